"""librdkafka (confluent-kafka) as an encoder oracle for record batch v2.

A real confluent-kafka Producer sends to a capture stub
(librdkafka_capture.py: ApiVersions, Metadata v1, Produce v3-v7 over a
loopback socket); the captured Produce records bytes are librdkafka's own
batches. kref must validate and decode them for every codec, including
librdkafka's raw (non-xerial) snappy and its lz4 frames, with headers, null
keys and timestamps intact.
"""

import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kref.records.batch import decode_batch
from kref.records.compression import XERIAL_MAGIC, CompressionType
from kref.records.validation import validate_records

sys.path.insert(0, str(Path(__file__).parent))
from librdkafka_capture import LibrdkafkaCapture  # noqa: E402


@pytest.fixture
def capture():
    cap = LibrdkafkaCapture("oracle")
    yield cap
    cap.close()


def sample(i):
    key = None if i % 2 else b"key-%d" % i
    value = (b"value %d, " % i) * 40
    headers = [("h", b"x"), ("null", None)] if i % 3 else None
    return key, value, headers, 1_700_000_000_000 + i


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kref_decodes_librdkafka_batches(capture, codec):
    p = Producer({
        "bootstrap.servers": capture.bootstrap, "compression.type": codec, "linger.ms": 100,
        "enable.idempotence": False, "acks": 1, "log_level": 3,
    })
    n = 30
    for i in range(n):
        key, value, headers, ts = sample(i)
        p.produce("oracle", value=value, key=key, headers=headers, timestamp=ts)
    assert p.flush(20) == 0
    records = []
    for raw in capture.captured:
        headers = validate_records(raw, max_batch_size=1 << 20, require_single_batch=True)
        batch = decode_batch(raw)
        assert batch.compression_type == CompressionType[codec.upper()]
        assert headers[0].records_count == len(batch.records)
        if codec == "snappy":
            # librdkafka writes raw snappy, not the Java client's xerial framing
            assert not raw[61:].startswith(XERIAL_MAGIC)
        records += batch.records
    assert len(records) == n
    for i, r in enumerate(records):
        key, value, headers, ts = sample(i)
        assert (r.key, r.value, r.timestamp) == (key, value, ts)
        assert [(hd.key, hd.value) for hd in r.headers] == (headers or [])

"""Byte compatibility of record batch v2 with real Kafka clients' encoders.

Oracles: kafka-python (kafka.record.default_records) and aiokafka
(aiokafka.record.default_records, its compiled and pure-Python variants),
two independent implementations of Kafka's DefaultRecordBatch. kref must
decode every batch they build (every codec, headers, null keys/values,
producer fields) to the same records, and their readers must accept every
batch kref builds (CRC-32C, attributes, control batches, LogAppendTime).
Uncompressed batches must be byte-identical.
"""

import aiokafka.record.default_records as aio
import pytest
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

from kref.records import header as h
from kref.records.batch import Header, Record, build_batch, decode_batch
from kref.records.compression import CompressionType
from kref.records.control import (
    ControlRecordType,
    build_end_transaction_marker,
    control_markers,
)

CODECS = list(CompressionType)
BUILDERS = {
    "kafka-python": KpBuilder,
    "aiokafka": aio.DefaultRecordBatchBuilder,
    "aiokafka-py": aio._DefaultRecordBatchBuilderPy,
}
READERS = {
    "kafka-python": KpBatch,
    "aiokafka": aio.DefaultRecordBatch,
    "aiokafka-py": aio._DefaultRecordBatchPy,
}


def sample(i):
    key = None if i % 3 == 0 else b"key-%d" % i
    value = None if i % 7 == 3 else (b"value-%d-" % i) * (i % 11)
    headers = [("h%d" % j, None if j == 1 else b"hv%d" % j) for j in range(i % 4)]
    return key, value, headers, 1_700_000_000_000 + 13 * i - (40 if i % 5 == 0 else 0)


def client_batch(builder_cls, codec, n=60, *, transactional=False):
    b = builder_cls(
        magic=2, compression_type=int(codec), is_transactional=transactional,
        producer_id=4242 if transactional else -1, producer_epoch=7 if transactional else -1,
        base_sequence=100 if transactional else -1, batch_size=1 << 22,
    )
    for i in range(n):
        key, value, headers, ts = sample(i)
        b.append(i, timestamp=ts, key=key, value=value, headers=headers)
    return bytes(b.build())


def as_tuples(records):
    return [
        (r.offset, r.timestamp, r.key, r.value, [(hd[0], hd[1]) if isinstance(hd, tuple) else (hd.key, hd.value) for hd in r.headers])
        for r in records
    ]


def expected(n=60):
    out = []
    for i in range(n):
        key, value, headers, ts = sample(i)
        out.append((i, ts, key, value, headers))
    return out


@pytest.mark.parametrize("client", list(BUILDERS))
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kref_decodes_client_batches(client, codec):
    raw = client_batch(BUILDERS[client], codec, transactional=True)
    batch = decode_batch(raw)
    assert batch.compression_type == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4242, 7, 100)
    assert batch.is_transactional and not batch.is_control_batch
    assert batch.records_count == 60 and batch.last_offset_delta == 59
    assert as_tuples(batch.records) == expected()
    assert batch.max_timestamp == max(r.timestamp for r in batch.records)


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_clients_read_kref_batches(reader, codec):
    records = [Record(timestamp=t, key=k, value=v, headers=tuple(Header(*x) for x in hs))
               for (_, t, k, v, hs) in expected()]
    raw = build_batch(records, base_offset=1000, compression=codec, producer_id=9, producer_epoch=2,
                      base_sequence=5, is_transactional=True, partition_leader_epoch=3)
    batch = READERS[reader](raw)
    assert batch.validate_crc()
    assert batch.compression_type == codec and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 2, 5)
    got = as_tuples(batch)
    assert got == [(o + 1000, t, k, v, hs) for (o, t, k, v, hs) in expected()]


@pytest.mark.parametrize("client", list(BUILDERS))
def test_uncompressed_batches_are_byte_identical(client):
    raw = client_batch(BUILDERS[client], CompressionType.NONE, transactional=True)
    batch = decode_batch(raw)
    rebuilt = build_batch(batch.records, producer_id=4242, producer_epoch=7, base_sequence=100,
                          is_transactional=True, partition_leader_epoch=batch.partition_leader_epoch)
    # Clients leave partitionLeaderEpoch (0 or -1) for the broker to stamp.
    assert batch.partition_leader_epoch in (0, -1)
    assert rebuilt == raw


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kref_compressed_batches_roundtrip_through_kafka_python_builder_format(codec):
    """The same records compressed by kref and by kafka-python decode alike."""
    ours = decode_batch(build_batch([Record(timestamp=t, key=k, value=v, headers=tuple(Header(*x) for x in hs))
                                     for (_, t, k, v, hs) in expected()], compression=codec))
    theirs = decode_batch(client_batch(KpBuilder, codec))
    assert ours.records == theirs.records


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("kind", [ControlRecordType.COMMIT, ControlRecordType.ABORT])
def test_control_batches_read_by_clients(reader, kind):
    raw = build_end_transaction_marker(kind, producer_id=77, producer_epoch=4, coordinator_epoch=12,
                                       timestamp=1234, base_offset=50)
    batch = decode_batch(raw)
    assert batch.is_control_batch and batch.is_transactional
    [marker] = control_markers(batch)
    assert marker.control_type == kind and marker.coordinator_epoch == 12
    theirs = READERS[reader](raw)
    assert theirs.is_control_batch and theirs.validate_crc()
    [rec] = list(theirs)
    assert rec.offset == 50
    if reader == "kafka-python":  # kafka-python surfaces a typed ControlRecord
        assert rec.type == int(kind) and rec.abort == (kind == ControlRecordType.ABORT)


@pytest.mark.parametrize("reader", list(READERS))
def test_log_append_time_batches_report_max_timestamp(reader):
    raw = bytearray(build_batch([Record(timestamp=10 + i, value=b"x") for i in range(5)], compression=CompressionType.LZ4))
    hdr = h.read_header(raw)
    h.set_log_append_time(raw, hdr, 999_999)
    batch = decode_batch(raw)
    assert batch.timestamp_type == 1 and batch.max_timestamp == 999_999
    assert [r.timestamp for r in batch.records] == [999_999] * 5
    theirs = READERS[reader](bytes(raw))
    assert theirs.validate_crc() and theirs.timestamp_type == 1
    assert [r.timestamp for r in theirs] == [999_999] * 5


def test_every_header_field_roundtrips():
    raw = build_batch([Record(offset=100, timestamp=5), Record(offset=104, timestamp=3)],
                      base_offset=100, producer_id=1 << 40, producer_epoch=32000, base_sequence=(1 << 31) - 2,
                      is_transactional=True, partition_leader_epoch=77, timestamp_type=1, max_timestamp=50,
                      delete_horizon_ms=2)
    b = decode_batch(raw)
    hd = b.header
    assert (hd.base_offset, hd.last_offset_delta, hd.partition_leader_epoch, hd.magic) == (100, 4, 77, 2)
    assert (hd.base_timestamp, hd.max_timestamp, hd.has_delete_horizon_ms, hd.is_log_append_time) == (2, 50, True, True)
    assert (hd.producer_id, hd.producer_epoch, hd.base_sequence, hd.records_count) == (1 << 40, 32000, (1 << 31) - 2, 2)
    assert hd.last_sequence == 2  # wraps at 2^31 like Kafka
    assert [r.offset for r in b.records] == [100, 104]
    kp = KpBatch(raw)
    assert kp.validate_crc() and kp.last_offset_delta == 4 and kp.leader_epoch == 77


@pytest.mark.parametrize("reader", list(READERS))
def test_empty_batch_left_by_compaction(reader):
    """The log cleaner keeps an empty batch to preserve a producer's last
    sequence and offset range (KIP-98); readers see no records."""
    raw = build_batch([], base_offset=40, last_offset_delta=9, producer_id=5, producer_epoch=1,
                      base_sequence=90, delete_horizon_ms=123)
    b = decode_batch(raw)
    assert b.records == () and b.last_offset == 49 and b.has_delete_horizon_ms and b.base_timestamp == 123
    theirs = READERS[reader](raw)
    assert theirs.validate_crc() and list(theirs) == []

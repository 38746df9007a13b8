"""Legacy message sets v0/v1 (legacy.py) against kafka-python and aiokafka.

Checks CRC-32 (IEEE), attributes, v1 timestamps and LogAppendTime wrappers,
nested compressed wrapper messages with absolute (v0) and relative (v1,
KIP-31) inner offsets, and every codec (lz4 in v0 with the KAFKA-3160 header
checksum). The clients' legacy builders are oracles for reading; their
readers (kafka.record.memory_records.MemoryRecords, aiokafka's) must accept
what kref writes; uncompressed sets are byte-identical.
"""

import aiokafka.record.legacy_records as aio_legacy
import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder as KpLegacyBuilder
from kafka.record.memory_records import MemoryRecords

from kref.records import legacy
from kref.records.batch import Record
from kref.records.compression import CompressionType, compress, decompress
from kref.records.errors import (
    BatchLengthError,
    InvalidCrcError,
    InvalidMagicError,
    InvalidRecordError,
    TruncatedBatchError,
    UnsupportedCompressionError,
)

CODECS = [c for c in CompressionType if c != CompressionType.ZSTD]
BUILDERS = {"kafka-python": KpLegacyBuilder, "aiokafka": aio_legacy.LegacyRecordBatchBuilder}


def sample(i):
    return (None if i % 4 == 0 else b"k%d" % i), (None if i % 9 == 5 else b"value %d " % i * (i % 6)), 1_600_000_000_000 + i


def client_set(builder_cls, magic, codec, n=25, base=0):
    b = builder_cls(magic=magic, compression_type=int(codec), batch_size=1 << 22)
    for i in range(n):
        key, value, ts = sample(i)
        b.append(base + i, timestamp=ts, key=key, value=value)
    return bytes(b.build())


def expected(magic, n=25, base=0):
    return [(base + i, sample(i)[2] if magic else -1, sample(i)[0], sample(i)[1]) for i in range(n)]


def kref_tuples(buf):
    return [(r.offset, r.timestamp, r.key, r.value) for b in legacy.iter_legacy_batches(buf) for r in b.records]


@pytest.mark.parametrize("client", list(BUILDERS))
@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kref_reads_client_message_sets(client, magic, codec):
    if client == "aiokafka" and magic == 0 and codec == CompressionType.LZ4:
        pytest.skip("aiokafka refuses LZ4 for message format v0")
    raw = client_set(BUILDERS[client], magic, codec)
    got = kref_tuples(raw)
    assert got == expected(magic)
    batches = legacy.validate_message_set(raw)
    assert all(b.magic == magic and b.compression_type == codec for b in batches)
    assert len(batches) == (1 if codec else 25)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kafka_python_reads_kref_message_sets(magic, codec):
    recs = [Record(timestamp=ts, key=k, value=v) for (_, ts, k, v) in expected(1)]
    raw = legacy.build_message_set(recs, magic=magic, compression=codec, base_offset=500)
    assert kref_tuples(raw) == expected(magic, base=500)
    mr = MemoryRecords(raw)
    got = []
    while mr.has_next():
        batch = mr.next_batch()
        assert batch.magic == magic and batch.compression_type == codec
        for r in batch:
            assert r.validate_crc()
            got.append((r.offset, r.timestamp if magic else -1, r.key, r.value))
    assert got == expected(magic, base=500)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_aiokafka_reads_kref_wrappers(magic, codec):
    if magic == 0 and codec == CompressionType.LZ4:
        pytest.skip("aiokafka refuses LZ4 for message format v0")
    recs = [Record(timestamp=ts, key=k, value=v) for (_, ts, k, v) in expected(1)]
    raw = legacy.build_message_set(recs, magic=magic, compression=codec, base_offset=0)
    got = []
    for b in legacy.iter_legacy_batches(raw):
        one = bytes(raw[b.position:b.next_position])
        theirs = aio_legacy.LegacyRecordBatch(one, magic)
        theirs.validate_crc()
        got += [(r.offset, r.timestamp if magic else -1, r.key, r.value) for r in theirs]
    assert got == expected(magic)


@pytest.mark.parametrize("magic", [0, 1])
def test_uncompressed_message_sets_are_byte_identical(magic):
    raw = client_set(KpLegacyBuilder, magic, CompressionType.NONE)
    recs = [Record(o, ts, k, v) for (o, ts, k, v) in kref_tuples(raw)]
    assert legacy.build_message_set(recs, magic=magic) == raw


def test_v1_relative_inner_offsets_kip31():
    recs = [Record(timestamp=10 + i, value=b"v%d" % i) for i in range(4)]
    raw = legacy.build_message_set(recs, magic=1, compression=CompressionType.GZIP, base_offset=1000)
    [batch] = list(legacy.iter_legacy_batches(raw))
    assert batch.wrapper.offset == 1003 and batch.last_offset == 1003 and batch.base_offset == 1000
    inner = decompress(CompressionType.GZIP, batch.wrapper.value)
    assert [m.offset for m in _inner_messages(inner)] == [0, 1, 2, 3]
    assert batch.wrapper.timestamp == 13  # wrapper carries the max inner timestamp


def test_v0_inner_offsets_are_absolute():
    recs = [Record(value=b"v%d" % i) for i in range(3)]
    raw = legacy.build_message_set(recs, magic=0, compression=CompressionType.SNAPPY, base_offset=70)
    [batch] = list(legacy.iter_legacy_batches(raw))
    inner = decompress(CompressionType.SNAPPY, batch.wrapper.value)
    assert [m.offset for m in _inner_messages(inner)] == [70, 71, 72]
    assert [r.offset for r in batch.records] == [70, 71, 72]


def _inner_messages(buf):
    pos, out = 0, []
    while pos < len(buf):
        m = legacy.read_message(buf, pos)
        out.append(m)
        pos = m.next_position
    return out


def test_v1_log_append_time_wrapper_overrides_inner_timestamps():
    recs = [Record(timestamp=5 + i, value=b"x") for i in range(3)]
    raw = legacy.build_message_set(recs, magic=1, compression=CompressionType.LZ4, timestamp_type=1,
                                   log_append_time=777)
    [batch] = list(legacy.iter_legacy_batches(raw))
    assert batch.timestamp_type == 1 and [r.timestamp for r in batch.records] == [777] * 3
    kb = MemoryRecords(raw).next_batch()
    assert kb.timestamp_type == 1 and [r.timestamp for r in kb] == [777] * 3


def test_corruption_is_typed():
    raw = bytearray(legacy.build_message_set([Record(value=b"hello", timestamp=1)], magic=1))
    with pytest.raises(TruncatedBatchError):
        legacy.read_message(raw[:-1])
    bad = bytearray(raw)
    bad[-1] ^= 1
    with pytest.raises(InvalidCrcError):
        legacy.read_message(bad)
    bad = bytearray(raw)
    bad[16] = 3
    with pytest.raises(InvalidMagicError):
        legacy.read_message(bad)
    bad = bytearray(raw)
    bad[8:12] = (5).to_bytes(4, "big")
    with pytest.raises(BatchLengthError):
        legacy.read_message(bad)


def test_nested_compression_and_empty_wrappers_are_invalid():
    inner = legacy.build_message_set([Record(value=b"a")], magic=1, compression=CompressionType.GZIP)
    nested = legacy.encode_message(0, magic=1, attributes=1, timestamp=0, key=None,
                                   value=compress(CompressionType.GZIP, inner))
    with pytest.raises(InvalidRecordError, match="compressed inner"):
        legacy.decode_legacy_batch(nested)
    empty = legacy.encode_message(0, magic=1, attributes=1, timestamp=0, key=None,
                                  value=compress(CompressionType.GZIP, b""))
    with pytest.raises(InvalidRecordError, match="no inner"):
        legacy.decode_legacy_batch(empty)
    null = legacy.encode_message(0, magic=1, attributes=2, timestamp=0, key=None, value=None)
    with pytest.raises(InvalidRecordError, match="null value"):
        legacy.decode_legacy_batch(null)
    mixed_inner = legacy.encode_message(0, magic=0, key=None, value=b"a")
    mixed = legacy.encode_message(0, magic=1, attributes=1, timestamp=0, key=None,
                                  value=compress(CompressionType.GZIP, mixed_inner))
    with pytest.raises(InvalidRecordError, match="magic"):
        legacy.decode_legacy_batch(mixed)


def test_headers_are_refused_for_legacy_formats():
    from kref.records.batch import Header
    with pytest.raises(ValueError):
        legacy.build_message_set([Record(value=b"a", headers=(Header("h", b"v"),))], magic=1)


def test_zstd_needs_message_format_v2():
    with pytest.raises(UnsupportedCompressionError):
        legacy.build_message_set([Record(value=b"a")], magic=1, compression=CompressionType.ZSTD)
    wrapper = legacy.encode_message(0, magic=1, attributes=CompressionType.ZSTD, timestamp=0, key=None,
                                    value=compress(CompressionType.ZSTD, legacy.encode_message(0, magic=1, key=None, value=b"a")))
    with pytest.raises(UnsupportedCompressionError):
        legacy.decode_legacy_batch(wrapper)

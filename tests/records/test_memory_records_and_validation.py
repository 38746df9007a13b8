"""Mixed-format iteration (memory_records.py) and produce-path validation
(validation.py, Kafka's LogValidator rules that depend only on the bytes).

A buffer mixing v0, v1 and v2 batches (as a log upgraded across message
formats holds) is walked by magic byte; validate_records accepts exactly
what a producer may send and names every violation with a typed error.
"""

import struct

import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from kref.records import header as h
from kref.records.batch import Record, build_batch
from kref.records.compression import CompressionType
from kref.records.control import ControlRecordType, build_end_transaction_marker
from kref.records.errors import (
    BatchLengthError,
    CompressionError,
    CorruptRecordError,
    DecompressionLimitError,
    InvalidCrcError,
    InvalidMagicError,
    InvalidRecordError,
    TruncatedBatchError,
)
from kref.records.legacy import build_message_set
from kref.records.memory_records import iter_batches, iter_records
from kref.records.validation import validate_records


def mixed_buffer():
    return (
        build_message_set([Record(value=b"a"), Record(value=b"b")], magic=0, base_offset=0)
        + build_message_set([Record(timestamp=5, value=b"c"), Record(timestamp=6, value=b"d")], magic=1,
                            compression=CompressionType.SNAPPY, base_offset=2)
        + build_batch([Record(timestamp=7, value=b"e"), Record(timestamp=8, value=b"f")], base_offset=4,
                      compression=CompressionType.ZSTD)
        + build_message_set([Record(timestamp=9, value=b"g")], magic=1, base_offset=6)
    )


def test_iter_batches_over_mixed_formats():
    buf = mixed_buffer()
    batches = list(iter_batches(buf))
    assert [b.magic for b in batches] == [0, 0, 1, 2, 1]
    assert [r.offset for r in iter_records(buf)] == list(range(7))
    assert [r.value for r in iter_records(buf)] == [b"a", b"b", b"c", b"d", b"e", b"f", b"g"]
    assert [r.timestamp for r in iter_records(buf)] == [-1, -1, 5, 6, 7, 8, 9]
    assert batches[-1].next_position == len(buf)


def test_partial_tail_of_a_fetch_response_can_be_ignored():
    buf = mixed_buffer()
    for cut in (1, 5, 13, 30):
        got = [r.offset for r in iter_records(buf[:-cut], allow_partial_tail=True)]
        assert got == list(range(6))  # the last batch (offset 6) was cut off
    with pytest.raises(TruncatedBatchError):
        list(iter_records(buf[:-1]))


def test_iter_batches_stops_with_typed_errors():
    buf = mixed_buffer()
    with pytest.raises(TruncatedBatchError):
        list(iter_batches(buf[:-3]))
    bad = bytearray(buf)
    bad[16] = 9
    with pytest.raises(InvalidMagicError):
        list(iter_batches(bad))


def producer_batch(n=3, codec=0, **kw):
    return build_batch([Record(timestamp=100 + i, key=b"k", value=b"v%d" % i) for i in range(n)],
                       compression=codec, **kw)


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
def test_validate_accepts_producer_batches(codec):
    raw = producer_batch(5, codec, producer_id=3, producer_epoch=0, base_sequence=0)
    [hdr] = validate_records(raw, max_batch_size=1 << 20, require_single_batch=True)
    assert hdr.records_count == 5 and hdr.compression_type == codec


def test_validate_accepts_kafka_python_producer_batches():
    b = DefaultRecordBatchBuilder(magic=2, compression_type=CompressionType.LZ4, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(10):
        b.append(i, timestamp=i, key=None, value=b"x" * i, headers=[("a", b"b")])
    assert len(validate_records(bytes(b.build()), max_batch_size=1 << 20)) == 1


def restamp(raw: bytearray) -> bytearray:
    """Recompute the CRC after a deliberate header edit, so only the edit is wrong."""
    struct.pack_into(">I", raw, h.CRC_OFFSET, crc32c.crc32c(memoryview(raw)[h.ATTRIBUTES_OFFSET:]))
    return raw


def test_validate_rejections():
    ok = producer_batch(3)
    cases = []
    cases.append((b"", InvalidRecordError, "no record batch"))
    cases.append((build_message_set([Record(value=b"a")], magic=1), InvalidMagicError, "only v2"))
    flipped = bytearray(ok)
    flipped[-1] ^= 0x20
    cases.append((bytes(flipped), InvalidCrcError, "CRC"))
    cases.append((ok[:-1], TruncatedBatchError, "announces"))
    cases.append((ok, BatchLengthError, "exceeds the limit"))  # with a tiny max_batch_size below
    ctrl = build_end_transaction_marker(ControlRecordType.COMMIT, producer_id=1, producer_epoch=0,
                                        coordinator_epoch=0, timestamp=0)
    cases.append((ctrl, InvalidRecordError, "control"))
    cases.append((producer_batch(2, producer_id=5, producer_epoch=0, base_sequence=-1), InvalidRecordError,
                  "baseSequence"))
    wrong_count = bytearray(ok)
    struct.pack_into(">i", wrong_count, 57, 4)
    cases.append((bytes(restamp(wrong_count)), InvalidRecordError, "lastOffsetDelta"))
    wrong_delta = bytearray(ok)
    struct.pack_into(">i", wrong_delta, 23, 5)
    cases.append((bytes(restamp(wrong_delta)), InvalidRecordError, "lastOffsetDelta"))
    gappy = build_batch([Record(offset=0, value=b"a"), Record(offset=2, value=b"b")], last_offset_delta=1)
    cases.append((gappy, InvalidRecordError, "offset delta|exceeds lastOffsetDelta"))
    bad_codec = bytearray(ok)
    struct.pack_into(">h", bad_codec, 21, 6)
    cases.append((bytes(restamp(bad_codec)), CorruptRecordError, "codec"))
    for raw, error, match in cases:
        limit = 20 if error is BatchLengthError else 1 << 20
        with pytest.raises(error, match=match):
            validate_records(raw, max_batch_size=limit)
    with pytest.raises(InvalidRecordError, match="exactly one"):
        validate_records(ok + ok, max_batch_size=1 << 20, require_single_batch=True)
    assert len(validate_records(ok + ok, max_batch_size=1 << 20)) == 2


def test_validate_refuses_a_compression_bomb():
    bomb = build_batch([Record(timestamp=0, value=b"\0" * (20 << 20))], compression=CompressionType.GZIP)
    assert len(bomb) < 1 << 16
    with pytest.raises(DecompressionLimitError):
        validate_records(bomb, max_batch_size=1 << 20, max_uncompressed_bytes=1 << 20)
    garbage = bytearray(build_batch([Record(timestamp=0, value=b"x" * 100)], compression=CompressionType.ZSTD))
    garbage[h.HEADER_SIZE + 5] ^= 0xFF
    with pytest.raises(CompressionError):
        validate_records(bytes(restamp(garbage)), max_batch_size=1 << 20)

"""The produce path's framing validation against the full validate_records.

validate_records_framing (kref/records/framing_validation.py) keeps every
batch-level check and walks each record's framing instead of decoding it.
Checked: it accepts every valid batch (all codecs, headers, nulls), rejects
the framing faults a buggy client could send behind a valid CRC (wrong
offset delta, record length past the end, trailing bytes, fewer records
than recordsCount, several batches where one is required), and, as a
hypothesis property over random byte mutations with the CRC recomputed, it
never rejects what validate_records accepts and never accepts what fails
the checks it claims to make (it is the weaker check, by design).
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kref.records.batch import Header, Record, build_batch
from kref.records.compression import CompressionType
from kref.records.errors import CorruptRecordError, InvalidRecordError
from kref.records.framing_validation import validate_records_framing
from kref.records.header import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE
from kref.records.validation import validate_records

RECORDS = [
    Record(timestamp=1_700_000_000_000 + i * 300, key=None if i % 3 else b"k%d" % i, value=b"v" * (i * 7),
           headers=(Header("h", b"x"),) if i % 2 else ())
    for i in range(40)
]


def recrc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c.crc32c(bytes(buf[ATTRIBUTES_OFFSET:])))
    return bytes(buf)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_valid_batches_pass_both(codec):
    buf = build_batch(RECORDS, compression=codec)
    assert validate_records_framing(buf, max_batch_size=1 << 20) == validate_records(buf, max_batch_size=1 << 20)


def test_long_batches_with_multi_byte_varints_pass():
    # Over 64 records: offset deltas and lengths need two-byte varints.
    many = [Record(timestamp=1_700_000_000_000 + 70 * i, value=b"x" * 100) for i in range(300)]
    buf = build_batch(many)
    assert validate_records_framing(buf, max_batch_size=1 << 20)[0].records_count == 300


def _uncompressed_records_section() -> tuple[bytearray, int]:
    buf = bytearray(build_batch(RECORDS[:3]))
    return buf, HEADER_SIZE


def test_wrong_offset_delta_is_rejected():
    buf, start = _uncompressed_records_section()
    # Record 0: length varint, attributes, timestamp delta (0 -> 1 byte), offset delta.
    assert buf[start + 3] == 0
    buf[start + 3] = 2  # zigzag(1): offset delta 1 where 0 is expected
    with pytest.raises(InvalidRecordError, match="offset delta"):
        validate_records_framing(recrc(buf), max_batch_size=1 << 20)


def test_record_length_past_the_end_is_rejected():
    buf, start = _uncompressed_records_section()
    assert len(buf) - start < 63
    buf[start] = 0x7E  # zigzag(63): more than the whole records section
    with pytest.raises(InvalidRecordError, match="record length"):
        validate_records_framing(recrc(buf), max_batch_size=1 << 20)


def test_trailing_bytes_and_missing_records_are_rejected():
    buf = bytearray(build_batch(RECORDS[:3]))
    extra = buf + b"\x00\x00"
    struct.pack_into(">i", extra, 8, len(extra) - 12)
    with pytest.raises(CorruptRecordError):
        validate_records_framing(recrc(extra), max_batch_size=1 << 20)
    fewer = bytearray(build_batch(RECORDS[:3]))
    struct.pack_into(">i", fewer, 23, 3)  # lastOffsetDelta 3 ...
    struct.pack_into(">i", fewer, 57, 4)  # ... and recordsCount 4, but only 3 records
    with pytest.raises(InvalidRecordError):
        validate_records_framing(recrc(fewer), max_batch_size=1 << 20)


def test_one_batch_per_partition_when_required():
    two = build_batch(RECORDS[:2]) + build_batch(RECORDS[:2])
    assert len(validate_records_framing(two, max_batch_size=1 << 20)) == 2
    with pytest.raises(InvalidRecordError, match="exactly one"):
        validate_records_framing(two, max_batch_size=1 << 20, require_single_batch=True)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(HEADER_SIZE, 10_000), st.integers(0, 255)), min_size=1, max_size=4))
def test_never_stricter_than_full_validation(mutations):
    buf = bytearray(build_batch(RECORDS[:8]))
    for where, value in mutations:
        buf[where % len(buf) if where % len(buf) >= HEADER_SIZE else HEADER_SIZE] = value
    data = recrc(buf)
    try:
        validate_records(data, max_batch_size=1 << 20)
    except CorruptRecordError:
        return  # full validation rejects: the framing check may or may not
    validate_records_framing(data, max_batch_size=1 << 20)

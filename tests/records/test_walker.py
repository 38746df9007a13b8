"""The vectorized record walker (kref/records/walker.py) against the full decoder.

Produce validation hands batches of VECTOR_MIN_RECORDS records or more to
walker.check_records. Checked on such batches: every valid batch passes
(keys, null values, headers, all codecs, multi-byte varints); a wrong offset
delta, a key or value running past its record, a bad header, a record
length that disagrees with its fields, trailing bytes and missing records
are rejected with InvalidRecordError naming the record; and, as a
hypothesis property over byte mutations with the CRC recomputed, whatever
the full decoder (validate_records) accepts, the produce path accepts too.
index_records returns the same fields the full decoder reads.
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kref.records.batch import Header, Record, build_batch, decode_records
from kref.records.compression import CompressionType
from kref.records.errors import CorruptRecordError, InvalidRecordError
from kref.records.framing_validation import validate_records_framing
from kref.records.header import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, read_header
from kref.records.validation import validate_records
from kref.records.walker import VECTOR_MIN_RECORDS, check_records, index_records
from kref.records.varint import read_varint
from tests.records.sections import record_starts

N = VECTOR_MIN_RECORDS + 88
MANY = [
    Record(timestamp=1_700_000_000_000 + 3 * i, key=None if i % 5 else b"key-%d" % i,
           value=None if i % 97 == 3 else b"v" * (i % 150), headers=(Header("h", b"x"),) if i % 7 == 0 else ())
    for i in range(N)
]


def recrc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c.crc32c(bytes(buf[ATTRIBUTES_OFFSET:])))
    return bytes(buf)


def section_of(records) -> bytearray:
    return bytearray(build_batch(records)[HEADER_SIZE:])


@pytest.mark.parametrize("codec", list(CompressionType))
def test_valid_long_batches_pass(codec):
    buf = build_batch(MANY, compression=codec)
    assert validate_records_framing(buf, max_batch_size=1 << 22) == validate_records(buf, max_batch_size=1 << 22)


def test_uniform_runs_and_long_records_pass():
    same = [Record(timestamp=1_700_000_000_000 + i, value=b"x" * 100) for i in range(3000)]
    big = [Record(timestamp=1_700_000_000_000, key=b"k", value=b"y" * (9000 + i)) for i in range(VECTOR_MIN_RECORDS)]
    for records in (same, big):
        check_records(bytes(section_of(records)), len(records))


def test_index_records_matches_the_decoder():
    buf = build_batch(MANY)
    index = index_records(buf[HEADER_SIZE:])
    decoded = decode_records(buf, read_header(buf, 0))
    assert index.offset_deltas.tolist() == [r.offset for r in decoded]
    assert index.keys() == [r.key for r in decoded]
    assert [n >= 0 for n in index.value_lengths.tolist()] == [r.value is not None for r in decoded]
    assert index.timestamp_deltas.tolist() == [r.timestamp - MANY[0].timestamp for r in decoded]


def _field_position(section: bytes, i: int, fields: int) -> int:
    """Position of field `fields` (0 attributes, 1 timestamp delta, 2 offset delta, 3 key length) of record i."""
    length, pos = read_varint(section, record_starts(section)[i], len(section))
    pos += 1
    for size in (10, 5)[: max(fields - 1, 0)]:
        _, pos = read_varint(section, pos, len(section), size)
    return pos


def test_wrong_offset_delta_is_rejected():
    section = section_of(MANY)
    pos = _field_position(bytes(section), 555, 2)
    delta, _ = read_varint(bytes(section), pos, len(section))
    assert delta == 555
    section[pos] ^= 0x02  # zigzag: 555 -> 554
    with pytest.raises(InvalidRecordError, match="offset delta 554 where 555"):
        check_records(bytes(section), N)


def test_key_past_its_record_is_rejected():
    records = [Record(timestamp=0, key=b"kk", value=b"v" * 20) for _ in range(N)]
    section = section_of(records)
    pos = _field_position(bytes(section), N - 1, 3)
    assert section[pos] == 4  # zigzag(2)
    section[pos] = 60  # key length 30 > what is left of the record
    with pytest.raises(InvalidRecordError, match="record %d" % (N - 1)):
        check_records(bytes(section), N)


def test_bad_headers_and_trailing_bytes_are_rejected():
    records = [Record(timestamp=0, value=b"v", headers=(Header("hk", b"hv"),)) for _ in range(N)]
    section = bytes(section_of(records))
    # the header key length (zigzag(2) = 4) of record 520 becomes -2
    start = record_starts(section)[520]
    spot = section.index(b"\x04hk", start)
    bad = bytearray(section)
    bad[spot] = 3
    with pytest.raises(InvalidRecordError, match="record 520: header key length"):
        check_records(bytes(bad), N)
    with pytest.raises(InvalidRecordError, match="bytes left"):
        check_records(section + b"\x00", N)
    with pytest.raises(InvalidRecordError, match="ends after"):
        check_records(section, N + 1)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(HEADER_SIZE, 100_000), st.integers(0, 255)), min_size=1, max_size=3))
def test_never_stricter_than_full_validation(mutations):
    buf = bytearray(build_batch(MANY))
    for where, value in mutations:
        buf[max(where % len(buf), HEADER_SIZE)] = value
    data = recrc(buf)
    try:
        validate_records(data, max_batch_size=1 << 22)
    except CorruptRecordError:
        with pytest.raises(CorruptRecordError):
            # Every fault the full decoder finds in a record's fields is one the walker finds
            # too, except key/value/header-value lengths below -1 (Kafka's reader takes them as null).
            try:
                validate_records_framing(data, max_batch_size=1 << 22)
            except CorruptRecordError:
                raise
            else:
                if not _has_odd_null_length(data):
                    raise AssertionError("the walker accepted a batch the full decoder refuses")
                raise CorruptRecordError("odd null length")
        return
    validate_records_framing(data, max_batch_size=1 << 22)


def _has_odd_null_length(data: bytes) -> bool:
    section = data[HEADER_SIZE:]
    for start in record_starts(section):
        length, pos = read_varint(section, start, len(section))
        pos += 1
        _, pos = read_varint(section, pos, len(section), 10)
        _, pos = read_varint(section, pos, len(section))
        for _ in range(2):
            n, pos = read_varint(section, pos, len(section))
            if n < -1:
                return True
            pos += max(n, 0)
        # Header values too: Kafka's reader takes any negative header value
        # length as null (only a negative header key length is an error).
        try:
            count, pos = read_varint(section, pos, len(section))
            for _ in range(max(count, 0)):
                key_len, pos = read_varint(section, pos, len(section))
                pos += max(key_len, 0)
                value_len, pos = read_varint(section, pos, len(section))
                if value_len < -1:
                    return True
                pos += max(value_len, 0)
        except Exception:  # noqa: BLE001 - a garbled tail is the decoder's finding, not an odd null
            pass
    return False

"""Produce-path validation that checks every record's framing without decoding it.

Why this exists next to validation.validate_records: that function decodes
every record into objects (key, value, headers), which in Python costs tens
of microseconds per record and made the broker's produce path ~6x slower
than its peers (bench/broker.py). This one keeps every batch-level check of
validate_records (v2 magic, size bound, torn batch, CRC-32C, no control
batches from clients, base sequence with a producer id, recordsCount =
lastOffsetDelta + 1, known codec, bounded decompression) and walks each
record's framing: its length varint, attributes byte, timestamp delta
varlong and offset delta varint, requiring the offset deltas 0..count-1 in
order and the records to end exactly at the end of the (decompressed)
section. What it does not check are the fields inside a record after the
offset delta (key, value and header lengths): the CRC-32C already proves
those bytes are the ones the client sent, so only a client that encodes
a record's key, value or headers wrongly could slip through, and then its
consumers fail on that record. validate_records remains the full check for
tools and tests.

Sections of VECTOR_MIN_RECORDS records or more go to the vectorized walker
(kref/records/walker.py), which checks more (key, value and header
lengths too, as Kafka's record reader does) in less time: its per-record
Python work is one step of the length chain, often skipped over whole runs
of equal-length records. Below that size its numpy calls cost more than
this loop, which stays for small batches and single-record requests.
When the compiled walker is built (kref/records/_cwalker.c), it walks both
kinds of batch, each with the same checks as its Python walk (which then
only runs to name the fault of a batch it refused).

A produce payload that is one plain batch (uncompressed, small, the
compiled walker built) is checked by one function with the same checks
(_plain_single_batch); anything it does not accept goes the general way,
which names the fault.

Raises the same typed errors as validate_records, so the broker maps them
to CORRUPT_MESSAGE / INVALID_RECORD the same way.
"""

from __future__ import annotations

from kref.records import header as h
from kref.records.batch import records_section
from kref.records.validation import validate_records
from kref.records.errors import InvalidRecordError
from kref.records.varint import read_varint
from kref.records.walker import VECTOR_MIN_RECORDS, _cwalker, check_records

Buffer = bytes | bytearray | memoryview


def validate_records_framing(
    buf: Buffer,
    *,
    max_batch_size: int,
    max_uncompressed_bytes: int | None = None,
    require_single_batch: bool = False,
) -> list[h.BatchHeader]:
    """validate_records with the framing walk in place of the full record decode."""
    if require_single_batch:
        plain = _plain_single_batch(buf, max_batch_size, max_uncompressed_bytes)
        if plain is not None:
            return plain
    return validate_records(
        buf,
        max_batch_size=max_batch_size,
        max_uncompressed_bytes=max_uncompressed_bytes,
        require_single_batch=require_single_batch,
        check_records=check_record_framing,
    )


def _plain_single_batch(buf: Buffer, max_batch_size: int, max_uncompressed_bytes: int | None) -> list[h.BatchHeader] | None:
    """The header of a produce payload that is one plain batch which passes
    every check, else None (then validate_records runs and names the fault).

    Plain: exactly one v2 batch filling the payload, uncompressed, not a
    control batch, fewer than VECTOR_MIN_RECORDS records, the compiled
    walker built. The same checks as validate_records with
    check_record_framing, in one function (a single-record produce paid
    about as much for the calls and properties as for the checks): size
    bounds, magic, CRC-32C, base sequence with a producer id, recordsCount =
    lastOffsetDelta + 1 > 0, and the compiled framing walk.
    tests/records/test_plain_batch_validation.py holds both paths to the
    same verdict.
    """
    n = len(buf)
    if _cwalker is None or n < h.HEADER_SIZE:
        return None
    fields = h._HEADER.unpack_from(buf, 0)
    (_, batch_length, _, magic, crc, attributes, last_offset_delta, _, _, producer_id, _, base_sequence,
     records_count) = fields
    if (magic != 2 or h.LOG_OVERHEAD + batch_length != n or n > max_batch_size
            or attributes & (h.COMPRESSION_CODEC_MASK | h.CONTROL_FLAG_MASK)
            or records_count <= 0 or last_offset_delta + 1 != records_count or records_count >= VECTOR_MIN_RECORDS
            or (producer_id != h.NO_PRODUCER_ID and base_sequence < 0)):
        return None
    view = memoryview(buf)
    if h.crc32c.crc32c(view[h.ATTRIBUTES_OFFSET:]) != crc:
        return None
    section = view[h.HEADER_SIZE:]
    if max_uncompressed_bytes is not None and len(section) > max_uncompressed_bytes:
        return None
    if not _cwalker.check_framing(section, records_count):
        return None
    return [h.BatchHeader(0, *fields)]


def check_record_framing(view: memoryview, header: h.BatchHeader, max_uncompressed_bytes: int) -> None:
    section = records_section(view, header, max_uncompressed_bytes=max_uncompressed_bytes)
    if header.records_count >= VECTOR_MIN_RECORDS:
        check_records(section, header.records_count, header.position)
    elif _cwalker is None or not _cwalker.check_framing(section, header.records_count):
        _walk_records(section, header.records_count, header.position)


def _walk_records(section: memoryview, count: int, where: int) -> None:
    # Varints are decoded inline, with one- and two-byte fast paths (a
    # record of 64..8191 bytes has a two-byte length): this loop runs once
    # per record on the produce path, so it avoids calls and objects.
    end = len(section)
    pos = 0
    for expected_delta in range(count):
        if pos + 1 >= end:
            raise InvalidRecordError(f"records section ends after {expected_delta} of {count} records", where)
        b = section[pos]
        if b < 0x80:
            z = b
            pos += 1
        elif section[pos + 1] < 0x80:
            z = (b & 0x7F) | (section[pos + 1] << 7)
            pos += 2
        else:
            z = -1
            length, pos = read_varint(section, pos, end, 5)
        if z >= 0:
            length = (z >> 1) ^ -(z & 1)
        record_end = pos + length
        if length < 3 or record_end > end:
            raise InvalidRecordError(f"record length {length} with {end - pos} bytes left", where)
        # Skip attributes (1 byte) and the timestamp delta varlong (<= 10 bytes).
        pos += 1
        stop = pos + 10
        if stop > record_end:
            stop = record_end
        while pos < stop and section[pos] >= 0x80:
            pos += 1
        pos += 1
        if pos >= record_end:
            raise InvalidRecordError("record ends inside its header fields", where)
        b = section[pos]
        if b < 0x80:
            delta = (b >> 1) ^ -(b & 1)
        elif pos + 1 < record_end and section[pos + 1] < 0x80:
            z = (b & 0x7F) | (section[pos + 1] << 7)
            delta = (z >> 1) ^ -(z & 1)
        else:
            delta, _ = read_varint(section, pos, record_end, 5)
        if delta != expected_delta:
            raise InvalidRecordError(f"record offset delta {delta} where {expected_delta} was expected", where)
        pos = record_end
    if pos != end:
        raise InvalidRecordError(f"{end - pos} bytes left in the records section after {count} records", where)

"""Record batch v2 (KIP-98's DefaultRecordBatch): decode and build whole batches.

header.py reads the fixed 61-byte header in place; this module adds the
records section: decompression (compression.py) and the records themselves.

One record, all integers zigzag varints (varint.py):

    length         varint   bytes of the record after this field
    attributes     int8     unused, 0
    timestampDelta varlong  timestamp - baseTimestamp
    offsetDelta    varint   offset - baseOffset
    keyLength      varint   -1 = null key
    key            bytes
    valueLength    varint   -1 = null value
    value          bytes
    headersCount   varint
    headers        headerKeyLength varint (>= 0), key (UTF-8),
                   headerValueLength varint (-1 = null), value

Bounded decoding: no length or count read from the input causes an
allocation larger than the bytes that remain. recordsCount is checked against
the smallest possible record (7 bytes) before anything is allocated, every
length against what is left of its record, and the decompressed section
against the caller's `max_uncompressed_bytes`. Every failure is a
CorruptRecordError subclass naming the field.

For a LogAppendTime batch the records keep their CreateTime deltas on disk,
but every record reports the batch's maxTimestamp (the broker's append time),
as Kafka's DefaultRecordBatch does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable, NamedTuple, Sequence

import crc32c

from kref.records import header as h
from kref.records.compression import DEFAULT_MAX_UNCOMPRESSED_BYTES, CompressionType, compress, decompress
from kref.records.errors import BatchLengthError, CorruptRecordError, InvalidRecordError
from kref.records.varint import read_varint, read_varlong, size_of_varint, write_varint

Buffer = bytes | bytearray | memoryview

# length(1) attributes(1) timestampDelta(1) offsetDelta(1) keyLength(1)
# valueLength(1) headersCount(1): no record is smaller.
MIN_RECORD_SIZE = 7
# Kafka's DefaultRecord limit on the record length field (its size in bytes).
_INT32_MAX = (1 << 31) - 1

_HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
_KEY_VALUE = ("key", "value")


class Header(NamedTuple):
    """A record header (KIP-82): a UTF-8 string key and a nullable byte value."""

    key: str
    value: bytes | None


class Record(NamedTuple):
    """One record with absolute offset and effective timestamp.

    When building a batch, `offset=-1` means "next offset in the batch".
    (A NamedTuple: immutable, and about five times cheaper to create than a
    frozen dataclass, which matters in the decode loop.)"""

    offset: int = -1
    timestamp: int = h.NO_TIMESTAMP
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[Header, ...] = ()
    attributes: int = 0


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """A decoded v2 batch: its header (every field, via attribute access) and records."""

    header: h.BatchHeader
    records: tuple[Record, ...]

    def __getattr__(self, name: str):
        # Delegation keeps one source of truth for the header fields.
        if name == "header":
            raise AttributeError(name)
        return getattr(self.header, name)

    @property
    def magic(self) -> int:
        return 2

    @property
    def timestamp_type(self) -> int:
        return 1 if self.header.is_log_append_time else 0

    def __iter__(self):
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)


def records_section(
    buf: Buffer, header: h.BatchHeader, *, max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES
) -> memoryview | bytes:
    """The records bytes of the batch `header` describes: a view into `buf`
    when uncompressed, else the decompressed bytes."""
    view = memoryview(buf)[header.position + h.HEADER_SIZE : header.next_position]
    if header.compression_type == CompressionType.NONE:
        if len(view) > max_uncompressed_bytes:
            raise BatchLengthError(
                f"records section of {len(view)} bytes exceeds max_uncompressed_bytes={max_uncompressed_bytes}",
                header.position,
            )
        return view
    return decompress(header.compression_type, view, max_uncompressed_bytes=max_uncompressed_bytes)


def decode_batch(
    buf: Buffer,
    position: int = 0,
    *,
    max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
    verify_crc: bool = True,
    max_batch_size: int = 1 << 30,
) -> RecordBatch:
    """Decode the whole v2 batch at `position`: header, CRC, records."""
    header = h.read_header(buf, position, max_batch_size=max_batch_size)
    if verify_crc:
        h.verify_crc(buf, header)
    return RecordBatch(header, decode_records(buf, header, max_uncompressed_bytes=max_uncompressed_bytes))


def decode_records(
    buf: Buffer, header: h.BatchHeader, *, max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES
) -> tuple[Record, ...]:
    """Parse every record of the batch; the count and offsets must agree with the header."""
    try:
        section = records_section(buf, header, max_uncompressed_bytes=max_uncompressed_bytes)
    except CorruptRecordError as e:
        if e.position is None:
            e.position = header.position
        raise
    count = header.records_count
    if count < 0:
        raise InvalidRecordError(f"recordsCount {count} is negative", header.position)
    if count * MIN_RECORD_SIZE > len(section):
        raise InvalidRecordError(
            f"recordsCount {count} cannot fit in a records section of {len(section)} bytes", header.position
        )
    records = _parse_records(section if isinstance(section, bytes) else bytes(section), count, header)
    if records and records[-1].offset - header.base_offset > header.last_offset_delta:
        raise InvalidRecordError(
            f"record offset delta {records[-1].offset - header.base_offset} exceeds lastOffsetDelta "
            f"{header.last_offset_delta}",
            header.position,
        )
    return tuple(records)


def _parse_records(buf: bytes, count: int, header: h.BatchHeader) -> list[Record]:
    """The hot loop. Varints take an inlined one-byte fast path; a fast path
    may read past the end of its record (never past the buffer: IndexError is
    caught), which the length checks that follow always turn into an error."""
    where = header.position
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    log_append_time = header.max_timestamp if header.is_log_append_time else None
    records = []
    append = records.append
    pos, end = 0, len(buf)
    try:
        for _ in range(count):
            b = buf[pos]
            if b < 0x80:
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                length, pos = read_varint(buf, pos, end)
            if length <= 0 or length > end - pos:
                raise InvalidRecordError(f"record length {length} with {end - pos} bytes left", where)
            record_end = pos + length
            attributes = buf[pos]
            b = buf[pos + 1]
            if b < 0x80:
                timestamp_delta, pos = (b >> 1) ^ -(b & 1), pos + 2
            else:
                timestamp_delta, pos = read_varint(buf, pos + 1, record_end, 10)
            b = buf[pos]
            if b < 0x80:
                offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                offset_delta, pos = read_varint(buf, pos, record_end)
            key = value = None
            for field in _KEY_VALUE:
                b = buf[pos]
                if b < 0x80:
                    n, pos = (b >> 1) ^ -(b & 1), pos + 1
                else:
                    n, pos = read_varint(buf, pos, record_end)
                if n >= 0:
                    if n > record_end - pos:
                        raise InvalidRecordError(
                            f"record {field} length {n} exceeds the {record_end - pos} bytes left", where
                        )
                    if field == "key":
                        key = buf[pos : pos + n]
                    else:
                        value = buf[pos : pos + n]
                    pos += n
                elif n != -1:
                    raise InvalidRecordError(f"record {field} length {n} is invalid", where)
            b = buf[pos]
            if b == 0:
                headers, pos = (), pos + 1
            else:
                headers, pos = _read_headers(buf, pos, record_end, where)
            if pos != record_end:
                raise InvalidRecordError(
                    f"record length says {length} bytes but its fields take {length - (record_end - pos)}", where
                )
            timestamp = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
            append(Record(base_offset + offset_delta, timestamp, key, value, headers, attributes))
    except IndexError:
        raise InvalidRecordError("record runs past the end of the records section", where) from None
    if pos != end:
        raise InvalidRecordError(f"{end - pos} bytes left in the records section after {count} records", where)
    return records


def _read_headers(buf: bytes, pos: int, record_end: int, where: int) -> tuple[tuple[Header, ...], int]:
    n_headers, pos = read_varint(buf, pos, record_end)
    if n_headers < 0:
        raise InvalidRecordError(f"record headers count {n_headers} is negative", where)
    # A header costs at least 2 bytes (key length + value length).
    if n_headers * 2 > record_end - pos:
        raise InvalidRecordError(f"record headers count {n_headers} cannot fit in the record", where)
    headers = []
    for _ in range(n_headers):
        key_len, pos = read_varint(buf, pos, record_end)
        if key_len < 0 or key_len > record_end - pos:
            raise InvalidRecordError(f"header key length {key_len} is invalid", where)
        header_key = buf[pos : pos + key_len].decode("utf-8", "surrogateescape")
        pos += key_len
        n, pos = read_varint(buf, pos, record_end)
        if n >= 0:
            if n > record_end - pos:
                raise InvalidRecordError(f"header value length {n} exceeds the {record_end - pos} bytes left", where)
            header_value = buf[pos : pos + n]
            pos += n
        elif n == -1:
            header_value = None
        else:
            raise InvalidRecordError(f"header value length {n} is invalid", where)
        headers.append(Header(header_key, header_value))
    return tuple(headers), pos


# --- building ---------------------------------------------------------------


def encode_record(out: bytearray, record: Record, offset_delta: int, timestamp_delta: int) -> None:
    body = bytearray()
    body.append(record.attributes & 0xFF)
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    _write_bytes(body, record.key)
    _write_bytes(body, record.value)
    write_varint(body, len(record.headers))
    for header in record.headers:
        key = header.key.encode("utf-8", "surrogateescape")
        write_varint(body, len(key))
        body += key
        _write_bytes(body, header.value)
    write_varint(out, len(body))
    out += body


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out.append(1)  # zigzag(-1)
    else:
        write_varint(out, len(data))
        out += data


def build_batch(
    records: Iterable[Record],
    *,
    base_offset: int = 0,
    compression: int = CompressionType.NONE,
    producer_id: int = h.NO_PRODUCER_ID,
    producer_epoch: int = h.NO_PRODUCER_EPOCH,
    base_sequence: int = h.NO_SEQUENCE,
    is_transactional: bool = False,
    is_control_batch: bool = False,
    partition_leader_epoch: int = h.NO_PARTITION_LEADER_EPOCH,
    timestamp_type: int = 0,
    max_timestamp: int | None = None,
    delete_horizon_ms: int | None = None,
    last_offset_delta: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """Encode a v2 batch as a Kafka producer (or, with the optional fields, a
    broker or the log cleaner) would write it.

    Records with offset -1 take the next offset after the previous record;
    baseTimestamp is the first record's timestamp (or delete_horizon_ms when
    given, which sets the hasDeleteHorizonMs bit), maxTimestamp the largest
    (or `max_timestamp`, e.g. the LogAppendTime). `last_offset_delta` is only
    needed for an empty batch left behind by compaction.
    """
    records = list(records)
    offsets = []
    next_offset = base_offset
    for r in records:
        off = next_offset if r.offset < 0 else r.offset
        if off < base_offset or off - base_offset > _INT32_MAX:
            raise ValueError(f"record offset {off} is outside the batch starting at {base_offset}")
        offsets.append(off)
        next_offset = off + 1
    timestamps = [r.timestamp for r in records]
    if delete_horizon_ms is not None:
        base_timestamp = delete_horizon_ms
    else:
        base_timestamp = timestamps[0] if timestamps else h.NO_TIMESTAMP
    if max_timestamp is None:
        max_timestamp = max(timestamps) if timestamps else h.NO_TIMESTAMP
    if last_offset_delta is None:
        last_offset_delta = offsets[-1] - base_offset if offsets else 0

    body = bytearray()
    for r, off in zip(records, offsets):
        encode_record(body, r, off - base_offset, r.timestamp - base_timestamp)
    codec = CompressionType(compression)
    section = body if codec == CompressionType.NONE else compress(codec, body, level=compression_level)

    attributes = (
        codec
        | (h.TIMESTAMP_TYPE_MASK if timestamp_type else 0)
        | (h.TRANSACTIONAL_FLAG_MASK if is_transactional else 0)
        | (h.CONTROL_FLAG_MASK if is_control_batch else 0)
        | (h.DELETE_HORIZON_FLAG_MASK if delete_horizon_ms is not None else 0)
    )
    out = bytearray(h.HEADER_SIZE)
    out += section
    _HEADER_STRUCT.pack_into(
        out, 0,
        base_offset, len(out) - h.LOG_OVERHEAD, partition_leader_epoch, 2, 0, attributes, last_offset_delta,
        base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, len(records),
    )  # fmt: skip
    struct.pack_into(">I", out, h.CRC_OFFSET, crc32c.crc32c(memoryview(out)[h.ATTRIBUTES_OFFSET :]))
    return bytes(out)


def batch_size_estimate(records: Sequence[Record]) -> int:
    """Upper-bound size of an uncompressed batch of `records` (for limits)."""
    total = h.HEADER_SIZE
    for r in records:
        n = 1 + 10 + 5 + 5 + len(r.key or b"") + 5 + len(r.value or b"") + 5
        for hd in r.headers:
            n += 10 + len(hd.key.encode("utf-8", "surrogateescape")) + len(hd.value or b"")
        total += n + size_of_varint(n)
    return total

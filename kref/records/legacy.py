"""Legacy message sets: message format v0 (Kafka 0.8-0.9) and v1 (KIP-32, 0.10).

Before record batches (v2), a log was a sequence of messages:

    offset      int64
    messageSize int32   bytes after this field
    crc         uint32  CRC-32 (IEEE, zlib.crc32) of magic..end
    magic       int8    0 or 1
    attributes  int8    bits 0-2 compression codec, bit 3 timestamp type (v1)
    timestamp   int64   v1 only
    key         int32 length (-1 = null) + bytes
    value       int32 length (-1 = null) + bytes

A compressed message set is a single "wrapper" message whose value is the
compressed bytes of an inner message set. Inner messages are never
compressed themselves and carry the wrapper's magic. Offsets of inner
messages differ by version (KIP-31):

- v0: inner offsets are absolute (the broker rewrites them on append);
- v1: inner offsets are relative (0..n-1); the wrapper's offset is the
  absolute offset of the last inner message, so inner absolute offset =
  wrapper.offset - last_inner.offset + inner.offset (unless that base is
  negative: a producer's wrapper before the broker assigned offsets).

For v1 with LogAppendTime (attribute bit 3 on the wrapper) every inner
message reports the wrapper's timestamp, which the broker overwrites without
touching the inner messages. LZ4 in a v0 message uses the KAFKA-3160 broken
frame header checksum (compression.py); zstd is refused (v2 only, KIP-110).

Like Kafka's AbstractLegacyRecordBatch, each outer message is one "batch":
base_offset is its first (inner) offset, last_offset the outer offset.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Iterable, Iterator

from kref.records.batch import Record
from kref.records.compression import DEFAULT_MAX_UNCOMPRESSED_BYTES, CompressionType, compress, decompress
from kref.records.errors import (
    BatchLengthError,
    CorruptRecordError,
    InvalidCrcError,
    InvalidMagicError,
    InvalidRecordError,
    TruncatedBatchError,
    UnsupportedCompressionError,
)

Buffer = bytes | bytearray | memoryview

LOG_OVERHEAD = 12
# crc(4) magic(1) attributes(1) [timestamp(8)] keyLength(4) valueLength(4)
RECORD_OVERHEAD_V0 = 14
RECORD_OVERHEAD_V1 = 22
CRC_OFFSET = 12
MAGIC_OFFSET = 16
ATTRIBUTES_OFFSET = 17
TIMESTAMP_OFFSET = 18
COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
NO_TIMESTAMP = -1
# zstd arrived with KIP-110 for message format v2 only.
LEGACY_CODECS = (CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4)

_OFFSET_SIZE = struct.Struct(">qi")
_CRC_MAGIC_ATTR = struct.Struct(">IbB")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class LegacyMessage:
    """One outer (shallow) or inner message, as stored."""

    position: int
    offset: int
    message_size: int
    crc: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None

    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self.message_size

    @property
    def next_position(self) -> int:
        return self.position + self.size_in_bytes

    @property
    def compression_type(self) -> int:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        # v0 has no timestamps; its "type" bit is meaningless.
        return 1 if self.magic > 0 and self.attributes & TIMESTAMP_TYPE_MASK else 0


@dataclass(frozen=True, slots=True)
class LegacyBatch:
    """An outer message with its (deep) records, offsets made absolute."""

    wrapper: LegacyMessage
    records: tuple[Record, ...]

    position = property(lambda self: self.wrapper.position)
    magic = property(lambda self: self.wrapper.magic)
    attributes = property(lambda self: self.wrapper.attributes)
    crc = property(lambda self: self.wrapper.crc)
    compression_type = property(lambda self: self.wrapper.compression_type)
    timestamp_type = property(lambda self: self.wrapper.timestamp_type)
    size_in_bytes = property(lambda self: self.wrapper.size_in_bytes)
    next_position = property(lambda self: self.wrapper.next_position)
    last_offset = property(lambda self: self.wrapper.offset)
    is_control_batch = False
    is_transactional = False
    producer_id = -1

    @property
    def base_offset(self) -> int:
        return self.records[0].offset

    @property
    def next_offset(self) -> int:
        return self.wrapper.offset + 1

    @property
    def max_timestamp(self) -> int:
        return max(r.timestamp for r in self.records)

    def __iter__(self):
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)


def read_message(
    buf: Buffer, position: int = 0, *, verify_crc: bool = True, max_message_size: int = 1 << 30
) -> LegacyMessage:
    """Decode the shallow message at `position` (lengths, magic, CRC, key, value)."""
    available = len(buf) - position
    if available < LOG_OVERHEAD:
        raise TruncatedBatchError(f"{available} bytes left, need {LOG_OVERHEAD} for offset and size", position)
    offset, size = _OFFSET_SIZE.unpack_from(buf, position)
    if size < RECORD_OVERHEAD_V0:
        raise BatchLengthError(f"message size {size} is below the minimum {RECORD_OVERHEAD_V0}", position)
    if LOG_OVERHEAD + size > max_message_size:
        raise BatchLengthError(f"message of {LOG_OVERHEAD + size} bytes exceeds the limit of {max_message_size}", position)
    if available < LOG_OVERHEAD + 6:
        raise TruncatedBatchError(f"{available} bytes left, too few for a message header", position)
    crc, magic, attributes = _CRC_MAGIC_ATTR.unpack_from(buf, position + CRC_OFFSET)
    if magic not in (0, 1):
        raise InvalidMagicError(f"magic {magic} where a legacy message (magic 0 or 1) was expected", position)
    if magic == 1 and size < RECORD_OVERHEAD_V1:
        raise BatchLengthError(f"v1 message size {size} is below the minimum {RECORD_OVERHEAD_V1}", position)
    end = position + LOG_OVERHEAD + size
    if available < LOG_OVERHEAD + size:
        raise TruncatedBatchError(f"message announces {LOG_OVERHEAD + size} bytes but only {available} remain", position)
    if verify_crc:
        actual = zlib.crc32(memoryview(buf)[position + MAGIC_OFFSET : end])
        if actual != crc:
            raise InvalidCrcError(
                f"CRC-32 mismatch for message at offset {offset}: stored {crc:#010x}, computed {actual:#010x}", position
            )
    pos = position + TIMESTAMP_OFFSET
    timestamp = NO_TIMESTAMP
    if magic == 1:
        (timestamp,) = _INT64.unpack_from(buf, pos)
        pos += 8
    key, pos = _read_bytes(buf, pos, end, "key", position)
    value, pos = _read_bytes(buf, pos, end, "value", position)
    if pos != end:
        raise InvalidRecordError(f"{end - pos} bytes left in the message after its value", position)
    return LegacyMessage(position, offset, size, crc, magic, attributes, timestamp, key, value)


def _read_bytes(buf: Buffer, pos: int, end: int, what: str, position: int) -> tuple[bytes | None, int]:
    if end - pos < 4:
        raise InvalidRecordError(f"message {what} length field runs past the message end", position)
    (n,) = _INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        if n != -1:
            raise InvalidRecordError(f"message {what} length {n} is invalid", position)
        return None, pos
    if n > end - pos:
        raise InvalidRecordError(f"message {what} length {n} exceeds the {end - pos} bytes left", position)
    return bytes(buf[pos : pos + n]), pos + n


def decode_legacy_batch(
    buf: Buffer,
    position: int = 0,
    *,
    max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
    verify_crc: bool = True,
    max_message_size: int = 1 << 30,
) -> LegacyBatch:
    """Decode the outer message at `position` and, if compressed, its inner messages."""
    wrapper = read_message(buf, position, verify_crc=verify_crc, max_message_size=max_message_size)
    codec = wrapper.compression_type
    if codec == CompressionType.NONE:
        return LegacyBatch(wrapper, (Record(wrapper.offset, wrapper.timestamp, wrapper.key, wrapper.value),))
    if codec not in LEGACY_CODECS:
        raise UnsupportedCompressionError(f"compression codec {codec} is not allowed in message format v{wrapper.magic}", position)
    if wrapper.value is None:
        raise InvalidRecordError("compressed wrapper message has a null value", position)
    try:
        inner_bytes = decompress(codec, wrapper.value, max_uncompressed_bytes=max_uncompressed_bytes, magic=wrapper.magic)
    except CorruptRecordError as e:
        if e.position is None:
            e.position = position
        raise
    inner = []
    pos = 0
    while pos < len(inner_bytes):
        try:
            msg = read_message(inner_bytes, pos, verify_crc=verify_crc)
        except CorruptRecordError as e:
            raise type(e)(f"inner message of the wrapper at offset {wrapper.offset}: {e}", position) from None
        if msg.compression_type != CompressionType.NONE:
            raise InvalidRecordError("compressed wrapper message contains a compressed inner message", position)
        if msg.magic != wrapper.magic:
            raise InvalidRecordError(
                f"inner message has magic {msg.magic} inside a wrapper of magic {wrapper.magic}", position
            )
        inner.append(msg)
        pos = msg.next_position
    if not inner:
        raise InvalidRecordError("compressed wrapper message has no inner messages", position)
    base = 0
    if wrapper.magic == 1:
        base = wrapper.offset - inner[-1].offset
        # A producer's wrapper carries offset 0 (the broker assigns offsets);
        # then the base is negative and, as in Kafka's deep iterator, the
        # relative inner offsets are reported unchanged.
        if base < 0:
            base = 0
    log_append_time = wrapper.timestamp_type == 1
    records = tuple(
        Record(base + m.offset, wrapper.timestamp if log_append_time else m.timestamp, m.key, m.value)
        for m in inner
    )
    return LegacyBatch(wrapper, records)


def iter_legacy_batches(
    buf: Buffer, position: int = 0, *, max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES
) -> Iterator[LegacyBatch]:
    view = memoryview(buf)
    while position < len(view):
        batch = decode_legacy_batch(view, position, max_uncompressed_bytes=max_uncompressed_bytes)
        yield batch
        position = batch.next_position


def validate_message_set(
    buf: Buffer, *, max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES
) -> list[LegacyBatch]:
    """Fully check a legacy message set: lengths, magic, CRCs (outer and
    inner), codecs, inner offsets strictly increasing, v1 timestamps >= -1."""
    batches = list(iter_legacy_batches(buf, max_uncompressed_bytes=max_uncompressed_bytes))
    for batch in batches:
        offsets = [r.offset for r in batch.records]
        if any(b <= a for a, b in zip(offsets, offsets[1:])):
            raise InvalidRecordError("inner message offsets are not strictly increasing", batch.position)
        if batch.magic == 1 and any(r.timestamp < NO_TIMESTAMP for r in batch.records):
            raise InvalidRecordError("v1 message with a negative timestamp", batch.position)
    return batches


# --- writing ----------------------------------------------------------------


def encode_message(
    offset: int, *, magic: int, attributes: int = 0, timestamp: int = NO_TIMESTAMP,
    key: bytes | None, value: bytes | None,
) -> bytes:  # fmt: skip
    body = bytearray(_CRC_MAGIC_ATTR.pack(0, magic, attributes))
    if magic == 1:
        body += _INT64.pack(timestamp)
    elif magic != 0:
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    for field in (key, value):
        if field is None:
            body += _INT32.pack(-1)
        else:
            body += _INT32.pack(len(field))
            body += field
    struct.pack_into(">I", body, 0, zlib.crc32(memoryview(body)[4:]))
    return _OFFSET_SIZE.pack(offset, len(body)) + bytes(body)


def build_message_set(
    records: Iterable[Record],
    *,
    magic: int,
    compression: int = CompressionType.NONE,
    base_offset: int = 0,
    timestamp_type: int = 0,
    log_append_time: int | None = None,
) -> bytes:
    """Write records as a v0/v1 message set, as a broker stores them.

    Uncompressed: one message per record. Compressed: one wrapper message
    whose value holds the inner messages (absolute offsets for v0, relative
    for v1), with the wrapper offset = the last record's offset and, for v1,
    the wrapper timestamp = the largest inner timestamp (or
    `log_append_time` with timestamp_type=1).
    """
    records = list(records)
    if any(r.headers for r in records):
        raise ValueError("record headers need message format v2")
    offsets = []
    nxt = base_offset
    for r in records:
        offsets.append(nxt if r.offset < 0 else r.offset)
        nxt = offsets[-1] + 1
    ts_attr = TIMESTAMP_TYPE_MASK if (magic == 1 and timestamp_type) else 0
    codec = CompressionType(compression)
    if codec not in LEGACY_CODECS and codec != CompressionType.NONE:
        raise UnsupportedCompressionError(f"{codec.name} needs message format v2")
    if codec == CompressionType.NONE:
        return b"".join(
            encode_message(off, magic=magic, attributes=ts_attr, timestamp=_ts(r, magic, log_append_time),
                           key=r.key, value=r.value)
            for r, off in zip(records, offsets)
        )  # fmt: skip
    if not records:
        raise ValueError("a compressed message set needs at least one record")
    inner = b"".join(
        encode_message(
            off if magic == 0 else off - offsets[0], magic=magic, timestamp=_ts(r, magic, None), key=r.key, value=r.value
        )
        for r, off in zip(records, offsets)
    )
    if magic == 1 and ts_attr and log_append_time is not None:
        wrapper_ts = log_append_time
    else:
        wrapper_ts = max(_ts(r, magic, None) for r in records)
    return encode_message(
        offsets[-1], magic=magic, attributes=codec | ts_attr, timestamp=wrapper_ts,
        key=None, value=compress(codec, inner, magic=magic),
    )  # fmt: skip


def _ts(record: Record, magic: int, log_append_time: int | None) -> int:
    if magic == 0:
        return NO_TIMESTAMP
    return record.timestamp if log_append_time is None else log_append_time

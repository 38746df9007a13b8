"""Zigzag varints as Kafka's record format v2 uses them (ByteUtils).

Record lengths, deltas, key/value/header lengths are signed integers written
zigzag-encoded (so -1, the "null" length, costs one byte) in base-128 groups,
least significant first. Kafka rejects a varint longer than 5 bytes (int32)
or a varlong longer than 10 bytes (int64); we do the same, and a varint that
runs past the end of the buffer is a truncated record, never an IndexError.
"""

from __future__ import annotations

from kref.records.errors import InvalidRecordError

Buffer = bytes | bytearray | memoryview


def read_varint(buf: Buffer, pos: int, end: int, max_bytes: int = 5) -> tuple[int, int]:
    """Decode one zigzag varint (max_bytes=5) or varlong (max_bytes=10) at
    `pos`, not reading at or past `end`; return (value, next position)."""
    if pos + 1 < end:
        b = buf[pos]
        if b < 0x80:  # one byte: lengths, small deltas
            return (b >> 1) ^ -(b & 1), pos + 1
        c = buf[pos + 1]
        if c < 0x80:  # two bytes: most record lengths, value sizes, deltas
            v = (b & 0x7F) | (c << 7)
            return (v >> 1) ^ -(v & 1), pos + 2
    elif pos < end:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    result = shift = 0
    limit = min(end, pos + max_bytes)
    while pos < limit:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            # Java accumulates into an int/long, silently dropping bits past
            # 32/64; masking reproduces what Kafka would read.
            result &= 0xFFFFFFFF if max_bytes == 5 else 0xFFFFFFFFFFFFFFFF
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    if pos >= end:
        raise InvalidRecordError("varint runs past the end of the record data", pos)
    raise InvalidRecordError(f"varint longer than {max_bytes} bytes", pos)


def read_varlong(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    return read_varint(buf, pos, end, 10)


def write_varint(out: bytearray, value: int) -> None:
    """Append `value` zigzag-encoded (works for both int32 and int64 ranges)."""
    z = (value << 1) ^ (value >> 63)
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def size_of_varint(value: int) -> int:
    z = (value << 1) ^ (value >> 63)
    n = 1
    while z >= 0x80:
        z >>= 7
        n += 1
    return n

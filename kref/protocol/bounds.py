"""Length pre-check of request bodies before kio decodes them.

Theory of operation: kio 0.6's native reader reserves memory for an array
from the length the message claims. A flexible (KIP-482) compact array
length is an unsigned varint, so a 20-byte request can claim 2^35 elements
and the reservation aborts the whole process ("memory allocation ... failed",
found by tests/protocol fuzzing). Kafka reads the same claim lazily and
fails on the first missing byte.

So before kio sees a body we walk it once in Python, following the schema
kio generated, and check that every array, string and bytes length fits in
the bytes that remain (each array element takes at least one byte). The
walk reads no values, allocates nothing proportional to a claim, and
returns where the body ends. A failing check raises LengthError, which the
codec turns into RequestDecodeError (close the connection, as Kafka does for
a request it cannot parse). Walkers are compiled once per entity type.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from dataclasses import fields

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

__all__ = ["LengthError", "check_body", "skip_tagged_fields"]

Walker = Callable[[bytes, int], int]

_FIXED_SIZES = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float64": 8,
    "bool": 1,
    "uuid": 16,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class LengthError(ValueError):
    """A claimed length does not fit in the request's remaining bytes."""


def _need(buf: bytes, pos: int, n: int) -> int:
    if n < 0 or pos + n > len(buf):
        raise LengthError(f"length {n} at byte {pos} exceeds the {len(buf) - pos} bytes left")
    return pos + n


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    if pos < len(buf) and buf[pos] < 0x80:  # the common one-byte case
        return buf[pos], pos + 1
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise LengthError("varint runs past the end of the request")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 35:
            raise LengthError("varint longer than 5 bytes")


def _fixed(size: int) -> Walker:
    def walk(buf: bytes, pos: int) -> int:
        end = pos + size
        if end > len(buf):
            raise LengthError(f"{size} bytes of fixed-size fields at byte {pos} exceed the {len(buf) - pos} bytes left")
        return end

    return walk


def _compact_bytes(buf: bytes, pos: int) -> int:
    n, pos = _uvarint(buf, pos)
    return pos if n == 0 else _need(buf, pos, n - 1)


def _legacy_string(buf: bytes, pos: int) -> int:
    _need(buf, pos, 2)
    (n,) = _I16.unpack_from(buf, pos)
    return pos + 2 if n == -1 else _need(buf, pos + 2, n)


def _legacy_bytes(buf: bytes, pos: int) -> int:
    _need(buf, pos, 4)
    (n,) = _I32.unpack_from(buf, pos)
    return pos + 4 if n == -1 else _need(buf, pos + 4, n)


def _primitive(kafka_type: str, flexible: bool) -> Walker:
    if kafka_type in _FIXED_SIZES:
        return _fixed(_FIXED_SIZES[kafka_type])
    if kafka_type in ("string", "bytes", "records"):
        if flexible:
            return _compact_bytes
        return _legacy_string if kafka_type == "string" else _legacy_bytes
    raise LengthError(f"no length rule for kafka type {kafka_type!r}")


def _array(item: Walker, flexible: bool) -> Walker:
    def walk(buf: bytes, pos: int) -> int:
        if flexible:
            if pos < len(buf) and buf[pos] < 0x80:
                n = buf[pos] - 1  # 0 encodes null
                pos += 1
            else:
                n, pos = _uvarint(buf, pos)
                n -= 1
        else:
            _need(buf, pos, 4)
            (n,) = _I32.unpack_from(buf, pos)
            pos += 4
        if n <= 0:
            return pos
        if n > len(buf) - pos:
            raise LengthError(f"array of {n} elements at byte {pos} exceeds the {len(buf) - pos} bytes left")
        for _ in range(n):
            pos = item(buf, pos)
        return pos

    return walk


def _nullable_entity(inner: Walker) -> Walker:
    def walk(buf: bytes, pos: int) -> int:
        pos = _need(buf, pos, 1)
        return pos if buf[pos - 1] == 0xFF else inner(buf, pos)

    return walk


def _tagged_fields(buf: bytes, pos: int) -> int:
    if pos < len(buf) and buf[pos] == 0:  # no tagged fields: nearly always
        return pos + 1
    count, pos = _uvarint(buf, pos)
    if count > len(buf) - pos:
        raise LengthError(f"{count} tagged fields exceed the {len(buf) - pos} bytes left")
    for _ in range(count):
        _, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos = _need(buf, pos, size)
    return pos


@functools.cache
def _entity(entity_type: type) -> Walker:
    flexible = bool(entity_type.__flexible__)
    steps: list[Walker | int] = []  # an int: that many bytes of fixed-size fields
    for field in fields(entity_type):
        if get_field_tag(field) is not None:
            continue  # tagged: skipped by size in the tag section
        kind = classify_field(field)
        kafka_type = get_schema_field_type(field) if isinstance(kind, (PrimitiveField, PrimitiveTupleField)) else None
        if kafka_type in _FIXED_SIZES and not kind.is_array:
            # Runs of fixed-size fields are checked as one length: a walk step
            # per field was most of the walk's cost on small requests.
            size = _FIXED_SIZES[kafka_type]
            if steps and isinstance(steps[-1], int):
                steps[-1] += size
            else:
                steps.append(size)
            continue
        if kafka_type is not None:
            step = _primitive(kafka_type, flexible)
        elif isinstance(kind, (EntityField, EntityTupleField)):
            step = _entity(kind.type_)
            if isinstance(kind, EntityField) and is_optional(field):
                step = _nullable_entity(step)
        else:  # pragma: no cover - kio has no other field classes
            raise LengthError(f"unknown field class {kind!r}")
        steps.append(_array(step, flexible) if kind.is_array else step)
    if flexible:
        steps.append(_tagged_fields)
    compiled = tuple(_fixed(step) if isinstance(step, int) else step for step in steps)
    if len(compiled) == 1:
        return compiled[0]

    def walk(buf: bytes, pos: int) -> int:
        for step in compiled:
            pos = step(buf, pos)
        return pos

    return walk


def check_body(body_type: type, buf: bytes, offset: int) -> int:
    """Offset just past the body; LengthError if any length does not fit."""
    return _entity(body_type)(buf, offset)


def skip_tagged_fields(buf: bytes, pos: int) -> int:
    """Offset just past a tag buffer (KIP-482) starting at `pos`."""
    return _tagged_fields(buf, pos)

"""Produce requests (v3-v13) read with struct: the broker's most frequent request.

Theory of operation
-------------------
A single-record produce is a few dozen bytes of structure around one record
batch, yet the generic path (bounds.py's length walk, then kio's reflective
reader) was about a tenth of the broker's CPU for it. This module reads the
one plain shape every client sends: transactional id, acks, timeout, topics
(name, or topic id from v13), partitions (index, records), and empty tag
buffers in the flexible versions (v9+). It returns a ProduceBody:
plain tuples in place of kio's three frozen dataclasses and a timedelta,
which cost about as much to build as the whole read (about 6 us a request).
The handler takes the same ProduceBody from kio's dataclasses on the
generic path (`from_kio`), so it sees one form whichever reader ran;
tests/protocol/test_produce_request.py checks that both paths give equal
bodies for every version.

It never reports an error itself: anything else (a tagged field, a null
array, a length that runs past the frame, bytes left over, bad UTF-8)
returns None, and the caller takes the generic path, which keeps the bounds
checks and the exact error message. Every loop reads at least one byte per
step, so a lying count ends at the frame's end.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from typing import NamedTuple

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_ZERO_UUID_BYTES = bytes(16)
_ONE_MS = datetime.timedelta(milliseconds=1)
VIEW_BYTES = 64 * 1024


class ProduceBody(NamedTuple):
    """A Produce request's body as the handler reads it, whichever reader ran.

    `topics`: per topic entry (name or None, topic id or None, partitions),
    per partition (index, records or None), in request order.
    """

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: tuple[tuple[str | None, uuid.UUID | None, tuple[tuple[int, bytes | None], ...]], ...]


def from_kio(request) -> ProduceBody:
    """The ProduceBody of a request kio's generic reader decoded."""
    return ProduceBody(
        request.transactional_id,
        int(request.acks),
        request.timeout // _ONE_MS,  # exact: total_seconds() * 1000 is a float
        tuple(
            (getattr(t, "name", None), getattr(t, "topic_id", None),
             tuple((int(p.index), p.records) for p in t.partition_data))
            for t in request.topic_data
        ),
    )


class _NotPlain(Exception):
    """The request is not the plain shape: the generic reader takes it."""


def _uvarint(frame: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = frame[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise _NotPlain


def decode_produce(frame: bytes, pos: int, version: int) -> ProduceBody | None:
    """The Produce request of `version` in frame[pos:], or None for the generic path."""
    try:
        return _decode(frame, pos, version)
    except (_NotPlain, IndexError, struct.error, UnicodeDecodeError):
        return None


def _length(frame: bytes, pos: int, flexible: bool, fixed: struct.Struct) -> tuple[int, int]:
    """A string/bytes length or an array count (-1: null), compact in flexible versions."""
    if flexible:
        byte = frame[pos]
        if byte < 0x80:  # nearly every length and count: one byte, no call
            return byte - 1, pos + 1
        n, pos = _uvarint(frame, pos)
        return n - 1, pos
    (n,) = fixed.unpack_from(frame, pos)
    return n, pos + fixed.size


def _chunk(frame: bytes, pos: int, n: int) -> tuple[bytes | None, int]:
    """n bytes at pos; n == -1 is null (the caller decides whether null is plain)."""
    if n == -1:
        return None, pos
    if n < 0 or pos + n > len(frame):
        raise _NotPlain
    return frame[pos:pos + n], pos + n


def _records(frame: bytes, pos: int, n: int) -> tuple[bytes | memoryview | None, int]:
    """A partition's records: _chunk, but from VIEW_BYTES on a view into the
    frame rather than a copy. A produce of a megabyte was otherwise copied
    once more before the log copies it to stamp its offsets (the frame is
    bytes, so the view cannot change under the handler)."""
    if n < VIEW_BYTES:
        return _chunk(frame, pos, n)
    if pos + n > len(frame):
        raise _NotPlain
    return memoryview(frame)[pos:pos + n], pos + n


def _decode(frame: bytes, pos: int, version: int) -> ProduceBody:
    flexible = version >= 9
    by_id = version >= 13
    n, pos = _length(frame, pos, flexible, _I16)
    raw, pos = _chunk(frame, pos, n)
    transactional_id = None if raw is None else raw.decode("utf-8")
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos)
    pos += 6
    topic_count, pos = _length(frame, pos, flexible, _I32)
    if topic_count < 0:
        raise _NotPlain  # a null array: kio's reader decides
    topics = []
    for _ in range(topic_count):
        if by_id:
            raw, pos = _chunk(frame, pos, 16)
            if len(raw) != 16:
                raise _NotPlain
            name, topic_id = None, None if raw == _ZERO_UUID_BYTES else uuid.UUID(bytes=raw)
        else:
            n, pos = _length(frame, pos, flexible, _I16)
            raw, pos = _chunk(frame, pos, n)
            if raw is None:
                raise _NotPlain
            name, topic_id = raw.decode("utf-8"), None
        partition_count, pos = _length(frame, pos, flexible, _I32)
        if partition_count < 0:
            raise _NotPlain
        partitions = []
        for _ in range(partition_count):
            (index,) = _I32.unpack_from(frame, pos)
            n, pos = _length(frame, pos + 4, flexible, _I32)
            records, pos = _records(frame, pos, n)
            if flexible:
                if frame[pos]:
                    raise _NotPlain  # a tagged field: kio's reader knows what to do with it
                pos += 1
            partitions.append((index, records))
        if flexible:
            if frame[pos]:
                raise _NotPlain
            pos += 1
        topics.append((name, topic_id, tuple(partitions)))
    if flexible:
        if frame[pos]:
            raise _NotPlain
        pos += 1
    if pos != len(frame):
        raise _NotPlain  # bytes left over: the generic path reports them
    return ProduceBody(transactional_id, acks, timeout_ms, tuple(topics))

"""Produce responses written straight to wire bytes (Produce v3-v13).

Why: a single-record produce spends a large share of the broker's time in
kio's generic (pure Python, reflective) response writer, for a message of a
few dozen bytes. This module writes the same bytes with `struct`, for the
response shapes the produce handler builds: per partition an error code,
base offset, log append time, log start offset (v5+), empty record errors
and an optional error message (v8+); flexible encoding with empty tag
buffers from v9; topic id instead of name from v13. The handler hands the
result to the codec as a PreEncoded body. tests/broker/test_produce_response.py
checks it byte for byte against kio's writer for every version.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable

from kref.protocol.wire import array_count, uvarint

_PARTITION_V3 = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... log_start_offset
_ZERO_UUID = uuid.UUID(int=0)


def _string(value: str, flexible: bool) -> bytes:
    raw = value.encode()
    return (uvarint(len(raw) + 1) if flexible else struct.pack(">h", len(raw))) + raw


def _nullable_string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else b"\xff\xff"
    return _string(value, flexible)


def topic_key(name: str | None, topic_id: uuid.UUID | None, by_id: bool, flexible: bool) -> bytes:
    """A response's topic entry key: the topic id (KIP-516 versions) or the name."""
    return (topic_id or _ZERO_UUID).bytes if by_id else _string(name or "", flexible)


# A topic's key bytes per (name, id, by_id, flexible): every produce answer
# re-encoded the same few names. Bounded: cleared when full.
_TOPIC_KEYS: dict[tuple, bytes] = {}
MAX_CACHED_TOPIC_KEYS = 10_000


def _cached_topic_key(name: str | None, topic_id: uuid.UUID | None, by_id: bool, flexible: bool) -> bytes:
    key = (name, topic_id, by_id, flexible)
    encoded = _TOPIC_KEYS.get(key)
    if encoded is None:
        if len(_TOPIC_KEYS) >= MAX_CACHED_TOPIC_KEYS:
            _TOPIC_KEYS.clear()
        encoded = _TOPIC_KEYS[key] = topic_key(name, topic_id, by_id, flexible)
    return encoded


# What follows a partition's fixed fields when it has no error message:
# v8+ adds empty record_errors and a null error_message, v9+ a tag buffer.
_PARTITION_TAIL = {v: (b"\x01\x00\x00" if v >= 9 else b"\x00\x00\x00\x00\xff\xff" if v >= 8 else b"")
                   for v in range(3, 14)}
_RESPONSE_TAIL = {v: (b"\x00\x00\x00\x00\x00" if v >= 9 else b"\x00\x00\x00\x00") for v in range(3, 14)}


# (index, error_code, base_offset, log_append_time, log_start_offset, error_message)
PartitionResult = tuple[int, int, int, int, int, str | None]


def encode_produce_response(
    api_version: int, topics: Iterable[tuple[str | None, uuid.UUID | None, list[PartitionResult]]]
) -> bytes:
    """The body of a ProduceResponse of `api_version` (3..13), throttle time 0."""
    if not 3 <= api_version <= 13:
        raise ValueError(f"Produce v{api_version} is outside v3-v13")
    flexible = api_version >= 9
    topics = list(topics)
    out = [array_count(len(topics), flexible)]
    plain_tail = _PARTITION_TAIL[api_version]
    for name, topic_id, partitions in topics:
        out.append(_cached_topic_key(name, topic_id, api_version >= 13, flexible))
        out.append(array_count(len(partitions), flexible))
        for index, error_code, base_offset, append_time, log_start_offset, message in partitions:
            if api_version >= 5:
                out.append(_PARTITION_V5.pack(index, error_code, base_offset, append_time, log_start_offset))
            else:
                out.append(_PARTITION_V3.pack(index, error_code, base_offset, append_time))
            if message is None:
                out.append(plain_tail)
                continue
            if api_version >= 8:
                out.append(array_count(0, flexible))  # record_errors
                out.append(_nullable_string(message, flexible))
            if flexible:
                out.append(b"\x00")  # partition tagged fields
        if flexible:
            out.append(b"\x00")  # topic tagged fields
    out.append(_RESPONSE_TAIL[api_version])  # throttle_time_ms 0 (and the tag buffer)
    return b"".join(out)


# A one-partition answer's bytes around its fixed fields, per (version,
# name, id): every single-record produce to the same partition writes the
# same head (one topic, its key, one partition) and, without an error
# message, the same tail. Bounded like _TOPIC_KEYS.
_SINGLE_HEADS: dict[tuple, bytes] = {}
_SINGLE_TAIL = {v: _PARTITION_TAIL[v] + (b"\x00" if v >= 9 else b"") + _RESPONSE_TAIL[v] for v in range(3, 14)}


def encode_single_partition_response(
    api_version: int, name: str | None, topic_id: uuid.UUID | None, partition: PartitionResult
) -> bytes:
    """encode_produce_response for one topic with one partition (the common answer), the same bytes."""
    index, error_code, base_offset, append_time, log_start_offset, message = partition
    if message is not None or not 3 <= api_version <= 13:
        return encode_produce_response(api_version, ((name, topic_id, [partition]),))
    key = (api_version, name, topic_id)
    head = _SINGLE_HEADS.get(key)
    if head is None:
        if len(_SINGLE_HEADS) >= MAX_CACHED_TOPIC_KEYS:
            _SINGLE_HEADS.clear()
        flexible = api_version >= 9
        head = _SINGLE_HEADS[key] = b"".join((
            array_count(1, flexible), topic_key(name, topic_id, api_version >= 13, flexible), array_count(1, flexible),
        ))
    if api_version >= 5:
        fixed = _PARTITION_V5.pack(index, error_code, base_offset, append_time, log_start_offset)
    else:
        fixed = _PARTITION_V3.pack(index, error_code, base_offset, append_time)
    return b"".join((head, fixed, _SINGLE_TAIL[api_version]))

"""Fetch responses written straight to wire bytes (Fetch v4-v17), around the segment bytes.

Why: a consumer's Fetch response is mostly record bytes read from a segment,
up to megabytes. kio's generic writer walks the response reflectively and
copies those bytes through a BytesIO twice more; this module writes the
fixed fields with `struct` and joins them with the records in one copy. The
handler hands the result to the codec as a PreEncoded body.

Shapes written (what the fetch handler answers): top-level throttle time 0,
an error code (v7+) and session id (v7+); per topic its name (v4-v12) or
topic id (v13+, KIP-516); per partition the index, error code,
high_watermark, last_stable_offset, log_start_offset (v5+), a null
aborted-transactions list, preferred_read_replica (v11+, KIP-392) and the records.
Flexible versions (v12+, KIP-482) carry tag buffers: empty, except the
diverging epoch (tag 0) a leader sends a follower whose log diverges
(KIP-320); the other tagged fields (current leader, snapshot id, node
endpoints) keep their defaults, which kio omits as well. tests/broker/test_fetch_response.py
checks every version byte for byte against kio's writer.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence

from kref.broker.handlers.produce_response import topic_key
from kref.protocol.wire import array_count as _count, uvarint as _uvarint

_I32 = struct.Struct(">i")
_TOP_V7 = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_PARTITION_V4 = struct.Struct(">ihqq")  # index, error_code, high_watermark, last_stable_offset
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... log_start_offset
_EPOCH_END = struct.Struct(">iq")  # diverging_epoch: epoch, end_offset

# (index, error_code, high_watermark, last_stable_offset, log_start_offset, records[, diverging[, preferred]])
# where diverging is (epoch, end_offset) for a follower told to truncate (v12+) or None, and
# preferred the replica a consumer should fetch from (KIP-392, v11+) or -1
PartitionData = tuple


def encode_fetch_response(
    api_version: int,
    error_code: int,
    session_id: int,
    topics: Sequence[tuple[str | None, uuid.UUID | None, Sequence[PartitionData]]],
) -> bytes:
    """The body of a FetchResponse of `api_version` (4..17), throttle time 0."""
    return b"".join(fetch_response_chunks(api_version, error_code, session_id, topics))


def fetch_response_chunks(
    api_version: int,
    error_code: int,
    session_id: int,
    topics: Sequence[tuple[str | None, uuid.UUID | None, Sequence[PartitionData]]],
) -> tuple[bytes, ...]:
    """encode_fetch_response's body as chunks, the record bytes among them
    uncopied (the frame encoder joins them once with the header)."""
    if not 4 <= api_version <= 17:
        raise ValueError(f"Fetch v{api_version} is outside v4-v17")
    flexible = api_version >= 12
    out: list[bytes] = [_TOP_V7.pack(0, error_code, session_id) if api_version >= 7 else _I32.pack(0)]
    out.append(_count(len(topics), flexible))
    for name, topic_id, partitions in topics:
        out.append(topic_key(name, topic_id, api_version >= 13, flexible))
        out.append(_count(len(partitions), flexible))
        for index, code, high_watermark, last_stable_offset, log_start_offset, records, *extra in partitions:
            if api_version >= 5:
                out.append(_PARTITION_V5.pack(index, code, high_watermark, last_stable_offset, log_start_offset))
            else:
                out.append(_PARTITION_V4.pack(index, code, high_watermark, last_stable_offset))
            out.append(b"\x00" if flexible else b"\xff\xff\xff\xff")  # aborted_transactions: null
            if api_version >= 11:
                preferred = extra[1] if len(extra) > 1 else -1
                out.append(_I32.pack(preferred))  # preferred_read_replica (KIP-392), -1: none
            if records is None:
                out.append(b"\x00" if flexible else b"\xff\xff\xff\xff")
            else:
                out.append(_uvarint(len(records) + 1) if flexible else _I32.pack(len(records)))
                out.append(records)
            if flexible:
                diverging = extra[0] if extra else None
                if diverging is None:
                    out.append(b"\x00")  # partition tagged fields: none
                else:
                    # tag 0 diverging_epoch (KIP-320): EpochEndOffset{epoch i32, end_offset i64, no tags}
                    out.append(b"\x01\x00\x0d" + _EPOCH_END.pack(*diverging) + b"\x00")
        if flexible:
            out.append(b"\x00")  # topic tagged fields
    if flexible:
        out.append(b"\x00")  # top-level tagged fields
    return tuple(out)

"""Fetch (API key 1, v4-v17): consumer reads up to the high watermark, with long poll.

Theory of operation
-------------------
A consumer fetch names partitions (by topic name, or by topic id from v13,
KIP-516; librdkafka uses ids as soon as the broker offers v13) with a fetch
offset and a per-partition byte limit, plus a response byte limit, min_bytes
and max_wait_ms.

1. Read every partition in request order through its driver
   (`Partition.read`): whole batches from the fetch offset, below the high
   watermark, returned exactly as the segment stores them (no re-encoding).
   The response limit (request max_bytes, capped by the broker's
   fetch.max.bytes bound) is shared across partitions in order; as in
   KIP-74 the first partition that has data returns at least one batch even
   if it is bigger than the limits, so a consumer never gets stuck behind a
   large batch.
2. If that found at least min_bytes, or an error, or the client does not
   want to wait, answer now. Otherwise park a DelayedFetch in the fetch
   purgatory, watching those partitions; the drivers wake it when a high
   watermark moves (new data became visible), and it completes once the
   bytes appended since cover min_bytes, or after max_wait_ms. Then read
   again and answer.

Fetch sessions (KIP-227) are not kept: the response's session_id is 0, which
tells clients to send full fetch requests, as Kafka does when its session
cache is full. Follower fetches (replica_id >= 0, or the ReplicaState of
v15+) go to the replica core as FetchFromFollower (read up to the log end
offset, or a diverging epoch, KIP-320) and long-poll on the log end offset.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kref.broker.handlers.fetch_response import encode_fetch_response
from kref.broker.partition import ReadResult
from kref.protocol.codec import PreEncoded, response_class
from kref.protocol.errors import ErrorCode
from kref.replication.purgatory import DelayedFetch, wait_for

FETCH = 1
MIN_VERSION, MAX_VERSION = 4, 17
# Kafka's fetch.max.bytes default: the most one response carries.
MAX_RESPONSE_BYTES = 55 * 1024 * 1024
MAX_WAIT_MS = 30_000



@dataclass(slots=True)
class _Wanted:
    topic_index: int
    name: str | None
    topic_id: uuid.UUID | None
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    unknown_error: int
    last_fetched_epoch: int = -1


def register(router, broker) -> None:

    async def handle_fetch(ctx, request) -> Any:
        return await fetch(ctx.broker, ctx.api_version, request)

    router.register(FETCH, MIN_VERSION, MAX_VERSION, handle_fetch)


def _replica_id(request) -> int:
    state = getattr(request, "replica_state", None)
    if state is not None and int(state.replica_id) >= 0:
        return int(state.replica_id)
    return int(getattr(request, "replica_id", -1))


def _wanted(broker, request) -> list[_Wanted]:
    out = []
    for i, topic in enumerate(request.topics):
        name = getattr(topic, "topic", None)
        topic_id = getattr(topic, "topic_id", None)
        unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if name is None:
            meta = broker.topic_by_id(topic_id) if topic_id is not None else None
            name = meta.name if meta is not None else None
            unknown = ErrorCode.UNKNOWN_TOPIC_ID
        for p in topic.partitions:
            out.append(
                _Wanted(i, name, topic_id, int(p.partition), int(p.fetch_offset), int(p.partition_max_bytes),
                        int(getattr(p, "current_leader_epoch", -1)), unknown,
                        int(getattr(p, "last_fetched_epoch", -1)))
            )
    return out


def _read_all(broker, wanted: list[_Wanted], max_bytes: int, request) -> tuple[list[ReadResult], int]:
    results = []
    remaining = max_bytes
    total = 0
    replica_id = _replica_id(request)
    for w in wanted:
        part = broker.partitions.get((w.name, w.partition)) if w.name is not None else None
        if part is None:
            results.append(ReadResult(w.unknown_error, -1, -1, -1))
            continue
        limit = min(w.partition_max_bytes, remaining)
        if replica_id >= 0:
            # A follower's fetch: the replica core decides (FetchFromFollower).
            result = part.read_as_follower(replica_id, w.fetch_offset, w.last_fetched_epoch,
                                           w.current_leader_epoch, limit, broker.now_ms())
        else:
            result = part.read(w.fetch_offset, limit, min_one_message=(total == 0),
                               current_leader_epoch=w.current_leader_epoch)
        size = len(result.records)
        total += size
        remaining = max(0, remaining - size)
        results.append(result)
    return results, total


async def fetch(broker, api_version: int, request) -> Any:
    wanted = _wanted(broker, request)
    max_bytes = max(0, min(int(request.max_bytes), MAX_RESPONSE_BYTES))
    results, total = _read_all(broker, wanted, max_bytes, request)

    max_wait_ms = max(0, min(int(request.max_wait.total_seconds() * 1000), MAX_WAIT_MS))
    min_bytes = int(request.min_bytes)
    has_error = any(r.error_code != ErrorCode.NONE for r in results)
    if max_wait_ms > 0 and total < min_bytes and not has_error and wanted:
        parts = [broker.partitions[(w.name, w.partition)] for w in wanted]
        # A consumer is woken by high watermark movement (only bytes below it
        # count); a follower reads up to the log end offset, so any append
        # past its fetch offset answers it (replica.fetch.min.bytes is 1 by default).
        follower = _replica_id(request) >= 0
        start = [p.visible_bytes for p in parts]

        def ready() -> bool:
            arrived = total
            for w, p, before in zip(wanted, parts, start):
                if not p.is_leader or broker.partitions.get(p.key) is not p:
                    return True  # leadership moved or topic deleted: answer now
                if follower:
                    if p.log_end_offset > w.fetch_offset:
                        return True
                    continue
                arrived += p.visible_bytes - before
            return arrived >= min_bytes

        op = DelayedFetch([p.key for p in parts], ready)
        await wait_for(broker.fetch_purgatory, op, max_wait_ms)
        results, total = _read_all(broker, wanted, max_bytes, request)

    return _response(api_version, request, wanted, results)


def _response(api_version: int, request, wanted: list[_Wanted], results: list[ReadResult]) -> Any:
    per_topic: dict[int, list] = {}
    for w, r in zip(wanted, results):
        per_topic.setdefault(w.topic_index, []).append(
            (w.partition, r.error_code, r.high_watermark, r.last_stable_offset, r.log_start_offset, r.records,
             r.diverging)
        )
    topics = [
        (getattr(topic, "topic", None), getattr(topic, "topic_id", None), per_topic.get(i, ()))
        for i, topic in enumerate(request.topics)
    ]
    body = encode_fetch_response(api_version, ErrorCode.NONE, 0, topics)
    return PreEncoded(response_class(FETCH, api_version), body)

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
2. If that found at least min_bytes, or an error, a diverging epoch or a
   preferred read replica, or the client does not want to wait, answer now
   (the core's `fetch_answered_at_once`, Kafka's fetchMessages). Otherwise park a DelayedFetch in the fetch
   purgatory, watching those partitions; the drivers wake it when a high
   watermark moves (new data became visible). Whether it is answered is
   the replica core's rule (`replica.delayed_fetch_complete`, Kafka's
   DelayedFetch.tryComplete): the bytes that became visible since cover
   min_bytes, or leadership or the epoch moved; else after max_wait_ms.
   Then read again and answer.

Fetch sessions (KIP-227, v7+): kref/broker/fetch_session.py decides what a
request means. A full fetch (epoch 0) opens a session; an incremental one
(epoch n) updates the session's partitions, and then *every* partition of
the session is read and waited on (the request may name none), while the
response carries only those with something new. Follower fetches
(replica_id >= 0, or the ReplicaState of v15+) go to the replica core as
FetchFromFollower (read up to the log end offset, or a diverging epoch,
KIP-320) and long-poll on the log end offset.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import logging
import random

import trio

from kref.broker.fetch_session import CachedPartition, FetchSessionCache, SessionDecision
from kref.broker.handlers.fetch_response import fetch_response_chunks
from kref.broker.loop_steps import StepBudget
from kref.broker.partition import ReadResult
from kref.protocol.codec import PreEncoded, response_class
from kref.protocol.errors import ErrorCode
from kref.broker import replication_quota
from kref.replication import replica
from kref.replication.purgatory import DelayedFetch
from kref.broker.purgatory_wait import wait_for

log = logging.getLogger(__name__)

FETCH = 1
MIN_VERSION, MAX_VERSION = 4, 17
# Kafka's fetch.max.bytes default: the most one response carries.
MAX_RESPONSE_BYTES = 55 * 1024 * 1024
MAX_WAIT_MS = 30_000



@dataclass(slots=True)
class _Wanted:
    topic_key: object  # the topic id (v13+) or the name the fetcher uses
    name: str | None
    topic_id: uuid.UUID | None
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    unknown_error: int
    last_fetched_epoch: int = -1


def register(router, broker) -> None:
    if broker is not None:
        # Session ids come from the cache's own generator, seeded through the
        # broker's ids port (a seeded broker replays the same ids).
        broker.fetch_sessions = FetchSessionCache(
            broker.config.max_incremental_fetch_session_cache_slots, random.Random(broker.ids.seed()))

    async def handle_fetch(ctx, request) -> Any:
        return await fetch(ctx.broker, ctx.api_version, request)

    router.register(FETCH, MIN_VERSION, MAX_VERSION, handle_fetch)


def _replica_id(request) -> int:
    state = getattr(request, "replica_state", None)
    if state is not None and int(state.replica_id) >= 0:
        return int(state.replica_id)
    return int(getattr(request, "replica_id", -1))


def _replica_epoch(request) -> int:
    """KIP-903: the follower's broker epoch (Fetch v15+ ReplicaState; -1 before)."""
    state = getattr(request, "replica_state", None)
    return int(state.replica_epoch) if state is not None else -1


def _wanted(broker, request, api_version: int) -> list[_Wanted]:
    out = []
    for topic in request.topics:
        name = getattr(topic, "topic", None)
        topic_id = getattr(topic, "topic_id", None)
        for p in topic.partitions:
            out.append(_resolve(broker, api_version, name, topic_id, int(p.partition), CachedPartition(
                int(p.fetch_offset), int(p.partition_max_bytes), int(getattr(p, "current_leader_epoch", -1)),
                int(getattr(p, "last_fetched_epoch", -1)))))
    return out


def _resolve(broker, api_version: int, name: str | None, topic_id, partition: int, cp: CachedPartition) -> _Wanted:
    unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if api_version >= 13:
        meta = broker.topic_by_id(topic_id) if topic_id is not None else None
        name = meta.name if meta is not None else None
        unknown = ErrorCode.UNKNOWN_TOPIC_ID
    return _Wanted(topic_id if api_version >= 13 else name, name, topic_id, partition, cp.fetch_offset,
                   cp.partition_max_bytes, cp.current_leader_epoch, unknown, cp.last_fetched_epoch)


def _session(broker, api_version: int, request, wanted: list[_Wanted]) -> SessionDecision:
    """KIP-227: what this request means for the fetcher's session (v7+)."""
    forgotten = [
        (getattr(t, "topic_id", None) if api_version >= 13 else getattr(t, "topic", None), int(p))
        for t in (getattr(request, "forgotten_topics_data", None) or ()) for p in t.partitions
    ]
    partitions = [((w.topic_key, w.partition), CachedPartition(
        w.fetch_offset, w.partition_max_bytes, w.current_leader_epoch, w.last_fetched_epoch)) for w in wanted]
    return broker.fetch_sessions.on_request(
        int(request.session_id), int(request.session_epoch), _replica_id(request) >= 0, partitions, forgotten,
        broker.now_ms())


RACK_AWARE_SELECTOR = "RackAwareReplicaSelector"


def _client_rack(broker, api_version: int, request) -> tuple[str, dict[int, str | None]]:
    """KIP-392: the consumer's rack and the brokers' racks when the rack-aware
    selector is configured (replica.selector.class), else no rack."""
    selector = broker.config.replica_selector_class or ""
    rack = str(getattr(request, "rack_id", "") or "") if api_version >= 11 else ""
    if not rack or not selector.endswith(RACK_AWARE_SELECTOR):
        return "", {}
    return rack, {b.broker_id: b.rack for b in broker.image.brokers.values()}


async def _read_all(broker, wanted: list[_Wanted], max_bytes: int, request,
                    api_version: int = 4) -> tuple[list[ReadResult], int]:
    """Every wanted partition read in order, in slices: a replica Fetch names thousands of
    partitions, and one step over all of them kept the quorum waiting (kref/broker/loop_steps.py)."""
    budget = StepBudget()
    results = []
    remaining = max_bytes
    total = 0
    replica_id = _replica_id(request)
    if replica_id >= 0:
        replica_epoch = _replica_epoch(request)
        registered_epoch, isr_eligible = broker.image.isr_registration(replica_id)
    # Fetch v11+ consumers may read from a follower (KIP-392), up to its high watermark.
    allow_follower = replica_id < 0 and api_version >= 11
    rack, racks = _client_rack(broker, api_version, request) if replica_id < 0 else ("", {})
    for w in wanted:
        await budget.spend()
        part = broker.partitions.get((w.name, w.partition)) if w.name is not None else None
        if part is None:
            results.append(ReadResult(broker.absent_partition_error(w.name, w.partition, w.unknown_error), -1, -1, -1))
            continue
        limit = min(w.partition_max_bytes, remaining)
        if replica_id >= 0:
            # A follower's fetch: the replica core decides (FetchFromFollower).
            result = part.read_as_follower(replica_id, w.fetch_offset, w.last_fetched_epoch,
                                           w.current_leader_epoch, limit, broker.now_ms(),
                                           broker_epoch=replica_epoch, registered_broker_epoch=registered_epoch,
                                           isr_eligible=isr_eligible)
            result = replication_quota.leader_filtered(broker, part, replica_id, result, broker.now_ms())
        else:
            preferred = part.core.preferred_read_replica(w.fetch_offset, rack, racks, broker.now_ms()) if rack else -1
            if preferred >= 0:
                # Go to the replica in your rack: no records from here (Kafka's answer).
                hw, lso = part.high_watermark, part.log_start_offset
                results.append(ReadResult(ErrorCode.NONE, hw, hw, lso, preferred_read_replica=preferred))
                continue
            result = part.read(w.fetch_offset, limit, min_one_message=(total == 0),
                               current_leader_epoch=w.current_leader_epoch, allow_follower=allow_follower)
        size = len(result.records)
        total += size
        remaining = max(0, remaining - size)
        results.append(result)
    return results, total


async def fetch(broker, api_version: int, request) -> Any:
    wanted = _wanted(broker, request, api_version)
    decision = None
    if api_version >= 7 and getattr(broker, "fetch_sessions", None) is not None:
        decision = _session(broker, api_version, request, wanted)
        if int(request.session_epoch) == 0 and log.isEnabledFor(logging.DEBUG):
            log.debug("fetch session %d opened with %d partition(s) (%d session(s) cached)",
                      decision.session_id, len(decision.partitions), len(broker.fetch_sessions.sessions))
        if decision.error_code != ErrorCode.NONE:
            body = fetch_response_chunks(api_version, decision.error_code, 0, ())
            return PreEncoded(response_class(FETCH, api_version), body)
        wanted = [_resolve(broker, api_version, key[0] if api_version < 13 else None,
                           key[0] if api_version >= 13 else None, key[1], cp) for key, cp in decision.partitions]
    max_bytes = max(0, min(int(request.max_bytes), MAX_RESPONSE_BYTES))
    results, total = await _read_all(broker, wanted, max_bytes, request, api_version)

    max_wait_ms = max(0, min(int(request.max_wait.total_seconds() * 1000), MAX_WAIT_MS))
    min_bytes = int(request.min_bytes)
    at_once = replica.fetch_answered_at_once(
        max_wait_ms, total, min_bytes, partitions=len(wanted),
        error=any(r.error_code != ErrorCode.NONE for r in results),
        diverging=any(r.diverging is not None for r in results),
        preferred_read_replica=any(r.preferred_read_replica >= 0 for r in results))
    # The reads gave the loop back between slices: a partition read may have gone since
    # (deleted or moved), which is answered at once, as an error would be.
    parts = [broker.partitions.get((w.name, w.partition)) for w in wanted] if not at_once else []
    if not at_once and None not in parts:
        # The replica core decides when this fetch is answered (Kafka's
        # DelayedFetch.tryComplete); the handler only parks it and re-asks
        # when a partition's high watermark or log end offset moves.
        replica_id = _replica_id(request)
        follower = replica_id >= 0
        parked = [replica.ParkedFetch(w.fetch_offset, follower, p.is_leader, p.leader_epoch, w.current_leader_epoch,
                                      p.visible_bytes) for w, p in zip(wanted, parts)]

        def ready() -> bool:
            # KIP-73 is read here once per partition (is the leader quota holding this follower
            # back now?) and weighed by the core: a throttled partition counts nothing.
            now_ms = broker.now_ms()
            return replica.delayed_fetch_complete(
                [(seen, p.core if broker.partitions.get(p.key) is p else None, p.visible_bytes,
                  follower and replication_quota.leader_throttles(broker, p, replica_id, now_ms))
                 for seen, p in zip(parked, parts)], total, min_bytes)

        op = DelayedFetch([p.key for p in parts], ready)
        await wait_for(broker.fetch_purgatory, op, max_wait_ms)
        results, total = await _read_all(broker, wanted, max_bytes, request, api_version)
    elif max_wait_ms > 0 and not wanted and decision is not None and decision.incremental:
        # An empty session still long-polls (a fetcher that forgot every partition).
        await trio.sleep(max_wait_ms / 1000)

    if _replica_id(request) >= 0:
        _record_replication(broker, wanted, results)
    if decision is None:
        return _response(api_version, wanted, results, 0)
    keep = FetchSessionCache.filter_response(decision, results)
    kept = [(w, r) for w, r, k in zip(wanted, results, keep) if k]
    return _response(api_version, [w for w, _ in kept], [r for _, r in kept], decision.session_id)


def _record_replication(broker, wanted: list[_Wanted], results: list[ReadResult]) -> None:
    """KIP-73: the leader quota counts what throttled partitions send to followers."""
    sent = [(broker.partitions.get((w.name, w.partition)), r) for w, r in zip(wanted, results) if r.records]
    if sent:
        replication_quota.leader_sent(broker, sent, broker.now_ms())


def _response(api_version: int, wanted: list[_Wanted], results: list[ReadResult], session_id: int) -> Any:
    per_topic: dict[object, tuple[str | None, uuid.UUID | None, list]] = {}
    for w, r in zip(wanted, results):
        entry = per_topic.setdefault(w.topic_key, (w.name if api_version < 13 else None, w.topic_id, []))
        entry[2].append(
            (w.partition, r.error_code, r.high_watermark, r.last_stable_offset, r.log_start_offset, r.records,
             r.diverging, r.preferred_read_replica)
        )
    body = fetch_response_chunks(api_version, ErrorCode.NONE, session_id, list(per_topic.values()))
    return PreEncoded(response_class(FETCH, api_version), body)

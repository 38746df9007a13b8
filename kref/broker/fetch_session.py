"""Incremental fetch sessions (KIP-227): the broker remembers what a fetcher asks for.

Theory of operation
-------------------
A consumer or follower that fetches the same partitions again and again
need not name them all in every request, nor hear about every one in every
response. With a fetch session the broker keeps, per session, the fetcher's
partitions (fetch offset, byte limit, epochs) and what it last told the
fetcher about each (high watermark, log start offset, last stable offset).

The request's (session_id, session_epoch) say what it is:

- epoch -1 (FINAL): a full fetch with no session; a named session is closed;
- epoch 0 (INITIAL): a full fetch that opens a new session (closing a named
  one); the response carries the new session id, or 0 when the cache has no
  room, which tells the client to keep sending full fetches;
- epoch n > 0: an incremental fetch of session `session_id`, whose epoch must
  be exactly n: the request's partitions add to or update the session, its
  forgotten topics leave it. The broker reads every partition of the
  session, and answers only those with something new: records, an error, or
  a high watermark / log start / last stable offset the fetcher has not been
  told. An unknown session is FETCH_SESSION_ID_NOT_FOUND, a wrong epoch
  INVALID_FETCH_SESSION_EPOCH; then the client starts over with epoch 0.

The cache is bounded (max.incremental.fetch.session.cache.slots). When it is
full, a new session may evict one: any session unused for EVICTION_MS first
(the least recently used of those), else the least valuable one if the new
session outranks it: a follower's session (privileged) outranks a
consumer's, and among equals a session with more partitions outranks one
with fewer (the savings of a session grow with its size). Otherwise the new
fetcher gets no session. This is Kafka's policy (FetchSessionCache).

This module is pure: the clock is an argument and session ids come from an
injected random generator, so the decisions can be replayed in tests; the
fetch handler (kref/broker/handlers/fetch.py) drives it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kref.protocol.errors import ErrorCode

if TYPE_CHECKING:  # pragma: no cover
    import random

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000  # Kafka's fetch session eviction time
MAX_EPOCH = 2**31 - 1

# (topic key, partition): the topic key is the topic id from Fetch v13, else the name.
PartitionKey = tuple[object, int]


@dataclass(slots=True)
class CachedPartition:
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    # what the fetcher was last told (-1: nothing yet, so the next answer includes it)
    high_watermark: int = -1
    log_start_offset: int = -1
    last_stable_offset: int = -1


@dataclass(slots=True)
class FetchSession:
    session_id: int
    privileged: bool  # a follower's session
    epoch: int  # the epoch the next incremental request must carry
    last_used_ms: int
    partitions: dict[PartitionKey, CachedPartition] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SessionDecision:
    """What the handler does with one request.

    error_code NONE: read `partitions` (in this order) and answer with
    `session_id`; `incremental` says whether unchanged partitions are left
    out of the response (`filter_response`). Otherwise answer the error alone."""

    error_code: int
    session_id: int = INVALID_SESSION_ID
    incremental: bool = False
    partitions: tuple[tuple[PartitionKey, CachedPartition], ...] = ()


class FetchSessionCache:
    def __init__(self, max_slots: int, rng: random.Random) -> None:
        # The session-id generator comes from the driver: the cache draws no
        # randomness of its own, so a seeded run replays.
        self.max_slots = max(0, max_slots)
        self.sessions: dict[int, FetchSession] = {}
        self._rng = rng
        self.evictions = 0

    # ------------------------------------------------------------ requests

    def on_request(
        self,
        session_id: int,
        session_epoch: int,
        privileged: bool,
        partitions: list[tuple[PartitionKey, CachedPartition]],
        forgotten: list[PartitionKey],
        now_ms: int,
    ) -> SessionDecision:
        if session_epoch == FINAL_EPOCH:
            self.sessions.pop(session_id, None)
            return SessionDecision(ErrorCode.NONE, INVALID_SESSION_ID, False, tuple(partitions))
        if session_epoch == INITIAL_EPOCH:
            self.sessions.pop(session_id, None)
            new_id = self._try_create(privileged, partitions, now_ms)
            return SessionDecision(ErrorCode.NONE, new_id, False, tuple(partitions))
        session = self.sessions.get(session_id)
        if session is None:
            return SessionDecision(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != session_epoch:
            return SessionDecision(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        for key in forgotten:
            session.partitions.pop(key, None)
        for key, wanted in partitions:
            cached = session.partitions.get(key)
            if cached is None:
                session.partitions[key] = wanted
            else:  # new fetch position and limits; what the fetcher was told stays
                cached.fetch_offset = wanted.fetch_offset
                cached.partition_max_bytes = wanted.partition_max_bytes
                cached.current_leader_epoch = wanted.current_leader_epoch
                cached.last_fetched_epoch = wanted.last_fetched_epoch
        session.epoch = session.epoch + 1 if session.epoch < MAX_EPOCH else 1
        session.last_used_ms = now_ms
        return SessionDecision(ErrorCode.NONE, session.session_id, True, tuple(session.partitions.items()))

    @staticmethod
    def filter_response(decision: SessionDecision, results: list) -> list[bool]:
        """Which partitions go into the response; updates what each fetcher was told.

        `results[i]` answers `decision.partitions[i]` with error_code,
        high_watermark, log_start_offset, last_stable_offset and records."""
        keep = []
        for (_, cached), result in zip(decision.partitions, results):
            changed = (
                result.error_code != ErrorCode.NONE
                or bool(result.records)
                or getattr(result, "diverging", None) is not None  # a follower told to truncate
                or getattr(result, "preferred_read_replica", -1) >= 0  # KIP-392: go elsewhere
                or result.high_watermark != cached.high_watermark
                or result.log_start_offset != cached.log_start_offset
                or result.last_stable_offset != cached.last_stable_offset
            )
            cached.high_watermark = result.high_watermark
            cached.log_start_offset = result.log_start_offset
            cached.last_stable_offset = result.last_stable_offset
            keep.append(changed or not decision.incremental)
        return keep

    # ------------------------------------------------------------ the cache

    def _try_create(self, privileged: bool, partitions: list, now_ms: int) -> int:
        if self.max_slots == 0:
            return INVALID_SESSION_ID
        if len(self.sessions) >= self.max_slots and not self._evict_for(privileged, len(partitions), now_ms):
            return INVALID_SESSION_ID
        session_id = self._new_id()
        # The next incremental request carries epoch 1.
        self.sessions[session_id] = FetchSession(session_id, privileged, 1, now_ms, dict(partitions))
        return session_id

    def _evict_for(self, privileged: bool, size: int, now_ms: int) -> bool:
        stale = [s for s in self.sessions.values() if now_ms - s.last_used_ms >= EVICTION_MS]
        if stale:
            victim = min(stale, key=lambda s: s.last_used_ms)
        else:
            victim = min(self.sessions.values(), key=lambda s: (s.privileged, len(s.partitions), s.last_used_ms))
            outranks = (privileged and not victim.privileged) or (
                privileged == victim.privileged and size > len(victim.partitions))
            if not outranks:
                return False
        del self.sessions[victim.session_id]
        self.evictions += 1
        return True

    def _new_id(self) -> int:
        while True:
            candidate = self._rng.randint(1, MAX_EPOCH)
            if candidate not in self.sessions:
                return candidate


# ------------------------------------------------------------------ fetcher side

# What a fetcher asks about one partition: (fetch_offset, current_leader_epoch,
# last_fetched_epoch, log_start_offset, partition_max_bytes). A partition is
# named in an incremental request only when this changed since it was sent.
FetchData = tuple


@dataclass(frozen=True, slots=True)
class FetchPlan:
    """One request of a fetcher's session: what goes into it."""

    session_id: int
    session_epoch: int
    send: tuple[PartitionKey, ...]  # partitions named in the request
    forgotten: tuple[PartitionKey, ...]  # partitions that leave the session
    incremental: bool  # unnamed partitions of the answer are unchanged, not missing


class FetcherSession:
    """The fetcher half of KIP-227 (Kafka's FetchSessionHandler), pure.

    `plan(wanted)` says what the next request carries: a full fetch with
    epoch 0 while there is no session (which opens one), else only the
    partitions whose fetch position changed plus the ones to forget, with the
    session's next epoch. `on_response` learns the session the broker
    granted, or starts over on a session error; `on_failure` starts over
    after a lost connection. `last_told(key)` is the high watermark and log
    start offset the broker last reported for a partition: an incremental
    answer leaves out partitions with nothing new, which the fetcher reads as
    "no records, same offsets" (Kafka's fetcher does the same)."""

    __slots__ = ("session_id", "epoch", "_sent", "_told", "_pending")

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._sent: dict[PartitionKey, FetchData] = {}  # the session's partitions as the broker holds them
        self._told: dict[PartitionKey, tuple[int, int]] = {}
        self._pending: tuple[dict[PartitionKey, FetchData], bool] | None = None

    def plan(self, wanted: dict[PartitionKey, FetchData]) -> FetchPlan:
        incremental = self.session_id != INVALID_SESSION_ID and self.epoch != INITIAL_EPOCH
        if not incremental:
            self._pending = (dict(wanted), False)
            return FetchPlan(INVALID_SESSION_ID, INITIAL_EPOCH, tuple(wanted), (), False)
        send = tuple(k for k, v in wanted.items() if self._sent.get(k) != v)
        forgotten = tuple(k for k in self._sent if k not in wanted)
        self._pending = (dict(wanted), True)
        return FetchPlan(self.session_id, self.epoch, send, forgotten, True)

    def on_response(self, error_code: int, session_id: int) -> bool:
        """The answer's top-level error and session id; False: the answer
        carries no partitions to use (a session error: start over)."""
        pending, self._pending = self._pending, None
        if error_code in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
            self.on_failure()
            return False
        if pending is None:
            return error_code == ErrorCode.NONE
        wanted, incremental = pending
        if error_code != ErrorCode.NONE:
            self.on_failure()
            return False
        if incremental:
            self._sent = wanted
            self.epoch = self.epoch + 1 if self.epoch < MAX_EPOCH else 1
        elif session_id != INVALID_SESSION_ID:
            self.session_id, self.epoch, self._sent = session_id, 1, wanted
        else:  # no room in the broker's cache: full fetches until one is granted
            self.session_id, self.epoch, self._sent = INVALID_SESSION_ID, INITIAL_EPOCH, {}
        for key in list(self._told):
            if key not in wanted:
                del self._told[key]
        return True

    def on_failure(self) -> None:
        self.session_id, self.epoch, self._sent, self._pending = INVALID_SESSION_ID, INITIAL_EPOCH, {}, None
        self._told.clear()

    def told(self, key: PartitionKey, high_watermark: int, log_start_offset: int) -> None:
        self._told[key] = (high_watermark, log_start_offset)

    def last_told(self, key: PartitionKey) -> tuple[int, int] | None:
        return self._told.get(key)

"""Replica fetchers: the trio tasks that carry followers' Fetch requests to their leaders.

Theory of operation
-------------------
Kafka's ReplicaFetcherManager runs num.replica.fetchers threads per source
broker; each owns the partitions hashed to it that follow that broker, and
loops: build one Fetch for all of them, send it, hand each partition's answer
to the partition, repeat. kref does the same with trio tasks:

- `ReplicaFetcherManager.run` looks at the hosted partitions every
  `SCAN_INTERVAL_S` (and when the metadata changes) and starts a
  `fetcher_loop` for every (leader, fetcher index) that has followers and no
  task yet; a loop ends by itself once it has none.
- A loop asks each of its partitions what to fetch (Partition.follower_fetch_due,
  which steps the replica core: the spec's FollowerFetch; fetch offset = log
  end offset, last fetched epoch, current leader epoch), sends one Fetch v15
  (topic ids; ReplicaState = this broker's id and broker epoch, KIP-903: the
  leader records which incarnation fetched; max_wait = replica.fetch.wait.max.ms, min_bytes
  = replica.fetch.min.bytes, per-partition replica.fetch.max.bytes, response
  bounded by replica.fetch.response.max.bytes; written straight to wire
  bytes by kref/broker/replica_fetcher_request.py) over one connection to the
  leader's inter-broker listener, and hands every partition's answer to
  Partition.on_fetch_response (the core decides append / truncate / backoff).

Nothing is decided here: which offsets, what to do with an answer, when a
partition backs off are the core's (kref/replication/follower.py). The
fetcher only moves bytes and bounds them: one request in flight per loop,
a response frame at most replica.fetch.response.max.bytes plus headroom, a
socket timeout of replica.socket.timeout.ms.

The socket timeout is kept by a watchdog task per loop (`RequestWatchdog`),
not a trio timeout around every request: a trio timeout is a cancel scope
entered and closed per request, and on the acks=all path every record costs
each follower one fetch round trip, with the scope's exit between the
answer's arrival and the append, and its entry between the append and the
next fetch. The watchdog sleeps until the request in flight is overdue
(it looks again when the deadline it slept for has passed: about once per
timeout while fetches are answered) and then closes the connection, which
fails the pending send or receive as the timeout would; connecting keeps
its own timeout.
"""

from __future__ import annotations

import functools
import logging
import math
import zlib
from typing import Any

import trio

from kref.broker.fetch_session import FetchPlan, FetcherSession
from kref.broker.loop_steps import StepBudget
from kref.broker.replica_fetcher_request import FETCH, FETCH_VERSION, encode_fetch_request
from kref.protocol.codec import decode_response, response_class
from kref.protocol.errors import ErrorCode
from kref.protocol.framing import FrameDecoder, FrameError
from kref.broker import replication_quota
from kref.replication.follower import SendFetch
from kref.replication.replica import Role

log = logging.getLogger("kref.replica_fetcher")

SCAN_INTERVAL_S = 0.05
# Frame headroom over replica.fetch.response.max.bytes (KIP-74 lets the first
# batch exceed it: one replica.fetch.max.bytes more, plus headers).
FRAME_HEADROOM = 64 * 1024
# The smallest read; a response's remaining bytes are asked for in one read
# (bounded by the frame bound above), so a large answer costs few receives.
RECEIVE_BYTES = 64 * 1024
RECEIVE_MAX_BYTES = 4 * 1024 * 1024


@functools.lru_cache(maxsize=1 << 17)
def fetcher_index(key: tuple[str, int], fetchers: int) -> int:
    """Which of a source broker's fetchers serves a partition (stable across processes).

    Cached (bounded): the manager asks it for every hosted partition on every scan and round."""
    return zlib.crc32(f"{key[0]}-{key[1]}".encode()) % max(1, fetchers)


def _fetch_data(due: SendFetch, config: Any) -> tuple:
    """What the session compares to decide whether a partition is named again."""
    return (due.fetch_offset, due.current_leader_epoch, due.last_fetched_epoch, due.log_start_offset,
            config.replica_fetch_max_bytes)


def _forgotten(keys: tuple, topic_ids: dict[str, Any]) -> list[tuple[Any, list[int]]]:
    by_topic: dict[Any, list[int]] = {}
    for topic, partition in keys:
        topic_id = topic_ids.get(topic)
        if topic_id is not None:  # never sent by id: the leader's session does not hold it
            by_topic.setdefault(topic_id, []).append(partition)
    return list(by_topic.items())


class _Unchanged:
    """A partition an incremental answer left out, as the fields _deliver reads."""

    __slots__ = ("high_watermark", "log_start_offset")

    def __init__(self, high_watermark: int, log_start_offset: int) -> None:
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset


class RequestWatchdog:
    """replica.socket.timeout.ms for one fetcher loop's request in flight (see the module doc)."""

    __slots__ = ("deadline", "stream", "stopped", "_sleeping_until", "_wake")

    def __init__(self) -> None:
        self.deadline = math.inf  # trio time when the request in flight is overdue
        self.stream: trio.SocketStream | None = None
        self.stopped = False
        self._sleeping_until = math.inf
        self._wake = trio.Event()

    def request(self, seconds: float) -> RequestWatchdog:
        """`with watchdog.request(s):` around one request's send and answer."""
        self.deadline = trio.current_time() + seconds
        return self

    def __enter__(self) -> None:
        if self.deadline < self._sleeping_until:
            self._wake.set()

    def __exit__(self, *exc: object) -> None:
        self.deadline = math.inf

    def stop(self) -> None:
        self.stopped = True
        self._wake.set()

    async def run(self) -> None:
        while not self.stopped:
            self._sleeping_until = self.deadline
            self._wake = trio.Event()
            with trio.move_on_at(self._sleeping_until):
                await self._wake.wait()
            if trio.current_time() >= self.deadline and self.stream is not None:
                # Overdue: fail the pending send/receive, as a timeout would.
                self.deadline = math.inf
                stream, self.stream = self.stream, None
                with trio.CancelScope(shield=True):
                    await stream.aclose()


class ReplicaFetcherManager:
    def __init__(self, broker: Any, view: Any) -> None:
        self.broker = broker
        self.view = view
        self.running: set[tuple[int, int]] = set()
        # The topic id each topic name was last fetched by: a deleted topic's id is
        # still needed to forget it in the session, after the image dropped it.
        self.topic_ids: dict[str, Any] = {}

    def _broker_epoch(self) -> int:
        """This incarnation's broker epoch (KIP-903; -1 while not registered)."""
        lifecycle = getattr(self.view, "lifecycle", None)
        return int(lifecycle.broker_epoch) if lifecycle is not None else -1

    async def _followed(self) -> set[tuple[int, int]]:
        """(leader, fetcher index) of every partition followed here; a scan of every hosted
        partition, so in slices (kref/broker/loop_steps.py)."""
        fetchers = self.broker.config.num_replica_fetchers
        out = set()
        budget = StepBudget()
        for key, part in list(self.broker.partitions.items()):
            await budget.spend()
            c = part.core
            if c.role is Role.FOLLOWER and c.leader >= 0 and c.leader != self.broker.node_id:
                out.add((c.leader, fetcher_index(key, fetchers)))
        return out

    async def _partitions_of(self, leader: int, index: int) -> list[Any]:
        fetchers = self.broker.config.num_replica_fetchers
        out = []
        budget = StepBudget()
        for key, part in list(self.broker.partitions.items()):
            await budget.spend()
            if part.core.role is Role.FOLLOWER and part.core.leader == leader and fetcher_index(key, fetchers) == index:
                out.append(part)
        return out

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async with trio.open_nursery() as nursery:
            while True:
                for leader, index in sorted(await self._followed() - self.running):
                    self.running.add((leader, index))
                    watchdog = RequestWatchdog()
                    nursery.start_soon(watchdog.run)
                    nursery.start_soon(self.fetcher_loop, leader, index, watchdog)
                with trio.move_on_after(1.0):
                    await self.view.changed.wait()
                await trio.sleep(SCAN_INTERVAL_S)

    async def fetcher_loop(self, leader: int, index: int, watchdog: RequestWatchdog) -> None:
        config = self.broker.config
        name = f"kref-replica-fetcher-{self.broker.node_id}-{leader}-{index}"
        stream: trio.SocketStream | None = None
        max_frame = config.replica_fetch_response_max_bytes + config.replica_fetch_max_bytes + FRAME_HEADROOM
        decoder = FrameDecoder(max_frame)
        correlation_id = 0
        backoff_s = config.replica_fetch_backoff_ms / 1000
        # KIP-227: one session per connection; a new connection starts over.
        session = FetcherSession()
        try:
            while True:
                parts = await self._partitions_of(leader, index)
                if not parts:
                    return
                # The leader's address first: a core is asked for its fetch (the spec's FollowerFetch,
                # logged) only when there is somewhere to send it (the metadata may not name the
                # leader's listener yet, or no more).
                endpoint = self.view.broker_endpoint(leader, config.inter_broker_listener_name)
                if endpoint is None:
                    await trio.sleep(min(backoff_s, 0.1))
                    continue
                now = self.broker.now_ms()
                broker_epoch = self._broker_epoch()
                wanted: list[tuple[Any, SendFetch]] = []
                budget = StepBudget()
                for part in parts:
                    if await budget.spend():
                        now = self.broker.now_ms()
                    if self.broker.partitions.get(part.key) is not part:
                        continue  # deleted or replaced while the loop was given back
                    if replication_quota.follower_holds_back(self.broker, part, now):
                        continue  # KIP-73: asked before the core begins a FollowerFetch for it
                    due = part.follower_fetch_due(now, broker_epoch)
                    if isinstance(due, SendFetch):
                        wanted.append((part, due))
                if not wanted:
                    await trio.sleep(min(backoff_s, 0.1))
                    continue
                plan = session.plan({(part.topic, part.partition): _fetch_data(due, config) for part, due in wanted})
                try:
                    timeout_s = config.replica_socket_timeout_ms / 1000 + config.replica_fetch_wait_max_ms / 1000
                    with watchdog.request(timeout_s):
                        if stream is None:
                            with trio.fail_after(timeout_s):
                                stream = await trio.open_tcp_stream(*endpoint)
                            watchdog.stream = stream
                            decoder = FrameDecoder(max_frame)
                        correlation_id += 1
                        await stream.send_all(self._request(wanted, plan, correlation_id, name))
                        frame = decoder.next_frame()
                        while frame is None:
                            data = await stream.receive_some(max(RECEIVE_BYTES, min(decoder.missing_bytes, RECEIVE_MAX_BYTES)))
                            if not data:
                                raise ConnectionError("leader closed the connection")
                            decoder.feed(data)
                            frame = decoder.next_frame()
                    try:
                        got, response = decode_response(frame, response_class(FETCH, FETCH_VERSION))
                    except Exception as exc:  # noqa: BLE001 - a garbled answer: drop the connection
                        raise ConnectionError(f"undecodable fetch response: {exc}") from None
                    if got != correlation_id:
                        raise ConnectionError(f"correlation id {got}, expected {correlation_id}")
                except (OSError, ConnectionError, trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError,
                        FrameError) as exc:
                    log.info("%s: fetch from broker %d failed: %s", name, leader, exc)
                    session.on_failure()
                    # Each partition's core learns its fetch failed (the spec's FetchError: the
                    # request is dropped and it backs off); else its next FollowerFetch would
                    # follow one that was never answered.
                    self._fail(wanted, self.broker.now_ms())
                    if stream is not None:
                        with trio.CancelScope(shield=True):
                            await stream.aclose()
                    stream = None
                    await trio.sleep(backoff_s)
                    continue
                code = int(getattr(response, "error_code", ErrorCode.NONE))
                if not session.on_response(code, int(getattr(response, "session_id", 0))):
                    # A session error (FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH):
                    # the next request is a full one; any other top-level error backs off.
                    log.info("%s: fetch from broker %d answered error %d; starting a new fetch session",
                             name, leader, code)
                    # Every partition's fetch was answered with that error: its core drops it (the
                    # spec's FetchError), so its next FollowerFetch follows no unanswered one.
                    session_error = code in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH)
                    self._fail(wanted, self.broker.now_ms(), code, backoff_ms=0 if session_error else None)
                    if not session_error:
                        await trio.sleep(backoff_s)
                    continue
                await self._apply(wanted, response, session, plan)
        finally:
            watchdog.stop()
            self.running.discard((leader, index))
            if stream is not None:
                with trio.CancelScope(shield=True):
                    await stream.aclose()

    def _request(self, wanted: list[tuple[Any, SendFetch]], plan: FetchPlan, correlation_id: int,
                 client_id: str) -> bytes:
        """The Fetch v15 frame for `wanted` as the session plans it (written straight to
        bytes: kref/broker/replica_fetcher_request.py)."""
        config = self.broker.config
        by_topic: dict[Any, list] = {}
        named = set(plan.send)
        for part, due in wanted:
            topic = self.view.image.topic(part.topic)
            if topic is not None:
                self.topic_ids[part.topic] = topic.topic_id
            if (part.topic, part.partition) not in named or part.topic not in self.topic_ids:
                continue  # unchanged since the session last heard of it
            by_topic.setdefault(self.topic_ids[part.topic], []).append((
                part.partition, due.current_leader_epoch, due.fetch_offset, due.last_fetched_epoch,
                due.log_start_offset, config.replica_fetch_max_bytes))
        return encode_fetch_request(
            correlation_id, client_id,
            replica_id=self.broker.node_id,
            replica_epoch=wanted[0][1].broker_epoch if wanted else -1,
            max_wait_ms=config.replica_fetch_wait_max_ms,
            min_bytes=config.replica_fetch_min_bytes,
            max_bytes=config.replica_fetch_response_max_bytes,
            session_id=plan.session_id,
            session_epoch=plan.session_epoch,
            topics=list(by_topic.items()),
            forgotten=_forgotten(plan.forgotten, self.topic_ids),
        )

    async def _apply(self, wanted: list[tuple[Any, SendFetch]], response: Any, session: FetcherSession,
                     plan: FetchPlan) -> None:
        """Each partition's answer to its core, in slices (kref/broker/loop_steps.py): between
        them other tasks run, so each partition is looked up again before its delivery."""
        budget = StepBudget()
        config = self.broker.config
        sent = {(part.topic, part.partition): (part, due) for part, due in wanted}
        names = {self.topic_ids.get(part.topic): part.topic for part, _ in wanted}
        now = self.broker.now_ms()
        answered = set()
        for topic in response.responses:
            for p in topic.partitions:
                key = (names.get(topic.topic_id), int(p.partition_index))
                entry = sent.get(key)
                if entry is None:
                    continue
                answered.add(key)
                session.told(key, int(p.high_watermark), int(p.log_start_offset))
                if await budget.spend():
                    now = self.broker.now_ms()
                part, due = entry
                if self.broker.partitions.get(part.key) is not part:
                    continue  # deleted or replaced meanwhile
                diverging = getattr(p, "diverging_epoch", None)
                epoch = int(diverging.epoch) if diverging is not None else -1
                end = int(diverging.end_offset) if diverging is not None else -1
                records = p.records
                if records is not None and not isinstance(records, bytes):
                    records = bytes(records)
                code = int(p.error_code)
                if code != ErrorCode.NONE:
                    log.debug("%s-%d: fetch from %d answered error %d", part.topic, part.partition, due.leader, code)
                try:
                    self._deliver(part, due, p, code, epoch, end, records, now)
                except Exception:  # noqa: BLE001 - one partition's failure must not stop the others
                    # (a storage error on truncate/append; Kafka marks the partition failed)
                    log.exception("%s-%d: cannot apply the fetch answer from broker %d", part.topic,
                                  part.partition, due.leader)
                    part.fetch_backoff_until_ms = now + config.replica_fetch_backoff_ms
        if plan.incremental:
            # Left out of an incremental answer: nothing new (no records, same
            # high watermark and log start), which the core hears as such.
            for key, (part, due) in sent.items():
                told = session.last_told(key) if key not in answered else None
                if told is not None and await budget.spend():
                    now = self.broker.now_ms()
                if told is None or self.broker.partitions.get(part.key) is not part:
                    continue
                self._deliver(part, due, _Unchanged(told[0], told[1]), ErrorCode.NONE, -1, -1, None, now)

    def _fail(self, wanted: list[tuple[Any, SendFetch]], now: int, code: int = ErrorCode.NETWORK_EXCEPTION,
              backoff_ms: int | None = None) -> None:
        """Tell each partition's core its fetch failed (`code`; backoff_ms: the fetcher's own by default)."""
        backoff = self.broker.config.replica_fetch_backoff_ms if backoff_ms is None else backoff_ms
        for part, due in wanted:
            if self.broker.partitions.get(part.key) is not part:
                continue  # deleted or replaced meanwhile
            part.on_fetch_response(
                due, error_code=code, high_watermark=-1, log_start_offset=-1,
                diverging_epoch=-1, diverging_end_offset=-1, records=None, now_ms=now,
                backoff_ms=backoff,
            )

    def _deliver(self, part: Any, due: SendFetch, p: Any, code: int, epoch: int, end: int, records, now: int) -> None:
        part.on_fetch_response(
            due,
            error_code=code,
            high_watermark=int(p.high_watermark),
            log_start_offset=int(p.log_start_offset),
            diverging_epoch=epoch,
            diverging_end_offset=end,
            records=records,
            now_ms=now,
            backoff_ms=self.broker.config.replica_fetch_backoff_ms,
        )
        if code == ErrorCode.NONE:
            replication_quota.follower_answered(self.broker, part, int(p.high_watermark), records, now)

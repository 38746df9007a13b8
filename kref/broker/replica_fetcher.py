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
  bounded by replica.fetch.response.max.bytes) over one connection to the
  leader's inter-broker listener, and hands every partition's answer to
  Partition.on_fetch_response (the core decides append / truncate / backoff).

Nothing is decided here: which offsets, what to do with an answer, when a
partition backs off are the core's (kref/replication/follower.py). The
fetcher only moves bytes and bounds them: one request in flight per loop,
a response frame at most replica.fetch.response.max.bytes plus headroom, a
socket timeout of replica.socket.timeout.ms.
"""

from __future__ import annotations

import datetime
import logging
import sys
import zlib
from typing import Any

import trio

from kref.broker.fetch_session import FetchPlan, FetcherSession
from kref.protocol.codec import decode_response, encode_request, request_class, response_class
from kref.protocol.errors import ErrorCode
from kref.protocol.framing import FrameDecoder, FrameError
from kref.replication.follower import SendFetch
from kref.replication.replica import Role

log = logging.getLogger("kref.replica_fetcher")

FETCH = 1
FETCH_VERSION = 15  # topic ids (v13), diverging epochs (KIP-320), ReplicaState with the broker epoch (KIP-903)
SCAN_INTERVAL_S = 0.05
# Frame headroom over replica.fetch.response.max.bytes (KIP-74 lets the first
# batch exceed it: one replica.fetch.max.bytes more, plus headers).
FRAME_HEADROOM = 64 * 1024
# The smallest read; a response's remaining bytes are asked for in one read
# (bounded by the frame bound above), so a large answer costs few receives.
RECEIVE_BYTES = 64 * 1024
RECEIVE_MAX_BYTES = 4 * 1024 * 1024


def fetcher_index(key: tuple[str, int], fetchers: int) -> int:
    """Which of a source broker's fetchers serves a partition (stable across processes)."""
    return zlib.crc32(f"{key[0]}-{key[1]}".encode()) % max(1, fetchers)


def _fetch_data(due: SendFetch, config: Any) -> tuple:
    """What the session compares to decide whether a partition is named again."""
    return (due.fetch_offset, due.current_leader_epoch, due.last_fetched_epoch, due.log_start_offset,
            config.replica_fetch_max_bytes)


def _forgotten(m: Any, keys: tuple, topic_ids: dict[str, Any]) -> tuple:
    by_topic: dict[Any, list[int]] = {}
    for topic, partition in keys:
        topic_id = topic_ids.get(topic)
        if topic_id is not None:  # never sent by id: the leader's session does not hold it
            by_topic.setdefault(topic_id, []).append(partition)
    return tuple(m.ForgottenTopic(topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items())


class _Unchanged:
    """A partition an incremental answer left out, as the fields _deliver reads."""

    __slots__ = ("high_watermark", "log_start_offset")

    def __init__(self, high_watermark: int, log_start_offset: int) -> None:
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset


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

    def _followed(self) -> set[tuple[int, int]]:
        fetchers = self.broker.config.num_replica_fetchers
        out = set()
        for key, part in list(self.broker.partitions.items()):
            c = part.core
            if c.role is Role.FOLLOWER and c.leader >= 0 and c.leader != self.broker.node_id:
                out.add((c.leader, fetcher_index(key, fetchers)))
        return out

    def _partitions_of(self, leader: int, index: int) -> list[Any]:
        fetchers = self.broker.config.num_replica_fetchers
        return [
            part
            for key, part in list(self.broker.partitions.items())
            if part.core.role is Role.FOLLOWER and part.core.leader == leader and fetcher_index(key, fetchers) == index
        ]

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async with trio.open_nursery() as nursery:
            while True:
                for leader, index in sorted(self._followed() - self.running):
                    self.running.add((leader, index))
                    nursery.start_soon(self.fetcher_loop, leader, index)
                with trio.move_on_after(1.0):
                    await self.view.changed.wait()
                await trio.sleep(SCAN_INTERVAL_S)

    async def fetcher_loop(self, leader: int, index: int) -> None:
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
                parts = self._partitions_of(leader, index)
                if not parts:
                    return
                now = self.broker.now_ms()
                broker_epoch = self._broker_epoch()
                wanted: list[tuple[Any, SendFetch]] = []
                for part in parts:
                    due = part.follower_fetch_due(now, broker_epoch)
                    if isinstance(due, SendFetch):
                        wanted.append((part, due))
                if not wanted:
                    await trio.sleep(min(backoff_s, 0.1))
                    continue
                endpoint = self.view.broker_endpoint(leader, config.inter_broker_listener_name)
                if endpoint is None:
                    await trio.sleep(min(backoff_s, 0.1))
                    continue
                plan = session.plan({(part.topic, part.partition): _fetch_data(due, config) for part, due in wanted})
                body = self._request(wanted, plan)
                try:
                    with trio.fail_after(config.replica_socket_timeout_ms / 1000 + config.replica_fetch_wait_max_ms / 1000):
                        if stream is None:
                            stream = await trio.open_tcp_stream(*endpoint)
                            decoder = FrameDecoder(max_frame)
                        correlation_id += 1
                        await stream.send_all(encode_request(body, correlation_id, name))
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
                except (OSError, ConnectionError, trio.TooSlowError, trio.BrokenResourceError, FrameError) as exc:
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
                    if code not in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
                        await trio.sleep(backoff_s)
                    continue
                self._apply(wanted, response, session, plan)
        finally:
            self.running.discard((leader, index))
            if stream is not None:
                with trio.CancelScope(shield=True):
                    await stream.aclose()

    def _request(self, wanted: list[tuple[Any, SendFetch]], plan: FetchPlan) -> Any:
        config = self.broker.config
        cls = request_class(FETCH, FETCH_VERSION)
        m = sys.modules[cls.__module__]
        by_topic: dict[Any, list] = {}
        named = set(plan.send)
        for part, due in wanted:
            topic = self.view.image.topic(part.topic)
            if topic is not None:
                self.topic_ids[part.topic] = topic.topic_id
            if (part.topic, part.partition) not in named or part.topic not in self.topic_ids:
                continue  # unchanged since the session last heard of it
            by_topic.setdefault(self.topic_ids[part.topic], []).append(
                m.FetchPartition(
                    partition=part.partition,
                    current_leader_epoch=due.current_leader_epoch,
                    fetch_offset=due.fetch_offset,
                    last_fetched_epoch=due.last_fetched_epoch,
                    log_start_offset=due.log_start_offset,
                    partition_max_bytes=config.replica_fetch_max_bytes,
                )
            )
        broker_epoch = wanted[0][1].broker_epoch if wanted else -1
        return cls(
            cluster_id=None,
            replica_state=m.ReplicaState(replica_id=self.broker.node_id, replica_epoch=broker_epoch),
            max_wait=datetime.timedelta(milliseconds=config.replica_fetch_wait_max_ms),
            min_bytes=config.replica_fetch_min_bytes,
            max_bytes=config.replica_fetch_response_max_bytes,
            isolation_level=0,
            session_id=plan.session_id,
            session_epoch=plan.session_epoch,
            topics=tuple(m.FetchTopic(topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            forgotten_topics_data=_forgotten(m, plan.forgotten, self.topic_ids),
            rack_id="",
        )

    def _apply(self, wanted: list[tuple[Any, SendFetch]], response: Any, session: FetcherSession,
               plan: FetchPlan) -> None:
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
                if told is None or self.broker.partitions.get(part.key) is not part:
                    continue
                self._deliver(part, due, _Unchanged(told[0], told[1]), ErrorCode.NONE, -1, -1, None, now)

    def _fail(self, wanted: list[tuple[Any, SendFetch]], now: int) -> None:
        for part, due in wanted:
            if self.broker.partitions.get(part.key) is not part:
                continue  # deleted or replaced meanwhile
            part.on_fetch_response(
                due, error_code=ErrorCode.NETWORK_EXCEPTION, high_watermark=-1, log_start_offset=-1,
                diverging_epoch=-1, diverging_end_offset=-1, records=None, now_ms=now,
                backoff_ms=self.broker.config.replica_fetch_backoff_ms,
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

"""The trio driver of the KRaft quorum core: real sockets, real files, real clock.

Theory of operation
-------------------
`RaftNode` runs one QuorumCore (kref/controller/quorum.py) for a node in
the controller quorum (a voter) or following it (an observer: a broker-only
node). It decides nothing; it translates:

- time: a tick task steps the core with Tick every `TICK_MS`;
- inbound RPCs, on the CONTROLLER listener (a Router of its own, served by
  kref.broker.server's connection handler): Vote, BeginQuorumEpoch,
  EndQuorumEpoch, Fetch of `__cluster_metadata-0` and DescribeQuorum, as
  Kafka's own messages (kio). A request becomes `Received(source, message)`;
  the response the core addresses back to that source is the RPC's answer;
- outbound RPCs: one sender task per peer with one request in flight,
  over one connection that is re-opened after a failure. Responses come
  back as `Received`; a failed connection as `SendFailed`. What waits to
  be sent is a `PeerOutbox`: the newest request of each kind (Vote,
  BeginQuorumEpoch, EndQuorumEpoch, Fetch or FetchSnapshot), so at most four
  per peer. A newer request of a kind supersedes an unsent older one: the
  core only counts answers to the request it sent last (a Fetch's offset,
  a Vote's epoch), so the older one could only be answered in vain. Kafka
  gets there differently (its RequestManager keeps one request in flight
  per destination and builds the next one only when it can go); a
  first-in-first-out queue of 64 here filled behind slow syncs at 10,000
  partitions and dropped the newest VoteRequests, which left the quorum
  without a leader for good (docs/kraft.md);
- effects, carried out in list order inside the step. The quorum-state
  write and the log appends must be durable before anything that follows
  them leaves the node: that is what makes a granted vote durable before the
  candidate can count it, and a follower's log durable before its next
  Fetch tells the leader how far it has it. Each is fsynced in place,
  inside the step. (Session 10 tried fsyncs in a worker thread, with every
  output of a step held until its sync returned, as Kafka runs
  KafkaRaftClient on its own thread; session 11's A/B runs at 1,000 and
  3,000 partitions showed no gain from it and more elections at 3,000,
  so it was removed: docs/kraft.md, "The metadata log".)

Committed records (below the high watermark, control batches skipped) are
decoded once and handed, in offset order and once each, to the `on_commit`
callbacks (the broker's image reads the log through them), after this
node's own image has them; `applied_offset` then moves past them and the
`on_high_watermark` callbacks run (the controller's replies waiting for a
commit). The `_deliverer` task does this in slices: a 10,000-partition
topic is one batch of 10,001 records, about 0.2 s of decoding and 0.15 s of
applying on a quiet machine, and several seconds of wall time on a loaded
one, which in one loop step held every other task, the quorum's timers and
RPCs among them, that long. Decoding gives the loop back every
STEP_BUDGET_MS (kref/broker/loop_steps.py); records are applied and handed
on in whole batches only (what the controller wrote at once is never seen
half applied, as Kafka's metadata loader publishes whole batches), so the
longest step left is one batch's apply. `applied_offset` (what a broker's
heartbeat reports as its metadata offset) counts only what the callbacks
have had.

Fetch is long-polled, as Kafka's: this node asks for a max wait of
`fetch_max_wait_ms` (Kafka's 500 ms, cut to a quarter of
controller.quorum.fetch.timeout.ms when that is short, so that a held Fetch
always comes back well before the follower's timer). When the core parks a
Fetch (it decides when, kref/controller/quorum.py), the RPC handler waits on
a per-fetcher slot; the core's later `SendFetchResponse(parked=True)` (after
an append, a high watermark move, a Tick past the max wait, or a lost
leadership) fills the slot and the handler answers. Without a long poll an
idle quorum re-fetched every 50 ms on every follower and observer.

Snapshots (kref/controller/snapshot.py): the driver keeps its own
MetadataImage of what is committed (fed by the same records as on_commit).
At start it loads the newest valid snapshot (a torn one is logged and
skipped) and hands it to the `on_snapshot` callbacks before the first tick;
after each delivery of committed records it asks `snapshot_due` and writes
the image as a snapshot, then asks `retention_log_start` and steps the core
with AdvanceLogStart. FetchSnapshot (API 59) is served and sent here; the
core's InstallSnapshot effect is carried out here (validate, freeze, truncate
the log fully, load the image) and answered with SnapshotInstalled.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Callable
from typing import Any

import trio

from kref.broker.config import BrokerConfig, ConfigError, Voter
from kref.broker.loop_steps import STEP_BUDGET_MS
from kref.broker.router import RequestContext, Router
from kref.controller import quorum as q
from kref.storage.metadata_log import (
    METADATA_TOPIC,
    MetadataLog,
    QuorumState,
    batch_spans,
    leader_change_value,
    read_quorum_state,
    write_quorum_state,
)
from kref.controller import snapshot as snap
from kref.node.controller_channel import ControllerChannel
from kref.metadata import serde
from kref.metadata.image import MetadataImage
from kref.ports.clock import Clock, SystemClock
from kref.ports.fs import FileSystem, RealFileSystem
from kref.ports.ids import SYSTEM_IDS, Ids
from kref.protocol.codec import decode_response, encode_request, request_class, response_class
from kref.protocol.errors import ErrorCode
from kref.protocol.framing import FrameDecoder

log = logging.getLogger("kref.raft")

TICK_MS = 10
TRACE_FLUSH_TICKS = 10  # the trace reaches the file within ~100 ms (kill -9 loses at most that)
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
FETCH_MAX_WAIT_MS = 500  # what Kafka's KRaft followers ask for (KafkaRaftClient)

VOTE, FETCH, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, DESCRIBE_QUORUM, FETCH_SNAPSHOT = 52, 1, 53, 54, 55, 59
RETENTION_CHECK_TICKS = 100  # metadata.max.retention.ms is checked about once a second


class MetadataLogError(ConfigError):
    """The metadata log cannot be used as found (it starts after every valid snapshot)."""


class SnapshotLoad:
    """A snapshot handed to the on_snapshot callbacks: the whole image's records,
    and the records that turn what was applied before into it."""

    __slots__ = ("end_offset", "records", "changes")

    def __init__(self, end_offset: int, records: list, changes: list) -> None:
        self.end_offset = end_offset
        self.records = records
        self.changes = changes


class PeerOutbox:
    """The requests waiting for one peer's sender: the newest of each kind, oldest first.

    `put` replaces an unsent request of the same kind (and moves the kind to
    the back: the requests left keep the order the core made them in), so
    the outbox never holds more than one request per kind, four in all.
    Responses never go through here: they are RPC answers.
    Plain data, no trio: the sender waits on its own event.
    """

    __slots__ = ("_entries", "superseded")

    def __init__(self) -> None:
        self._entries: dict[str, q.Message] = {}
        self.superseded = 0  # requests replaced before they were sent (logged at debug level)

    @staticmethod
    def kind(message: q.Message) -> str:
        match message:
            case q.VoteRequest():  # a pre-vote too: the core has moved on from the older one
                return "vote"
            case q.BeginQuorumEpochRequest():
                return "begin_quorum_epoch"
            case q.EndQuorumEpochRequest():
                return "end_quorum_epoch"
            case q.FetchRequest() | q.FetchSnapshotRequest():  # the core has one fetch of either out
                return "fetch"
        raise ValueError(f"{type(message).__name__} is not a request a sender sends")

    def put(self, message: q.Message) -> q.Message | None:
        """Queue `message`; the unsent request it replaces, if any."""
        kind = self.kind(message)
        old = self._entries.pop(kind, None)
        self._entries[kind] = message
        if old is not None:
            self.superseded += 1
        return old

    def peek(self) -> q.Message | None:
        """The oldest waiting request, left in place."""
        return next(iter(self._entries.values()), None)

    def take(self) -> q.Message | None:
        """Remove and return the oldest waiting request."""
        if not self._entries:
            return None
        kind = next(iter(self._entries))
        return self._entries.pop(kind)

    def __len__(self) -> int:
        return len(self._entries)


FETCH_VERSION = 12
# Vote v2 (KIP-996) carries pre_vote; every voter of a kref quorum speaks it (Kafka
# sends it once every voter advertises v2). v0-v1 requests are still answered.
VOTE_VERSION = 2


def _kio(api_key: int, version: int, kind: str):
    """The kio message class and its module (for the nested entities)."""
    cls = request_class(api_key, version) if kind == "request" else response_class(api_key, version)
    return cls, sys.modules[cls.__module__]


class RaftNode:
    def __init__(
        self,
        config: BrokerConfig,
        cluster_id: str,
        metadata_log_dir: str,
        *,
        voters: tuple[Voter, ...] | None = None,
        trace_sink: Any = None,
        jitter_seed: int | None = None,
        fetch_backoff_ms: int = 50,
        fetch_max_wait_ms: int | None = None,
        clock: Clock | None = None,
        fs: FileSystem | None = None,
        ids: Ids | None = None,
    ) -> None:
        # The ports: the quorum's timers run on `clock` (monotonic), its files
        # (metadata log, snapshots, quorum-state) live on `fs`, the election
        # jitter's seed (when none is given) comes from `ids`.
        self.clock: Clock = clock or SystemClock()
        self.fs: FileSystem = fs or RealFileSystem()
        self.ids: Ids = ids or SYSTEM_IDS
        self.cluster_id = cluster_id
        self.voters = {v.node_id: v for v in (voters or config.controller_quorum_voters)}
        self.node_id = config.node_id
        self.trace_sink = trace_sink
        self.log_dir = metadata_log_dir
        now = self.now_ms()
        self.metadata_log = MetadataLog(
            metadata_log_dir, now, segment_bytes=config.metadata_log_segment_bytes,
            segment_ms=config.metadata_log_segment_ms, fs=self.fs,
        )
        # Committed and ready to deliver, for the _deliverer task; its
        # wake-up; and a counter that a snapshot install or a truncation bumps,
        # so that a delivery in progress starts over from the new applied_offset.
        self._delivery_target = 0
        self._delivery_wanted: trio.Event | None = None
        self._delivery_generation = 0
        self.snapshot_policy = snap.SnapshotPolicy(
            max_bytes_between_snapshots=config.metadata_log_max_record_bytes_between_snapshots,
            max_interval_ms=config.metadata_log_max_snapshot_interval_ms,
            retention_bytes=config.metadata_max_retention_bytes,
            retention_ms=config.metadata_max_retention_ms,
        )
        self.snapshots = snap.SnapshotStore(self.fs, self.metadata_log.dir)
        self.snapshots.remove_partial()
        loaded = self.snapshots.latest_valid()
        self._load_at_start(loaded)
        self.quorum_config = q.QuorumConfig(
            config.node_id,
            frozenset(self.voters),
            election_timeout_ms=config.controller_quorum_election_timeout_ms,
            fetch_timeout_ms=config.controller_quorum_fetch_timeout_ms,
            retry_backoff_ms=config.controller_quorum_retry_backoff_ms,
            fetch_backoff_ms=fetch_backoff_ms,
            fetch_max_wait_ms=(
                min(FETCH_MAX_WAIT_MS, config.controller_quorum_fetch_timeout_ms // 4)
                if fetch_max_wait_ms is None else fetch_max_wait_ms
            ),
            max_snapshot_chunk_bytes=config.controller_quorum_fetch_snapshot_max_bytes,
            jitter_seed=self.ids.seed() if jitter_seed is None else jitter_seed,
        )
        state = read_quorum_state(self.metadata_log.dir, self.fs)
        self.core = q.QuorumCore.restore(
            self.quorum_config,
            leader_epoch=state.leader_epoch,
            voted_for=state.voted_for,
            leader_id=state.leader_id,
            epochs=self.metadata_log.epochs(),
            log_end_offset=self.metadata_log.log_end_offset,
            now_ms=now,
            tracing=trace_sink is not None and getattr(trace_sink, "enabled", False),
            log_start_offset=self.metadata_log.log_start_offset,
            snapshots=[snap_ref(loaded)] if loaded is not None else [],
        )
        # What is committed and applied: the image (snapshot + records) and its offset.
        self.image = MetadataImage()
        self.applied_offset = 0
        self._pending_load: SnapshotLoad | None = None
        if loaded is not None:
            records = self._decode(loaded.records, loaded.snapshot_id.end_offset)
            self.image.apply(records, on_invalid=self._skip_invalid)
            self.applied_offset = loaded.snapshot_id.end_offset
            self._pending_load = SnapshotLoad(self.applied_offset, records, records)
            log.info("node %d: loaded snapshot %s (%d records)", self.node_id,
                     self.snapshots.path(loaded.snapshot_id), len(records))
        # Snapshot triggers: record bytes committed since the latest snapshot, and its time.
        self.bytes_since_snapshot = 0
        self.last_snapshot_ms = now
        self.snapshot_chunks = 0  # of the snapshot being fetched (for the log line)
        self._followups: list[q.Event] = []
        # Called with committed records, decoded (kref.metadata.records), whole batches at a time.
        self.on_commit: list[Callable[[list], None]] = []
        # Called with a SnapshotLoad when a snapshot replaces what was applied
        # (at start, before the first tick; and after a FetchSnapshot).
        self.on_snapshot: list[Callable[[SnapshotLoad], None]] = []
        self.on_leader_change: list[Callable[[int, int, q.State], None]] = []
        # Called with the new high watermark after on_commit (pending replies wait on it).
        self.on_high_watermark: list[Callable[[int], None]] = []
        # What waits for each peer's sender, and the event that wakes it.
        self._outboxes: dict[int, PeerOutbox] = {}
        self._outbox_wake: dict[int, trio.Event] = {}
        # Fetch RPCs the core holds, by fetcher: at most one each (a new Fetch
        # from the same fetcher makes the core answer the held one first).
        self._parked: dict[int, _HeldFetch] = {}
        # Controller RPCs this node sends (heartbeats, AlterPartition, forwarded
        # admin requests), over kept connections; closed before the server
        # would close them as idle (connections.max.idle.ms).
        idle_ms = config.connections_max_idle_ms
        self.controller_channel = ControllerChannel(
            idle_close_s=(idle_ms / 2000 if idle_ms >= 0 else float("inf")),
            clock=self.clock,
        )
        self.closed = False
        for peer in self.voters:
            if peer != self.node_id:
                self._outboxes[peer] = PeerOutbox()
                self._outbox_wake[peer] = trio.Event()

    def now_ms(self) -> int:
        # The monotonic clock: the core's timers must not jump with the wall clock.
        return self.clock.monotonic_ms()

    # ------------------------------------------------------------ snapshots

    def _load_at_start(self, loaded: snap.Snapshot | None) -> None:
        log_start = self.metadata_log.log_start_offset
        if loaded is not None and loaded.snapshot_id.end_offset > self.metadata_log.log_end_offset:
            # A snapshot fetched from the leader, then a crash before the log was cut.
            self.metadata_log.truncate_fully_and_start_at(loaded.snapshot_id.end_offset)
        elif log_start > 0 and (loaded is None or loaded.snapshot_id.end_offset < log_start):
            raise MetadataLogError(
                f"{self.metadata_log.dir}: the metadata log starts at offset {log_start} but no valid snapshot "
                f"reaches it; the records before it are lost (restore the snapshot or remove the directory)"
            )
        if loaded is not None:
            # Older snapshots below the log start are of no use (Kafka deletes them too).
            for old in self.snapshots.ids():
                if old.end_offset < min(self.metadata_log.log_start_offset, loaded.snapshot_id.end_offset):
                    self.snapshots.delete(old)

    def _decode(self, values, where: int) -> list:
        out = []
        for value in values:
            try:
                out.append(serde.decode(value))
            except Exception as exc:  # noqa: BLE001 - consumers skip an unreadable record too, loudly
                log.error("node %d: metadata record near offset %d unreadable: %s", self.node_id, where, exc)
        return out

    def _skip_invalid(self, record: object, exc: Exception) -> None:
        log.warning("node %d: metadata record not applied to the snapshot image: %s", self.node_id, exc)

    def _deliver_pending_load(self) -> None:
        load, self._pending_load = self._pending_load, None
        if load is not None:
            for callback in self.on_snapshot:
                callback(load)

    def _snapshot_epoch(self, end_offset: int) -> int:
        epoch = self.core.epoch_at(end_offset - 1)
        if epoch == q.NO_EPOCH:
            base = self.core.base_snapshot()
            epoch = base.epoch if base is not None else 0
        return epoch

    def _maybe_snapshot(self, now: int) -> None:
        latest = self.core.latest_snapshot()
        if not snap.snapshot_due(
            self.snapshot_policy, new_bytes=self.bytes_since_snapshot, applied_offset=self.applied_offset,
            latest_end_offset=latest.end_offset if latest else 0, ms_since_latest=now - self.last_snapshot_ms,
        ):
            return
        snapshot_id = snap.SnapshotId(self.applied_offset, self._snapshot_epoch(self.applied_offset))
        data = snap.encode_snapshot(
            snapshot_id, [serde.encode(r) for r in self.image.to_records()], self.clock.now_ms(),
            self.clock.now_ms(),
        )
        self.snapshots.write(snapshot_id, data)
        self.bytes_since_snapshot = 0
        self.last_snapshot_ms = now
        log.info("node %d: wrote snapshot %s (%d bytes)", self.node_id, self.snapshots.path(snapshot_id), len(data))
        self._followups.append(q.SnapshotCreated(snapshot_id.end_offset, snapshot_id.epoch, len(data)))
        # The core learns of it with the followup; retention may already count it.
        self._maybe_clean(now, q.SnapshotRef(snapshot_id.end_offset, snapshot_id.epoch, len(data)))

    def _maybe_clean(self, now: int, new: q.SnapshotRef | None = None) -> None:
        snapshots = [*self.core.snapshots, *([new] if new is not None else [])]
        if not snapshots:
            return
        latest = max(snapshots, key=lambda s: s.end_offset)
        start = snap.retention_log_start(
            self.snapshot_policy, log_size_bytes=self.metadata_log.size_in_bytes,
            snapshot_bytes=sum(s.size_in_bytes for s in snapshots),
            oldest_timestamp=self.metadata_log.oldest_timestamp(), latest_snapshot_end=latest.end_offset,
            log_start_offset=self.core.log_start_offset, now_ms=self.clock.now_ms(),
        )
        if start > self.core.log_start_offset:
            self._followups.append(q.AdvanceLogStart(start))

    def _install_snapshot(self, effect: q.InstallSnapshot) -> None:
        snapshot_id = snap.SnapshotId(effect.end_offset, effect.epoch)
        try:
            data = self.snapshots.fs.read_bytes(self.snapshots.partial_path(snapshot_id))
            loaded = snap.decode_snapshot(snapshot_id, data)
        except (snap.SnapshotError, OSError) as exc:
            log.error("node %d: snapshot %s from the leader ignored: %s", self.node_id, snapshot_id.file_name, exc)
            self.snapshots.fs.unlink(self.snapshots.partial_path(snapshot_id))
            self._followups.append(q.SnapshotFetchFailed(effect.end_offset, effect.epoch))
            return
        self.snapshots.freeze(snapshot_id)  # durable before the log it replaces is cut
        self.metadata_log.truncate_fully_and_start_at(effect.end_offset)
        records = self._decode(loaded.records, effect.end_offset)
        image = MetadataImage()
        image.apply(records, on_invalid=self._skip_invalid)
        changes = self.image.changes_to(image)
        self.image = image
        self.applied_offset = effect.end_offset
        self._delivery_generation += 1  # a delivery in progress read the log this replaced
        self.bytes_since_snapshot = 0
        log.info("node %d: loaded snapshot %s from the leader (%d bytes in %d FetchSnapshot chunks, %d records, %d changes)",
                 self.node_id, snapshot_id.file_name, len(data), self.snapshot_chunks, len(records), len(changes))
        for callback in self.on_snapshot:
            callback(SnapshotLoad(effect.end_offset, records, changes))
        self._followups.append(q.SnapshotInstalled(effect.end_offset, effect.epoch))

    # ------------------------------------------------------------ stepping

    def step(self, event: q.Event, reply_to: int | None = None) -> q.Message | None:
        """Step the core and carry out its effects; the response addressed to `reply_to`, if any."""
        if self.closed:
            return None
        now = self.now_ms()
        effects = self.core.step(event, now)
        return self._apply(effects, now, reply_to)

    def _apply(self, effects: list[q.Effect], now: int, reply_to: int | None) -> q.Message | None:
        reply = None
        for effect in effects:
            match effect:
                case q.PersistQuorumState():
                    state = QuorumState(effect.leader_epoch, effect.voted_for, effect.leader_id)
                    write_quorum_state(self.metadata_log.dir, state, list(self.voters), self.fs)
                case q.AppendAsLeader():
                    if effect.control:
                        value = leader_change_value(self.node_id, list(self.voters), sorted(self.voters))
                        self.metadata_log.append_as_leader([], effect.leader_epoch, now, control_value=value,
                                                           timestamp_ms=self.clock.now_ms())
                    else:
                        self.metadata_log.append_as_leader(list(effect.payload), effect.leader_epoch, now,
                                                           timestamp_ms=self.clock.now_ms())
                    if self.metadata_log.log_end_offset != effect.base_offset + effect.records_count:
                        raise q.InvariantViolation(
                            f"metadata log end {self.metadata_log.log_end_offset} after appending at {effect.base_offset}"
                        )
                case q.AppendAsFollower():
                    self.metadata_log.append_as_follower(b"".join(b.payload for b in effect.batches), now)
                case q.TruncateTo():
                    self.metadata_log.truncate_to(effect.log_end_offset)
                    self.applied_offset = min(self.applied_offset, effect.log_end_offset)
                    self._delivery_generation += 1
                case q.Send():
                    if reply_to is not None and effect.destination == reply_to and _is_response(effect.message):
                        reply = effect.message
                    else:
                        self._enqueue(effect.destination, effect.message)
                case q.SendFetchSnapshotResponse():
                    response = effect.response
                    if effect.length > 0:
                        snapshot_id = snap.SnapshotId(response.snapshot_end_offset, response.snapshot_epoch)
                        data = self.snapshots.read_chunk(snapshot_id, effect.position, effect.length)
                        response = dataclasses.replace(response, data=data)
                    if reply_to is not None and effect.destination == reply_to:
                        reply = response
                    else:
                        self._enqueue(effect.destination, response)
                case q.StartSnapshotFetch():
                    self.snapshots.start_partial(snap.SnapshotId(effect.end_offset, effect.epoch))
                    self.snapshot_chunks = 0
                case q.AppendSnapshotChunk():
                    self.snapshots.append_partial(snap.SnapshotId(effect.end_offset, effect.epoch), effect.data)
                    self.snapshot_chunks += 1
                case q.InstallSnapshot():
                    self._install_snapshot(effect)
                case q.LogStartAdvanced():
                    self.metadata_log.advance_log_start(effect.log_start_offset, now)
                    log.info("node %d: metadata log starts at offset %d now", self.node_id, effect.log_start_offset)
                case q.DeleteSnapshot():
                    try:
                        self.snapshots.delete(snap.SnapshotId(effect.end_offset, effect.epoch))
                    except FileNotFoundError:
                        pass
                case q.SendFetchResponse():
                    response = effect.response
                    if effect.from_offset >= 0:
                        response = _with_records(response, self.metadata_log.read(effect.from_offset))
                    if effect.parked:
                        held = self._parked.pop(effect.destination, None)
                        if held is not None:  # else its RPC is gone (connection closed)
                            held.answer(response)
                    elif reply_to is not None and effect.destination == reply_to:
                        reply = response
                    else:
                        self._enqueue(effect.destination, response)
                case q.HighWatermarkAdvanced():
                    self._commit_ready(effect.high_watermark)
                case q.LeaderChanged():
                    log.info(
                        "node %d: %s, leader %s in epoch %d",
                        self.node_id, effect.state.value, effect.leader_id, effect.leader_epoch,
                    )
                    for callback in self.on_leader_change:
                        callback(effect.leader_id, effect.leader_epoch, effect.state)
                case q.Emit():
                    if self.trace_sink is not None:
                        self.trace_sink.emit(effect.event)
                case q.ProposeRejected():
                    pass
                case _:
                    raise AssertionError(f"unknown effect {effect!r}")
        # Events the effects produced (a snapshot written, installed, ...), in order.
        while self._followups:
            event = self._followups.pop(0)
            self._apply(self.core.step(event, now), now, None)
        return reply

    @property
    def high_watermark(self) -> int:
        """The high watermark this node may act on: the core's, once what it
        commits is delivered (below it, what is delivered)."""
        return min(self.core.high_watermark, self.applied_offset)

    def _commit_ready(self, high_watermark: int) -> None:
        """Committed up to `high_watermark`: the _deliverer's next target."""
        if high_watermark > self._delivery_target:
            self._delivery_target = high_watermark
            if self._delivery_wanted is not None:
                self._delivery_wanted.set()

    async def _deliverer(self) -> None:
        while not self.closed:
            if self._delivery_target <= self.applied_offset:
                self._delivery_wanted = trio.Event()
                await self._delivery_wanted.wait()
                continue
            await self._deliver_slices()

    async def _deliver_slices(self) -> None:
        """Deliver committed batches from applied_offset up to the target (which
        may grow meanwhile), giving the loop back every STEP_BUDGET_MS. Returns
        early, to start over, when a snapshot install or truncation replaced
        what it was reading."""
        generation = self._delivery_generation
        pending: list = []  # decoded records of whole batches, not handed on yet
        pending_bytes = 0
        pending_end = position = self.applied_offset
        slice_end = self.clock.monotonic_ms() + STEP_BUDGET_MS

        async def next_slice() -> bool:
            """Hand on what is whole, give the loop back; False: start over."""
            nonlocal pending, pending_bytes, slice_end
            self._deliver(pending, pending_bytes, pending_end)
            pending, pending_bytes = [], 0
            await trio.lowlevel.checkpoint()
            slice_end = self.clock.monotonic_ms() + STEP_BUDGET_MS
            return generation == self._delivery_generation and not self.closed

        while position < self._delivery_target:
            batches = self.metadata_log.committed_batches(position, self._delivery_target)
            if not batches:
                # The core never commits past its log end: a bug. Said once; the
                # next high watermark the core reaches tries again.
                log.error("node %d: committed records from offset %d up to %d are not in the log", self.node_id,
                          position, self._delivery_target)
                self._delivery_target = position
                break
            for next_offset, records in batches:
                decoded = []
                for offset, value in records:
                    try:
                        decoded.append(serde.decode(value))
                    except Exception as exc:  # noqa: BLE001 - consumers skip an unreadable record too, loudly
                        log.error("node %d: metadata record at offset %d unreadable: %s", self.node_id, offset, exc)
                    if self.clock.monotonic_ms() >= slice_end and not await next_slice():
                        return
                pending.extend(decoded)
                pending_bytes += sum(len(v) for _, v in records)
                pending_end = position = next_offset
                if self.clock.monotonic_ms() >= slice_end and not await next_slice():
                    return
        self._deliver(pending, pending_bytes, pending_end)

    def _deliver(self, decoded: list, nbytes: int, end_offset: int) -> None:
        """Apply whole committed batches (the records before `end_offset`) to
        this node's image, hand them on, then move applied_offset."""
        if end_offset <= self.applied_offset:
            return
        if decoded:
            self.image.apply(decoded, on_invalid=self._skip_invalid)
            self.bytes_since_snapshot += nbytes
            for callback in self.on_commit:
                callback(decoded)
        self.applied_offset = end_offset
        for callback in self.on_high_watermark:
            callback(end_offset)
        now = self.now_ms()
        self._maybe_snapshot(now)
        self._apply([], now, None)  # what the delivery set off (a snapshot written, ...)

    def propose(self, values: list[bytes]) -> int | None:
        """Append metadata records as leader; the base offset, or None when not the leader."""
        effects = self.core.step(q.Propose(tuple(values), len(values)), self.now_ms())
        base = next((e.base_offset for e in effects if isinstance(e, q.AppendAsLeader)), None)
        self._apply(effects, self.now_ms(), None)
        return base

    # ------------------------------------------------------------ tasks

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            for peer in self._outboxes:
                nursery.start_soon(self._sender, peer)
            nursery.start_soon(self._deliverer)
            self._deliver_pending_load()
            task_status.started()
            ticks = 0
            try:
                while True:
                    self.step(q.Tick())
                    ticks += 1
                    if ticks % RETENTION_CHECK_TICKS == 0 and not self.closed:
                        now = self.now_ms()
                        self._maybe_snapshot(now)
                        self._maybe_clean(now)
                        self._apply([], now, None)
                    if ticks % TRACE_FLUSH_TICKS == 0 and self.trace_sink is not None:
                        self.trace_sink.flush()
                    await trio.sleep(TICK_MS / 1000)
            finally:
                nursery.cancel_scope.cancel()

    def shutdown(self) -> None:
        """Graceful: a leader resigns (EndQuorumEpoch queued, sent if the senders still run)."""
        if not self.closed:
            self.step(q.Shutdown())

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for held in self._parked.values():
                held.answer(None)
            self._parked.clear()
            for wake in self._outbox_wake.values():
                wake.set()  # a sender waiting for work sees `closed`
            if self._delivery_wanted is not None:
                self._delivery_wanted.set()
            self.controller_channel.close()
            self.metadata_log.close()  # flushes the log

    # ------------------------------------------------------------ senders

    def _enqueue(self, destination: int, message: q.Message) -> None:
        outbox = self._outboxes.get(destination)
        if outbox is None:
            log.debug("node %d: no address for node %d, message dropped", self.node_id, destination)
            return
        if _is_response(message):
            # A response whose RPC is gone (it went to another step's caller): a
            # response only travels as its RPC's answer.
            log.debug("node %d: %s to node %d has no RPC to answer, dropped", self.node_id,
                      type(message).__name__, destination)
            return
        old = outbox.put(message)
        if old is not None:
            log.debug("node %d: unsent %s to node %d superseded", self.node_id, type(old).__name__, destination)
        self._outbox_wake[destination].set()

    async def _next_request(self, peer: int) -> q.Message | None:
        """The oldest request waiting for `peer` (None: closed)."""
        outbox = self._outboxes[peer]
        while not self.closed:
            message = outbox.take()
            if message is not None:
                return message
            wake = self._outbox_wake[peer] = trio.Event()
            await wake.wait()
        return None

    async def _sender(self, peer: int) -> None:
        voter = self.voters[peer]
        stream: trio.SocketStream | None = None
        decoder = FrameDecoder(MAX_RESPONSE_BYTES)
        correlation_id = 0
        timeout_s = self.quorum_config.fetch_timeout_ms / 1000
        while True:
            message = await self._next_request(peer)
            if message is None:
                return
            try:
                body = self._to_kio_request(message, peer)
                if body is None:
                    continue
                with trio.fail_after(timeout_s):
                    if stream is None:
                        stream = await trio.open_tcp_stream(voter.host or "127.0.0.1", voter.port)
                        decoder = FrameDecoder(MAX_RESPONSE_BYTES)
                    correlation_id += 1
                    await stream.send_all(encode_request(body, correlation_id, f"kref-raft-{self.node_id}"))
                    frame = None
                    while frame is None:
                        frame = decoder.next_frame()
                        if frame is None:
                            data = await stream.receive_some(65536)
                            if not data:
                                raise ConnectionError("connection closed")
                            decoder.feed(data)
                    response_type = response_class(type(body).__api_key__, type(body).__version__)
                    got, response = decode_response(frame, response_type)
                    if got != correlation_id:
                        raise ConnectionError(f"correlation id {got}, expected {correlation_id}")
            except (OSError, ConnectionError, trio.TooSlowError, trio.BrokenResourceError) as exc:
                log.debug("node %d: request to node %d failed: %s", self.node_id, peer, exc)
                if stream is not None:
                    with trio.CancelScope(shield=True):
                        await stream.aclose()
                stream = None
                self.step(q.SendFailed(peer))
                await trio.sleep(self.quorum_config.retry_backoff_ms / 1000)
                continue
            core_response = self._from_kio_response(message, response)
            if core_response is not None:
                self.step(q.Received(peer, core_response))

    # ------------------------------------------------------------ wire <-> core

    def _to_kio_request(self, message: q.Message, destination: int) -> Any:
        def topic(module, **partition):
            return (module.TopicData(topic_name=METADATA_TOPIC, partitions=(module.PartitionData(partition_index=0, **partition),)),)

        match message:
            case q.VoteRequest():
                cls, m = _kio(VOTE, VOTE_VERSION, "request")
                return cls(cluster_id=self.cluster_id, voter_id=destination, topics=topic(
                    m, replica_epoch=message.candidate_epoch, replica_id=message.candidate_id,
                    replica_directory_id=None, voter_directory_id=None,
                    last_offset_epoch=message.last_offset_epoch, last_offset=message.last_offset,
                    pre_vote=message.pre_vote,
                ))
            case q.BeginQuorumEpochRequest():
                cls, m = _kio(BEGIN_QUORUM_EPOCH, 0, "request")
                return cls(cluster_id=self.cluster_id, topics=topic(m, leader_id=message.leader_id, leader_epoch=message.leader_epoch))
            case q.EndQuorumEpochRequest():
                cls, m = _kio(END_QUORUM_EPOCH, 0, "request")
                return cls(cluster_id=self.cluster_id, topics=topic(
                    m, leader_id=message.leader_id, leader_epoch=message.leader_epoch,
                    preferred_successors=tuple(message.preferred_successors),
                ))
            case q.FetchRequest():
                import datetime

                cls, m = _kio(FETCH, FETCH_VERSION, "request")
                return cls(
                    cluster_id=self.cluster_id,
                    replica_id=message.replica_id,
                    max_wait=datetime.timedelta(milliseconds=message.max_wait_ms),
                    min_bytes=0,
                    topics=(m.FetchTopic(topic=METADATA_TOPIC, partitions=(m.FetchPartition(
                        partition=0, current_leader_epoch=message.current_leader_epoch,
                        fetch_offset=message.fetch_offset, last_fetched_epoch=message.last_fetched_epoch,
                        partition_max_bytes=1024 * 1024,
                    ),)),),
                    forgotten_topics_data=(),
                )
            case q.FetchSnapshotRequest():
                cls, m = _kio(FETCH_SNAPSHOT, 0, "request")
                return cls(
                    cluster_id=self.cluster_id, replica_id=message.replica_id, max_bytes=message.max_bytes,
                    topics=(m.TopicSnapshot(name=METADATA_TOPIC, partitions=(m.PartitionSnapshot(
                        partition=0, current_leader_epoch=message.current_leader_epoch,
                        snapshot_id=m.SnapshotId(end_offset=message.snapshot_end_offset, epoch=message.snapshot_epoch),
                        position=message.position,
                    ),)),),
                )
        return None  # responses never travel on the sender's connection

    def _from_kio_response(self, request: q.Message, response: Any) -> q.Message | None:
        try:
            p = response.topics[0].partitions[0] if not isinstance(request, q.FetchRequest) else response.responses[0].partitions[0]
        except (IndexError, AttributeError):
            code = getattr(response, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
            log.warning("node %d: %s answered with error %s and no partition", self.node_id, type(response).__name__, code)
            return None
        match request:
            case q.VoteRequest():
                return q.VoteResponse(int(p.error_code), p.leader_id, p.leader_epoch, p.vote_granted,
                                      pre_vote=request.pre_vote)
            case q.BeginQuorumEpochRequest():
                return q.BeginQuorumEpochResponse(int(p.error_code), p.leader_id, p.leader_epoch)
            case q.EndQuorumEpochRequest():
                return q.EndQuorumEpochResponse(int(p.error_code), p.leader_id, p.leader_epoch)
            case q.FetchRequest():
                records = bytes(p.records or b"")
                batches = tuple(
                    q.Batch(base, last, epoch, records[start:end]) for base, last, epoch, start, end in batch_spans(records)
                )
                return q.FetchResponse(
                    int(p.error_code), p.current_leader.leader_id, p.current_leader.leader_epoch, p.high_watermark,
                    p.diverging_epoch.epoch, p.diverging_epoch.end_offset, batches, request.fetch_offset,
                    p.snapshot_id.end_offset, p.snapshot_id.epoch,
                )
            case q.FetchSnapshotRequest():
                return q.FetchSnapshotResponse(
                    int(p.error_code), p.current_leader.leader_id, p.current_leader.leader_epoch,
                    p.snapshot_id.end_offset, p.snapshot_id.epoch, p.size, p.position, bytes(p.unaligned_records or b""),
                )
        return None

    # ------------------------------------------------------------ server side

    def register(self, router: Router) -> None:
        router.register(VOTE, 0, VOTE_VERSION, self._handle_vote)
        router.register(BEGIN_QUORUM_EPOCH, 0, 0, self._handle_begin_quorum_epoch)
        router.register(END_QUORUM_EPOCH, 0, 0, self._handle_end_quorum_epoch)
        router.register(FETCH, FETCH_VERSION, FETCH_VERSION, self._handle_fetch)
        router.register(DESCRIBE_QUORUM, 0, 0, self._handle_describe_quorum)
        # v1 (KIP-853) adds tagged fields only (replica directory id, node endpoints).
        router.register(FETCH_SNAPSHOT, 0, 1, self._handle_fetch_snapshot)

    def _wrong_cluster(self, request: Any) -> bool:
        cluster_id = getattr(request, "cluster_id", None)
        return cluster_id is not None and cluster_id != self.cluster_id

    @staticmethod
    def _partition(request: Any) -> Any:
        topics = request.topics
        if len(topics) != 1 or topics[0].topic_name != METADATA_TOPIC or len(topics[0].partitions) != 1:
            return None
        p = topics[0].partitions[0]
        return p if p.partition_index == 0 else None

    def _respond(self, api_key: int, top_error: int, reply: Any, version: int = 0, **partition: Any) -> Any:
        cls, m = _kio(api_key, version, "response")
        extra = {"node_endpoints": ()} if api_key == VOTE and version >= 1 else {}
        if reply is None:
            return cls(error_code=top_error, topics=(), **extra)
        return cls(error_code=ErrorCode.NONE, topics=(m.TopicData(topic_name=METADATA_TOPIC, partitions=(
            m.PartitionData(partition_index=0, **partition),
        )),), **extra)

    def _refusal(self, request: Any, valid: bool) -> int | None:
        """The top-level error of a quorum RPC that is not for this node's
        __cluster_metadata-0 of this cluster (None: serve it)."""
        if not valid:
            return ErrorCode.INVALID_REQUEST
        if self._wrong_cluster(request):
            return ErrorCode.INCONSISTENT_CLUSTER_ID
        return None

    async def _handle_vote(self, ctx: RequestContext, request: Any) -> Any:
        p = self._partition(request)
        code = self._refusal(request, p is not None)
        if code is not None:
            return self._respond(VOTE, code, None, ctx.api_version)
        pre_vote = bool(getattr(p, "pre_vote", False))  # v2 (KIP-996); older versions never pre-vote
        reply = self.step(
            q.Received(p.replica_id, q.VoteRequest(p.replica_epoch, p.replica_id, p.last_offset_epoch, p.last_offset,
                                                   pre_vote=pre_vote)),
            reply_to=p.replica_id,
        )
        if not isinstance(reply, q.VoteResponse):
            reply = q.VoteResponse(ErrorCode.BROKER_NOT_AVAILABLE, self.core.leader_id, self.core.leader_epoch, False)
        return self._respond(VOTE, 0, reply, ctx.api_version, error_code=reply.error_code, leader_id=reply.leader_id,
                             leader_epoch=reply.leader_epoch, vote_granted=reply.vote_granted)

    async def _handle_begin_quorum_epoch(self, ctx: RequestContext, request: Any) -> Any:
        p = self._partition(request)
        code = self._refusal(request, p is not None)
        if code is not None:
            return self._respond(BEGIN_QUORUM_EPOCH, code, None)
        reply = self.step(q.Received(p.leader_id, q.BeginQuorumEpochRequest(p.leader_id, p.leader_epoch)),
                                     reply_to=p.leader_id)
        if reply is None:
            reply = q.BeginQuorumEpochResponse(ErrorCode.BROKER_NOT_AVAILABLE, self.core.leader_id, self.core.leader_epoch)
        return self._respond(BEGIN_QUORUM_EPOCH, 0, reply, error_code=reply.error_code, leader_id=reply.leader_id,
                             leader_epoch=reply.leader_epoch)

    async def _handle_end_quorum_epoch(self, ctx: RequestContext, request: Any) -> Any:
        p = self._partition(request)
        code = self._refusal(request, p is not None)
        if code is not None:
            return self._respond(END_QUORUM_EPOCH, code, None)
        reply = self.step(
            q.Received(p.leader_id, q.EndQuorumEpochRequest(p.leader_id, p.leader_epoch, tuple(p.preferred_successors))),
            reply_to=p.leader_id,
        )
        if reply is None:
            reply = q.EndQuorumEpochResponse(ErrorCode.BROKER_NOT_AVAILABLE, self.core.leader_id, self.core.leader_epoch)
        return self._respond(END_QUORUM_EPOCH, 0, reply, error_code=reply.error_code, leader_id=reply.leader_id,
                             leader_epoch=reply.leader_epoch)

    def _metadata_partition(self, request: Any, name_field: str) -> tuple[int | None, Any]:
        """Fetch and FetchSnapshot's shared guard: (the top-level error, the one
        partition asked for); a controller serves exactly __cluster_metadata-0."""
        topics = request.topics
        valid = _only_metadata_partition(topics, getattr(topics[0], name_field) if len(topics) == 1 else None)
        code = self._refusal(request, valid)
        return code, topics[0].partitions[0] if code is None else None

    async def _handle_fetch(self, ctx: RequestContext, request: Any) -> Any:
        cls, m = _kio(FETCH, FETCH_VERSION, "response")
        code, fp = self._metadata_partition(request, "topic")
        if code is not None:
            return cls(throttle_time=_zero(), error_code=code, responses=())
        source = request.replica_id
        max_wait_ms = max(0, int(request.max_wait.total_seconds() * 1000)) if request.max_wait else 0
        reply = self.step(
            q.Received(source, q.FetchRequest(
                source, fp.current_leader_epoch, fp.fetch_offset, fp.last_fetched_epoch, max_wait_ms,
            )),
            reply_to=source,
        )
        if reply is None and source in self.core.parked_fetches:
            reply = await self._wait_parked(source)
        if not isinstance(reply, q.FetchResponse):
            reply = q.FetchResponse(ErrorCode.BROKER_NOT_AVAILABLE, self.core.leader_id, self.core.leader_epoch, self.core.high_watermark)
        records = reply.batches[0].payload if reply.batches else b""
        partition = m.PartitionData(
            partition_index=0,
            error_code=reply.error_code,
            high_watermark=reply.high_watermark,
            log_start_offset=self.core.log_start_offset,
            diverging_epoch=m.EpochEndOffset(epoch=reply.diverging_epoch, end_offset=reply.diverging_end_offset),
            current_leader=m.LeaderIdAndEpoch(leader_id=reply.leader_id, leader_epoch=reply.leader_epoch),
            snapshot_id=m.SnapshotId(end_offset=reply.snapshot_end_offset, epoch=reply.snapshot_epoch),
            aborted_transactions=None,
            records=records,
        )
        return cls(throttle_time=_zero(), error_code=ErrorCode.NONE,
                   responses=(m.FetchableTopicResponse(topic=METADATA_TOPIC, partitions=(partition,)),))

    async def _wait_parked(self, source: int) -> q.FetchResponse | None:
        """Hold the Fetch RPC until the core answers the Fetch it parked.

        The core answers at the latest on the first Tick past its deadline
        (at most the fetch timeout away); the bound here only guards against
        a bug leaving the RPC open forever.
        """
        held = _HeldFetch()
        self._parked[source] = held
        try:
            with trio.move_on_after(2 * self.quorum_config.fetch_timeout_ms / 1000):
                await held.event.wait()
        finally:
            if self._parked.get(source) is held:
                del self._parked[source]
        return held.response

    async def _handle_fetch_snapshot(self, ctx: RequestContext, request: Any) -> Any:
        cls, m = _kio(FETCH_SNAPSHOT, ctx.api_version, "response")
        code, p = self._metadata_partition(request, "name")
        if code is not None:
            return cls(throttle_time=_zero(), error_code=code, topics=())
        source = request.replica_id
        reply = self.step(q.Received(source, q.FetchSnapshotRequest(
            source, p.current_leader_epoch, p.snapshot_id.end_offset, p.snapshot_id.epoch, p.position,
            min(int(request.max_bytes), MAX_RESPONSE_BYTES // 2),
        )), reply_to=source)
        if not isinstance(reply, q.FetchSnapshotResponse):
            reply = q.FetchSnapshotResponse(ErrorCode.BROKER_NOT_AVAILABLE, self.core.leader_id, self.core.leader_epoch,
                                            p.snapshot_id.end_offset, p.snapshot_id.epoch)
        partition = m.PartitionSnapshot(
            index=0, error_code=reply.error_code,
            snapshot_id=m.SnapshotId(end_offset=reply.snapshot_end_offset, epoch=reply.snapshot_epoch),
            current_leader=m.LeaderIdAndEpoch(leader_id=reply.leader_id, leader_epoch=reply.leader_epoch),
            size=reply.size, position=reply.position, unaligned_records=reply.data,
        )
        return cls(throttle_time=_zero(), error_code=ErrorCode.NONE,
                   topics=(m.TopicSnapshot(name=METADATA_TOPIC, partitions=(partition,)),))

    async def _handle_describe_quorum(self, ctx: RequestContext, request: Any) -> Any:
        cls, m = _kio(DESCRIBE_QUORUM, 0, "response")
        if self._partition(request) is None:
            return cls(error_code=ErrorCode.INVALID_REQUEST, topics=())
        core = self.core
        if not core.is_leader():
            return cls(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, topics=())
        voters = tuple(
            m.ReplicaState(replica_id=v, log_end_offset=core.log_end_offset if v == self.node_id else core.end_offsets.get(v, -1))
            for v in sorted(self.voters)
        )
        observers = tuple(
            m.ReplicaState(replica_id=o, log_end_offset=offset) for o, offset in sorted(core.observer_offsets.items())
        )
        return cls(error_code=ErrorCode.NONE, topics=(m.TopicData(topic_name=METADATA_TOPIC, partitions=(
            m.PartitionData(partition_index=0, error_code=ErrorCode.NONE, leader_id=self.node_id,
                            leader_epoch=core.leader_epoch, high_watermark=core.high_watermark,
                            current_voters=voters, observers=observers),
        )),))


class _HeldFetch:
    """One parked Fetch RPC: the handler waits on `event` for the core's answer."""

    __slots__ = ("event", "response")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.response: q.FetchResponse | None = None

    def answer(self, response: q.FetchResponse | None) -> None:
        self.response = response
        self.event.set()


def _only_metadata_partition(topics, name: str | None) -> bool:
    """Fetch and FetchSnapshot on a controller name exactly __cluster_metadata-0."""
    return name == METADATA_TOPIC and len(topics[0].partitions) == 1 and topics[0].partitions[0].partition == 0


def snap_ref(loaded: snap.Snapshot) -> q.SnapshotRef:
    return q.SnapshotRef(loaded.snapshot_id.end_offset, loaded.snapshot_id.epoch, loaded.size_in_bytes)


def _zero():
    import datetime

    return datetime.timedelta(0)


def _is_response(message: q.Message) -> bool:
    return isinstance(message, (
        q.VoteResponse, q.BeginQuorumEpochResponse, q.EndQuorumEpochResponse, q.FetchResponse, q.FetchSnapshotResponse,
    ))


def _with_records(response: q.FetchResponse, records: bytes) -> q.FetchResponse:
    """The leader's answer with the log bytes it read, as one opaque 'batch' for the wire."""
    if not records:
        return response
    return q.FetchResponse(
        response.error_code, response.leader_id, response.leader_epoch, response.high_watermark,
        response.diverging_epoch, response.diverging_end_offset,
        (q.Batch(-1, -1, -1, records),), response.fetch_offset,
        response.snapshot_end_offset, response.snapshot_epoch,
    )

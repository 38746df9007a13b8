"""A simulated cluster: the controller core, brokers running replica cores, clients.

Theory of operation
-------------------
One active controller (kref/controller/controller.py, node 0) and
`brokers` brokers (ids 1..n) host one partition `t-0` with replication
factor n, on a `World` (virtual clock, seeded scheduler, faulty network).
Every decision is a core's: the controller core registers, heartbeats,
fences and elects (its metadata records are committed as it writes them:
the metadata quorum itself is simulated separately, kref/sim/quorum.py); each
broker replays those records into its own `MetadataImage` and, like
kref/broker/replica_manager.py, tells its `PartitionReplica` to
BecomeLeader/BecomeFollower on every partition change; the replica core
decides produce admission, the high watermark, ISR changes (AlterPartition to
the controller) and, through its follower side (kref/replication/follower.py),
what Fetch to send and whether to append or truncate.

The simulator only carries effects out: a log is a file of fixed-size
records (leader_epoch, record id, CRC) on the broker's MemoryFileSystem,
flushed every `flush_interval_ms` (Kafka's log.flush.interval.ms), with a
leader-epoch cache beside it; a crash keeps the synced bytes and maybe a torn
tail, recovery drops a partial or corrupt last record. A restarted broker
registers a new incarnation (refused until the old session expires, so it
is fenced and out of the isr first) and acts on partition roles only once
its metadata reaches its own registration (as the controller's `caught_up`).

Faults (the nemesis, one decision every few hundred ms): crash one broker
(losing unflushed bytes, sometimes tearing the last write), restart it,
pause one broker (a zombie: its timers stop, its state stays), isolate one
broker from everyone, heal; messages are dropped, duplicated, delayed and so
reordered throughout. At most one broker is down or paused at a time: with
min.insync.replicas=2 of 3 that is the failure budget under which acks=all
promises no loss (flush interval < replica.lag.time.max.ms, so a record
acked by the isr is on disk somewhere before the isr can shrink to one).

Invariants, after every event, named as in spec/Replication.tla:
ElectionSafety (one leader per leader_epoch), LogMatching (same epoch at the
same offset => same prefix), LeaderCompleteness (a new leader holds every
committed record), NoCommittedRecordLost (every acknowledged or consumed
record stays at its offset in the current leader's log),
MonotonicHighWatermark (a leader's HW never goes back within its epoch),
HighWatermarkBelowLogEnd. Committed = acknowledged to an acks=all producer
or read by a consumer below the high watermark.
"""

from __future__ import annotations

import struct
from typing import Any
import uuid
import zlib
from dataclasses import dataclass, field

from kref.controller import controller as cc
from kref.controller import lifecycle as lc
from kref.metadata.image import MetadataImage
from kref.ports.fs import MemoryFileSystem
from kref.protocol.errors import ErrorCode
from kref.replication import follower as fc
from kref.replication import replica as rc
from kref.replication.purgatory import DelayedProduce, ProducePartitionStatus, Purgatory
from kref.sim.world import Violation, World, check_log_matching
from kref.trace.events import partition_creations

TOPIC, PARTITION = "t", 0
CONTROLLER = 0
CLIENT = 1000
LOG_PATH = "/data/t-0/log"
HW_PATH = "/data/t-0/replication-offset-checkpoint"
RECORD = struct.Struct(">iqI")  # leader_epoch, record id, crc32 of the first 12 bytes
MAX_FETCH_RECORDS = 50
MAX_IN_FLIGHT_PRODUCES = 5
# AlterPartition sends whose (possibly late) answers are still paired with their request.
MAX_REMEMBERED_ALTER_PARTITIONS = 8


KEY = (TOPIC, PARTITION)


class _WorldClock:
    """The Clock port over the simulated world's virtual time."""

    def __init__(self, world: World) -> None:
        self.world = world

    def now_ms(self) -> int:
        return self.world.now_ms

    def monotonic_ms(self) -> int:
        return self.world.now_ms


@dataclass
class Settings:
    brokers: int = 3
    min_insync_replicas: int = 2
    replica_lag_time_max_ms: int = 0  # 0: drawn from the seed, 400 or 1500 ms
    broker_session_timeout_ms: int = 900
    heartbeat_interval_ms: int = 100
    metadata_fetch_interval_ms: int = 40
    fetch_interval_ms: int = 20
    fetch_timeout_ms: int = 200
    isr_check_interval_ms: int = 100
    flush_interval_ms: int = 60
    produce_interval_ms: int = 15
    produce_timeout_ms: int = 800
    # An AlterPartition with no answer by then failed (the broker's
    # controller RPC times out the same way and steps REQUEST_TIMED_OUT).
    alter_partition_timeout_ms: int = 400
    consume_interval_ms: int = 50
    nemesis_interval_ms: tuple[int, int] = (200, 900)
    duration_ms: int = 8_000
    quiet_ms: int = 3_000  # faults healed, then this long to settle
    faults: bool = True
    # Only crashes and restarts, a network that loses and duplicates nothing: the faults
    # spec/Replication.tla models, so that a whole trace can be validated (trace_check).
    crashes_only: bool = False


@dataclass
class Broker:
    node_id: int
    fs: MemoryFileSystem = field(default_factory=MemoryFileSystem)
    alive: bool = True
    paused: bool = False
    generation: int = 0  # bumped on crash: timers of an earlier life do nothing
    incarnation: uuid.UUID | None = None
    # The broker's side of membership: kref/controller/lifecycle.py's core, as
    # the real broker drives it (controller request id -> the core's request id).
    lifecycle: lc.BrokerLifecycleCore | None = None
    lifecycle_requests: dict[int, int] = field(default_factory=dict)
    image: MetadataImage = field(default_factory=MetadataImage)
    metadata_offset: int = 0
    core: rc.PartitionReplica | None = None
    log: list[tuple[int, int]] = field(default_factory=list)  # (leader_epoch, record id)
    epochs: list[tuple[int, int]] = field(default_factory=list)  # leader-epoch cache: (epoch, start_offset)
    # acks=all produces waiting for the high watermark: the broker's own
    # purgatory, with its deadlines on the world's virtual clock.
    purgatory: Purgatory | None = None
    fetch_sent_ms: int | None = None
    alter_partition_request: int | None = None  # the controller request id of the AlterPartition in flight
    # The AlterPartition each recent controller request id carried: an answer,
    # even a late one to a send that timed out, goes to the core with the
    # request it answers (the core takes only the one in flight).
    alter_partitions: dict[int, rc.AlterPartition] = field(default_factory=dict)
    fetch_request: Any = None  # the SendFetch in flight (None: none, or an OffsetsForLeaderEpoch)
    dirty: bool = False

    @property
    def broker_epoch(self) -> int:
        return self.lifecycle.broker_epoch if self.lifecycle is not None else -1


class ClusterSim:
    def __init__(self, seed: int, settings: Settings | None = None, *, trace: bool = False) -> None:
        self.s = settings or Settings()
        self.world = World(seed, trace=trace)
        w = self.world
        w.net.drop = w.rng.choice((0.0, 0.01, 0.03))
        w.net.duplicate = w.rng.choice((0.0, 0.01, 0.02))
        w.net.max_delay_ms = w.rng.choice((3, 10, 25))
        if self.s.crashes_only:
            w.net.drop = w.net.duplicate = 0.0
        if self.s.replica_lag_time_max_ms == 0:  # drawn: below or above the broker session timeout
            self.s.replica_lag_time_max_ms = w.rng.choice((400, 1500))
        self.controller = cc.ControllerCore(CONTROLLER, broker_session_timeout_ms=self.s.broker_session_timeout_ms,
                                            tracing=trace)
        self.metadata: list = []
        self.controller.step(cc.BecomeActive(1, 0), 0)
        self.brokers = {b: Broker(b) for b in range(1, self.s.brokers + 1)}
        self.topic_id = uuid.UUID(int=w.rng.getrandbits(128))
        self.request_ids = 0
        self.pending: dict[int, int] = {}  # controller request id -> broker
        # checker state
        self.committed: dict[int, int] = {}  # offset -> record id
        self.leaders: dict[int, int] = {}  # leader_epoch -> broker
        self.hw_seen: dict[int, tuple[int, int]] = {}  # broker -> (leader_epoch, high watermark)
        self.acked = 0
        self.consumed = 0
        self.produce_in_flight: dict[int, int] = {}  # request id -> sent time
        self.next_record = 0
        self.consumer_offset = 0
        self.down: int | None = None  # the one broker crashed or paused
        self.topic_created = False
        self.changed: set[int] = set()
        self.holders: dict[tuple[int, int], set[int]] = {}  # (offset, record id) -> brokers that appended it
        self.recheck = False  # a log lost entries or the isr changed: re-check the committed records
        for b in self.brokers.values():
            b.fs.makedirs("/data/t-0")
            self._start(b)
        w.after(50, self._controller_tick)
        w.after(20, self._client_tick)
        w.after(self.s.consume_interval_ms, self._consume)
        if self.s.faults:
            w.after(w.rng.randint(*self.s.nemesis_interval_ms), self._nemesis)

    # ------------------------------------------------------------ run

    def run(self) -> None:
        w = self.world
        w.run_until(self.s.duration_ms, self._check)
        self._heal()
        w.run_until(self.s.duration_ms + self.s.quiet_ms, self._check)
        self.converged()

    # ------------------------------------------------------------ controller

    def _controller_tick(self) -> None:
        self._controller_step(cc.Tick())
        if not self.topic_created and sum(1 for b in self.controller.brokers.values() if not b.fenced) == self.s.brokers:
            self.request_ids += 1
            self._controller_step(cc.CreateTopic(self.request_ids, TOPIC, 1, self.s.brokers, self.topic_id))
            self.topic_created = TOPIC in self.controller.topics
        self.world.after(100, self._controller_tick)

    def _controller_step(self, event) -> None:
        for e in self.controller.step(event, self.world.now_ms):
            if isinstance(e, cc.WriteRecords):
                self.metadata.extend(e.records)
                self.recheck = True
                if self.world.trace:  # the partition's creation, traced as the broker's driver does
                    for created in partition_creations(e.records, e.base_offset, self.controller.topics_by_id,
                                                       replica=CONTROLLER, time_ms=self.world.now_ms):
                        self._trace(created)
                if e.request_id is not None:
                    self._reply(e.request_id, e.reply)
            elif isinstance(e, cc.Reply):
                self._reply(e.request_id, e.reply)
            elif isinstance(e, cc.Emit):
                self._trace(e.event)

    def _reply(self, request_id: int, reply) -> None:
        broker = self.pending.pop(request_id, None)
        if broker is not None:
            self.world.send(CONTROLLER, broker, self._on_controller_reply, broker, reply, self.brokers[broker].generation,
                            request_id)

    def _to_controller(self, b: Broker, event) -> None:
        self.pending[event.request_id] = b.node_id
        self.world.send(b.node_id, CONTROLLER, self._controller_step, event)

    # ------------------------------------------------------------ broker life

    def _start(self, b: Broker) -> None:
        b.alive, b.paused = True, False
        b.incarnation = uuid.UUID(int=self.world.rng.getrandbits(128))
        b.metadata_offset, b.image = 0, MetadataImage()
        # A request unanswered by the next heartbeat is given up (the network may lose it).
        b.lifecycle = lc.BrokerLifecycleCore(self.s.heartbeat_interval_ms, self.s.broker_session_timeout_ms,
                                             request_timeout_ms=self.s.heartbeat_interval_ms)
        b.lifecycle_requests = {}
        b.log, b.epochs = self._recover(b), []
        for offset, (epoch, _) in enumerate(b.log):
            if not b.epochs or b.epochs[-1][0] != epoch:
                b.epochs.append((epoch, offset))
        b.core = rc.PartitionReplica(TOPIC, PARTITION, b.node_id, min_insync_replicas=self.s.min_insync_replicas,
                                     replica_lag_time_max_ms=self.s.replica_lag_time_max_ms, tracing=self.world.trace)
        b.purgatory, b.fetch_sent_ms = Purgatory("produce", clock=_WorldClock(self.world)), None
        b.alter_partition_request, b.fetch_request = None, None
        b.alter_partitions = {}
        g = b.generation
        w = self.world
        for period, fn in ((self.s.heartbeat_interval_ms, self._heartbeat),
                           (self.s.metadata_fetch_interval_ms, self._metadata_fetch),
                           (self.s.fetch_interval_ms, self._fetch_due),
                           (self.s.isr_check_interval_ms, self._isr_tick),
                           (self.s.flush_interval_ms, self._flush)):
            w.after(w.rng.randint(1, period), self._timer, b, g, period, fn)

    def _timer(self, b: Broker, generation: int, period: int, fn) -> None:
        if b.generation != generation:
            return
        if b.alive and not b.paused:
            fn(b)
        self.world.after(period, self._timer, b, generation, period, fn)

    def _recover(self, b: Broker) -> list[tuple[int, int]]:
        """Log recovery: keep whole records with a good CRC, cut the rest (a torn write)."""
        if not b.fs.exists(LOG_PATH):
            b.fs.write_bytes(LOG_PATH, b"")
            b.fs.fsync(LOG_PATH)
            b.fs.fsync_dir("/data/t-0")
        data = b.fs.read_bytes(LOG_PATH)
        log = []
        for i in range(len(data) // RECORD.size):
            epoch, record_id, crc = RECORD.unpack_from(data, i * RECORD.size)
            if crc != zlib.crc32(data[i * RECORD.size: i * RECORD.size + 12]):
                break
            log.append((epoch, record_id))
        if len(log) * RECORD.size != len(data):
            b.fs.write_bytes(LOG_PATH, data[: len(log) * RECORD.size])
            b.fs.fsync(LOG_PATH)
        return log

    def _crash(self, b: Broker) -> None:
        torn = self.world.rng.choice((0, 0, 5, RECORD.size + 3))
        self.world.fault("Crash", replica=b.node_id, torn_bytes=torn, log_end_offset=len(b.log))
        b.fs.crash(keep_torn_bytes=torn)
        b.alive, b.core = False, None
        b.log = self._recover(b)  # what the disk holds: the spec's log of an Offline replica
        self.recheck = True
        b.generation += 1

    def _restart(self, b: Broker) -> None:
        self._start(b)
        self.world.fault("Restart", replica=b.node_id, log_end_offset=len(b.log))

    # ------------------------------------------------------------ broker timers

    def _heartbeat(self, b: Broker) -> None:
        for e in b.lifecycle.step(lc.Tick(b.metadata_offset), self.world.now_ms):
            if isinstance(e, (lc.SendRegistration, lc.SendHeartbeat)):
                self.request_ids += 1
                b.lifecycle_requests[self.request_ids] = e.request_id
                if isinstance(e, lc.SendRegistration):
                    self._to_controller(b, cc.BrokerRegistration(self.request_ids, b.node_id, b.incarnation))
                else:
                    self._to_controller(b, cc.BrokerHeartbeatRequest(self.request_ids, b.node_id, e.broker_epoch,
                                                                     e.metadata_offset, e.want_shut_down))

    def _on_controller_reply(self, node: int, reply, generation: int, request_id: int) -> None:
        b = self.brokers[node]
        if b.generation != generation or not b.alive or b.paused:
            return
        if isinstance(reply, cc.RegistrationReply | cc.HeartbeatReply):
            core_request = b.lifecycle_requests.pop(request_id, None)
            if core_request is None:
                return  # a duplicate
            if isinstance(reply, cc.RegistrationReply):
                b.lifecycle.step(lc.RegistrationAnswered(core_request, reply.error_code, reply.broker_epoch),
                                 self.world.now_ms)
            else:
                b.lifecycle.step(lc.HeartbeatAnswered(core_request, reply.error_code, reply.is_caught_up,
                                                      reply.is_fenced, reply.should_shut_down), self.world.now_ms)
        elif isinstance(reply, cc.AlterPartitionReply):
            request = b.alter_partitions.pop(request_id, None)
            if request is None:
                return  # a duplicate
            if b.alter_partition_request == request_id:
                b.alter_partition_request = None
            self._step(b, rc.AlterPartitionResponse(reply.error_code, reply.leader_epoch, frozenset(reply.isr),
                                                    reply.partition_epoch, request))

    def _alter_partition_timed_out(self, node: int, generation: int, request_id: int, leader_epoch: int) -> None:
        b = self.brokers[node]
        if b.generation != generation or not b.alive or b.alter_partition_request != request_id:
            return
        if b.paused:  # a stopped process notices the timeout once it runs again
            self.world.after(self.s.fetch_interval_ms, self._alter_partition_timed_out, node, generation,
                             request_id, leader_epoch)
            return
        b.alter_partition_request = None
        # The core keeps the change pending and asks to send it again.
        self._step(b, rc.AlterPartitionResponse(ErrorCode.REQUEST_TIMED_OUT, leader_epoch, frozenset(), -1,
                                                b.alter_partitions.get(request_id)))

    def _metadata_fetch(self, b: Broker) -> None:
        self.world.send(b.node_id, CONTROLLER, self._serve_metadata, b.node_id, b.metadata_offset, b.generation)

    def _serve_metadata(self, node: int, offset: int, generation: int) -> None:
        records = tuple(self.metadata[offset: offset + 100])
        if records:
            self.world.send(CONTROLLER, node, self._on_metadata, node, offset, records, generation)

    def _on_metadata(self, node: int, offset: int, records: tuple, generation: int) -> None:
        b = self.brokers[node]
        if b.generation != generation or not b.alive or b.paused or offset != b.metadata_offset:
            return
        delta = b.image.apply(records)
        b.metadata_offset += len(records)
        if not self._acts_on_metadata(b):
            return
        changed = (TOPIC, PARTITION) in delta.changed_partitions
        if changed or (b.core.role is rc.Role.NONE and self._partition(b) is not None):
            self._apply_role(b)

    def _acts_on_metadata(self, b: Broker) -> bool:
        return b.broker_epoch >= 0 and b.metadata_offset > b.broker_epoch

    def _partition(self, b: Broker):
        topic = b.image.topic(TOPIC)
        return topic.partitions.get(PARTITION) if topic is not None else None

    def _apply_role(self, b: Broker) -> None:
        self.recheck = True
        p = self._partition(b)
        if p is None or b.node_id not in p.replicas:
            return
        hw = b.core.high_watermark if b.core.role is not rc.Role.NONE else self._hw_checkpoint(b)
        if p.leader == b.node_id:
            previous = self.leaders.setdefault(p.leader_epoch, b.node_id)
            if previous != b.node_id:
                raise Violation("ElectionSafety", f"leader_epoch {p.leader_epoch} led by {previous} and {b.node_id}")
            new_term = not (b.core.is_leader and b.core.leader_epoch == p.leader_epoch)
            self._step(b, rc.BecomeLeader(p.leader_epoch, p.partition_epoch, frozenset(p.isr), p.replicas, 0,
                                          len(b.log), hw))
            if new_term:
                missing = [(o, r) for o, r in self.committed.items() if o >= len(b.log) or b.log[o][1] != r]
                if missing:
                    raise Violation("LeaderCompleteness", f"broker {b.node_id} leads epoch {p.leader_epoch} "
                                    f"without committed (offset, record) {missing[:3]}")
        else:
            self._step(b, rc.BecomeFollower(p.leader, p.leader_epoch, p.partition_epoch, frozenset(p.isr), p.replicas,
                                            0, len(b.log), hw, last_fetched_epoch=self._last_epoch(b)))

    def _hw_checkpoint(self, b: Broker) -> int:
        return int(b.fs.read_bytes(HW_PATH)) if b.fs.exists(HW_PATH) else 0

    def _flush(self, b: Broker) -> None:
        if b.dirty:
            b.fs.fsync(LOG_PATH)
            b.dirty = False
        if b.core.role is not rc.Role.NONE:
            b.fs.write_bytes(HW_PATH, str(b.core.high_watermark).encode())
            b.fs.fsync(HW_PATH)

    def _isr_tick(self, b: Broker) -> None:
        if b.core.is_leader:
            self._step(b, rc.Tick())

    # ------------------------------------------------------------ the log (effects carried out)

    def _last_epoch(self, b: Broker) -> int:
        return b.epochs[-1][0] if b.epochs else rc.NO_EPOCH

    def _end_offset_for(self, b: Broker, epoch: int) -> tuple[int, int]:
        """The leader-epoch cache lookup: largest epoch <= `epoch` and where it ends."""
        found = None
        for i, (e, _) in enumerate(b.epochs):
            if e > epoch:
                break
            found = i
        if found is None:
            return rc.NO_EPOCH, rc.UNKNOWN_OFFSET
        end = b.epochs[found + 1][1] if found + 1 < len(b.epochs) else len(b.log)
        return b.epochs[found][0], end

    def _append(self, b: Broker, entries) -> None:
        data = bytearray()
        for epoch, record_id in entries:
            head = struct.pack(">iq", epoch, record_id)
            data += head + struct.pack(">I", zlib.crc32(head))
            if not b.epochs or b.epochs[-1][0] < epoch:
                b.epochs.append((epoch, len(b.log)))
            self.holders.setdefault((len(b.log), record_id), set()).add(b.node_id)
            b.log.append((epoch, record_id))
        b.fs.append(LOG_PATH, bytes(data))
        b.dirty = True
        self.changed.add(b.node_id)

    def _truncate(self, b: Broker, offset: int) -> None:
        # The epoch cache is cut even when no record goes: an epoch that began
        # at the log end with no record (AssignLeaderEpoch) must not survive.
        b.epochs = [(e, o) for e, o in b.epochs if o < offset]
        if offset >= len(b.log):
            return
        del b.log[offset:]
        self.recheck = True
        data = b.fs.read_bytes(LOG_PATH)[: offset * RECORD.size]
        b.fs.write_bytes(LOG_PATH, data)
        b.fs.fsync(LOG_PATH)
        self.changed.add(b.node_id)

    # ------------------------------------------------------------ stepping the replica core

    def _step(self, b: Broker, event) -> list:
        effects = b.core.step(event, self.world.now_ms)
        for e in effects:
            match e:
                case rc.Emit():
                    self._trace(e.event)
                case rc.AssignLeaderEpoch():
                    if not b.epochs or b.epochs[-1][0] < e.leader_epoch:
                        b.epochs.append((e.leader_epoch, e.start_offset))
                case rc.AlterPartition():
                    self.request_ids += 1
                    b.alter_partition_request = self.request_ids
                    b.alter_partitions[self.request_ids] = e
                    while len(b.alter_partitions) > MAX_REMEMBERED_ALTER_PARTITIONS:
                        del b.alter_partitions[next(iter(b.alter_partitions))]
                    self.world.after(self.s.alter_partition_timeout_ms, self._alter_partition_timed_out,
                                     b.node_id, b.generation, self.request_ids, e.leader_epoch)
                    with_epochs = e.isr_with_broker_epochs(b.node_id, b.broker_epoch)  # AlterPartition v3 (KIP-903)
                    self._to_controller(b, cc.AlterPartition(self.request_ids, b.node_id, b.broker_epoch, self.topic_id,
                                                             PARTITION, e.leader_epoch, e.partition_epoch,
                                                             tuple(m for m, _ in with_epochs),
                                                             tuple(epoch for _, epoch in with_epochs)))
                case rc.HighWatermarkAdvanced():
                    b.purgatory.check_and_complete(KEY)
                case fc.TruncateLog():
                    self._truncate(b, e.offset)
                    self._step(b, rc.FollowerTruncated(len(b.log), self._last_epoch(b)))
                case fc.TruncateFullyAndStartAt():
                    raise Violation("NoRetention", "TruncateFullyAndStartAt without retention or DeleteRecords")
                case _:
                    pass
        return effects

    def _delay_produce(self, b: Broker, request_id: int, required: int, first: int) -> None:
        """Park an acks=all produce in the broker's purgatory, as the broker's
        produce handler does: answered when the core says so, or
        REQUEST_TIMED_OUT at its deadline (a timer on the world's clock)."""
        op = DelayedProduce({KEY: ProducePartitionStatus(required)},
                            lambda _key, offset: b.core.check_produce_completion(offset))
        op.waker = lambda: self._answer_produce(b, request_id, op.partitions[KEY].error_code, first)
        if op.try_complete():
            op.completed = True
            op.waker()
        elif b.purgatory.watch(op, self.s.produce_timeout_ms):
            self.world.at(op.deadline_ms, self._expire_produces, b.node_id, b.generation)
        else:
            op.on_expiration()
            op.waker()

    def _expire_produces(self, node: int, generation: int) -> None:
        b = self.brokers[node]
        if not b.alive or b.generation != generation:
            return
        if b.paused:  # a stopped process times nothing out; it does once it runs again
            self.world.after(self.s.fetch_interval_ms, self._expire_produces, node, generation)
            return
        b.purgatory.expire(self.world.now_ms)

    # ------------------------------------------------------------ replication messages

    def _fetch_due(self, b: Broker) -> None:
        if b.core.role is not rc.Role.FOLLOWER:
            return
        if b.fetch_sent_ms is not None and self.world.now_ms - b.fetch_sent_ms < self.s.fetch_timeout_ms:
            return  # one Fetch in flight per partition
        if b.fetch_request is not None:
            # Timed out: the core learns its fetch failed (FetchError), as the broker's fetcher tells it;
            # else its next FollowerFetch would follow one never answered (the spec: one in flight).
            req, b.fetch_request = b.fetch_request, None
            self._step(b, fc.FetchResponseReceived(req.current_leader_epoch, req.fetch_offset,
                                                   ErrorCode.REQUEST_TIMED_OUT, -1, -1))
        for e in self._step(b, fc.FollowerFetchDue(b.broker_epoch)):
            if isinstance(e, fc.SendFetch):
                b.fetch_sent_ms = self.world.now_ms
                b.fetch_request = e
                self.world.send(b.node_id, e.leader, self._on_fetch, e.leader, b.node_id, e, b.generation)
            elif isinstance(e, fc.SendOffsetsForLeaderEpoch):
                b.fetch_sent_ms = self.world.now_ms
                self.world.send(b.node_id, e.leader, self._on_offsets_for_leader_epoch, e.leader, b.node_id, e,
                                b.generation)

    def _usable(self, node: int) -> Broker | None:
        b = self.brokers[node]
        return b if b.alive and not b.paused else None

    def _on_fetch(self, leader: int, follower: int, req: fc.SendFetch, follower_generation: int,
                  image: MetadataImage | None = None) -> None:
        """A follower's Fetch at its leader; `image` is the metadata the leader checks the
        follower against (its own; a test may give an older one: a leader that lags)."""
        b = self._usable(leader)
        if b is None:
            return
        end = None
        if req.last_fetched_epoch != rc.NO_EPOCH:
            end = self._end_offset_for(b, req.last_fetched_epoch)
        registered_epoch, eligible = (image or b.image).isr_registration(follower)  # KIP-841/903
        effects = self._step(b, rc.FetchFromFollower(follower, req.fetch_offset, req.last_fetched_epoch,
                                                     req.current_leader_epoch, end, req.broker_epoch,
                                                     registered_epoch, eligible))
        for e in effects:
            if isinstance(e, rc.RespondFollowerFetch):
                records = ()
                if e.error_code == ErrorCode.NONE and e.diverging_epoch == rc.NO_EPOCH:
                    records = tuple(b.log[req.fetch_offset: req.fetch_offset + MAX_FETCH_RECORDS])
                self.world.send(leader, follower, self._on_fetch_response, follower, req, e, records,
                                follower_generation)

    def _on_fetch_response(self, node: int, req: fc.SendFetch, resp: rc.RespondFollowerFetch, records: tuple,
                           generation: int) -> None:
        b = self._usable(node)
        if b is None or b.generation != generation or b.fetch_request is not req:
            return  # a late answer to a fetch that timed out: the follower has dropped it
        b.fetch_sent_ms, b.fetch_request = None, None
        local = self._end_offset_for(b, resp.diverging_epoch) if resp.diverging_epoch != rc.NO_EPOCH else None
        event = fc.FetchResponseReceived(req.current_leader_epoch, req.fetch_offset, resp.error_code,
                                         resp.high_watermark, resp.log_start_offset, bool(records),
                                         resp.diverging_epoch, resp.diverging_end_offset, local)
        for e in self._step(b, event):
            if isinstance(e, fc.AppendAsFollower):
                first = len(b.log)
                if records:
                    self._append(b, records)
                self._step(b, rc.FollowerAppended(first, len(b.log) - 1, len(b.log), e.leader_high_watermark,
                                                  self._last_epoch(b), e.leader_log_start_offset))

    def _on_offsets_for_leader_epoch(self, leader: int, follower: int, req: fc.SendOffsetsForLeaderEpoch,
                                     generation: int) -> None:
        b = self._usable(leader)
        if b is None:
            return
        error = b.core.check_leader_epoch(req.current_leader_epoch)
        epoch, end = self._end_offset_for(b, req.leader_epoch) if error == ErrorCode.NONE else (rc.NO_EPOCH, -1)
        self.world.send(leader, follower, self._on_epoch_end_offset, follower, req, error, epoch, end, generation)

    def _on_epoch_end_offset(self, node: int, req, error: int, epoch: int, end: int, generation: int) -> None:
        b = self._usable(node)
        if b is None or b.generation != generation or b.fetch_request is not req:
            return  # a late answer to a fetch that timed out: the follower has dropped it
        b.fetch_sent_ms, b.fetch_request = None, None
        local = self._end_offset_for(b, epoch) if epoch != rc.NO_EPOCH else None
        self._step(b, fc.EpochEndOffsetReceived(req.current_leader_epoch, req.leader_epoch, error, epoch, end, local))

    # ------------------------------------------------------------ clients

    def _client_leader(self) -> int | None:
        """The producer's metadata: what a random live broker's image says."""
        live = [b for b in self.brokers.values() if b.alive]
        p = self._partition(self.world.rng.choice(live)) if live else None
        return p.leader if p is not None and p.leader > 0 else None

    def _client_tick(self) -> None:
        w = self.world
        now = w.now_ms
        for request_id, sent in list(self.produce_in_flight.items()):
            if now - sent > self.s.produce_timeout_ms:
                del self.produce_in_flight[request_id]  # timed out: the client retries with a new record
        if now < self.s.duration_ms + self.s.quiet_ms // 2 and len(self.produce_in_flight) < MAX_IN_FLIGHT_PRODUCES:
            leader = self._client_leader()
            if leader is not None:
                self.request_ids += 1
                self.next_record += 1
                self.produce_in_flight[self.request_ids] = now
                w.send(CLIENT, leader, self._on_produce, leader, self.request_ids, self.next_record)
        w.after(self.s.produce_interval_ms, self._client_tick)

    def _on_produce(self, node: int, request_id: int, record_id: int) -> None:
        b = self._usable(node)
        if b is None:
            return
        for e in self._step(b, rc.ClientProduce(request_id, -1, 1, self.s.min_insync_replicas)):
            if isinstance(e, rc.ProduceResult):
                self._answer_produce(b, request_id, e.error_code, -1)
            elif isinstance(e, rc.AppendToLog):
                first = len(b.log)
                self._append(b, [(e.leader_epoch, record_id)])
                for e2 in self._step(b, rc.LogAppended(request_id, -1, first, first, len(b.log))):
                    if isinstance(e2, rc.DelayProduce):
                        self._delay_produce(b, request_id, e2.required_offset, first)
                    elif isinstance(e2, rc.ProduceResult):
                        self._answer_produce(b, request_id, e2.error_code, first)

    def _answer_produce(self, b: Broker, request_id: int, error_code: int, offset: int) -> None:
        record_id = b.log[offset][1] if error_code == ErrorCode.NONE and 0 <= offset < len(b.log) else -1
        if error_code == ErrorCode.NONE:
            holders = self.holders.get((offset, record_id), ())
            if len(holders) < self.s.min_insync_replicas:
                # Kafka's acks=all contract: acknowledged once min.insync.replicas replicas have it.
                raise Violation("AckedByMinInsyncReplicas", f"record {record_id} at offset {offset} acknowledged "
                                f"by leader {b.node_id} with only brokers {sorted(holders)} holding it")
        self.world.send(b.node_id, CLIENT, self._on_produce_answer, request_id, error_code, offset, record_id)

    def _on_produce_answer(self, request_id: int, error_code: int, offset: int, record_id: int) -> None:
        if self.produce_in_flight.pop(request_id, None) is None:
            return
        if error_code == ErrorCode.NONE:
            self.acked += 1
            self._commit(offset, record_id, "acknowledged")
            if self.world.trace:
                self.world.record({"type": "ProduceAcknowledged", "time_ms": self.world.now_ms, "offset": offset,
                                   "record": record_id})

    def _consume(self) -> None:
        leader = self._client_leader()
        if leader is not None:
            self.world.send(CLIENT, leader, self._serve_consumer, leader, self.consumer_offset)
        self.world.after(self.s.consume_interval_ms, self._consume)

    def _serve_consumer(self, node: int, offset: int) -> None:
        b = self._usable(node)
        if b is None:
            return
        error, upto = b.core.consumer_read(offset, rc.NO_EPOCH)
        if error == ErrorCode.NONE and upto > offset:
            records = tuple(b.log[offset: min(upto, offset + MAX_FETCH_RECORDS)])
            self.world.send(node, CLIENT, self._on_consumed, offset, records)

    def _on_consumed(self, offset: int, records: tuple) -> None:
        if offset != self.consumer_offset:
            return
        for i, (_, record_id) in enumerate(records):
            self._commit(offset + i, record_id, "consumed")
        self.consumed += len(records)
        self.consumer_offset += len(records)

    def _commit(self, offset: int, record_id: int, how: str) -> None:
        self.recheck = True
        before = self.committed.setdefault(offset, record_id)
        if before != record_id:
            raise Violation("NoCommittedRecordLost", f"offset {offset} {how} as record {record_id}, "
                            f"committed earlier as record {before}")

    # ------------------------------------------------------------ nemesis

    def _nemesis(self) -> None:
        w, rng = self.world, self.world.rng
        if w.now_ms >= self.s.duration_ms:
            return
        roll = rng.random()
        if self.s.crashes_only:
            roll = 0.0  # the crash below
        if self.down is None:
            leader = self._current_leader()
            victim = leader if leader is not None and rng.random() < 0.5 else self.brokers[rng.randint(1, self.s.brokers)]
            if roll < 0.3:
                self._crash(victim)
                self.down = victim.node_id
                w.after(rng.randint(100, 1500), self._recover_down)
            elif roll < 0.5:
                victim.paused = True
                self.down = victim.node_id
                w.fault("Pause", replica=victim.node_id)
                w.after(rng.randint(100, 2500), self._recover_down)
            elif roll < 0.7:
                # Sometimes the clients still reach it: an isolated leader keeps appending (a zombie).
                others = (CONTROLLER, *self.brokers) if rng.random() < 0.5 else (CONTROLLER, CLIENT, *self.brokers)
                w.cut = {frozenset((victim.node_id, o)) for o in others if o != victim.node_id}
                w.fault("Partition", isolated=victim.node_id, clients=CLIENT not in others)
            else:
                if w.cut:
                    w.fault("Heal")
                w.cut = set()
        w.after(rng.randint(*self.s.nemesis_interval_ms), self._nemesis)

    def _recover_down(self) -> None:
        if self.down is None:
            return
        b = self.brokers[self.down]
        if not b.alive:
            self._restart(b)
        elif b.paused:
            b.paused = False
            self.world.fault("Resume", replica=b.node_id)
        self.down = None

    def _heal(self) -> None:
        self.world.cut = set()
        self.world.net.drop = self.world.net.duplicate = 0.0
        self._recover_down()

    # ------------------------------------------------------------ invariants

    def _check(self) -> None:
        for b in self.brokers.values():
            core = b.core
            if core is None:
                continue
            if core.high_watermark > core.log_end_offset or core.log_end_offset != len(b.log):
                if core.high_watermark > core.log_end_offset:
                    raise Violation("HighWatermarkBelowLogEnd", f"broker {b.node_id} hw={core.high_watermark} "
                                    f"leo={core.log_end_offset}")
            if core.is_leader:
                seen = self.hw_seen.get(b.node_id)
                if seen is not None and seen[0] == core.leader_epoch and core.high_watermark < seen[1]:
                    raise Violation("MonotonicHighWatermark", f"broker {b.node_id} epoch {core.leader_epoch} "
                                    f"hw {seen[1]} -> {core.high_watermark}")
                self.hw_seen[b.node_id] = (core.leader_epoch, core.high_watermark)
        if self.recheck and self.committed:
            self.recheck = False
            self._check_committed()
        if self.changed:
            for a in self.changed:
                la = self.brokers[a].log
                for c, other in self.brokers.items():
                    if c != a:
                        check_log_matching(a, la, c, other.log, "brokers")
                        self._below_high_watermarks(self.brokers[a], other)
            self.changed.clear()

    def _check_committed(self) -> None:
        p = self._partition_of_controller()
        if p is None:
            return
        # spec: LeaderCompleteness -- the elected leader, unless Offline, holds every committed record.
        leader = self.brokers.get(p.leader)
        if leader is not None and leader.alive and leader.core is not None and leader.core.role is not rc.Role.NONE:
            log = leader.log
            for offset, record_id in self.committed.items():
                if offset >= len(log) or log[offset][1] != record_id:
                    raise Violation("LeaderCompleteness", f"record {record_id} committed at offset {offset} is not in "
                                    f"the log of leader {leader.node_id} (leader_epoch {p.leader_epoch}, "
                                    f"log_end_offset {len(log)})")
        # spec: NoCommittedRecordLost -- some member of the controller's isr still holds it.
        logs = [self.brokers[r].log for r in p.isr if r in self.brokers]
        # Kafka's definition of the isr: every acting, unfenced member holds what is committed
        # (the spec's NoCommittedRecordLost and LeaderCompleteness rest on it at the next election).
        for r in p.isr:
            b, registration = self.brokers.get(r), self.controller.brokers.get(r)
            if b is None or not b.alive or b.core is None or b.core.role is rc.Role.NONE:
                continue
            if registration is None or registration.fenced:
                continue
            for offset, record_id in self.committed.items():
                if offset >= len(b.log) or b.log[offset][1] != record_id:
                    raise Violation("IsrMembersHoldCommitted", f"broker {r} is in the isr {list(p.isr)} "
                                    f"(partition_epoch {p.partition_epoch}) without record {record_id} committed "
                                    f"at offset {offset} (its log_end_offset {len(b.log)})")
        for offset, record_id in self.committed.items():
            if not any(offset < len(log) and log[offset][1] == record_id for log in logs):
                raise Violation("NoCommittedRecordLost", f"record {record_id} committed at offset {offset} is held by "
                                f"no member of the isr {list(p.isr)}")

    def _partition_of_controller(self):
        topic = self.controller.image.topic(TOPIC)
        return topic.partitions.get(PARTITION) if topic is not None else None

    def _below_high_watermarks(self, a: Broker, b: Broker) -> None:
        # spec: LogMatching, first part -- replicas agree below both their high watermarks.
        if a.core is None or b.core is None:
            return
        n = min(a.core.high_watermark, b.core.high_watermark, len(a.log), len(b.log))
        if a.log[:n] != b.log[:n]:
            k = next(i for i in range(n) if a.log[i] != b.log[i])
            raise Violation("LogMatching", f"brokers {a.node_id} and {b.node_id} differ at offset {k} below both high "
                            f"watermarks ({a.core.high_watermark}, {b.core.high_watermark}): {a.log[k]} vs {b.log[k]}")

    def converged(self) -> None:
        """spec liveness ReplicasConverge / HighWatermarkCatchesUp, after the quiet period: every
        replica holds the leader's log and the high watermark reached its end."""
        leader = self._current_leader()
        if leader is None:
            raise Violation("ReplicasConverge", "no leader after the quiet period")
        for b in self.brokers.values():
            if b.log != leader.log:
                raise Violation("ReplicasConverge", f"broker {b.node_id} log_end_offset {len(b.log)} differs from "
                                f"leader {leader.node_id}'s {len(leader.log)} after the quiet period")
        if leader.core.high_watermark != len(leader.log):
            raise Violation("HighWatermarkCatchesUp", f"leader {leader.node_id} high_watermark "
                            f"{leader.core.high_watermark} < log_end_offset {len(leader.log)} after the quiet period")

    def _current_leader(self) -> Broker | None:
        best = None
        for b in self.brokers.values():
            if b.alive and b.core is not None and b.core.is_leader:
                if best is None or b.core.leader_epoch > best.core.leader_epoch:
                    best = b
        return best

    # ------------------------------------------------------------ trace

    def _trace(self, event) -> None:
        if self.world.trace:
            self.world.record(event.to_dict())

    def summary(self) -> dict:
        leader = self._current_leader()
        return {
            "events": self.world.events,
            "faults": self.world.faults,
            "acked": self.acked,
            "consumed": self.consumed,
            "leader_epochs": len(self.leaders),
            "high_watermark": leader.core.high_watermark if leader else -1,
        }

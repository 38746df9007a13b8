"""The pure partition replica core: leader epochs, ISR and high watermark.

Theory of operation
-------------------
`PartitionReplica` is the state of one partition on one broker, as
spec/Replication.tla names it: `leader_epoch`, `partition_epoch`, `isr`,
`log_end_offset`, `high_watermark`, and on a leader one `ReplicaState` per
follower (its log_end_offset as learnt from its fetches and the last time it
was caught up). It is a sans-IO state machine:

    effects = replica.step(event, now_ms)

It reads no clock, touches no file and sends nothing. The driver
(kref/broker/partition.py for the trio broker, the simulator, or a test)
turns effects into I/O and feeds the outcome back as the next event. The log
itself (bytes, segments, the leader-epoch cache) belongs to the driver's
kref.storage Log; the core only tracks offsets, which is all the replication
protocol decides on.

Transitions and the spec actions they implement (each emits a trace event
named after the action, carrying the post-state):

- BecomeLeader        -> BecomeLeader: start `leader_epoch` at the current
  log_end_offset (effect AssignLeaderEpoch for the epoch cache), reset the
  followers' fetch state, give ISR members a full replica_lag_time_max_ms.
  Of the leader's own epoch with a newer partition_epoch (an isr or
  replicas change the controller committed): BecomeLeader too, keeping the
  followers' state and dropping the AlterPartition in flight.
- ClientProduce       -> reject (not leader; acks=all with fewer than
  min_insync_replicas in the isr: ErrorCode.NOT_ENOUGH_REPLICAS) or AppendToLog.
- LogAppended         -> LeaderAppend, then AdvanceHighWatermark if
  min log_end_offset over the isr moved; acks=1 answers now, acks=all either
  answers (high watermark already past the batch) or DelayProduce.
- FetchFromFollower   -> LeaderHandleFetch: fence stale epochs, detect a
  diverging log (KIP-320: the follower's last fetched epoch ends earlier on
  the leader), record the follower's log_end_offset and caught-up time,
  ExpandIsr once it reached the high watermark (and the start of the current
  epoch), AdvanceHighWatermark. KIP-903: the fetch carries the follower's
  broker epoch, recorded with its offset; a fetch of an older incarnation than
  the leader's metadata knows is refused, ExpandIsr needs an eligible broker
  (KIP-841) of the recorded incarnation, and AlterPartition names each
  member's epoch for the controller to check.
- Tick                -> ShrinkIsr for followers not caught up for more than
  replica_lag_time_max_ms, then AdvanceHighWatermark (a smaller isr may let
  it move).
- BecomeFollower, FollowerAppended, FollowerTruncated -> BecomeFollower,
  FollowerAppend, TruncateToEpochEndOffset on the follower side (the
  follower's fetcher sending requests, the spec's FollowerFetch, lives in
  the driver that will run followers).

Invariants kept here (a violation is a bug and raises): the high watermark
never decreases on a leader and never passes its log_end_offset; the leader
is always in its isr.

ISR changes follow KIP-497: ShrinkIsr / ExpandIsr only propose a new isr
(an AlterPartition effect, one in flight at a time); the isr and
partition_epoch change when the controller's AlterPartitionResponse commits
them (HandleAlterPartitionResponse). Meanwhile the high watermark counts the
maximal isr (committed | proposed), so a shrink cannot advance the HW before
it is committed.

An answer is taken only if it answers the request in flight (the response
names the AlterPartition it answers; Kafka compares the pending state it
sent): a late answer to an older request changes nothing. What an error
does follows Kafka's Partition.handleAlterPartitionError, because the
leader cannot tell whether the controller committed the change when the
answer is lost:
- INELIGIBLE_REPLICA, OPERATION_NOT_ATTEMPTED: the controller says it did
  not apply the change; back to the committed isr.
- FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, UNKNOWN_TOPIC_OR_PARTITION,
  INVALID_REQUEST, NEW_LEADER_ELECTED: the leader's registration is stale;
  the proposed isr stays pending (the HW keeps counting it) until metadata
  (BecomeLeader, BecomeFollower) replaces it.
- anything else (REQUEST_TIMED_OUT, NOT_CONTROLLER, a broken connection: the
  change may or may not have been committed): the proposed isr stays
  pending and the same AlterPartition is sent again (AlterPartitionManager's
  resend) once a backoff has passed: ALTER_PARTITION_BACKOFF_MS after the
  first failure, doubled per failure in a row up to
  ALTER_PARTITION_MAX_BACKOFF_MS (an unreachable controller is not hammered).
  The core decides the time; the resend goes out from the first step at or
  after it (any event: a Tick, a follower's fetch), and
  `alter_partition_resend_due_ms` tells a driver with timers when to step it.
  Until then the request still counts as in flight (the spec's
  AlterPartitionLost puts the same request back): an answer to it is taken.
The single broker's controller is its local metadata source (the Broker
commits the change as a PartitionChangeRecord and answers).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kref.protocol.errors import ErrorCode
from kref.replication.follower import (
    EpochEndOffsetReceived,
    FetchResponseReceived,
    FetchState,
    FollowerFetchDue,
    FollowerSide,
)
from kref import mutations as _m
from kref.trace import events as trace
from kref.trace import reassignment_events as reassign_trace


NO_EPOCH = -1
UNKNOWN_OFFSET = -1
# A broker epoch nobody sent or knows (Fetch before v15, AlterPartition before
# v3): KIP-903's checks skip it, as Kafka's do.
NO_BROKER_EPOCH = -1

# AlterPartition errors by what the leader does with its proposed isr (Kafka's
# Partition.handleAlterPartitionError): the controller says it did not apply
# the change -> back to the committed isr; the leader's registration is stale
# -> keep it pending until metadata replaces it. Any other error: resend.
_ALTER_PARTITION_NOT_APPLIED = frozenset({ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED})
_ALTER_PARTITION_AWAIT_METADATA = frozenset({
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.INVALID_REQUEST, ErrorCode.NEW_LEADER_ELECTED,
})

# The resend backoff after an AlterPartition that got no decision (Kafka's
# retry.backoff.ms, 100 ms, doubled per failure in a row up to the cap).
ALTER_PARTITION_BACKOFF_MS = 100
ALTER_PARTITION_MAX_BACKOFF_MS = 2_000

# ListOffsets special timestamps (KIP-79, KIP-734, KIP-405).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


class Role(enum.Enum):
    NONE = "none"  # not yet told its role (or partition going offline)
    LEADER = "leader"
    FOLLOWER = "follower"


# ---------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class BecomeLeader:
    leader_epoch: int
    partition_epoch: int
    isr: frozenset[int]
    replicas: tuple[int, ...]
    log_start_offset: int
    log_end_offset: int
    # From the high-watermark checkpoint; the new leader never lowers it.
    high_watermark: int


@dataclass(frozen=True, slots=True)
class BecomeFollower:
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: frozenset[int]
    replicas: tuple[int, ...]
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    # The epoch of the last record in the local log (NO_EPOCH when empty),
    # and whether the Fetch version carries diverging epochs (KIP-320, v12+)
    # or the follower must reconcile through OffsetsForLeaderEpoch first.
    last_fetched_epoch: int = NO_EPOCH
    truncate_on_fetch: bool = True


@dataclass(frozen=True, slots=True)
class StopReplica:
    """The registration (leader_epoch, partition_epoch) the broker applied no longer names
    it a replica (a reassignment removed it, KIP-455): the replica stops; its log goes."""

    leader_epoch: int
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class ClientProduce:
    request_id: int
    acks: int  # 0, 1 or -1 (all)
    records_count: int
    # The topic's min.insync.replicas as of this request (a dynamic config):
    # it comes in with the event, so the core never reads configuration.
    min_insync_replicas: int | None = None


@dataclass(frozen=True, slots=True)
class LogAppended:
    """The driver appended the batch of `request_id`; offsets as the log assigned them."""

    request_id: int
    acks: int
    first_offset: int
    last_offset: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class FetchFromFollower:
    """A fetch from follower `replica_id` arrived at this (leader) replica.

    `epoch_end_offset` is what the leader's epoch cache answers for
    `last_fetched_epoch`: (largest epoch <= it, end offset of that epoch),
    looked up by the driver before stepping; None when last_fetched_epoch is
    NO_EPOCH (an empty follower log: nothing to check).
    """

    replica_id: int
    fetch_offset: int
    last_fetched_epoch: int
    current_leader_epoch: int = NO_EPOCH
    epoch_end_offset: tuple[int, int] | None = None
    # KIP-903: the broker epoch of the incarnation that sent the fetch (Fetch
    # v15+ ReplicaState.ReplicaEpoch; NO_BROKER_EPOCH before v15).
    broker_epoch: int = NO_BROKER_EPOCH
    # The follower's broker as this leader's metadata has it, looked up by the
    # driver: the epoch of its registration when registered and unfenced
    # (Kafka's alive broker epoch; NO_BROKER_EPOCH when not, or unknown), and
    # whether it may join the isr at all (registered, unfenced, not in
    # controlled shutdown: KIP-841).
    registered_broker_epoch: int = NO_BROKER_EPOCH
    isr_eligible: bool = True


@dataclass(frozen=True, slots=True)
class FollowerAppended:
    """Follower side: records from the leader were appended; the leader's HW came along."""

    first_offset: int
    last_offset: int
    log_end_offset: int
    leader_high_watermark: int
    # The epoch of the last appended batch (unchanged when nothing came).
    last_fetched_epoch: int = NO_EPOCH
    leader_log_start_offset: int = UNKNOWN_OFFSET


@dataclass(frozen=True, slots=True)
class FollowerTruncated:
    """Follower side: the log was cut (TruncateLog / TruncateFullyAndStartAt)."""

    log_end_offset: int
    # The epoch of the last record left (NO_EPOCH when the log is empty).
    last_fetched_epoch: int = NO_EPOCH
    # Set by TruncateFullyAndStartAt: the new, empty log starts here.
    log_start_offset: int | None = None


@dataclass(frozen=True, slots=True)
class LogStartOffsetAdvanced:
    """DeleteRecords or retention moved the log start offset."""

    log_start_offset: int


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    """The controller's answer to this leader's AlterPartition: the committed isr and
    partition_epoch, or an error (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, ...)."""

    error_code: int
    leader_epoch: int
    isr: frozenset[int]
    partition_epoch: int
    # The AlterPartition effect this answers (the driver pairs them); None: the
    # one in flight (scripts that answer at once).
    request: AlterPartition | None = None


@dataclass(frozen=True, slots=True)
class Tick:
    """Periodic: time for the ISR shrink check (Kafka runs it every lag/2 ms)."""


Event = (
    BecomeLeader
    | BecomeFollower
    | ClientProduce
    | LogAppended
    | FetchFromFollower
    | FollowerAppended
    | FollowerTruncated
    | LogStartOffsetAdvanced
    | AlterPartitionResponse
    | Tick
    | FollowerFetchDue
    | FetchResponseReceived
    | EpochEndOffsetReceived
)

# ---------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class AssignLeaderEpoch:
    """Record in the leader-epoch cache that `leader_epoch` starts at `start_offset`."""

    leader_epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class AppendToLog:
    """Append the produce payload of `request_id` as leader in `leader_epoch`."""

    request_id: int
    leader_epoch: int
    acks: int


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """Answer the produce of `request_id` for this partition (nothing is sent for acks=0)."""

    request_id: int
    error_code: int


@dataclass(frozen=True, slots=True)
class DelayProduce:
    """acks=all: park `request_id` in the purgatory until the HW reaches `required_offset`."""

    request_id: int
    required_offset: int


@dataclass(frozen=True, slots=True)
class HighWatermarkAdvanced:
    """Wake delayed produces and consumer fetches waiting on this partition."""

    high_watermark: int


@dataclass(frozen=True, slots=True)
class LogEndOffsetAdvanced:
    """Wake delayed follower fetches (followers read up to the log end offset)."""

    log_end_offset: int


@dataclass(frozen=True, slots=True)
class RespondFollowerFetch:
    """How to answer follower `replica_id`: read from its fetch offset, or tell it to truncate."""

    replica_id: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    diverging_epoch: int = NO_EPOCH
    diverging_end_offset: int = UNKNOWN_OFFSET


@dataclass(frozen=True, slots=True)
class AlterPartition:
    """Send AlterPartition to the controller: the leader proposes `new_isr` from the
    epochs it applied; the answer comes back as AlterPartitionResponse (KIP-497)."""

    leader_epoch: int
    partition_epoch: int
    new_isr: frozenset[int]
    # KIP-903 (AlterPartition v3 NewIsrWithEpochs): per member of new_isr, the
    # broker epoch its last fetch carried (NO_BROKER_EPOCH: not known; the
    # leader's own entry is its driver's to fill, it knows its own epoch).
    broker_epochs: tuple[tuple[int, int], ...] = ()

    def isr_with_broker_epochs(self, own_id: int, own_broker_epoch: int) -> tuple[tuple[int, int], ...]:
        """(member, broker epoch) for every member of new_isr, in id order, the
        sending leader's own entry filled with its own epoch (the driver's)."""
        epochs = dict(self.broker_epochs)
        return tuple((b, own_broker_epoch if b == own_id else epochs.get(b, NO_BROKER_EPOCH))
                     for b in sorted(self.new_isr))


@dataclass(frozen=True, slots=True)
class Emit:
    """Write a trace event."""

    event: trace.TraceEvent


Effect = (
    AssignLeaderEpoch
    | AppendToLog
    | ProduceResult
    | DelayProduce
    | HighWatermarkAdvanced
    | LogEndOffsetAdvanced
    | RespondFollowerFetch
    | AlterPartition
    | Emit
)


# ---------------------------------------------------------------- state


@dataclass(slots=True)
class ReplicaState:
    """The leader's view of one follower, from its fetches (Kafka's Replica)."""

    replica_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_time_ms: int = 0
    last_fetch_time_ms: int = 0
    # The leader's log_end_offset when that last fetch arrived: a follower
    # that reached it by its next fetch was caught up at the earlier time.
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    # KIP-903: the broker epoch that last fetch carried (the spec's
    # remote_broker_epoch): the incarnation the log_end_offset above is of.
    broker_epoch: int = NO_BROKER_EPOCH


class InvariantViolation(AssertionError):
    """A transition would break one of the spec's invariants: a bug, never input."""


@dataclass(slots=True)
class PartitionReplica(FollowerSide):
    topic: str
    partition: int
    replica_id: int  # this broker's node id
    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = 30_000
    # Emit trace events (Emit effects); drivers without a sink switch it off.
    tracing: bool = True

    role: Role = Role.NONE
    leader: int = -1
    leader_epoch: int = NO_EPOCH
    partition_epoch: int = 0
    replicas: tuple[int, ...] = ()
    isr: frozenset[int] = frozenset()
    log_start_offset: int = 0
    log_end_offset: int = 0
    high_watermark: int = 0
    # The offset where the current leader epoch began (log_end_offset at
    # BecomeLeader); a follower joins the isr only once past it.
    leader_epoch_start_offset: int = 0
    followers: dict[int, ReplicaState] = field(default_factory=dict)
    # The isr this leader proposed in an AlterPartition still in flight (one at
    # a time); None when none is. The HW counts isr | pending_isr.
    pending_isr: frozenset[int] | None = None
    # The AlterPartition whose answer the leader waits for; None when none is
    # in flight (also while pending_isr waits for metadata after an error).
    alter_partition_sent: AlterPartition | None = None
    # Set when alter_partition_sent got no decision (timeout, NOT_CONTROLLER):
    # the time it goes again (None: it is out, or nothing is pending), and the
    # failures in a row the backoff doubles with.
    alter_partition_resend_due_ms: int | None = None
    alter_partition_failures: int = 0
    # Follower side (kref/replication/follower.py): the epoch of the last
    # record in the local log, how the next request is built, and whether
    # the Fetch version has diverging epochs.
    last_fetched_epoch: int = NO_EPOCH
    fetch_state: FetchState = FetchState.FETCHING
    truncate_on_fetch: bool = True

    # ------------------------------------------------------------ queries

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    def check_produce_completion(self, required_offset: int) -> int | None:
        """The error code to answer a waiting acks=all produce with, or None to keep waiting.

        Like Kafka's checkEnoughReplicasReachOffset: done once the high
        watermark passed the batch; if meanwhile the isr fell below
        min_insync_replicas the records are in but under-replicated, which
        the producer learns as ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND.
        """
        if not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark >= required_offset:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND if self.under_min_isr else ErrorCode.NONE
        return None

    @property
    def effective_min_isr(self) -> int:
        """min.insync.replicas bounded by the replica count (Kafka 3.7+,
        KAFKA-15583): a topic asking for more in-sync replicas than it has
        replicas is held to all of them, not made unwritable."""
        return min(self.min_insync_replicas, len(self.replicas)) if self.replicas else self.min_insync_replicas

    @property
    def under_min_isr(self) -> bool:
        """The committed isr is smaller than the effective min.insync.replicas."""
        return len(self.isr) < self.effective_min_isr

    def check_leader_epoch(self, current_leader_epoch: int, *, allow_follower: bool = False) -> int:
        """KIP-320: a client that names an epoch must name ours (and we must lead, or,
        for a consumer allowed to read from followers (KIP-392), follow)."""
        if not self.is_leader and not (allow_follower and self.role is Role.FOLLOWER):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.NONE
        return ErrorCode.FENCED_LEADER_EPOCH if current_leader_epoch < self.leader_epoch else ErrorCode.UNKNOWN_LEADER_EPOCH

    def consumer_read(
        self, fetch_offset: int, current_leader_epoch: int, *, allow_follower: bool = False
    ) -> tuple[int, int]:
        """Read visibility of a consumer fetch: (error_code, offset to read up to).

        Consumers see only offsets below the high watermark; a fetch offset
        outside [log_start_offset, log_end_offset] is OFFSET_OUT_OF_RANGE. An
        upper bound equal to the fetch offset means "nothing to read yet".
        A follower serves consumers that may read from followers (Fetch v11+,
        KIP-392) the same way, up to its own high watermark.
        """
        error = self.check_leader_epoch(current_leader_epoch, allow_follower=allow_follower)
        if error != ErrorCode.NONE:
            return error, fetch_offset
        if fetch_offset < self.log_start_offset or fetch_offset > self.log_end_offset:
            return ErrorCode.OFFSET_OUT_OF_RANGE, fetch_offset
        return ErrorCode.NONE, max(fetch_offset, self.high_watermark)

    def list_offsets(self, timestamp: int, current_leader_epoch: int) -> tuple[int, int | None]:
        """ListOffsets: (error_code, offset) for the special timestamps (KIP-79,
        KIP-734, KIP-405); offset None: look the timestamp up in the log and
        answer it only if `is_visible`."""
        error = self.check_leader_epoch(current_leader_epoch)
        if error != ErrorCode.NONE:
            return error, UNKNOWN_OFFSET
        if timestamp == LATEST_TIMESTAMP:
            return ErrorCode.NONE, self.high_watermark
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return ErrorCode.NONE, self.log_start_offset
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return ErrorCode.NONE, UNKNOWN_OFFSET  # nothing is tiered
        return ErrorCode.NONE, None

    def preferred_read_replica(self, fetch_offset: int, client_rack: str, racks: dict[int, str | None], now_ms: int) -> int:
        """KIP-392's RackAwareReplicaSelector, decided on the leader: the replica a
        consumer in `client_rack` should fetch from, or -1 for this leader itself.

        Candidates are the leader and the followers that hold `fetch_offset` and
        were caught up within replica_lag_time_max_ms; among those in the
        client's rack the leader wins, else the follower with the largest log
        end offset (then the most recently caught up). No rack, no candidate in
        it: the leader.
        """
        if not self.is_leader or not client_rack or fetch_offset < self.log_start_offset:
            return -1
        if racks.get(self.replica_id) == client_rack:
            return -1
        best: tuple[int, int, int] | None = None
        for r, state in self.followers.items():
            if racks.get(r) != client_rack or state.log_end_offset < fetch_offset:
                continue
            if now_ms - state.last_caught_up_time_ms > self.replica_lag_time_max_ms:
                continue
            key = (state.log_end_offset, state.last_caught_up_time_ms, -r)
            if best is None or key > best:
                best = key
        return -best[2] if best is not None else -1

    def is_visible(self, offset: int) -> bool:
        """Consumers (read_uncommitted; LSO = HW without transactions) see offsets below the HW."""
        return offset < self.high_watermark

    def delete_records(self, offset: int) -> tuple[int, int]:
        """DeleteRecords: (error_code, the log start offset to move to); -1 = the high watermark.

        Only the leader moves the log start offset, and never past the high
        watermark: what consumers cannot read yet is not theirs to delete.
        """
        if not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, UNKNOWN_OFFSET
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            return ErrorCode.OFFSET_OUT_OF_RANGE, self.log_start_offset
        return ErrorCode.NONE, max(offset, self.log_start_offset)

    # ------------------------------------------------------------ step

    def step(self, event: Event, now_ms: int) -> list[Effect]:
        out: list[Effect] = []
        match event:
            case ClientProduce():
                self._on_client_produce(event, out)
            case LogAppended():
                self._on_log_appended(event, now_ms, out)
            case FetchFromFollower():
                self._on_follower_fetch(event, now_ms, out)
            case Tick():
                self._on_tick(now_ms, out)
            case BecomeLeader():
                self._on_become_leader(event, now_ms, out)
            case BecomeFollower():
                self._on_become_follower(event, now_ms, out)
            case FollowerAppended():
                self._on_follower_appended(event, now_ms, out)
            case FollowerTruncated():
                self._on_follower_truncated(event, now_ms, out)
            case LogStartOffsetAdvanced():
                self._on_log_start_offset_advanced(event)
            case AlterPartitionResponse():
                self._on_alter_partition_response(event, now_ms, out)
            case FollowerFetchDue():
                self._on_follower_fetch_due(event, now_ms, out)
            case FetchResponseReceived():
                self._on_fetch_response(event, now_ms, out)
            case EpochEndOffsetReceived():
                self._on_epoch_end_offset(event, now_ms, out)
            case StopReplica():
                self._on_stop_replica(event, now_ms, out)
            case _:
                raise TypeError(f"not a replica event: {event!r}")
        if self.alter_partition_resend_due_ms is not None and now_ms >= self.alter_partition_resend_due_ms:
            self._resend_alter_partition(out)
        return out

    # ------------------------------------------------------------ transitions

    def _emit(self, out: list[Effect], event_type: type[trace.TraceEvent], now_ms: int, **fields) -> None:
        # Building events costs more than the transition itself; a driver
        # without a trace sink turns `tracing` off.
        if self.tracing:
            out.append(
                Emit(
                    event_type(
                        time_ms=now_ms, replica=self.replica_id, topic=self.topic, partition=self.partition, **fields
                    )
                )
            )

    def _on_become_leader(self, e: BecomeLeader, now_ms: int, out: list[Effect]) -> None:
        if e.leader_epoch < self.leader_epoch:
            raise InvariantViolation(f"leader epoch {e.leader_epoch} older than current {self.leader_epoch}")
        if self.replica_id not in e.isr:
            raise InvariantViolation(f"replica {self.replica_id} asked to lead but not in isr {sorted(e.isr)}")
        if self.role is Role.LEADER and e.leader_epoch == self.leader_epoch:
            return self._on_same_term_registration(e, now_ms, out)
        self.role = Role.LEADER
        self._drop_alter_partition()
        self.leader = self.replica_id
        self.leader_epoch = e.leader_epoch
        self.partition_epoch = e.partition_epoch
        self.replicas = tuple(e.replicas)
        self.isr = frozenset(e.isr)
        self.log_start_offset = e.log_start_offset
        self.log_end_offset = e.log_end_offset
        self.high_watermark = max(min(e.high_watermark, e.log_end_offset), e.log_start_offset)
        self.leader_epoch_start_offset = e.log_end_offset
        # Followers start unknown; isr members get a full lag window to fetch
        # before they can be shrunk out, others start "never caught up".
        self.followers = {
            r: ReplicaState(r, last_caught_up_time_ms=now_ms if r in self.isr else 0)
            for r in self.replicas
            if r != self.replica_id
        }
        out.append(AssignLeaderEpoch(self.leader_epoch, self.log_end_offset))
        self._emit_become_leader(now_ms, out)
        self._maybe_advance_high_watermark(now_ms, out)

    def _on_stop_replica(self, e: StopReplica, now_ms: int, out: list[Effect]) -> None:
        """spec/Replication.tla's StopReplica: no role, nothing pending; the driver deletes the log."""
        self._drop_alter_partition()
        self.role = Role.NONE
        self._emit(out, reassign_trace.StopReplica, now_ms, leader_epoch=e.leader_epoch,
                   partition_epoch=e.partition_epoch, log_end_offset=self.log_end_offset)

    def _emit_become_leader(self, now_ms: int, out: list[Effect]) -> None:
        self._emit(
            out,
            trace.BecomeLeader,
            now_ms,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            isr=self.isr,
            replicas=self.replicas,
            log_end_offset=self.log_end_offset,
            high_watermark=self.high_watermark,
        )

    def _on_same_term_registration(self, e: BecomeLeader, now_ms: int, out: list[Effect]) -> None:
        """A registration of our own leader epoch: a change of isr or replicas the
        controller committed (it fenced a follower, a reassignment moved on).

        Kafka keeps the term's state (followers' offsets, the epoch start) and
        takes the new assignment and committed isr, which replaces any isr
        change of ours still in flight (makeLeader -> updateAssignmentAndIsr);
        its late answer is then stale. That is the spec's BecomeLeader of the
        same leader epoch (remote offsets kept, alter_partition' = None), so it
        is traced as one. An older partition_epoch is metadata that lags our own
        AlterPartition response: taking its isr would shrink the isr behind the
        controller's back (Kafka's makeLeader skips it the same way). The same
        partition_epoch changes nothing: no step.
        """
        if e.partition_epoch < self.partition_epoch:
            return
        self.replicas = tuple(e.replicas)
        self.followers = {
            r: self.followers.get(r) or ReplicaState(r, last_caught_up_time_ms=now_ms if r in e.isr else 0)
            for r in self.replicas
            if r != self.replica_id
        }
        if e.partition_epoch == self.partition_epoch:
            return
        self.partition_epoch = e.partition_epoch
        self.isr = frozenset(e.isr)
        self._drop_alter_partition()
        self._emit_become_leader(now_ms, out)
        # A smaller isr may let the high watermark move (Kafka's makeLeader
        # tries to increment it too); the spec takes that as its own step.
        self._maybe_advance_high_watermark(now_ms, out)

    def _on_become_follower(self, e: BecomeFollower, now_ms: int, out: list[Effect]) -> None:
        if e.leader_epoch < self.leader_epoch:
            raise InvariantViolation(f"leader epoch {e.leader_epoch} older than current {self.leader_epoch}")
        self.role = Role.FOLLOWER
        self._drop_alter_partition()
        self.leader = e.leader
        self.leader_epoch = e.leader_epoch
        self.partition_epoch = e.partition_epoch
        self.replicas = tuple(e.replicas)
        self.isr = frozenset(e.isr)
        self.log_start_offset = e.log_start_offset
        self.log_end_offset = e.log_end_offset
        self.high_watermark = min(e.high_watermark, e.log_end_offset)
        self.followers = {}
        self._emit(
            out,
            trace.BecomeFollower,
            now_ms,
            leader=self.leader,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            isr=self.isr,
            replicas=self.replicas,
            log_end_offset=self.log_end_offset,
            high_watermark=self.high_watermark,
        )
        self._start_following(e.last_fetched_epoch, e.truncate_on_fetch, now_ms, out)

    def _on_client_produce(self, e: ClientProduce, out: list[Effect]) -> None:
        if e.min_insync_replicas is not None:
            self.min_insync_replicas = max(1, e.min_insync_replicas)
        if e.acks not in (0, 1, -1):
            out.append(ProduceResult(e.request_id, ErrorCode.INVALID_REQUIRED_ACKS))
        elif not self.is_leader:
            out.append(ProduceResult(e.request_id, ErrorCode.NOT_LEADER_OR_FOLLOWER))
        elif e.acks == -1 and self.under_min_isr and not (_m.ACTIVE and _m.on("acks_all_ignores_min_isr")):
            # Refused before the append: nothing of it reaches the log.
            out.append(ProduceResult(e.request_id, ErrorCode.NOT_ENOUGH_REPLICAS))
        else:
            out.append(AppendToLog(e.request_id, self.leader_epoch, e.acks))

    def _on_log_appended(self, e: LogAppended, now_ms: int, out: list[Effect]) -> None:
        if not self.is_leader:
            raise InvariantViolation("LogAppended on a replica that is not the leader")
        if e.log_end_offset < self.log_end_offset:
            raise InvariantViolation(f"log end offset went back from {self.log_end_offset} to {e.log_end_offset}")
        if e.log_end_offset > self.log_end_offset:
            # A duplicate (idempotent retry) leaves the log untouched: no action.
            self.log_end_offset = e.log_end_offset
            self._emit(
                out,
                trace.LeaderAppend,
                now_ms,
                leader_epoch=self.leader_epoch,
                first_offset=e.first_offset,
                last_offset=e.last_offset,
                log_end_offset=self.log_end_offset,
                high_watermark=self.high_watermark,
                acks=e.acks,
            )
            out.append(LogEndOffsetAdvanced(self.log_end_offset))
            self._maybe_advance_high_watermark(now_ms, out)
        if e.acks == -1:
            error = self.check_produce_completion(e.last_offset + 1)
            if error is None:
                out.append(DelayProduce(e.request_id, e.last_offset + 1))
            else:
                out.append(ProduceResult(e.request_id, error))
        else:
            out.append(ProduceResult(e.request_id, ErrorCode.NONE))

    def _on_follower_fetch(self, e: FetchFromFollower, now_ms: int, out: list[Effect]) -> None:
        def reject(code: int) -> None:
            out.append(RespondFollowerFetch(e.replica_id, code, self.high_watermark, self.log_start_offset))

        if not self.is_leader or e.replica_id not in self.followers:
            return reject(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if e.current_leader_epoch != NO_EPOCH and not (_m.ACTIVE and _m.on("skip_fetch_epoch_check")):
            if e.current_leader_epoch < self.leader_epoch:
                return reject(ErrorCode.FENCED_LEADER_EPOCH)
            if e.current_leader_epoch > self.leader_epoch:
                return reject(ErrorCode.UNKNOWN_LEADER_EPOCH)
        if e.last_fetched_epoch != NO_EPOCH and e.epoch_end_offset is not None and not (_m.ACTIVE and _m.on("skip_diverging_check")):
            end_epoch, end_offset = e.epoch_end_offset
            if end_epoch == NO_EPOCH or end_offset == UNKNOWN_OFFSET:
                # No epoch this old here: a "diverging epoch" of NO_EPOCH would read as
                # no divergence and the follower would append over its own older log.
                # Kafka answers OFFSET_OUT_OF_RANGE; the follower keeps its HW and refetches.
                # The spec's leader answers the same fetch with what its epoch lookup
                # finds for an epoch older than all it knows (EndOffsetForEpoch: epoch
                # -1, end offset 0), a diverging answer the follower truncates on: the
                # step is traced as that LeaderHandleFetch.
                self._emit_handle_fetch(e, now_ms, out, UNKNOWN_OFFSET, NO_EPOCH, 0)
                return reject(ErrorCode.OFFSET_OUT_OF_RANGE)
            if end_epoch != e.last_fetched_epoch or end_offset < e.fetch_offset:
                # KIP-320: the follower's log diverges; it truncates to the
                # end of the largest common epoch and fetches again.
                self._emit_handle_fetch(e, now_ms, out, UNKNOWN_OFFSET, end_epoch, end_offset)
                out.append(
                    RespondFollowerFetch(
                        e.replica_id, ErrorCode.NONE, self.high_watermark, self.log_start_offset, end_epoch, end_offset
                    )
                )
                return None
        if e.fetch_offset > self.log_end_offset or e.fetch_offset < self.log_start_offset:
            return reject(ErrorCode.OFFSET_OUT_OF_RANGE)
        if e.broker_epoch != NO_BROKER_EPOCH and e.registered_broker_epoch > e.broker_epoch:
            # KIP-903: a fetch of an earlier incarnation of the follower (it was
            # delayed, the broker restarted and registered again since): its
            # offset says nothing of the log the new incarnation holds. Kafka
            # refuses the fetch-state update (NOT_LEADER_OR_FOLLOWER). A leader
            # that has not applied the new registration yet takes it; the
            # controller's check of the epoch (ExpandIsr sends it) is the net.
            return reject(ErrorCode.NOT_LEADER_OR_FOLLOWER)

        state = self.followers[e.replica_id]
        if e.fetch_offset >= self.log_end_offset:
            state.last_caught_up_time_ms = now_ms
        elif e.fetch_offset >= state.last_fetch_leader_log_end_offset:
            state.last_caught_up_time_ms = max(state.last_caught_up_time_ms, state.last_fetch_time_ms)
        state.last_fetch_leader_log_end_offset = self.log_end_offset
        state.last_fetch_time_ms = now_ms
        state.log_end_offset = e.fetch_offset
        state.broker_epoch = e.broker_epoch
        self._emit_handle_fetch(e, now_ms, out, state.log_end_offset, NO_EPOCH, UNKNOWN_OFFSET)

        if (
            self.pending_isr is None  # one AlterPartition in flight at a time
            and e.replica_id not in self.isr
            and (state.log_end_offset >= self.high_watermark or (_m.ACTIVE and _m.on("expand_isr_early")))
            and state.log_end_offset >= self.leader_epoch_start_offset
            and self._isr_eligible(state, e)
        ):
            self._change_isr(self.isr | {e.replica_id}, now_ms, out, added=e.replica_id)
        self._maybe_advance_high_watermark(now_ms, out)
        out.append(RespondFollowerFetch(e.replica_id, ErrorCode.NONE, self.high_watermark, self.log_start_offset))
        return None

    @staticmethod
    def _isr_eligible(state: ReplicaState, e: FetchFromFollower) -> bool:
        """Kafka's isReplicaIsrEligible: the follower's broker may join (KIP-841)
        and the fetch that brought it here is of its registered incarnation
        (KIP-903); an epoch not sent (old Fetch versions) or not known is not
        compared. The controller checks the same again when it commits."""
        if not e.isr_eligible:
            return False
        return NO_BROKER_EPOCH in (state.broker_epoch, e.registered_broker_epoch) or (
            state.broker_epoch == e.registered_broker_epoch
        )

    def _emit_handle_fetch(
        self, e: FetchFromFollower, now_ms: int, out: list[Effect], follower_leo: int, d_epoch: int, d_offset: int
    ) -> None:
        self._emit(
            out,
            trace.LeaderHandleFetch,
            now_ms,
            leader_epoch=self.leader_epoch,
            follower=e.replica_id,
            fetch_offset=e.fetch_offset,
            last_fetched_epoch=e.last_fetched_epoch,
            remote_log_end_offset=follower_leo,
            diverging_epoch=d_epoch,
            diverging_end_offset=d_offset,
            broker_epoch=e.broker_epoch,
            log_end_offset=self.log_end_offset,
            high_watermark=self.high_watermark,
        )

    def _on_tick(self, now_ms: int, out: list[Effect]) -> None:
        if not self.is_leader or self.pending_isr is not None:
            return
        lagging = frozenset(
            r
            for r in self.isr
            if r != self.replica_id
            and self.followers[r].log_end_offset != self.log_end_offset
            and now_ms - self.followers[r].last_caught_up_time_ms > self.replica_lag_time_max_ms
        )
        if lagging:
            self._change_isr(self.isr - lagging, now_ms, out, removed=lagging)

    def _change_isr(
        self,
        new_isr: frozenset[int],
        now_ms: int,
        out: list[Effect],
        *,
        added: int | None = None,
        removed: frozenset[int] = frozenset(),
    ) -> None:
        """Propose `new_isr` to the controller; nothing changes until it commits (KIP-497)."""
        if self.replica_id not in new_isr:
            raise InvariantViolation("the leader must stay in its isr")
        self.pending_isr = new_isr
        common = {
            "leader_epoch": self.leader_epoch,
            "partition_epoch": self.partition_epoch,
            "isr": new_isr,
            "high_watermark": self.high_watermark,
        }
        if added is not None:
            self._emit(out, trace.ExpandIsr, now_ms, **common, added=added,
                       broker_epoch=self.followers[added].broker_epoch)
        else:
            self._emit(out, trace.ShrinkIsr, now_ms, **common, removed=removed)
        # KIP-903: each member with the epoch of the incarnation whose fetch the
        # leader counts (the spec's remote_broker_epoch; SendAlterPartition).
        broker_epochs = tuple(
            (r, self.followers[r].broker_epoch if r in self.followers else NO_BROKER_EPOCH) for r in sorted(new_isr)
        )
        self.alter_partition_sent = AlterPartition(self.leader_epoch, self.partition_epoch, new_isr, broker_epochs)
        out.append(self.alter_partition_sent)

    def _maximal_isr(self) -> frozenset[int]:
        if _m.ACTIVE and _m.on("hw_committed_isr_only"):
            return self.isr
        return self.isr | self.pending_isr if self.pending_isr is not None else self.isr

    def _on_alter_partition_response(self, e: AlterPartitionResponse, now_ms: int, out: list[Effect]) -> None:
        sent = self.alter_partition_sent
        if sent is None or (e.request is not None and e.request != sent):
            # Not the answer to the request in flight: one a BecomeLeader or
            # BecomeFollower superseded, or an earlier send. Kafka ignores it.
            return
        self.alter_partition_sent, self.alter_partition_resend_due_ms = None, None
        code = e.error_code
        if code == ErrorCode.NONE:
            if self.is_leader and e.leader_epoch == self.leader_epoch and e.partition_epoch > self.partition_epoch:
                self.isr = frozenset(e.isr)
                self.partition_epoch = e.partition_epoch
            self.pending_isr = None
        elif code in _ALTER_PARTITION_NOT_APPLIED:
            self.pending_isr = None
        elif code not in _ALTER_PARTITION_AWAIT_METADATA:
            # The change may be committed or not: keep counting the proposed isr
            # and ask again after the backoff (Kafka's AlterPartitionManager
            # resends; its channel waits retry.backoff.ms between tries).
            self.alter_partition_sent = sent
            self.alter_partition_resend_due_ms = now_ms + min(
                ALTER_PARTITION_BACKOFF_MS << min(self.alter_partition_failures, 16), ALTER_PARTITION_MAX_BACKOFF_MS)
            self.alter_partition_failures += 1
        if self.alter_partition_resend_due_ms is None:
            self.alter_partition_failures = 0
        self._emit(
            out,
            trace.HandleAlterPartitionResponse,
            now_ms,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            isr=self.isr,
            error_code=code,
            high_watermark=self.high_watermark,
        )
        if self.is_leader:
            self._maybe_advance_high_watermark(now_ms, out)

    def _resend_alter_partition(self, out: list[Effect]) -> None:
        """The backoff after a failed AlterPartition has passed: the same request again."""
        self.alter_partition_resend_due_ms = None
        if self.alter_partition_sent is not None and self.is_leader:
            out.append(self.alter_partition_sent)

    def _drop_alter_partition(self) -> None:
        """Metadata replaced the isr change (BecomeLeader, BecomeFollower): nothing is
        pending, in flight or to be resent any more; a late answer is stale."""
        self.pending_isr, self.alter_partition_sent = None, None
        self.alter_partition_resend_due_ms, self.alter_partition_failures = None, 0

    def _maybe_advance_high_watermark(self, now_ms: int, out: list[Effect]) -> None:
        # KAFKA-15583 (Kafka 3.7+, the spec's AdvanceHighWatermark): not while
        # the committed isr is below the effective min.insync.replicas. Records
        # that fewer replicas hold must not become visible, acks=1 ones
        # included: a leader left alone in its isr would otherwise expose
        # records that die with it. Found by trace validation of a simulator
        # seed (crashes only) against spec/Replication.tla.
        if self.under_min_isr and not (_m.ACTIVE and _m.on("hw_ignores_min_isr")):
            return
        # Over the maximal isr (KIP-497): a proposed member counts at once, a
        # member proposed for removal keeps counting until the removal commits.
        candidate = self.log_end_offset
        for r in self._maximal_isr():
            if r != self.replica_id:
                leo = self.followers[r].log_end_offset
                if leo == UNKNOWN_OFFSET:
                    return  # an isr member that has not fetched yet holds the HW
                candidate = max(candidate, leo) if _m.ACTIVE and _m.on("hw_max") else min(candidate, leo)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            if self.high_watermark > self.log_end_offset:
                raise InvariantViolation("high watermark above the leader's log end offset")
            self._emit(
                out,
                trace.AdvanceHighWatermark,
                now_ms,
                leader_epoch=self.leader_epoch,
                isr=self.isr,
                log_end_offset=self.log_end_offset,
                high_watermark=self.high_watermark,
            )
            out.append(HighWatermarkAdvanced(self.high_watermark))

    def _on_follower_appended(self, e: FollowerAppended, now_ms: int, out: list[Effect]) -> None:
        if self.role is not Role.FOLLOWER:
            raise InvariantViolation("FollowerAppended on a replica that is not a follower")
        if e.log_end_offset < self.log_end_offset:
            raise InvariantViolation(f"follower log end offset went back from {self.log_end_offset} to {e.log_end_offset}")
        moved = e.log_end_offset > self.log_end_offset
        if moved and e.last_fetched_epoch != NO_EPOCH:
            self.last_fetched_epoch = e.last_fetched_epoch
        self.log_end_offset = e.log_end_offset
        high_watermark = min(e.leader_high_watermark, self.log_end_offset)
        if _m.ACTIVE and _m.on("follower_hw_from_leader"):
            high_watermark = e.leader_high_watermark
        if not moved and high_watermark == self.high_watermark:
            if e.leader_log_start_offset >= 0:
                self._follow_log_start_offset(e.leader_log_start_offset, out)
            return  # an empty answer changed nothing: no action
        self.high_watermark = high_watermark
        if e.leader_log_start_offset >= 0:
            self._follow_log_start_offset(e.leader_log_start_offset, out)
        self._emit(
            out,
            trace.FollowerAppend,
            now_ms,
            leader=self.leader,
            leader_epoch=self.leader_epoch,
            first_offset=e.first_offset,
            last_offset=e.last_offset,
            log_end_offset=self.log_end_offset,
            high_watermark=self.high_watermark,
        )

    def _on_follower_truncated(self, e: FollowerTruncated, now_ms: int, out: list[Effect]) -> None:
        if self.role is not Role.FOLLOWER:
            raise InvariantViolation("FollowerTruncated on a replica that is not a follower")
        self.log_end_offset = e.log_end_offset
        self.last_fetched_epoch = e.last_fetched_epoch
        if e.log_start_offset is not None:
            # TruncateFullyAndStartAt: an empty log at the leader's start.
            self.log_start_offset = e.log_start_offset
            self.high_watermark = max(self.high_watermark, e.log_start_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self._emit(
            out,
            trace.TruncateToEpochEndOffset,
            now_ms,
            leader_epoch=self.leader_epoch,
            log_end_offset=self.log_end_offset,
            high_watermark=self.high_watermark,
        )

    def _on_log_start_offset_advanced(self, e: LogStartOffsetAdvanced) -> None:
        if e.log_start_offset > self.log_start_offset:
            self.log_start_offset = e.log_start_offset
            if self.log_end_offset < self.log_start_offset:
                # Kafka lets DeleteRecords and retention never pass the log
                # end offset; a log truncated fully starts anew there.
                self.log_end_offset = self.log_start_offset
            if self.high_watermark < self.log_start_offset:
                self.high_watermark = self.log_start_offset


# ---------------------------------------------------------------- delayed fetch completion


@dataclass(frozen=True, slots=True)
class ParkedFetch:
    """What a parked Fetch saw of one partition when it was parked.

    `visible_bytes` is the driver's count of bytes that had become readable
    by consumers (below the high watermark) at that moment; the core tracks
    offsets, not bytes, so the driver hands the count in and back.
    """

    fetch_offset: int
    # A follower's fetch (replica_id >= 0): it reads up to the log end offset.
    replica_fetch: bool
    was_leader: bool
    leader_epoch: int
    # The epoch the fetch named (NO_EPOCH: none, KIP-320).
    current_leader_epoch: int
    visible_bytes: int


def parked_fetch_progress(parked: ParkedFetch, replica: PartitionReplica | None, visible_bytes: int,
                          leader_throttled: bool = False) -> int | None:
    """One partition of Kafka's DelayedFetch.tryComplete: None = answer now, else
    the bytes that became readable since the fetch was parked.

    Answer now when the partition is gone or its leadership moved (the read
    again says NOT_LEADER_OR_FOLLOWER or UNKNOWN_TOPIC_OR_PARTITION), when a
    fetch that named a leader epoch sees another one (the read again fences
    it), when a follower's fetch finds the log end past its fetch offset
    (followers read up to it, and replica.fetch.min.bytes is 1), or when a
    consumer reading from this follower (KIP-392) finds its high watermark
    past the fetch offset.

    A follower's partition that the leader's replication quota throttles
    (KIP-73, `leader_throttled`, the driver's reading of the quota now) counts
    nothing: its records would be left out of the answer anyway, so they must
    not end the wait (Kafka's tryComplete skips a throttled partition's bytes).
    Counting its log end made a throttled follower's every fetch return at
    once, empty, and the follower fetch again at once: a busy loop for as long
    as the quota held it back.
    """
    if replica is None or replica.is_leader != parked.was_leader:
        return None
    if parked.current_leader_epoch != NO_EPOCH and replica.leader_epoch != parked.leader_epoch:
        return None
    if parked.replica_fetch:
        if leader_throttled:
            return 0
        return None if replica.log_end_offset > parked.fetch_offset else 0
    if not parked.was_leader:
        return None if replica.high_watermark > parked.fetch_offset else 0
    return visible_bytes - parked.visible_bytes


def fetch_answered_at_once(max_wait_ms: int, bytes_read: int, min_bytes: int, *, partitions: int,
                           error: bool, diverging: bool, preferred_read_replica: bool) -> bool:
    """Kafka's ReplicaManager.fetchMessages: whether a Fetch is answered now, not parked.

    Now when the fetcher does not wait, names no partition, the first read
    found min_bytes, or any partition has an error, a diverging epoch
    (KIP-320: the follower must truncate before it fetches anything, and
    parking the answer would only make it wait and log the answer twice) or
    a preferred read replica (KIP-392: the consumer goes elsewhere).
    """
    return (max_wait_ms <= 0 or partitions == 0 or bytes_read >= min_bytes or error or diverging
            or preferred_read_replica)


def delayed_fetch_complete(
    parked: list[tuple], bytes_read: int, min_bytes: int
) -> bool:
    """Kafka's DelayedFetch.tryComplete: whether a parked Fetch is answered now.

    `parked` holds, per partition, what the fetch saw at park, the replica
    core now (None when the partition is gone), the driver's count of
    visible bytes now and, optionally, whether the leader's replication
    quota throttles it for this follower now (default False); `bytes_read`
    is what the first read found. The deadline (max_wait_ms) is the
    purgatory's.
    """
    arrived = bytes_read
    for seen, replica, visible_bytes, *throttled in parked:
        progress = parked_fetch_progress(seen, replica, visible_bytes, bool(throttled and throttled[0]))
        if progress is None:
            return True
        arrived += progress
    return arrived >= min_bytes


# ---------------------------------------------------------------- retention


def admit_retention_log_start(replica: PartitionReplica, proposed: int) -> int | None:
    """Retention proposes a new log start offset (the retention planner's choice of
    whole segments); the core admits it, or None: the Log does not move.

    As for DeleteRecords (`delete_records`), the core owns the log start
    offset: it moves forward only, and never past the high watermark, since
    what consumers cannot read yet (or what a new leader may still need to
    commit) is not retention's to delete. Leader and follower alike apply it
    to their own log (Kafka runs retention on every replica).
    """
    if proposed <= replica.log_start_offset or proposed > replica.high_watermark:
        return None
    return proposed

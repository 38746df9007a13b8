"""The pure KRaft quorum core: one node's part in the controller quorum.

Theory of operation
-------------------
KRaft (KIP-595) is Raft with pull replication: the leader never pushes
records, followers and observers Fetch the metadata partition
`__cluster_metadata-0` from it, and the leader learns from each Fetch how far
that voter got. `QuorumCore` is the state of one node (spec/KRaft.tla's
per-voter variables: `leader_epoch`, `voted_for`, `leader_id`, `state`,
`high_watermark`, `end_offsets`, `votes_granted`, and the log position) as a
sans-IO state machine:

    effects = core.step(event, now_ms)

It reads no clock, touches no file, draws no random number (the election
jitter is a hash of a seed the driver chose, the node id and the epoch) and
sends nothing. Effects are carried out by the driver in list order. Two
orderings matter and are guaranteed by the list: `PersistQuorumState`
(write and fsync `quorum-state`) comes before any `Send` of the same step,
so a vote is durable before the candidate can count it, and a node that
crashes after granting cannot grant again in that epoch; and the log effects
(`AppendAsLeader`, `AppendAsFollower`, `TruncateTo`) come before the Send
that reports the new position (the driver fsyncs the log on append).

The core keeps the log only as offsets and epochs (log_end_offset and the
leader-epoch cache: the start offset of every epoch in the log). The record
bytes live in the driver's kref.storage Log; a leader answering a Fetch says
"records from fetch_offset" (`SendFetchResponse`) and the driver reads them.

Transitions and the spec actions they implement (trace events of the same
name, kref/trace/kraft.py):

- Tick, election timer expired      -> PreVote (KIP-996, `pre_vote` on, as in
  Kafka 4): Prospective in its own epoch, nothing persisted; it asks the
  voters with Vote(pre_vote=true) whether they would vote for it, and keeps
  fetching from the leader it knew (an answer from it makes it a Follower
  again: BeginQuorumEpoch). With a majority of pre-votes, or at once with
  `pre_vote` off -> RequestVote (Candidate, epoch + 1, votes for itself; a
  voter only). A follower's timer is controller.quorum.fetch.timeout.ms
  without a successful Fetch response.
- VoteRequest with pre_vote         -> GrantPreVote when this voter follows
  no leader and leads nothing (Unattached, Voted, Candidate, Prospective,
  Resigned) and the prospective's log is at least as up to date; a refusal
  otherwise. No state of its own changes (a higher epoch in the request
  first -> BecomeUnattached, as with any RPC). So one voter that lost touch
  with a leader everyone else still follows cannot raise the epoch.
- VoteRequest                       -> GrantVote (at most one per epoch, only
  for a voter whose log is at least as up to date: last epoch first, then
  end offset) or a refusal; a higher epoch first -> BecomeUnattached.
- VoteResponse with a majority      -> BecomeActiveController: Leader,
  appends the LeaderChange control record of its epoch, BeginQuorumEpoch to
  the other voters.
- BeginQuorumEpochRequest           -> BeginQuorumEpoch (Follower of its sender).
- FetchRequest (leader)             -> the diverging-epoch check; records
  from fetch_offset and the HW; the voter's end offset -> AdvanceHighWatermark
  (majority offset, only once it lies in the leader's own epoch). A Fetch
  with a max wait, at the log end, that did not move the HW, is parked
  (KafkaRaftClient's fetch purgatory): after every step the core answers a
  parked Fetch once records are appended past it, the HW moves, its max wait
  ends (Tick), or this node stops leading its epoch. Parking adds no trace
  event: the spec sees the Fetch when it is received and its answer when the
  fetcher gets it, as before.
- FetchResponse (follower/observer) -> FetchFromLeader or
  TruncateToEpochEndOffset; a higher epoch -> BecomeUnattached.
- Shutdown (leader)                 -> Resigned, EndQuorumEpoch to the voters
  (not in the spec model). A leader that has not heard a Fetch from a
  majority for 1.5 x fetch timeout (check quorum) resigns too: a paused,
  partitioned or outvoted leader stops calling itself one.
- EndQuorumEpochRequest             -> the follower's election timer is cut
  short, by its place in the preferred successors.

Snapshots (KIP-630; files and policy in kref/controller/snapshot.py): every
node snapshots its applied image at a committed offset on its own and tells
the core (SnapshotCreated); the driver's retention asks to move the log start
up to the latest snapshot (AdvanceLogStart), and the core drops the older
snapshots (DeleteSnapshot). The core decides the two protocol questions:

- FetchRequest below the leader's log start (or at it, in another epoch
  than the snapshot there) -> answered with the latest snapshot's id
  (Fetch's SnapshotId) instead of records;
- a follower told so fetches that snapshot with FetchSnapshot, chunk by
  chunk (position, bounded size; AppendSnapshotChunk), and when the chunks
  reach the snapshot's size asks the driver to InstallSnapshot (validate,
  freeze, truncate the log fully to the snapshot's end offset, load the
  image); SnapshotInstalled (or SnapshotFetchFailed) resumes Fetch after it.

Each is a spec/KRaft.tla action with a trace event of its name: a new
latest snapshot (CreateSnapshot), the log start moved (AdvanceLogStart), a
fetched snapshot installed (InstallSnapshot, logged once the driver
reports SnapshotInstalled).

Observers (brokers, process.roles without controller) run the same core
with `node_id not in voters`: they never vote or stand, fetch from the leader
(or, not knowing one, from the voters in turn until one names the leader),
and are not counted for the high watermark.

Invariants kept here (a violation is a bug and raises InvariantViolation):
two leaders are never seen in one epoch, the high watermark never passes the
log end offset, and a follower never truncates below its high watermark.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kref import mutations as _m
from kref.protocol.errors import ErrorCode
from kref.trace import kraft as trace

NO_ID = -1  # the spec's Nil: no vote cast, no known leader
NO_EPOCH = -1


class State(enum.Enum):
    UNATTACHED = "Unattached"
    VOTED = "Voted"  # the spec's Unattached with voted_for set
    PROSPECTIVE = "Prospective"  # KIP-996: asking for pre-votes, epoch not bumped
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"

    @property
    def spec_name(self) -> str:
        return "Unattached" if self is State.VOTED else self.value


class InvariantViolation(AssertionError):
    """A transition would break one of spec/KRaft.tla's invariants: a bug, never input."""


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    node_id: int
    voters: frozenset[int]
    election_timeout_ms: int = 1000  # controller.quorum.election.timeout.ms
    fetch_timeout_ms: int = 2000  # controller.quorum.fetch.timeout.ms
    retry_backoff_ms: int = 20  # controller.quorum.retry.backoff.ms
    # After an empty Fetch response the follower waits this long before the
    # next Fetch; only without a long poll (fetch_max_wait_ms = 0).
    fetch_backoff_ms: int = 50
    # The max wait this node asks for on its Fetch (Kafka's follower sends
    # 500 ms): the leader parks a Fetch with nothing to return until records
    # are appended, the high watermark moves, or this time ends. 0: answered
    # at once, and the follower polls every fetch_backoff_ms. It must stay
    # well under fetch_timeout_ms (the follower's timer waits on the answer).
    fetch_max_wait_ms: int = 0
    # Seeds the election jitter; the driver picks it (randomly, or a test's seed).
    jitter_seed: int = 0
    # Bound on the batches one Fetch response may carry (the driver also
    # bounds bytes): a follower far behind catches up in several round trips.
    max_fetch_batches: int = 64
    # Bound on one FetchSnapshot chunk (Kafka asks for at most 8 MiB).
    max_snapshot_chunk_bytes: int = 1024 * 1024
    # spec/KRaft.tla's CheckLogUpToDate: TRUE in Kafka; False only for the
    # must-fail test that shows the randomized schedules catch a lost commit.
    check_log_up_to_date: bool = True
    # KIP-996 pre-vote (spec: PreVoteEnabled). Kafka 4 always pre-votes once
    # every voter speaks Vote v2; False: KIP-595 elections alone.
    pre_vote: bool = True

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters


# ---------------------------------------------------------------- messages
# Named and shaped after Kafka's RPC schemas (VoteRequest, ...), carrying
# only the fields the protocol decides on; the driver maps them to kio.


@dataclass(frozen=True, slots=True)
class VoteRequest:
    candidate_epoch: int  # Kafka's replica_epoch: a prospective's own, unbumped epoch
    candidate_id: int
    last_offset_epoch: int
    last_offset: int  # the candidate's log end offset
    pre_vote: bool = False  # KIP-996 (Vote v2)


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error_code: int
    leader_id: int
    leader_epoch: int
    vote_granted: bool
    # Not on the wire: the driver sets it from the request it answers.
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error_code: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error_code: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int = 0  # Fetch's MaxWaitMs: how long the leader may park it


@dataclass(frozen=True, slots=True)
class Batch:
    """One record batch of the metadata log: offsets, epoch, and the driver's bytes."""

    base_offset: int
    last_offset: int
    leader_epoch: int
    payload: object = None  # opaque to the core (record bytes, or a test's value)


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error_code: int
    leader_id: int
    leader_epoch: int
    high_watermark: int
    diverging_epoch: int = NO_EPOCH
    diverging_end_offset: int = -1
    batches: tuple[Batch, ...] = ()
    # Not a wire field: the fetch_offset of the request this answers, which
    # the driver knows from the connection; a response to any Fetch but the
    # one in flight is ignored.
    fetch_offset: int = -1
    # Fetch's SnapshotId: the fetch offset lies before the leader's log start,
    # fetch this snapshot instead (-1: none).
    snapshot_end_offset: int = -1
    snapshot_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    replica_id: int
    current_leader_epoch: int
    snapshot_end_offset: int
    snapshot_epoch: int
    position: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    error_code: int
    leader_id: int
    leader_epoch: int
    snapshot_end_offset: int
    snapshot_epoch: int
    size: int = -1
    position: int = -1
    data: bytes = b""  # the chunk at `position` (the leader's driver fills it in)


Message = (
    VoteRequest
    | VoteResponse
    | BeginQuorumEpochRequest
    | BeginQuorumEpochResponse
    | EndQuorumEpochRequest
    | EndQuorumEpochResponse
    | FetchRequest
    | FetchResponse
    | FetchSnapshotRequest
    | FetchSnapshotResponse
)


# ---------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class Received:
    """A message from node `source` arrived."""

    source: int
    message: Message


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed; timers are checked against now_ms."""


@dataclass(frozen=True, slots=True)
class Propose:
    """Append records as leader (the controller's metadata records); `payload` is the driver's."""

    payload: object
    records_count: int = 1


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Graceful shutdown: a leader resigns and sends EndQuorumEpoch."""


@dataclass(frozen=True, slots=True)
class SendFailed:
    """The driver could not reach `destination` (connection refused or timed out)."""

    destination: int


@dataclass(frozen=True, slots=True)
class SnapshotIdentified:
    """Names one snapshot by its id: (end_offset, epoch), as Kafka's OffsetAndEpoch."""

    end_offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class SnapshotCreated(SnapshotIdentified):
    """The driver wrote (durably) a snapshot of its applied image."""

    size_in_bytes: int


@dataclass(frozen=True, slots=True)
class AdvanceLogStart:
    """Retention (kref/controller/snapshot.py) would start the log here."""

    log_start_offset: int


@dataclass(frozen=True, slots=True)
class SnapshotInstalled(SnapshotIdentified):
    """The driver carried out InstallSnapshot: the log now starts at end_offset."""


@dataclass(frozen=True, slots=True)
class SnapshotFetchFailed(SnapshotIdentified):
    """The fetched snapshot did not validate; the driver removed it."""


Event = (
    Received | Tick | Propose | Shutdown | SendFailed | SnapshotCreated | AdvanceLogStart | SnapshotInstalled
    | SnapshotFetchFailed
)


# ---------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class PersistQuorumState:
    """Write and fsync quorum-state before carrying out any later effect."""

    leader_epoch: int
    voted_for: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class AppendAsLeader:
    """Append one batch at base_offset in leader_epoch (and fsync it)."""

    base_offset: int
    leader_epoch: int
    records_count: int
    payload: object
    control: bool = False  # the LeaderChange control record


@dataclass(frozen=True, slots=True)
class AppendAsFollower:
    batches: tuple[Batch, ...]


@dataclass(frozen=True, slots=True)
class TruncateTo:
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class Send:
    destination: int
    message: Message


@dataclass(frozen=True, slots=True)
class SendFetchResponse:
    """Answer a Fetch: the driver reads up to max_batches batches from from_offset.

    `parked`: this answers a Fetch the leader parked in an earlier step (the
    driver still holds that RPC open), not a request of this step."""

    destination: int
    response: FetchResponse
    from_offset: int
    max_batches: int
    parked: bool = False


@dataclass(frozen=True, slots=True)
class SendFetchSnapshotResponse:
    """Answer a FetchSnapshot: the driver reads `length` bytes of the snapshot from `position`."""

    destination: int
    response: FetchSnapshotResponse
    position: int
    length: int


@dataclass(frozen=True, slots=True)
class StartSnapshotFetch(SnapshotIdentified):
    """Create (empty) the partial file of the snapshot being fetched."""


@dataclass(frozen=True, slots=True)
class AppendSnapshotChunk(SnapshotIdentified):
    data: bytes


@dataclass(frozen=True, slots=True)
class InstallSnapshot(SnapshotIdentified):
    """Every chunk is in: validate and freeze the snapshot, truncate the log
    fully to end_offset, load the snapshot into the image; then step
    SnapshotInstalled (or SnapshotFetchFailed)."""


@dataclass(frozen=True, slots=True)
class LogStartAdvanced:
    """Move the log start offset; segments wholly below it may go."""

    log_start_offset: int


@dataclass(frozen=True, slots=True)
class DeleteSnapshot(SnapshotIdentified):
    """Remove a snapshot below the new log start."""


@dataclass(frozen=True, slots=True)
class HighWatermarkAdvanced:
    """Records below high_watermark are committed: hand them to the metadata image."""

    high_watermark: int


@dataclass(frozen=True, slots=True)
class LeaderChanged:
    """This node's view of the quorum changed (for the controller and operators)."""

    leader_id: int
    leader_epoch: int
    state: State


@dataclass(frozen=True, slots=True)
class ProposeRejected:
    """A Propose reached a node that is not the leader (or has resigned)."""

    error_code: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class Emit:
    event: trace.TraceEvent


Effect = (
    PersistQuorumState
    | AppendAsLeader
    | AppendAsFollower
    | TruncateTo
    | Send
    | SendFetchResponse
    | SendFetchSnapshotResponse
    | StartSnapshotFetch
    | AppendSnapshotChunk
    | InstallSnapshot
    | LogStartAdvanced
    | DeleteSnapshot
    | HighWatermarkAdvanced
    | LeaderChanged
    | ProposeRejected
    | Emit
)


def _mix(*values: int) -> int:
    """splitmix64 over the values: deterministic jitter without a random source."""
    x = 0x9E3779B97F4A7C15
    for v in values:
        x = (x ^ (v & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
    return x


# ---------------------------------------------------------------- state


@dataclass(frozen=True, slots=True)
class SnapshotRef:
    """A snapshot this node holds: its id (end_offset, epoch) and size."""

    end_offset: int
    epoch: int
    size_in_bytes: int


@dataclass(slots=True)
class SnapshotFetch:
    """The snapshot a follower is fetching and how far it got."""

    end_offset: int
    epoch: int
    position: int = 0
    size: int = -1
    installing: bool = False


@dataclass(frozen=True, slots=True)
class ParkedFetch:
    """A Fetch the leader holds: nothing to return yet (KafkaRaftClient's fetch purgatory)."""

    request: FetchRequest
    high_watermark: int  # the leader's, when it parked the Fetch
    deadline_ms: int


@dataclass(slots=True)
class QuorumCore:
    config: QuorumConfig
    # quorum-state (persistent)
    leader_epoch: int = 0
    voted_for: int = NO_ID
    leader_id: int = NO_ID
    # the log, as offsets: [(epoch, start_offset)] ascending, and the end
    epochs: list[tuple[int, int]] = field(default_factory=list)
    log_end_offset: int = 0
    log_start_offset: int = 0
    snapshots: list[SnapshotRef] = field(default_factory=list)  # ascending by end offset
    fetching_snapshot: SnapshotFetch | None = None
    snapshot_in_flight: tuple[int, int] | None = None  # (destination, position)
    # volatile
    state: State = State.UNATTACHED
    high_watermark: int = 0
    end_offsets: dict[int, int] = field(default_factory=dict)  # leader: voter -> fetch offset
    last_fetch_ms: dict[int, int] = field(default_factory=dict)  # leader: voter -> time of its last Fetch
    observer_offsets: dict[int, int] = field(default_factory=dict)  # leader: observer -> fetch offset
    parked_fetches: dict[int, ParkedFetch] = field(default_factory=dict)  # leader: fetcher -> its held Fetch
    told_high_watermark: dict[int, int] = field(default_factory=dict)  # leader: fetcher -> HW in its last answer
    votes_granted: set[int] = field(default_factory=set)
    election_deadline_ms: int = 0
    fetch_due_ms: int | None = None  # follower: when to send the next Fetch (None: one is in flight)
    fetch_sent_ms: int = 0
    fetch_in_flight: tuple[int, int] | None = None  # (destination, fetch_offset)
    begin_epoch_due_ms: dict[int, int] = field(default_factory=dict)  # leader: voter -> resend time
    leader_start_ms: int = 0
    epoch_start_offset: int = 0  # leader: offset of its LeaderChange record
    bootstrap_index: int = 0  # observer without a leader: which voter to ask next
    election_attempt: int = 0
    tracing: bool = True

    # ------------------------------------------------------------ construction

    @classmethod
    def restore(
        cls,
        config: QuorumConfig,
        *,
        leader_epoch: int,
        voted_for: int,
        leader_id: int,
        epochs: list[tuple[int, int]],
        log_end_offset: int,
        now_ms: int,
        tracing: bool = True,
        log_start_offset: int = 0,
        snapshots: list[SnapshotRef] | None = None,
    ) -> QuorumCore:
        """The node as it starts from quorum-state, its snapshots and its log (Kafka's QuorumState.initialize)."""
        core = cls(
            config,
            leader_epoch=leader_epoch,
            voted_for=voted_for,
            leader_id=leader_id,
            epochs=[(e, o) for e, o in epochs if o < log_end_offset],
            log_end_offset=log_end_offset,
            log_start_offset=log_start_offset,
            snapshots=sorted(snapshots or [], key=lambda s: s.end_offset),
            tracing=tracing,
        )
        # What a snapshot holds is committed (it is only ever taken below the high watermark).
        core.high_watermark = min(max((s.end_offset for s in core.snapshots), default=0), log_end_offset)
        if core.snapshots and core.snapshots[-1].epoch > leader_epoch:
            raise InvariantViolation(f"snapshot epoch {core.snapshots[-1].epoch} above quorum-state's {leader_epoch}")
        if core.epochs and core.epochs[-1][0] > leader_epoch:
            raise InvariantViolation(f"log has epoch {core.epochs[-1][0]} above quorum-state's {leader_epoch}")
        if leader_id == config.node_id:
            # Never lead an epoch twice: the log of that epoch may have been
            # cut by the crash. Wait for the election timer.
            core.state = State.RESIGNED
        elif leader_id != NO_ID:
            core.state = State.FOLLOWER
            core.fetch_due_ms = now_ms
        elif voted_for == config.node_id and config.is_voter:
            core.state = State.CANDIDATE
            core.votes_granted = {config.node_id}
        elif voted_for != NO_ID:
            core.state = State.VOTED
        core._reset_election_timer(now_ms)
        if core.state is State.UNATTACHED and not config.is_voter:
            core.fetch_due_ms = now_ms
        return core

    @classmethod
    def new(cls, config: QuorumConfig, now_ms: int, tracing: bool = True) -> QuorumCore:
        return cls.restore(
            config, leader_epoch=0, voted_for=NO_ID, leader_id=NO_ID, epochs=[], log_end_offset=0,
            now_ms=now_ms, tracing=tracing,
        )

    # ------------------------------------------------------------ queries

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def last_epoch(self) -> int:
        if self.epochs:
            return self.epochs[-1][0]
        base = self.base_snapshot()
        return base.epoch if base is not None else 0

    def base_snapshot(self) -> SnapshotRef | None:
        """The snapshot the log starts at (log_start_offset == its end offset), if any."""
        for s in self.snapshots:
            if s.end_offset == self.log_start_offset:
                return s
        return None

    def latest_snapshot(self) -> SnapshotRef | None:
        return self.snapshots[-1] if self.snapshots else None

    def is_leader(self) -> bool:
        return self.state is State.LEADER

    def majority(self) -> int:
        return len(self.config.voters) // 2 + 1

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= `epoch` in the log, its end offset): OffsetForLeaderEpoch on this log.

        Epochs wholly inside the snapshot the log starts at count as that
        snapshot's epoch ending at its end offset (Kafka's KafkaMetadataLog)."""
        found_epoch, end = NO_EPOCH, 0
        base = self.base_snapshot()
        if base is not None and epoch >= base.epoch:
            found_epoch, end = base.epoch, base.end_offset
        for i, (e, start) in enumerate(self.epochs):
            if e > epoch:
                return (found_epoch, start) if found_epoch != NO_EPOCH else (NO_EPOCH, 0)
            found_epoch = e
            end = self.epochs[i + 1][1] if i + 1 < len(self.epochs) else self.log_end_offset
        return found_epoch, end

    def epoch_at(self, offset: int) -> int:
        """Epoch of the entry at `offset` (which must be below log_end_offset)."""
        result = NO_EPOCH
        for e, start in self.epochs:
            if start > offset:
                break
            result = e
        return result

    # ------------------------------------------------------------ step

    def step(self, event: Event, now_ms: int) -> list[Effect]:
        out: list[Effect] = []
        match event:
            case Tick():
                self._on_tick(now_ms, out)
            case Received(source=source, message=message):
                self._on_message(source, message, now_ms, out)
            case Propose():
                self._on_propose(event, now_ms, out)
            case Shutdown():
                self._on_shutdown(now_ms, out)
            case SendFailed():
                self._on_send_failed(event, now_ms, out)
            case SnapshotCreated():
                self._on_snapshot_created(event, now_ms, out)
            case AdvanceLogStart():
                self._on_advance_log_start(event, now_ms, out)
            case SnapshotInstalled():
                self._on_snapshot_installed(event, now_ms, out)
            case SnapshotFetchFailed():
                self._on_snapshot_fetch_failed(event, now_ms, out)
            case _:
                raise TypeError(f"not a quorum event: {event!r}")
        if self.parked_fetches:
            self._complete_parked_fetches(now_ms, out)
        return out

    # ------------------------------------------------------------ helpers

    def _emit(self, out: list[Effect], event_type: type[trace.QuorumEvent], now_ms: int, **fields) -> None:
        if self.tracing:
            out.append(
                Emit(
                    event_type(
                        time_ms=now_ms,
                        replica=self.node_id,
                        topic=trace.METADATA_TOPIC,
                        partition=0,
                        leader_epoch=self.leader_epoch,
                        voted_for=self.voted_for,
                        leader_id=self.leader_id,
                        state=self.state.spec_name,
                        log_end_offset=self.log_end_offset,
                        last_epoch=self.last_epoch,
                        high_watermark=self.high_watermark,
                        **fields,
                    )
                )
            )

    def _persist(self, out: list[Effect]) -> None:
        out.append(PersistQuorumState(self.leader_epoch, self.voted_for, self.leader_id))

    def _announce(self, out: list[Effect]) -> None:
        out.append(LeaderChanged(self.leader_id, self.leader_epoch, self.state))

    def _reset_election_timer(self, now_ms: int) -> None:
        timeout = self.config.election_timeout_ms
        if self.state is State.FOLLOWER:
            timeout = self.config.fetch_timeout_ms
        jitter = _mix(self.config.jitter_seed, self.node_id, self.leader_epoch, self.election_attempt)
        self.election_deadline_ms = now_ms + timeout + jitter % max(1, self.config.election_timeout_ms)

    def _clear_leader_state(self) -> None:
        self.end_offsets.clear()
        self.last_fetch_ms.clear()
        self.observer_offsets.clear()
        self.told_high_watermark.clear()
        self.votes_granted.clear()
        self.begin_epoch_due_ms.clear()

    def _response_epoch_check(self, source: int, leader_id: int, leader_epoch: int, now_ms: int, out: list[Effect]) -> bool:
        """Any message naming a higher epoch moves this node to it; True if it did.

        A known leader in that epoch makes this node its follower at once
        (Kafka does the same on a response that names the leader); otherwise
        it is Unattached without a vote (the spec's BecomeUnattached).
        """
        if leader_epoch <= self.leader_epoch:
            return False
        if leader_id not in (NO_ID, self.node_id):
            self._become_follower(leader_id, leader_epoch, now_ms, out)
        else:
            self._become_unattached(leader_epoch, source, now_ms, out)
        return True

    def _become_unattached(self, epoch: int, source: int, now_ms: int, out: list[Effect]) -> None:
        self._abandon_snapshot_fetch()
        self.leader_epoch = epoch
        self.voted_for = NO_ID
        self.leader_id = NO_ID
        self.state = State.UNATTACHED
        self._clear_leader_state()
        self.election_attempt = 0
        self._reset_election_timer(now_ms)
        self.fetch_due_ms = now_ms if not self.config.is_voter else None
        self._persist(out)
        self._announce(out)
        self._emit(out, trace.BecomeUnattached, now_ms, source=source)

    def _become_follower(self, leader: int, epoch: int, now_ms: int, out: list[Effect], send_fetch: bool = True) -> None:
        if leader == self.node_id:
            raise InvariantViolation(f"node {self.node_id} told to follow itself in epoch {epoch}")
        if self.state is State.LEADER and epoch == self.leader_epoch:
            raise InvariantViolation(f"two leaders in epoch {epoch}: {self.node_id} and {leader}")
        if epoch > self.leader_epoch:
            self.voted_for = NO_ID
        self._abandon_snapshot_fetch()
        self.leader_epoch = epoch
        self.leader_id = leader
        self.state = State.FOLLOWER
        self._clear_leader_state()
        self.election_attempt = 0
        self._reset_election_timer(now_ms)
        self.fetch_due_ms = now_ms
        self._persist(out)
        self._announce(out)
        self._emit(out, trace.BeginQuorumEpoch, now_ms)
        if send_fetch:
            self._maybe_send_fetch(now_ms, out)

    # ------------------------------------------------------------ timers

    def _on_tick(self, now_ms: int, out: list[Effect]) -> None:
        if self.state is State.LEADER:
            self._leader_tick(now_ms, out)
            return
        if self.config.is_voter and now_ms >= self.election_deadline_ms:
            if self.config.pre_vote:
                self._pre_vote(now_ms, out)
            else:
                self._request_vote(now_ms, out)
            return
        if not self.config.is_voter and self.state is State.FOLLOWER and now_ms >= self.election_deadline_ms:
            # An observer that lost its leader looks for the new one (a snapshot
            # fetch from the old one starts over).
            self._abandon_snapshot_fetch()
            self.leader_id = NO_ID
            self.state = State.UNATTACHED
            self._announce(out)
            self.fetch_due_ms = now_ms
            self._reset_election_timer(now_ms)
        self._maybe_send_fetch(now_ms, out)

    def _leader_tick(self, now_ms: int, out: list[Effect]) -> None:
        # Check quorum (KIP-595's leader fetch timeout): a majority must have
        # fetched within 1.5 x fetch timeout, or this leader may be deposed
        # without knowing it; it resigns so that nothing it says is trusted.
        window = self.config.fetch_timeout_ms * 3 // 2
        if now_ms - self.leader_start_ms >= window:
            recent = 1 + sum(
                1 for v in self.config.voters if v != self.node_id and now_ms - self.last_fetch_ms.get(v, -(10**18)) < window
            )
            if recent < self.majority():
                self._resign("check quorum: no fetch from a majority", now_ms, out)
                return
        for voter in sorted(self.config.voters):
            if voter == self.node_id or voter in self.last_fetch_ms:
                continue
            if now_ms >= self.begin_epoch_due_ms.get(voter, 0):
                self.begin_epoch_due_ms[voter] = now_ms + self.config.retry_backoff_ms * 5
                out.append(Send(voter, BeginQuorumEpochRequest(self.node_id, self.leader_epoch)))

    def _maybe_send_fetch(self, now_ms: int, out: list[Effect]) -> None:
        if self.state is State.PROSPECTIVE and self.leader_id not in (NO_ID, self.node_id):
            pass  # KIP-996: still fetching from the leader it knew, whose answer ends the pre-vote
        elif self.state not in (State.FOLLOWER, State.UNATTACHED):
            return
        if self.state is State.UNATTACHED and self.config.is_voter:
            return
        if self.fetch_due_ms is None:
            # One Fetch in flight; a lost one is retried after the fetch timeout's
            # half (plus the max wait the leader may hold it).
            if now_ms - self.fetch_sent_ms < max(self.config.fetch_timeout_ms // 2, 1) + self.config.fetch_max_wait_ms:
                return
        elif now_ms < self.fetch_due_ms:
            return
        if self.state in (State.FOLLOWER, State.PROSPECTIVE):
            destination = self.leader_id
        else:
            voters = sorted(self.config.voters)
            destination = voters[self.bootstrap_index % len(voters)]
            self.bootstrap_index += 1
        fetch = self.fetching_snapshot
        if fetch is not None and not fetch.installing and self.state is not State.FOLLOWER:
            self._abandon_snapshot_fetch()  # only a follower fetches a snapshot: Fetch first
            fetch = None
        if fetch is not None:
            if fetch.installing:
                return
            self.fetch_due_ms = None
            self.fetch_sent_ms = now_ms
            self.snapshot_in_flight = (destination, fetch.position)
            out.append(Send(destination, FetchSnapshotRequest(
                self.node_id, self.leader_epoch, fetch.end_offset, fetch.epoch, fetch.position,
                self.config.max_snapshot_chunk_bytes,
            )))
            return
        self.fetch_due_ms = None
        self.fetch_sent_ms = now_ms
        self.fetch_in_flight = (destination, self.log_end_offset)
        out.append(
            Send(
                destination,
                FetchRequest(self.node_id, self.leader_epoch, self.log_end_offset, self.last_epoch,
                             self.config.fetch_max_wait_ms),
            )
        )

    # ------------------------------------------------------------ election

    def _pre_vote(self, now_ms: int, out: list[Effect]) -> None:
        """KIP-996: ask whether a majority would vote for this node before raising the epoch."""
        self._abandon_snapshot_fetch()
        self.state = State.PROSPECTIVE
        self.votes_granted = {self.node_id}
        self.election_attempt += 1
        self._reset_election_timer(now_ms)
        if self.fetch_in_flight is None and self.leader_id not in (NO_ID, self.node_id):
            self.fetch_due_ms = now_ms
        self._announce(out)
        self._emit(out, trace.PreVote, now_ms, votes_granted=frozenset(self.votes_granted),
                   voters=frozenset(self.config.voters))
        request = VoteRequest(self.leader_epoch, self.node_id, self.last_epoch, self.log_end_offset, pre_vote=True)
        for voter in sorted(self.config.voters):
            if voter != self.node_id:
                out.append(Send(voter, request))
        self._maybe_stand(now_ms, out)
        self._maybe_send_fetch(now_ms, out)

    def _maybe_stand(self, now_ms: int, out: list[Effect]) -> None:
        if self.state is State.PROSPECTIVE and len(self.votes_granted) >= self.majority():
            self._request_vote(now_ms, out)

    def _request_vote(self, now_ms: int, out: list[Effect]) -> None:
        self._abandon_snapshot_fetch()
        self.leader_epoch += 1
        self.voted_for = self.node_id
        self.leader_id = NO_ID
        self.state = State.CANDIDATE
        self._clear_leader_state()
        self.votes_granted = {self.node_id}
        self.election_attempt += 1
        self._reset_election_timer(now_ms)
        self.fetch_due_ms = None
        self._persist(out)
        self._announce(out)
        self._emit(out, trace.RequestVote, now_ms, votes_granted=frozenset(self.votes_granted),
                   voters=frozenset(self.config.voters), pre_vote=self.config.pre_vote)
        request = VoteRequest(self.leader_epoch, self.node_id, self.last_epoch, self.log_end_offset)
        for voter in sorted(self.config.voters):
            if voter != self.node_id:
                out.append(Send(voter, request))
        self._maybe_become_leader(now_ms, out)

    def _on_vote_request(self, source: int, r: VoteRequest, now_ms: int, out: list[Effect]) -> None:
        def refuse(code: int = ErrorCode.NONE) -> None:
            out.append(Send(source, VoteResponse(code, self.leader_id, self.leader_epoch, False, pre_vote=r.pre_vote)))

        if not self.config.is_voter or r.candidate_id not in self.config.voters or r.candidate_id != source:
            refuse(ErrorCode.INCONSISTENT_VOTER_SET)
            return
        if r.candidate_epoch < self.leader_epoch:
            refuse(ErrorCode.FENCED_LEADER_EPOCH)
            return
        if r.pre_vote and r.last_offset_epoch > r.candidate_epoch:
            refuse(ErrorCode.INVALID_REQUEST)  # a prospective's log cannot hold a later epoch than its own
            return
        if r.candidate_epoch > self.leader_epoch:
            self._become_unattached(r.candidate_epoch, source, now_ms, out)
        if r.pre_vote:
            self._on_pre_vote_request(source, r, now_ms, out)
            return
        grantable = self.state is State.UNATTACHED or (self.state is State.VOTED and self.voted_for == r.candidate_id) or (
            _m.ACTIVE and _m.on("vote_twice") and self.state is State.VOTED
        )
        if not (grantable and self._log_up_to_date(r)):
            refuse()
            return
        if self.voted_for != r.candidate_id:
            self.voted_for = r.candidate_id
            self.state = State.VOTED
            self._reset_election_timer(now_ms)
            if _m.ACTIVE and _m.on("vote_before_durable"):
                out.append(Send(source, VoteResponse(ErrorCode.NONE, self.leader_id, self.leader_epoch, True)))
            # The vote is durable before the candidate can count it.
            self._persist(out)
            self._emit(out, trace.GrantVote, now_ms, candidate=r.candidate_id)
        out.append(Send(source, VoteResponse(ErrorCode.NONE, self.leader_id, self.leader_epoch, True)))

    def _log_up_to_date(self, r: VoteRequest) -> bool:
        return bool((r.last_offset_epoch, r.last_offset) >= (self.last_epoch, self.log_end_offset) or (
            not self.config.check_log_up_to_date
        ) or (_m.ACTIVE and _m.on("vote_without_log_check")))

    def _on_pre_vote_request(self, source: int, r: VoteRequest, now_ms: int, out: list[Effect]) -> None:
        # A voter that follows a leader (kref: in Follower state at all; Kafka:
        # once it fetched from it) or leads refuses: the leader is alive as far
        # as it knows. Nothing is persisted either way: a pre-vote is no vote.
        granted = self.state not in (State.FOLLOWER, State.LEADER) and self._log_up_to_date(r)
        if granted:
            self._emit(out, trace.GrantPreVote, now_ms, candidate=r.candidate_id)
        out.append(Send(source, VoteResponse(ErrorCode.NONE, self.leader_id, self.leader_epoch, granted, pre_vote=True)))

    def _on_vote_response(self, source: int, r: VoteResponse, now_ms: int, out: list[Effect]) -> None:
        if self._response_epoch_check(source, r.leader_id, r.leader_epoch, now_ms, out):
            return
        if r.pre_vote:
            self._on_pre_vote_response(source, r, now_ms, out)
            return
        if self.state is not State.CANDIDATE or r.leader_epoch != self.leader_epoch:
            return
        if r.vote_granted and source in self.config.voters:
            self.votes_granted.add(source)
            self._maybe_become_leader(now_ms, out)

    def _on_pre_vote_response(self, source: int, r: VoteResponse, now_ms: int, out: list[Effect]) -> None:
        if self.state is not State.PROSPECTIVE or r.leader_epoch != self.leader_epoch or source not in self.config.voters:
            return
        if r.vote_granted:
            self.votes_granted.add(source)
            self._maybe_stand(now_ms, out)
        elif self.leader_id == NO_ID and r.leader_id not in (NO_ID, self.node_id):
            # Refused by a follower of a leader of our epoch we did not know: follow it.
            self._become_follower(r.leader_id, r.leader_epoch, now_ms, out)

    def _maybe_become_leader(self, now_ms: int, out: list[Effect]) -> None:
        if self.state is not State.CANDIDATE or len(self.votes_granted) < self.majority():
            return
        votes = frozenset(self.votes_granted)
        self.state = State.LEADER
        self.leader_id = self.node_id
        self._clear_leader_state()
        self.leader_start_ms = now_ms
        self.epoch_start_offset = self.log_end_offset
        self._persist(out)
        self._announce(out)
        # The LeaderChange control record: nothing is committed in this epoch
        # until it is, and with it every older entry before it.
        self._append_as_leader(1, ("LeaderChange", self.node_id, self.leader_epoch), out, control=True)
        self._emit(out, trace.BecomeActiveController, now_ms, votes_granted=votes, voters=frozenset(self.config.voters))
        for voter in sorted(self.config.voters):
            if voter != self.node_id:
                self.begin_epoch_due_ms[voter] = now_ms + self.config.retry_backoff_ms * 5
                out.append(Send(voter, BeginQuorumEpochRequest(self.node_id, self.leader_epoch)))
        self._maybe_advance_high_watermark(now_ms, out)

    def _append_as_leader(self, records_count: int, payload: object, out: list[Effect], control: bool = False) -> int:
        base = self.log_end_offset
        if not self.epochs or self.epochs[-1][0] != self.leader_epoch:
            self.epochs.append((self.leader_epoch, base))
        self.log_end_offset = base + records_count
        out.append(AppendAsLeader(base, self.leader_epoch, records_count, payload, control))
        return base

    # ------------------------------------------------------------ leader epoch announcements

    def _on_begin_quorum_epoch(self, source: int, r: BeginQuorumEpochRequest, now_ms: int, out: list[Effect]) -> None:
        if r.leader_epoch < self.leader_epoch or r.leader_id != source:
            out.append(Send(source, BeginQuorumEpochResponse(ErrorCode.FENCED_LEADER_EPOCH, self.leader_id, self.leader_epoch)))
            return
        if r.leader_epoch > self.leader_epoch or self.state in (
            State.UNATTACHED, State.VOTED, State.CANDIDATE, State.PROSPECTIVE
        ):
            self._become_follower(r.leader_id, r.leader_epoch, now_ms, out)
        elif self.leader_id != r.leader_id:
            raise InvariantViolation(
                f"two leaders in epoch {r.leader_epoch}: {self.leader_id} and {r.leader_id} (at {self.node_id})"
            )
        out.append(Send(source, BeginQuorumEpochResponse(ErrorCode.NONE, self.leader_id, self.leader_epoch)))

    def _on_begin_quorum_epoch_response(self, source: int, r: BeginQuorumEpochResponse, now_ms: int, out: list[Effect]) -> None:
        self._response_epoch_check(source, r.leader_id, r.leader_epoch, now_ms, out)

    def _on_end_quorum_epoch(self, source: int, r: EndQuorumEpochRequest, now_ms: int, out: list[Effect]) -> None:
        if r.leader_epoch < self.leader_epoch:
            out.append(Send(source, EndQuorumEpochResponse(ErrorCode.FENCED_LEADER_EPOCH, self.leader_id, self.leader_epoch)))
            return
        if r.leader_epoch > self.leader_epoch:
            self._become_unattached(r.leader_epoch, source, now_ms, out)
        if self.config.is_voter and self.state in (State.FOLLOWER, State.UNATTACHED, State.VOTED) and (
            self.leader_id in (r.leader_id, NO_ID)
        ):
            # The leader is leaving: stand soon, the preferred successors first.
            successors = list(r.preferred_successors)
            position = successors.index(self.node_id) if self.node_id in successors else len(successors)
            self.election_deadline_ms = min(self.election_deadline_ms, now_ms + self.config.retry_backoff_ms * (1 + 2 * position))
        out.append(Send(source, EndQuorumEpochResponse(ErrorCode.NONE, self.leader_id, self.leader_epoch)))

    # ------------------------------------------------------------ fetch, leader side

    def _on_fetch_request(self, source: int, r: FetchRequest, now_ms: int, out: list[Effect]) -> None:
        def answer(code: int, **kw) -> None:
            response = FetchResponse(
                code, self.leader_id, self.leader_epoch, self.high_watermark, fetch_offset=r.fetch_offset, **kw
            )
            out.append(SendFetchResponse(source, response, -1, 0))

        if r.replica_id != source:
            answer(ErrorCode.INVALID_REQUEST)
            return
        self._release_parked_fetch(source, out)
        if r.current_leader_epoch > self.leader_epoch:
            # The fetcher knows a newer epoch than we do: learn it.
            self._become_unattached(r.current_leader_epoch, source, now_ms, out)
            answer(ErrorCode.UNKNOWN_LEADER_EPOCH)
            return
        if self.state is not State.LEADER:
            answer(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return
        if r.current_leader_epoch < self.leader_epoch:
            answer(ErrorCode.FENCED_LEADER_EPOCH)
            return
        snapshot = self.latest_snapshot()
        if snapshot is not None and self.log_start_offset > 0 and (
            r.fetch_offset < self.log_start_offset
            or (r.fetch_offset == self.log_start_offset and r.last_fetched_epoch != self.last_epoch_at_start())
            # Its last epoch ends before the log start: it diverges inside what is gone.
            or r.last_fetched_epoch < self.last_epoch_at_start()
        ):
            # What the fetcher needs next is gone from the log: it must load a
            # snapshot (Kafka's validateOffsetAndEpoch -> SNAPSHOT).
            if source in self.config.voters:
                self.last_fetch_ms[source] = now_ms
            else:
                self.observer_offsets[source] = r.fetch_offset
            answer(ErrorCode.NONE, snapshot_end_offset=snapshot.end_offset, snapshot_epoch=snapshot.epoch)
            return
        # Diverging-epoch check (KIP-595, as KIP-320): does (last_fetched_epoch,
        # fetch_offset) lie on this log?
        if r.fetch_offset > 0 or r.last_fetched_epoch > 0:
            epoch, end = self.end_offset_for_epoch(r.last_fetched_epoch)
            if epoch != r.last_fetched_epoch or end < r.fetch_offset:
                answer(ErrorCode.NONE, diverging_epoch=epoch, diverging_end_offset=end)
                return
        if r.fetch_offset > self.log_end_offset:
            answer(ErrorCode.OFFSET_OUT_OF_RANGE)
            return
        if source in self.config.voters:
            self.end_offsets[source] = r.fetch_offset
            self.last_fetch_ms[source] = now_ms
            self._maybe_advance_high_watermark(now_ms, out)
        else:
            self.observer_offsets[source] = r.fetch_offset
        if (
            r.max_wait_ms > 0
            and r.fetch_offset == self.log_end_offset
            and self.told_high_watermark.get(source) == self.high_watermark
        ):
            # Nothing to return and no newer high watermark than the one this
            # fetcher was last told (had the HW moved since, or with this very
            # Fetch, it would not learn it until the next append: KIP-1166's
            # gap, closed here on the leader's side): hold it. The wait is
            # bounded by the fetch timeout whatever the fetcher asked for.
            wait = min(r.max_wait_ms, self.config.fetch_timeout_ms)
            self.parked_fetches[source] = ParkedFetch(r, self.high_watermark, now_ms + wait)
            return
        self.told_high_watermark[source] = self.high_watermark
        response = FetchResponse(
            ErrorCode.NONE, self.leader_id, self.leader_epoch, self.high_watermark, fetch_offset=r.fetch_offset
        )
        out.append(SendFetchResponse(source, response, r.fetch_offset, self.config.max_fetch_batches))

    def _complete_parked_fetches(self, now_ms: int, out: list[Effect]) -> None:
        """Answer each held Fetch that can be answered now (checked after every step).

        Records were appended past its offset -> those records; the high
        watermark moved -> the new one; its max wait ended -> an empty answer;
        this node is no longer the leader of the Fetch's epoch -> NOT_LEADER_OR_FOLLOWER
        with what it knows, so the fetcher looks again at once.
        """
        for source in sorted(self.parked_fetches):
            parked = self.parked_fetches[source]
            r = parked.request
            if self.state is not State.LEADER or self.leader_epoch != r.current_leader_epoch:
                code, from_offset = ErrorCode.NOT_LEADER_OR_FOLLOWER, -1
            elif self.log_end_offset > r.fetch_offset:
                code, from_offset = ErrorCode.NONE, r.fetch_offset
            elif self.high_watermark != parked.high_watermark or now_ms >= parked.deadline_ms:
                code, from_offset = ErrorCode.NONE, -1
            else:
                continue
            del self.parked_fetches[source]
            if code == ErrorCode.NONE:
                self.told_high_watermark[source] = self.high_watermark
            response = FetchResponse(code, self.leader_id, self.leader_epoch, self.high_watermark, fetch_offset=r.fetch_offset)
            out.append(SendFetchResponse(source, response, from_offset, self.config.max_fetch_batches, parked=True))

    def _release_parked_fetch(self, source: int, out: list[Effect]) -> None:
        """A new Fetch from a fetcher with one held: the held one is answered (empty) first."""
        parked = self.parked_fetches.pop(source, None)
        if parked is not None:
            self.told_high_watermark[source] = self.high_watermark
            response = FetchResponse(
                ErrorCode.NONE, self.leader_id, self.leader_epoch, self.high_watermark,
                fetch_offset=parked.request.fetch_offset,
            )
            out.append(SendFetchResponse(source, response, -1, 0, parked=True))

    def last_epoch_at_start(self) -> int:
        """The epoch of the entry just before the log start (the base snapshot's)."""
        base = self.base_snapshot()
        return base.epoch if base is not None else self.epoch_at(self.log_start_offset - 1)

    def _on_fetch_snapshot_request(self, source: int, r: FetchSnapshotRequest, now_ms: int, out: list[Effect]) -> None:
        def answer(code: int, **kw) -> None:
            response = FetchSnapshotResponse(
                code, self.leader_id, self.leader_epoch, r.snapshot_end_offset, r.snapshot_epoch, **kw
            )
            out.append(SendFetchSnapshotResponse(source, response, -1, 0))

        if r.replica_id != source or r.max_bytes <= 0:
            answer(ErrorCode.INVALID_REQUEST)
            return
        if r.current_leader_epoch > self.leader_epoch:
            self._become_unattached(r.current_leader_epoch, source, now_ms, out)
            answer(ErrorCode.UNKNOWN_LEADER_EPOCH)
            return
        if self.state is not State.LEADER:
            answer(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return
        if r.current_leader_epoch < self.leader_epoch:
            answer(ErrorCode.FENCED_LEADER_EPOCH)
            return
        snapshot = next(
            (s for s in self.snapshots if (s.end_offset, s.epoch) == (r.snapshot_end_offset, r.snapshot_epoch)), None
        )
        if snapshot is None:
            answer(ErrorCode.SNAPSHOT_NOT_FOUND)
            return
        if r.position < 0 or r.position >= snapshot.size_in_bytes:
            answer(ErrorCode.POSITION_OUT_OF_RANGE)
            return
        if source in self.config.voters:
            # A voter loading a snapshot is alive for check quorum.
            self.last_fetch_ms[source] = now_ms
        length = min(r.max_bytes, self.config.max_snapshot_chunk_bytes, snapshot.size_in_bytes - r.position)
        response = FetchSnapshotResponse(
            ErrorCode.NONE, self.leader_id, self.leader_epoch, snapshot.end_offset, snapshot.epoch,
            size=snapshot.size_in_bytes, position=r.position,
        )
        out.append(SendFetchSnapshotResponse(source, response, r.position, length))

    def _maybe_advance_high_watermark(self, now_ms: int, out: list[Effect]) -> None:
        offsets = sorted(
            (self.log_end_offset if v == self.node_id else self.end_offsets.get(v, 0) for v in self.config.voters),
            reverse=True,
        )
        majority_offset = offsets[self.majority() - 1]
        # Only an offset in this leader's own epoch commits (Raft's rule;
        # the LeaderChange record is the first such entry).
        if majority_offset > self.high_watermark and (majority_offset > self.epoch_start_offset or _m.ACTIVE and _m.on("commit_earlier_epoch")):
            if majority_offset > self.log_end_offset:
                raise InvariantViolation(f"high watermark {majority_offset} past log end {self.log_end_offset}")
            self.high_watermark = majority_offset
            out.append(HighWatermarkAdvanced(self.high_watermark))
            self._emit(out, trace.AdvanceHighWatermark, now_ms, end_offsets=dict(sorted(self.end_offsets.items())))

    # ------------------------------------------------------------ fetch, follower side

    def _on_fetch_response(self, source: int, r: FetchResponse, now_ms: int, out: list[Effect]) -> None:
        if self.fetch_in_flight != (source, r.fetch_offset):
            return
        self.fetch_in_flight = None
        if self._response_epoch_check(source, r.leader_id, r.leader_epoch, now_ms, out):
            return
        if r.error_code != ErrorCode.NONE:
            if (
                r.leader_epoch == self.leader_epoch
                and r.leader_id not in (NO_ID, self.node_id)
                and self.state in (State.UNATTACHED, State.VOTED, State.CANDIDATE, State.PROSPECTIVE)
            ):
                # Told who leads our epoch (by a voter we asked): follow it.
                self._become_follower(r.leader_id, r.leader_epoch, now_ms, out)
                return
            if self.state in (State.FOLLOWER, State.UNATTACHED, State.PROSPECTIVE):
                self.fetch_due_ms = now_ms + self.config.retry_backoff_ms
            return
        if (
            r.leader_epoch == self.leader_epoch
            and source == r.leader_id
            and self.state in (State.UNATTACHED, State.VOTED, State.CANDIDATE, State.PROSPECTIVE)
        ):
            self._become_follower(source, r.leader_epoch, now_ms, out, send_fetch=False)
        if self.state is not State.FOLLOWER or source != self.leader_id or r.leader_epoch != self.leader_epoch:
            return
        self.election_attempt = 0
        self._reset_election_timer(now_ms)
        if r.snapshot_end_offset >= 0:
            self._start_snapshot_fetch(r, now_ms, out)
        elif r.diverging_epoch != NO_EPOCH or r.diverging_end_offset >= 0:
            self._truncate_to_epoch_end_offset(r, now_ms, out)
            self.fetch_due_ms = now_ms
        elif r.batches:
            self._append_as_follower(r, now_ms, out)
            self.fetch_due_ms = now_ms
        else:
            self._follow_high_watermark(r.high_watermark, out)
            # Long-polled: an empty answer means the wait ended or the high
            # watermark moved, so fetch again at once.
            self.fetch_due_ms = now_ms + (0 if self.config.fetch_max_wait_ms > 0 else self.config.fetch_backoff_ms)
        self._maybe_send_fetch(now_ms, out)

    # ------------------------------------------------------------ snapshots, follower side

    def _start_snapshot_fetch(self, r: FetchResponse, now_ms: int, out: list[Effect]) -> None:
        if r.snapshot_epoch < 0 or r.snapshot_end_offset < self.high_watermark or r.snapshot_epoch > self.leader_epoch:
            # Kafka treats these as a broken leader answer: ask again later.
            self.fetch_due_ms = now_ms + self.config.retry_backoff_ms
            return
        self.fetching_snapshot = SnapshotFetch(r.snapshot_end_offset, r.snapshot_epoch)
        out.append(StartSnapshotFetch(r.snapshot_end_offset, r.snapshot_epoch))
        self.fetch_due_ms = now_ms

    def _on_fetch_snapshot_response(self, source: int, r: FetchSnapshotResponse, now_ms: int, out: list[Effect]) -> None:
        fetch = self.fetching_snapshot
        if fetch is None or self.snapshot_in_flight is None or self.snapshot_in_flight[0] != source:
            return
        self.snapshot_in_flight = None
        if self._response_epoch_check(source, r.leader_id, r.leader_epoch, now_ms, out):
            return
        if r.error_code != ErrorCode.NONE:
            if r.error_code in (ErrorCode.SNAPSHOT_NOT_FOUND, ErrorCode.POSITION_OUT_OF_RANGE):
                # The leader moved on (a newer snapshot): Fetch again to learn which.
                self.fetching_snapshot = None
            self.fetch_due_ms = now_ms + self.config.retry_backoff_ms
            return
        if self.state is not State.FOLLOWER or source != self.leader_id or r.leader_epoch != self.leader_epoch:
            return
        self.election_attempt = 0
        self._reset_election_timer(now_ms)
        self.fetch_due_ms = now_ms
        if (r.snapshot_end_offset, r.snapshot_epoch) != (fetch.end_offset, fetch.epoch) or r.position != fetch.position:
            self._maybe_send_fetch(now_ms, out)  # an old answer: ask for the chunk we need
            return
        if r.size <= 0 or (fetch.size >= 0 and r.size != fetch.size) or r.position + len(r.data) > r.size or not r.data:
            self.fetching_snapshot = None  # inconsistent sizes: start over from a Fetch
            self.fetch_due_ms = now_ms + self.config.retry_backoff_ms
            return
        fetch.size = r.size
        out.append(AppendSnapshotChunk(fetch.end_offset, fetch.epoch, r.data))
        fetch.position += len(r.data)
        if fetch.position == fetch.size:
            # Complete: the driver installs it and steps SnapshotInstalled; no fetch until then.
            fetch.installing = True
            self.fetch_due_ms = None
            out.append(InstallSnapshot(fetch.end_offset, fetch.epoch))
            return
        self._maybe_send_fetch(now_ms, out)

    def _on_snapshot_installed(self, e: SnapshotInstalled, now_ms: int, out: list[Effect]) -> None:
        fetch = self.fetching_snapshot
        if fetch is None or not fetch.installing or (fetch.end_offset, fetch.epoch) != (e.end_offset, e.epoch):
            raise InvariantViolation(f"snapshot {e} installed but not fetched (fetching {fetch})")
        if e.end_offset < self.high_watermark:
            raise InvariantViolation(f"snapshot end {e.end_offset} below the high watermark {self.high_watermark}")
        self.fetching_snapshot = None
        self.log_end_offset = e.end_offset
        self.log_start_offset = e.end_offset
        self.epochs = []
        self.snapshots = [s for s in self.snapshots if s.end_offset < e.end_offset]
        for s in self.snapshots:
            out.append(DeleteSnapshot(s.end_offset, s.epoch))
        self.snapshots = [SnapshotRef(e.end_offset, e.epoch, fetch.size)]
        self._follow_high_watermark(e.end_offset, out)
        self._emit(out, trace.InstallSnapshot, now_ms, snapshot_end_offset=e.end_offset, snapshot_epoch=e.epoch)
        if self.state in (State.FOLLOWER, State.UNATTACHED):
            self.fetch_due_ms = now_ms
            self._maybe_send_fetch(now_ms, out)

    def _on_snapshot_fetch_failed(self, e: SnapshotFetchFailed, now_ms: int, out: list[Effect]) -> None:
        fetch = self.fetching_snapshot
        if fetch is not None and (fetch.end_offset, fetch.epoch) == (e.end_offset, e.epoch):
            self.fetching_snapshot = None
            if self.state in (State.FOLLOWER, State.UNATTACHED):
                self.fetch_due_ms = now_ms + self.config.retry_backoff_ms

    def _abandon_snapshot_fetch(self) -> None:
        """A new leader or epoch: the snapshot fetch starts over (unless it is being installed)."""
        if self.fetching_snapshot is not None and not self.fetching_snapshot.installing:
            self.fetching_snapshot = None
        self.snapshot_in_flight = None

    # ------------------------------------------------------------ snapshots, every node

    def _on_snapshot_created(self, e: SnapshotCreated, now_ms: int, out: list[Effect]) -> None:
        if e.end_offset > self.high_watermark:
            raise InvariantViolation(f"snapshot at {e.end_offset} above the high watermark {self.high_watermark}")
        if all(s.end_offset != e.end_offset for s in self.snapshots):
            latest = self.latest_snapshot()
            self.snapshots = sorted([*self.snapshots, SnapshotRef(e.end_offset, e.epoch, e.size_in_bytes)],
                                    key=lambda s: s.end_offset)
            if latest is None or e.end_offset > latest.end_offset:
                self._emit(out, trace.CreateSnapshot, now_ms, snapshot_end_offset=e.end_offset, snapshot_epoch=e.epoch)

    def _on_advance_log_start(self, e: AdvanceLogStart, now_ms: int, out: list[Effect]) -> None:
        latest = self.latest_snapshot()
        # Never past the latest snapshot, nor past what is committed.
        target = min(e.log_start_offset, latest.end_offset if latest else 0, self.high_watermark)
        if target <= self.log_start_offset:
            return
        self.log_start_offset = target
        out.append(LogStartAdvanced(target))
        self._emit(out, trace.AdvanceLogStart, now_ms, log_start_offset=target)
        for s in [s for s in self.snapshots if s.end_offset < target]:
            out.append(DeleteSnapshot(s.end_offset, s.epoch))
        self.snapshots = [s for s in self.snapshots if s.end_offset >= target]

    def _truncate_to_epoch_end_offset(self, r: FetchResponse, now_ms: int, out: list[Effect]) -> None:
        own_epoch, own_end = self.end_offset_for_epoch(r.diverging_epoch)
        target = min(r.diverging_end_offset, own_end if own_epoch != NO_EPOCH else 0)
        if target < self.high_watermark:
            raise InvariantViolation(
                f"node {self.node_id} asked to truncate to {target} below its high watermark {self.high_watermark}"
            )
        if target < self.log_end_offset:
            self.log_end_offset = target
            self.epochs = [(e, s) for e, s in self.epochs if s < target]
            out.append(TruncateTo(target))
        self._emit(
            out, trace.TruncateToEpochEndOffset, now_ms,
            diverging_epoch=r.diverging_epoch, diverging_end_offset=r.diverging_end_offset,
        )

    def _append_as_follower(self, r: FetchResponse, now_ms: int, out: list[Effect]) -> None:
        accepted: list[Batch] = []
        for b in r.batches:
            if b.last_offset < self.log_end_offset:
                continue  # already held (a duplicated or reordered response)
            if b.base_offset != self.log_end_offset or b.leader_epoch > self.leader_epoch or b.leader_epoch < self.last_epoch:
                break  # not contiguous: drop the rest, the next Fetch asks again
            if not self.epochs or self.epochs[-1][0] != b.leader_epoch:
                self.epochs.append((b.leader_epoch, b.base_offset))
            self.log_end_offset = b.last_offset + 1
            accepted.append(b)
        first = accepted[0].base_offset if accepted else self.log_end_offset
        if accepted:
            out.append(AppendAsFollower(tuple(accepted)))
            self._emit(out, trace.FetchFromLeader, now_ms, first_offset=first)
        self._follow_high_watermark(r.high_watermark, out)

    def _follow_high_watermark(self, leader_high_watermark: int, out: list[Effect]) -> None:
        high_watermark = min(leader_high_watermark, self.log_end_offset)
        if high_watermark > self.high_watermark:
            self.high_watermark = high_watermark
            out.append(HighWatermarkAdvanced(high_watermark))

    # ------------------------------------------------------------ the rest

    def _on_message(self, source: int, message: Message, now_ms: int, out: list[Effect]) -> None:
        match message:
            case VoteRequest():
                self._on_vote_request(source, message, now_ms, out)
            case VoteResponse():
                self._on_vote_response(source, message, now_ms, out)
            case BeginQuorumEpochRequest():
                self._on_begin_quorum_epoch(source, message, now_ms, out)
            case BeginQuorumEpochResponse():
                self._on_begin_quorum_epoch_response(source, message, now_ms, out)
            case EndQuorumEpochRequest():
                self._on_end_quorum_epoch(source, message, now_ms, out)
            case EndQuorumEpochResponse():
                self._response_epoch_check(source, message.leader_id, message.leader_epoch, now_ms, out)
            case FetchRequest():
                self._on_fetch_request(source, message, now_ms, out)
            case FetchResponse():
                self._on_fetch_response(source, message, now_ms, out)
            case FetchSnapshotRequest():
                self._on_fetch_snapshot_request(source, message, now_ms, out)
            case FetchSnapshotResponse():
                self._on_fetch_snapshot_response(source, message, now_ms, out)
            case _:
                raise TypeError(f"not a quorum message: {message!r}")

    def _on_propose(self, e: Propose, now_ms: int, out: list[Effect]) -> None:
        if self.state is not State.LEADER:
            out.append(ProposeRejected(ErrorCode.NOT_CONTROLLER, self.leader_id, self.leader_epoch))
            return
        self._append_as_leader(e.records_count, e.payload, out)
        # A single voter commits at once; otherwise the followers' fetches will.
        self._maybe_advance_high_watermark(now_ms, out)

    def _resign_silently(self) -> None:
        self.state = State.RESIGNED
        self._clear_leader_state()

    def _resign(self, reason: str, now_ms: int, out: list[Effect]) -> None:
        self._resign_silently()
        self._reset_election_timer(now_ms)
        self._announce(out)
        self._emit(out, trace.Resign, now_ms, reason=reason)
        # Followers nearest the end of the log are the best successors.
        successors = tuple(sorted((v for v in self.config.voters if v != self.node_id)))
        for voter in successors:
            out.append(Send(voter, EndQuorumEpochRequest(self.node_id, self.leader_epoch, successors)))

    def _on_shutdown(self, now_ms: int, out: list[Effect]) -> None:
        if self.state is State.LEADER:
            self._resign("shutdown", now_ms, out)

    def _on_send_failed(self, e: SendFailed, now_ms: int, out: list[Effect]) -> None:
        if self.fetch_in_flight is not None and self.fetch_in_flight[0] == e.destination:
            self.fetch_in_flight = None
            self.fetch_due_ms = now_ms + self.config.retry_backoff_ms
        if self.snapshot_in_flight is not None and self.snapshot_in_flight[0] == e.destination:
            self.snapshot_in_flight = None
            self.fetch_due_ms = now_ms + self.config.retry_backoff_ms

"""The pure controller core: broker membership, topics, partitions, leaders and ISRs.

Theory of operation
-------------------
The active controller (KIP-631) is the only writer of the metadata log
besides the quorum's own LeaderChange records. Every decision it makes
becomes metadata records (kref/metadata/records.py, Kafka's record types);
a request is answered only once its records are committed, so an answer
never describes metadata a failover could lose. `ControllerCore` is that
decision maker as a sans-IO state machine:

    effects = controller.step(event, now_ms)

Its state is what the records it has written or replayed say (brokers with
their epochs, racks and fencing; topics with their partitions' replicas,
isr, leader, leader_epoch and partition_epoch), plus the volatile heartbeat
sessions. It applies its own records to that state as it writes them
(Kafka's controller does the same), so a second request sees the first
one's effect before it commits. A standby controller replays committed
records (`Replay`), or is handed the committed image at once (`LoadImage`:
the node's quorum driver keeps that image anyway, so a controller node
replays nothing twice and a deposed controller drops what it wrote past the
commit without replaying the whole log, as Kafka's controller reverts to its
last committed snapshot); on `BecomeActive` it takes over with a fresh
session for every registered broker (a grace period: it never heard from
them).

Decisions, with the spec/KRaft.tla actions they implement:

- BrokerRegistration -> RegisterBrokerRecord (RegisterBroker): a new
  broker epoch (the record's offset, as Kafka), fenced until caught up. A
  second incarnation of a live broker id is refused
  (DUPLICATE_BROKER_REGISTRATION) until the old one's session expires.
- BrokerHeartbeat -> renews the session (BrokerHeartbeat); a stale broker
  epoch is refused (STALE_BROKER_EPOCH); a fenced broker whose metadata
  offset has reached its registration is unfenced (UnfenceBroker) and
  leaderless partitions with it in the isr get it as leader.
- Tick -> a broker without a heartbeat for broker.session.timeout.ms is
  fenced (FenceBroker): in the same batch of records every partition it
  leads gets a new leader from the isr (leader_epoch + 1) and it leaves
  every isr (partition_epoch + 1). With no other isr member the partition
  has no leader (-1), unless unclean.leader.election.enable holds for the
  topic (its ConfigRecord, else the cluster default, else the broker
  config): then a live replica outside the isr leads and becomes the whole
  isr (spec UncleanElectLeader; acknowledged records may be lost). A
  returning replica of a leaderless partition leads it: cleanly if it is in
  the isr, uncleanly (isr = itself) if the topic allows it.
- CreateTopics -> TopicRecord + PartitionRecords: replicas spread over the
  unfenced brokers (Kafka's assignment: a start offset per topic, leaders
  round-robin, followers shifted; racks alternated so replicas of a
  partition land on distinct racks while racks remain). Replication factor
  above the unfenced broker count: INVALID_REPLICATION_FACTOR.
- CreatePartitions -> PartitionRecords; DeleteTopics -> RemoveTopicRecord.
- AllocateProducerIds -> ProducerIdsRecord (KIP-730): the next block of
  producer ids for a registered broker of the current broker epoch
  (kref/coordinator/producer_id.grant_block decides the block).
- ElectLeaders (KIP-460, API 43): preferred election moves leadership to
  the first replica of the assignment when it is an eligible isr member
  (ELECTION_NOT_NEEDED if it leads, PREFERRED_LEADER_NOT_AVAILABLE if it
  cannot); unclean election gives a leaderless partition a leader, from
  the isr if one is eligible, else any live replica, which becomes the
  whole isr, whatever the topic config says (the operator asked).
- auto.leader.rebalance.enable: every leader.imbalance.check.interval.seconds
  a Tick counts, per preferred broker, the partitions it should lead but
  does not; above leader.imbalance.per.broker.percentage of its preferred
  partitions they get preferred elections, in one batch.
- Controlled shutdown: a heartbeat with want_shut_down writes a
  BrokerRegistrationChangeRecord (in_controlled_shutdown, persisted so a
  new controller knows) and moves every leadership off the broker and
  takes it out of every isr (as fencing does, while it still serves); it is
  no longer eligible to lead or join an isr. Once it leads nothing and has
  applied that batch, the heartbeat answers should_shut_down and the
  broker is fenced in the same write, so it exits with no partition
  waiting for a session timeout.
- Every answer of the active controller waits for the commit of the state
  it read (`Reply.commit_offset`), not only of the records it wrote.
- AlterConfigs / IncrementalAlterConfigs of a topic (forwarded by a broker
  with the topic's whole new override set) -> ConfigRecords for what
  changed; turning unclean.leader.election.enable on elects the topic's
  offline partitions in the same batch (UncleanElectLeader). A BROKER
  resource (one broker id, or "" for the cluster-wide default) becomes
  ConfigRecords of resource type BROKER the same way (KIP-226); when such
  a change turns unclean election on for a topic (the cluster-wide default,
  or the active controller's own broker-level config, which is where Kafka's
  controller reads it: topic > controller node > cluster default > static),
  that topic's offline partitions are elected in the same batch too.
- Unclean election check (Kafka's periodic electUnclean task, every
  unclean.leader.election.interval.ms, 5 min): on the first Tick after
  BecomeActive and then on that interval, every offline partition whose
  topic allows unclean election gets a live replica as leader. So a static
  unclean.leader.election.enable=true takes effect at a restart at once.
- AlterPartitionReassignments (KIP-455, API 45): per partition one
  PartitionChangeRecord growing the replicas to target + the leaving ones
  (adding_replicas / removing_replicas), completed by the AlterPartition
  that takes the last adding replica into the isr (replicas = target, the
  removed leave the isr, a new leader_epoch, a new leader if the old one
  left: NEW_LEADER_ELECTED to it); a null target cancels (reverts), a new
  target replaces; UNKNOWN_TOPIC_OR_PARTITION, NO_REASSIGNMENT_IN_PROGRESS,
  INVALID_REPLICA_ASSIGNMENT as Kafka answers. ListPartitionReassignments
  reads the image.
- Every leader change a batch makes is traced as the spec action that
  justifies it: ElectLeader (the old leader left the isr or there was
  none), ElectPreferredLeader (an isr member took over from a live
  leader), UncleanElectLeader (a leader from outside the isr).
- AlterPartition (the leader's isr change) -> PartitionChangeRecord, after
  the checks Kafka makes: broker epoch (STALE_BROKER_EPOCH), leader
  (NOT_LEADER_OR_FOLLOWER), leader epoch (FENCED_LEADER_EPOCH), partition
  epoch (INVALID_UPDATE_VERSION: a stale isr view is refused), isr members
  registered and unfenced, and (KIP-903, AlterPartition v3) of the broker
  epoch the leader names for them, the incarnation whose fetch it counted
  (INELIGIBLE_REPLICA).

The core is deterministic: topic ids and the assignment start come from
the driver (`topic_id` on the request) and from a hash of the topic name.
"""

from __future__ import annotations

import uuid
import zlib
from dataclasses import dataclass, field

from kref import mutations as _m
from kref.coordinator.producer_id import ProducerIdsExhaustedError, grant_block
from kref.metadata import records as r
from kref.metadata.image import BrokerImage, MetadataImage, PartitionImage, TopicImage
from kref.protocol.errors import ErrorCode
from kref.trace import reassignment_events as reassign_trace
from kref.trace.events import TraceEvent

NO_LEADER = r.NO_LEADER
NO_LEADER_CHANGE = r.NO_LEADER_CHANGE  # PartitionChangeRecord.leader when the leader stays
MAX_PARTITIONS_PER_REQUEST = 100_000


# ---------------------------------------------------------------- trace events


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerEvent(TraceEvent):
    """spec/KRaft.tla's broker-membership actions; replica = the controller's node id."""

    broker: int
    broker_epoch: int
    fenced: bool
    leader_epoch: int  # the controller's quorum epoch


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerWrite(BrokerEvent):
    """A membership event the controller logs when it proposes its records."""

    # The metadata log offset of the write's first record: trace_check compares it with a later
    # truncation of the controller's log to tell a write never committed (a zombie
    # controller's) from one that was.
    record_offset: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBroker(BrokerWrite):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerHeartbeat(BrokerEvent):
    metadata_offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FenceBroker(BrokerWrite):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class UnfenceBroker(BrokerWrite):
    metadata_offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdown(BrokerWrite):
    """A broker asked to shut down: spec/KRaft.tla's ControlledShutdown(l, b). The
    same batch marks it in controlled shutdown (BrokerRegistrationChangeRecord)
    and moves it off its partitions (the leader moves and isr removals follow)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderElection(reassign_trace.RegistrationWrite):
    """spec/Replication.tla's controller record after an election the controller
    wrote; replica = the controller's node id, topic/partition = the partition."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectLeader(LeaderElection):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectPreferredLeader(LeaderElection):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class UncleanElectLeader(LeaderElection):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigRecord(TraceEvent):
    """spec/Replication.tla's ConfigRecord: a config write (Kafka's ConfigRecord, of the
    topic, the cluster default or this controller's node) switched unclean.leader.election.enable
    for the partition as this controller resolves it; one event per partition of every topic whose
    value changed, logged before the elections of the same batch. replica = the controller's node id."""

    unclean_leader_election_enable: bool
    record_offset: int = -1  # the batch's first record (see BrokerWrite)


# ---------------------------------------------------------------- requests (events)


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    request_id: int
    broker_id: int
    incarnation_id: uuid.UUID
    end_points: tuple = ()
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequest:
    request_id: int
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_shut_down: bool = False


@dataclass(frozen=True, slots=True)
class CreateTopic:
    request_id: int
    name: str
    num_partitions: int
    replication_factor: int
    topic_id: uuid.UUID  # drawn by the driver: the core has no randomness
    configs: tuple[tuple[str, str], ...] = ()
    # CreateTopics' validate_only: every check, no record (Kafka's validateOnly).
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class CreatePartitions:
    request_id: int
    name: str
    count: int
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    """DeleteTopics of one topic, by name or (v6+, `name` None) by topic id."""

    request_id: int
    name: str | None
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class AlterPartition:
    request_id: int
    broker_id: int
    broker_epoch: int
    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    # KIP-903 (AlterPartition v3 NewIsrWithEpochs): the broker epoch the leader
    # sends for each member of new_isr, in the same order; -1 (or none at all:
    # v2) is not checked, as in Kafka.
    new_isr_broker_epochs: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class AllocateProducerIds:
    """KIP-730: a broker asks for its next block of producer ids."""

    request_id: int
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class AlterTopicConfigs:
    """AlterConfigs / IncrementalAlterConfigs of one topic, forwarded by a broker:
    the topic's complete new override set (the broker applied the operations to
    its view and checked the values; the controller writes the difference)."""

    request_id: int
    name: str
    configs: tuple[tuple[str, str], ...]
    # AlterConfigs' validate_only: every check, no record.
    validate_only: bool = False


PREFERRED_ELECTION, UNCLEAN_ELECTION = 0, 1  # ElectLeadersRequest.election_type


@dataclass(frozen=True, slots=True)
class ElectLeaders:
    """KIP-460; `partitions` None means every partition (Kafka's null topic list)."""

    request_id: int
    election_type: int
    partitions: tuple[tuple[str, int], ...] | None


@dataclass(frozen=True, slots=True)
class AlterBrokerConfigs:
    """KIP-226 dynamic broker configs of one BROKER resource ("" = the cluster-wide
    default, else a broker id), forwarded by a broker with the whole new override
    set (it checked names and values against its broker config definitions)."""

    request_id: int
    resource_name: str
    configs: tuple[tuple[str, str], ...]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class AlterPartitionReassignments:
    """KIP-455 (API 45): per partition a target replica list, or None to cancel."""

    request_id: int
    reassignments: tuple[tuple[str, int, tuple[int, ...] | None], ...]
    # KIP-860 (v1): False refuses a target whose length differs from the current replica count
    allow_replication_factor_change: bool = True


@dataclass(frozen=True, slots=True)
class ListPartitionReassignments:
    """KIP-455 (API 46); `partitions` None means every partition."""

    request_id: int
    partitions: tuple[tuple[str, int], ...] | None


@dataclass(frozen=True, slots=True)
class Tick:
    pass


@dataclass(frozen=True, slots=True)
class BecomeActive:
    """This node's quorum core became leader; `next_offset` is its log end offset."""

    leader_epoch: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class Resign:
    pass


@dataclass(frozen=True, slots=True)
class Replay:
    """Committed records read from the metadata log (a standby, or a restart)."""

    offset: int
    records: tuple


@dataclass(frozen=True, slots=True, eq=False)
class LoadImage:
    """The committed image at `offset` replaces the core's whole state (it is
    a standby again). The core keeps a copy (O(partitions), no record is
    replayed): the caller's image goes on changing."""

    image: MetadataImage
    offset: int


Event = (
    BrokerRegistration | BrokerHeartbeatRequest | CreateTopic | CreatePartitions | DeleteTopic
    | AlterPartition | AllocateProducerIds | ElectLeaders | AlterTopicConfigs | AlterBrokerConfigs
    | AlterPartitionReassignments
    | ListPartitionReassignments | Tick | BecomeActive | Resign | Replay | LoadImage
)


# ---------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class WriteRecords:
    """Propose `records` to the quorum at `base_offset`; answer `reply` once committed."""

    base_offset: int
    records: tuple
    request_id: int | None
    reply: object


@dataclass(frozen=True, slots=True)
class Reply:
    """Nothing to write (an error, or a heartbeat that changes nothing): answer once
    the log is committed up to `commit_offset`. The answer read the active
    controller's state, which may hold records not committed yet (Kafka's
    controller delays such a read the same way): answered earlier, a failover
    could lose what the answer told (a should_shut_down whose FenceBrokerRecord
    the next controller never saw). 0: at once (not the active controller)."""

    request_id: int
    reply: object
    commit_offset: int = 0


@dataclass(frozen=True, slots=True)
class Emit:
    event: TraceEvent


Effect = WriteRecords | Reply | Emit


# ---------------------------------------------------------------- replies


@dataclass(frozen=True, slots=True)
class RegistrationReply:
    error_code: int
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    error_code: int
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


@dataclass(frozen=True, slots=True)
class TopicReply:
    error_code: int
    message: str | None = None
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class ProducerIdsReply:
    error_code: int
    producer_id_start: int = -1
    producer_id_len: int = 0


@dataclass(frozen=True, slots=True)
class ElectLeadersReply:
    error_code: int
    # (topic, partition, error_code, error_message), in request order
    results: tuple[tuple[str, int, int, str | None], ...] = ()


@dataclass(frozen=True, slots=True)
class ReassignmentsReply:
    error_code: int
    # (topic, partition, error_code, error_message), in request order
    results: tuple[tuple[str, int, int, str | None], ...] = ()


@dataclass(frozen=True, slots=True)
class ListReassignmentsReply:
    error_code: int
    # (topic, partition, replicas, adding_replicas, removing_replicas), ongoing ones only
    results: tuple[tuple[str, int, tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class AlterPartitionReply:
    error_code: int
    leader: int = NO_LEADER
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1


# ---------------------------------------------------------------- state


# The controller's view of brokers, topics and partitions is the metadata
# image (kref/metadata/image.py): one replay of the records for every node.
Broker = BrokerImage
Partition = PartitionImage
Topic = TopicImage


class InvariantViolation(AssertionError):
    pass


@dataclass(slots=True)
class ControllerCore:
    node_id: int
    broker_session_timeout_ms: int = 9000
    # The broker config's default; a topic's (or the cluster's) ConfigRecord overrides it.
    unclean_leader_election_enable: bool = False
    # auto.leader.rebalance.enable and Kafka's imbalance settings (the driver
    # passes the broker config; off by default here so scripts opt in).
    auto_leader_rebalance_enable: bool = False
    leader_imbalance_check_interval_ms: int = 300_000
    leader_imbalance_per_broker_percentage: int = 10
    # delete.topic.enable (the broker config; Kafka's default true): off, every
    # DeleteTopics is refused with TOPIC_DELETION_DISABLED.
    delete_topic_enable: bool = True
    # Kafka's unclean.leader.election.interval.ms (an internal config, 5 min).
    unclean_leader_election_interval_ms: int = 300_000
    tracing: bool = True
    active: bool = False
    leader_epoch: int = -1
    next_offset: int = 0
    image: MetadataImage = field(default_factory=MetadataImage)
    last_heartbeat_ms: dict[int, int] = field(default_factory=dict)
    # Brokers in controlled shutdown -> the offset the broker must have applied
    # before it may stop (Kafka's controlled-shutdown offset; volatile, as
    # sessions). That a broker is in controlled shutdown is persisted
    # (BrokerImage.in_controlled_shutdown), so a new controller knows it too.
    shutting_down: dict[int, int] = field(default_factory=dict)
    next_imbalance_check_ms: int | None = None
    next_unclean_check_ms: int | None = None

    @property
    def brokers(self) -> dict[int, BrokerImage]:
        return self.image.brokers

    @property
    def topics(self) -> dict[str, TopicImage]:
        return self.image.topics

    @property
    def topics_by_id(self) -> dict[uuid.UUID, str]:
        return self.image.topics_by_id

    # ------------------------------------------------------------ step

    def step(self, event: Event, now_ms: int) -> list[Effect]:
        out: list[Effect] = []
        match event:
            case Replay():
                for i, record in enumerate(event.records):
                    self._apply(record, event.offset + i)
                self.next_offset = max(self.next_offset, event.offset + len(event.records))
            case BecomeActive():
                self.active = True
                self.leader_epoch = event.leader_epoch
                self.next_offset = event.next_offset
                # A fresh session for everyone: this controller never heard them.
                self.last_heartbeat_ms = {b: now_ms for b in self.brokers}
                self.next_imbalance_check_ms = now_ms + self.leader_imbalance_check_interval_ms
                self.next_unclean_check_ms = now_ms  # the first Tick checks
            case Resign():
                self._resign()
            case LoadImage():
                self._resign()
                self.image = event.image.copy()
                self.next_offset = event.offset
            case _ if not self.active:
                request_id = getattr(event, "request_id", None)
                if request_id is not None:
                    out.append(Reply(request_id, _not_controller(event)))
            case BrokerRegistration():
                self._on_registration(event, now_ms, out)
            case BrokerHeartbeatRequest():
                self._on_heartbeat(event, now_ms, out)
            case Tick():
                self._on_tick(now_ms, out)
            case CreateTopic():
                self._on_create_topic(event, out)
            case CreatePartitions():
                self._on_create_partitions(event, out)
            case DeleteTopic():
                self._on_delete_topic(event, out)
            case AlterPartition():
                self._on_alter_partition(event, out, now_ms)
            case AllocateProducerIds():
                self._on_allocate_producer_ids(event, out)
            case ElectLeaders():
                self._on_elect_leaders(event, now_ms, out)
            case AlterTopicConfigs():
                self._on_alter_topic_configs(event, now_ms, out)
            case AlterBrokerConfigs():
                self._on_alter_broker_configs(event, now_ms, out)
            case AlterPartitionReassignments():
                self._on_alter_reassignments(event, now_ms, out)
            case ListPartitionReassignments():
                self._on_list_reassignments(event, out)
            case _:
                raise TypeError(f"not a controller event: {event!r}")
        if self.active:
            # A read of state that may not be committed yet waits for it (see Reply).
            out = [Reply(e.request_id, e.reply, self.next_offset) if isinstance(e, Reply) else e for e in out]
        return out

    def _resign(self) -> None:
        self.active = False
        self.last_heartbeat_ms.clear()
        self.shutting_down.clear()
        self.next_imbalance_check_ms = None
        self.next_unclean_check_ms = None

    # ------------------------------------------------------------ records

    def _write(self, records: list, request_id: int | None, reply: object, out: list[Effect],
               now_ms: int = 0, announce=None, reassignments: dict | None = None) -> None:
        """Apply and propose `records`; `announce(offset)` emits the batch's own trace
        event (FenceBroker, ...; offset: its first record's) before the elections it caused.
        `reassignments` maps a record's index to the reassignment event it is traced as
        (kref/trace/reassignment_events.py) instead of an election."""
        base = self.next_offset
        elections = []
        moves = []
        for i, record in enumerate(records):
            if self.tracing and reassignments and i in reassignments:
                moves.append((reassignments[i], record, base + i))
            elif self.tracing and isinstance(record, r.PartitionChangeRecord) and record.leader >= 0:
                elections.append((record, self._partition_by_id(record.topic_id, record.partition_id), base + i))
            self._apply(record, base + i)
        self.next_offset = base + len(records)
        out.append(WriteRecords(base, tuple(records), request_id, reply))
        if announce is not None:
            announce(base)
        for record, before, offset in elections:
            self._emit_election(out, now_ms, record, before, offset)
        for cls, record, offset in moves:
            self._emit_reassignment(out, now_ms, cls, record, offset)

    def _emit_reassignment(self, out: list[Effect], now_ms: int, cls: type, record: r.PartitionChangeRecord,
                           offset: int) -> None:
        """The registration a reassignment record leaves, as spec/Replication.tla's action `cls`."""
        after = self._partition_by_id(record.topic_id, record.partition_id)
        if after is not None:
            out.append(Emit(cls(
                time_ms=now_ms, replica=self.node_id, topic=self.topics_by_id[record.topic_id],
                partition=record.partition_id, leader=after.leader, leader_epoch=after.leader_epoch,
                partition_epoch=after.partition_epoch, isr=after.isr, replicas=after.replicas,
                adding=after.adding_replicas, removing=after.removing_replicas, record_offset=offset,
            )))

    def _partition_by_id(self, topic_id: uuid.UUID, pid: int) -> Partition | None:
        name = self.topics_by_id.get(topic_id)
        return self.topics[name].partitions.get(pid) if name is not None else None

    def _emit_election(self, out: list[Effect], now_ms: int, record: r.PartitionChangeRecord,
                       before: Partition | None, offset: int) -> None:
        """Name the leader change after the spec action that justifies it."""
        after = self._partition_by_id(record.topic_id, record.partition_id)
        if before is None or after is None or before.leader == after.leader:
            return
        if after.leader not in before.isr:
            cls: type[LeaderElection] = UncleanElectLeader
        elif before.leader == NO_LEADER or before.leader not in after.isr:
            cls = ElectLeader  # the old leader was fenced or left (FenceBroker, then ElectLeader)
        else:
            cls = ElectPreferredLeader
        out.append(Emit(cls(
            time_ms=now_ms, replica=self.node_id, topic=self.topics_by_id[record.topic_id],
            partition=record.partition_id, leader=after.leader, leader_epoch=after.leader_epoch,
            partition_epoch=after.partition_epoch, isr=after.isr, replicas=after.replicas, record_offset=offset,
        )))

    def _apply(self, record: object, offset: int) -> None:
        """What a record means for the controller's state (replayed or just written):
        the metadata image's one replay, shared with every broker."""
        self.image.apply((record,))

    def _emit(self, out: list[Effect], cls: type[BrokerEvent], now_ms: int, broker: Broker, **fields) -> None:
        if self.tracing:
            # The image holds immutable values: report the broker as it is now.
            broker = self.brokers.get(broker.broker_id, broker)
            out.append(Emit(cls(
                time_ms=now_ms, replica=self.node_id, topic="__cluster_metadata", partition=0,
                broker=broker.broker_id, broker_epoch=broker.broker_epoch, fenced=broker.fenced,
                leader_epoch=self.leader_epoch, **fields,
            )))

    def _unclean_by_topic(self) -> dict[str, bool] | None:
        """unclean.leader.election.enable per topic as this controller resolves it (traced runs only)."""
        return {name: self._unclean_allowed(name) for name in self.topics} if self.tracing else None

    def _emit_unclean_switches(self, out: list[Effect], now_ms: int, before: dict[str, bool] | None,
                               offset: int) -> None:
        """A ConfigRecord event per partition whose unclean.leader.election.enable a written
        config batch changed (`before`: _unclean_by_topic() before the write)."""
        if before is None:
            return
        for name in sorted(self.topics):
            now = self._unclean_allowed(name)
            if name in before and before[name] != now:
                for pid in sorted(self.topics[name].partitions):
                    out.append(Emit(ConfigRecord(time_ms=now_ms, replica=self.node_id, topic=name, partition=pid,
                                                 unclean_leader_election_enable=now, record_offset=offset)))

    # ------------------------------------------------------------ membership

    def _on_registration(self, e: BrokerRegistration, now_ms: int, out: list[Effect]) -> None:
        existing = self.brokers.get(e.broker_id)
        if existing is not None and existing.incarnation_id != e.incarnation_id:
            alive = now_ms - self.last_heartbeat_ms.get(e.broker_id, -(10**18)) < self.broker_session_timeout_ms
            if alive and not existing.fenced:
                out.append(Reply(e.request_id, RegistrationReply(ErrorCode.DUPLICATE_BROKER_REGISTRATION)))
                return
        if existing is not None and existing.incarnation_id == e.incarnation_id:
            # A retried registration of the same process: same answer.
            out.append(Reply(e.request_id, RegistrationReply(ErrorCode.NONE, existing.broker_epoch)))
            return
        broker_epoch = self.next_offset
        record = r.RegisterBrokerRecord(
            broker_id=e.broker_id, incarnation_id=e.incarnation_id, broker_epoch=broker_epoch,
            end_points=tuple(e.end_points), rack=e.rack, fenced=True,
        )
        records: list = [record]
        if existing is not None:
            # The old incarnation's partitions lose it as leader and isr member.
            records += self._leave_partitions(existing.broker_id)
        self.shutting_down.pop(e.broker_id, None)
        self._write(records, e.request_id, RegistrationReply(ErrorCode.NONE, broker_epoch), out, now_ms,
                    lambda at: self._emit(out, RegisterBroker, now_ms, self.brokers[e.broker_id], record_offset=at))
        self.last_heartbeat_ms[e.broker_id] = now_ms

    def _on_heartbeat(self, e: BrokerHeartbeatRequest, now_ms: int, out: list[Effect]) -> None:
        broker = self.brokers.get(e.broker_id)
        if broker is None:
            out.append(Reply(e.request_id, HeartbeatReply(ErrorCode.BROKER_ID_NOT_REGISTERED)))
            return
        if broker.broker_epoch != e.broker_epoch:
            out.append(Reply(e.request_id, HeartbeatReply(ErrorCode.STALE_BROKER_EPOCH)))
            return
        self.last_heartbeat_ms[e.broker_id] = now_ms
        self._emit(out, BrokerHeartbeat, now_ms, broker, metadata_offset=e.current_metadata_offset)
        # The broker has applied its own registration (spec: broker_metadata_offset > RegistrationOffset).
        caught_up = e.current_metadata_offset > broker.broker_epoch
        if e.want_shut_down:
            return self._controlled_shutdown(e, broker, caught_up, now_ms, out)
        if broker.fenced and caught_up and not broker.in_controlled_shutdown:
            records: list = [r.UnfenceBrokerRecord(id=broker.broker_id, epoch=broker.broker_epoch)]
            records += self._elect_for_unfenced(broker.broker_id)
            self._write(records, e.request_id, HeartbeatReply(ErrorCode.NONE, True, False), out, now_ms,
                        lambda at: self._emit(out, UnfenceBroker, now_ms, broker,
                                              metadata_offset=e.current_metadata_offset, record_offset=at))
            return
        out.append(Reply(e.request_id, HeartbeatReply(ErrorCode.NONE, caught_up, broker.fenced)))

    def _controlled_shutdown(self, e: BrokerHeartbeatRequest, broker: Broker, caught_up: bool, now_ms: int,
                             out: list[Effect]) -> None:
        """want_shut_down: first mark the broker in controlled shutdown
        (BrokerRegistrationChangeRecord: no controller lets it lead or join an
        isr again) and, in the same batch, move every leadership off it and take
        it out of every isr; once it leads nothing and has applied that batch,
        fence it and answer should_shut_down (Kafka's SHUTDOWN_NOW)."""
        broker_id = broker.broker_id
        if broker.fenced:
            out.append(Reply(e.request_id, HeartbeatReply(ErrorCode.NONE, caught_up, True, True)))
            return
        if not broker.in_controlled_shutdown:
            records = [r.BrokerRegistrationChangeRecord(broker_id, broker.broker_epoch, in_controlled_shutdown=1)]
            records += self._leave_partitions(broker_id, shutting_down=True)
            self.shutting_down[broker_id] = self.next_offset + len(records)
            self._write(records, e.request_id, HeartbeatReply(ErrorCode.NONE, caught_up, False, False), out, now_ms,
                        lambda at: self._emit(out, ControlledShutdown, now_ms, broker, record_offset=at))
            return
        # A controller that took over mid-shutdown: the broker must apply what it has.
        self.shutting_down.setdefault(broker_id, self.next_offset)
        leads = any(p.leader == broker_id for t in self.topics.values() for p in t.partitions.values())
        if leads or e.current_metadata_offset < self.shutting_down[broker_id]:
            out.append(Reply(e.request_id, HeartbeatReply(ErrorCode.NONE, caught_up, False, False)))
            return
        del self.shutting_down[broker_id]
        self._write([r.FenceBrokerRecord(id=broker_id, epoch=broker.broker_epoch)], e.request_id,
                    HeartbeatReply(ErrorCode.NONE, caught_up, True, True), out, now_ms,
                    lambda at: self._emit(out, FenceBroker, now_ms, broker, record_offset=at))

    def _on_tick(self, now_ms: int, out: list[Effect]) -> None:
        for broker_id in sorted(self.brokers):
            broker = self.brokers[broker_id]
            last = self.last_heartbeat_ms.get(broker_id, now_ms)
            if broker.fenced or now_ms - last < self.broker_session_timeout_ms:
                continue
            self.shutting_down.pop(broker_id, None)
            records: list = [r.FenceBrokerRecord(id=broker_id, epoch=broker.broker_epoch)]
            records += self._leave_partitions(broker_id)
            self._write(records, None, None, out, now_ms,
                        lambda at, b=broker: self._emit(out, FenceBroker, now_ms, b, record_offset=at))
        if (self.auto_leader_rebalance_enable and self.next_imbalance_check_ms is not None
                and now_ms >= self.next_imbalance_check_ms):
            self.next_imbalance_check_ms = now_ms + self.leader_imbalance_check_interval_ms
            records = self._rebalance_records()
            if records:
                self._write(records, None, None, out, now_ms)
        if self.next_unclean_check_ms is not None and now_ms >= self.next_unclean_check_ms:
            self.next_unclean_check_ms = now_ms + self.unclean_leader_election_interval_ms
            records = self._unclean_election_records()
            if records:
                self._write(records, None, None, out, now_ms)

    def _unclean_election_records(self, broker_configs: dict | None = None,
                                  only_newly_allowed: bool = False) -> list:
        """spec UncleanElectLeader for every offline partition whose topic allows it
        (with `broker_configs`, BROKER config sets about to be written, in place of
        the image's); `only_newly_allowed`: only topics that did not allow it before."""
        records = []
        for name in sorted(self.topics):
            topic = self.topics[name]
            offline = [pid for pid in sorted(topic.partitions) if topic.partitions[pid].leader == NO_LEADER]
            if not offline or not self._unclean_allowed(name, broker_configs=broker_configs):
                continue
            if only_newly_allowed and self._unclean_allowed(name):
                continue
            for pid in offline:
                _, _, record = self._elect(UNCLEAN_ELECTION, topic, pid, topic.partitions[pid])
                if record is not None:
                    records.append(record)
        return records

    def _rebalance_records(self) -> list:
        """auto.leader.rebalance.enable: preferred elections for every broker whose
        share of not-led preferred partitions exceeds leader.imbalance.per.broker.percentage."""
        preferred: dict[int, int] = {}
        not_led: dict[int, list] = {}
        for name in sorted(self.topics):
            topic = self.topics[name]
            for pid in sorted(topic.partitions):
                p = topic.partitions[pid]
                if not p.replicas:
                    continue
                first = p.replicas[0]
                preferred[first] = preferred.get(first, 0) + 1
                if p.leader != first:
                    not_led.setdefault(first, []).append((topic, pid, p))
        records = []
        for broker_id in sorted(not_led):
            if len(not_led[broker_id]) * 100 <= self.leader_imbalance_per_broker_percentage * preferred[broker_id]:
                continue
            for topic, pid, p in not_led[broker_id]:
                if p.leader != NO_LEADER and broker_id in p.isr and self._eligible(broker_id):
                    records.append(r.PartitionChangeRecord(partition_id=pid, topic_id=topic.topic_id, leader=broker_id))
        return records

    # ------------------------------------------------------------ ElectLeaders

    def _on_elect_leaders(self, e: ElectLeaders, now_ms: int, out: list[Effect]) -> None:
        everything = e.partitions is None
        wanted = e.partitions if e.partitions is not None else tuple(
            (name, pid) for name in sorted(self.topics) for pid in sorted(self.topics[name].partitions))
        results = []
        records = []
        seen = set()
        for name, pid in wanted:
            topic = self.topics.get(name)
            p = topic.partitions.get(pid) if topic is not None else None
            if p is None:
                results.append((name, pid, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {name}-{pid}"))
                continue
            code, message, record = self._elect(e.election_type, topic, pid, p)
            if record is not None and (name, pid) not in seen:
                records.append(record)
            seen.add((name, pid))
            if not (everything and code == ErrorCode.ELECTION_NOT_NEEDED):
                results.append((name, pid, code, message))
        reply = ElectLeadersReply(ErrorCode.NONE, tuple(results))
        if records:
            self._write(records, e.request_id, reply, out, now_ms)
        else:
            out.append(Reply(e.request_id, reply))

    def _elect(self, election_type: int, topic: Topic, pid: int, p: Partition):
        """One partition of ElectLeaders: (error_code, message, record or None)."""
        if election_type == PREFERRED_ELECTION:
            first = p.replicas[0] if p.replicas else NO_LEADER
            if p.leader == first:
                return ErrorCode.ELECTION_NOT_NEEDED, None, None
            if first in p.isr and self._eligible(first):
                return ErrorCode.NONE, None, r.PartitionChangeRecord(partition_id=pid, topic_id=topic.topic_id, leader=first)
            return (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                    f"preferred replica {first} is not an unfenced isr member", None)
        if election_type == UNCLEAN_ELECTION:
            if p.leader != NO_LEADER:
                return ErrorCode.ELECTION_NOT_NEEDED, None, None
            leader = self._choose_leader(p.replicas, p.isr)
            if leader != NO_LEADER:
                return ErrorCode.NONE, None, r.PartitionChangeRecord(partition_id=pid, topic_id=topic.topic_id, leader=leader)
            for b in p.replicas:
                if self._eligible(b):
                    # The operator asked: a live replica outside the isr leads with what it has.
                    return ErrorCode.NONE, None, r.PartitionChangeRecord(
                        partition_id=pid, topic_id=topic.topic_id, isr=(b,), leader=b)
            return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "no live replica", None
        return ErrorCode.INVALID_REQUEST, f"unknown election type {election_type}", None

    def _eligible(self, broker_id: int) -> bool:
        """May lead or join an isr: registered, unfenced, not in controlled shutdown."""
        broker = self.brokers.get(broker_id)
        return broker is not None and not broker.fenced and not broker.in_controlled_shutdown

    def _leave_partitions(self, broker_id: int, shutting_down: bool = False) -> list:
        """One batch: every partition led by the broker gets a new leader from
        its isr (leader_epoch + 1), and the broker leaves every isr.
        (`shutting_down`: a controlled shutdown, not a fencing; only the
        mutation switches of `make mutation` tell them apart.)"""
        shutdown_bug = _m.ACTIVE and shutting_down
        records = []
        for name in sorted(self.topics):
            topic = self.topics[name]
            for pid in sorted(topic.partitions):
                p = topic.partitions[pid]
                if broker_id not in p.isr and p.leader != broker_id:
                    continue
                isr = tuple(b for b in p.isr if b != broker_id)
                if _m.ACTIVE and _m.on("fence_keeps_isr") or shutdown_bug and _m.on("shutdown_keeps_isr"):
                    isr = p.isr
                if p.leader == broker_id:
                    among = p.replicas if shutdown_bug and _m.on("shutdown_leader_outside_isr") else isr
                    leader = self._choose_leader(p.replicas, among, exclude=broker_id)
                    if leader == NO_LEADER:
                        # No other isr member: keep the last one in the isr
                        # (it holds every committed record) and go offline,
                        # unless the topic prefers availability (unclean).
                        isr = () if shutdown_bug and _m.on("shutdown_empties_isr") else p.isr
                        leader = self._choose_unclean_leader(name, p.replicas, isr, exclude=broker_id)
                        if leader != NO_LEADER:
                            isr = (leader,)
                    records.append(r.PartitionChangeRecord(partition_id=pid, topic_id=topic.topic_id, isr=isr, leader=leader))
                elif isr:
                    records.append(r.PartitionChangeRecord(partition_id=pid, topic_id=topic.topic_id, isr=isr))
        return records

    def _elect_for_unfenced(self, broker_id: int) -> list:
        records = []
        for name in sorted(self.topics):
            topic = self.topics[name]
            for pid in sorted(topic.partitions):
                p = topic.partitions[pid]
                if p.leader != NO_LEADER:
                    continue
                if broker_id in p.isr:
                    records.append(r.PartitionChangeRecord(partition_id=pid, topic_id=topic.topic_id, leader=broker_id))
                elif self._choose_unclean_leader(name, (broker_id,), p.isr, unfencing=broker_id) == broker_id:
                    # Every isr member is down and the topic allows unclean election:
                    # the returning replica leads with what it has (records may be lost).
                    records.append(r.PartitionChangeRecord(partition_id=pid, topic_id=topic.topic_id,
                                                           isr=(broker_id,), leader=broker_id))
        return records

    def _unclean_allowed(self, topic: str, topic_configs: dict[str, str] | None = None,
                         broker_configs: dict | None = None) -> bool:
        """unclean.leader.election.enable as Kafka's controller resolves it: the
        topic's config, else this controller's own broker-level dynamic config, else
        the cluster-wide dynamic default, else the broker configuration.
        `topic_configs` / `broker_configs` ({(BROKER, name): configs}) stand in for
        the image's, for a change not written yet."""
        for resource in ((r.TOPIC_RESOURCE, topic), (r.BROKER_RESOURCE, str(self.node_id)), (r.BROKER_RESOURCE, "")):
            if topic_configs is not None and resource[0] == r.TOPIC_RESOURCE:
                configs = topic_configs
            elif broker_configs is not None and resource in broker_configs:
                configs = broker_configs[resource]
            else:
                configs = self.image.configs.get(resource, {})
            value = configs.get("unclean.leader.election.enable")
            if value is not None:
                return value.strip().lower() == "true"
        return self.unclean_leader_election_enable

    def _choose_unclean_leader(self, topic: str, candidates: tuple[int, ...], isr: tuple[int, ...],
                               exclude: int = NO_LEADER, unfencing: int = NO_LEADER) -> int:
        """spec UncleanElectLeader: only when every isr member is fenced (or leaving),
        a live replica outside the isr, in assignment order."""
        if not self._unclean_allowed(topic):
            return NO_LEADER
        for b in isr:
            if b != exclude and self._eligible(b):
                return NO_LEADER  # a live isr member can lead cleanly
        for b in candidates:
            # `unfencing`: its UnfenceBrokerRecord is in the same batch, not yet applied
            if b != exclude and b not in isr and (self._eligible(b) or (b == unfencing and b in self.brokers)):
                return b
        return NO_LEADER

    def _choose_leader(self, replicas: tuple[int, ...], isr: tuple[int, ...], exclude: int = NO_LEADER) -> int:
        for b in replicas:
            if b != exclude and (b in isr or (_m.ACTIVE and _m.on("elect_outside_isr"))) and self._eligible(b):
                return b
        return NO_LEADER

    # ------------------------------------------------------------ topics

    def usable_brokers(self) -> list[Broker]:
        return [b for _, b in sorted(self.brokers.items()) if self._eligible(b.broker_id)]

    def assign_replicas(self, name: str, num_partitions: int, replication_factor: int, first_partition: int = 0) -> list[tuple[int, ...]] | None:
        """Kafka's replica assignment over the unfenced brokers, racks alternated; None if too few."""
        brokers = self.usable_brokers()
        if replication_factor < 1 or replication_factor > len(brokers):
            return None
        ordered = _rack_alternated(brokers)
        n = len(ordered)
        start = zlib.crc32(name.encode()) % n
        shift_base = zlib.crc32(name.encode()[::-1]) % n
        out = []
        for p in range(first_partition, first_partition + num_partitions):
            first = (start + p) % n
            shift = (shift_base + p // n) % max(1, n - 1)
            replicas = [ordered[first]]
            racks = {ordered[first].rack}
            candidates = [ordered[(first + 1 + (shift + k) % (n - 1)) % n] for k in range(n - 1)] if n > 1 else []
            # Distinct racks first while racks remain, then anything left.
            for pick_new_rack in (True, False):
                for b in candidates:
                    if len(replicas) == replication_factor:
                        break
                    if b in replicas or (pick_new_rack and b.rack is not None and b.rack in racks):
                        continue
                    replicas.append(b)
                    racks.add(b.rack)
            out.append(tuple(b.broker_id for b in replicas))
        return out

    def _on_create_topic(self, e: CreateTopic, out: list[Effect]) -> None:
        def fail(code: int, message: str) -> None:
            out.append(Reply(e.request_id, TopicReply(code, message)))

        if e.name in self.topics:
            return fail(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {e.name} already exists")
        if not 0 < e.num_partitions <= MAX_PARTITIONS_PER_REQUEST:
            return fail(ErrorCode.INVALID_PARTITIONS, f"number of partitions {e.num_partitions} is invalid")
        assignment = self.assign_replicas(e.name, e.num_partitions, e.replication_factor)
        if assignment is None:
            return fail(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor {e.replication_factor} is larger than the {len(self.usable_brokers())} "
                "unfenced brokers" if e.replication_factor >= 1 else "replication factor must be at least 1",
            )
        if e.validate_only:
            return fail(ErrorCode.NONE, None)
        records: list = [r.TopicRecord(name=e.name, topic_id=e.topic_id)]
        records += [
            r.ConfigRecord(resource_type=r.TOPIC_RESOURCE, resource_name=e.name, name=k, value=v) for k, v in e.configs
        ]
        records += [
            r.PartitionRecord(partition_id=pid, topic_id=e.topic_id, replicas=replicas, isr=replicas,
                              leader=replicas[0], leader_epoch=0, partition_epoch=0)
            for pid, replicas in enumerate(assignment)
        ]
        self._write(records, e.request_id, TopicReply(ErrorCode.NONE, None, e.topic_id), out)

    def _on_create_partitions(self, e: CreatePartitions, out: list[Effect]) -> None:
        topic = self.topics.get(e.name)
        if topic is None:
            out.append(Reply(e.request_id, TopicReply(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {e.name}")))
            return
        current = len(topic.partitions)
        if e.count <= current or e.count > MAX_PARTITIONS_PER_REQUEST:
            out.append(Reply(e.request_id, TopicReply(
                ErrorCode.INVALID_PARTITIONS, f"topic {e.name} has {current} partitions; {e.count} is not more")))
            return
        rf = len(topic.partitions[0].replicas)
        assignment = self.assign_replicas(e.name, e.count - current, rf, first_partition=current)
        if assignment is None:
            out.append(Reply(e.request_id, TopicReply(ErrorCode.INVALID_REPLICATION_FACTOR, "too few unfenced brokers")))
            return
        if e.validate_only:
            out.append(Reply(e.request_id, TopicReply(ErrorCode.NONE)))
            return
        records = [
            r.PartitionRecord(partition_id=current + i, topic_id=topic.topic_id, replicas=replicas, isr=replicas,
                              leader=replicas[0])
            for i, replicas in enumerate(assignment)
        ]
        self._write(records, e.request_id, TopicReply(ErrorCode.NONE, None, topic.topic_id), out)

    def _on_delete_topic(self, e: DeleteTopic, out: list[Effect]) -> None:
        name = e.name if e.name is not None else self.topics_by_id.get(e.topic_id)
        if name is None:
            out.append(Reply(e.request_id, TopicReply(ErrorCode.UNKNOWN_TOPIC_ID, "no topic with this id")))
            return
        topic = self.topics.get(name)
        # Internal topics come from each node's local metadata source, never from
        # this controller: none of its topics is one.
        refusal = delete_topic_refusal(name, topic is not None, delete_topic_enable=self.delete_topic_enable,
                                       internal=False)
        if refusal is not None:
            out.append(Reply(e.request_id, TopicReply(*refusal)))
            return
        self._write([r.RemoveTopicRecord(topic_id=topic.topic_id)], e.request_id,
                    TopicReply(ErrorCode.NONE, None, topic.topic_id), out)

    def _on_alter_topic_configs(self, e: AlterTopicConfigs, now_ms: int, out: list[Effect]) -> None:
        """ConfigRecords for what changes (a removed override: value None). When the
        change turns unclean.leader.election.enable on, the topic's offline partitions
        get a leader in the same batch, as the election on a returning replica would
        (spec UncleanElectLeader): a live isr member, else any live replica."""
        topic = self.topics.get(e.name)
        if topic is None:
            out.append(Reply(e.request_id, TopicReply(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {e.name}")))
            return
        if e.validate_only:  # the broker checked names and values; nothing is written
            out.append(Reply(e.request_id, TopicReply(ErrorCode.NONE)))
            return
        current = self.image.topic_configs(e.name)
        new = dict(e.configs)
        records: list = [r.ConfigRecord(r.TOPIC_RESOURCE, e.name, k, None) for k in sorted(set(current) - set(new))]
        records += [r.ConfigRecord(r.TOPIC_RESOURCE, e.name, k, v) for k, v in sorted(new.items()) if current.get(k) != v]
        if not records:
            out.append(Reply(e.request_id, TopicReply(ErrorCode.NONE, None, topic.topic_id)))
            return
        if not self._unclean_allowed(e.name) and self._unclean_allowed(e.name, new):
            for pid in sorted(topic.partitions):
                p = topic.partitions[pid]
                if p.leader == NO_LEADER:
                    _, _, record = self._elect(UNCLEAN_ELECTION, topic, pid, p)
                    if record is not None:
                        records.append(record)
        before = self._unclean_by_topic()
        self._write(records, e.request_id, TopicReply(ErrorCode.NONE, None, topic.topic_id), out, now_ms,
                    lambda at: self._emit_unclean_switches(out, now_ms, before, at))

    def _on_alter_broker_configs(self, e: AlterBrokerConfigs, now_ms: int, out: list[Effect]) -> None:
        """ConfigRecords (resource type BROKER) for what changes; every broker applies
        them from its image, so DescribeConfigs answers the same on every node. A
        change that turns unclean election on for a topic elects its offline
        partitions in the same batch (UncleanElectLeader), as a topic-level one does."""
        if e.resource_name != "" and not (e.resource_name.isdigit() and int(e.resource_name) >= 0):
            out.append(Reply(e.request_id, TopicReply(
                ErrorCode.INVALID_REQUEST, f"broker resource name {e.resource_name!r} is not a broker id or empty")))
            return
        if e.validate_only:
            out.append(Reply(e.request_id, TopicReply(ErrorCode.NONE)))
            return
        key = (r.BROKER_RESOURCE, e.resource_name)
        current = self.image.configs.get(key, {})
        new = dict(e.configs)
        records = [r.ConfigRecord(*key, k, None) for k in sorted(set(current) - set(new))]
        records += [r.ConfigRecord(*key, k, v) for k, v in sorted(new.items()) if current.get(k) != v]
        if records and current.get("unclean.leader.election.enable") != new.get("unclean.leader.election.enable"):
            records += self._unclean_election_records({key: new}, only_newly_allowed=True)
        if records:
            before = self._unclean_by_topic()
            self._write(records, e.request_id, TopicReply(ErrorCode.NONE), out, now_ms,
                        lambda at: self._emit_unclean_switches(out, now_ms, before, at))
        else:
            out.append(Reply(e.request_id, TopicReply(ErrorCode.NONE)))

    def _on_alter_partition(self, e: AlterPartition, out: list[Effect], now_ms: int = 0) -> None:
        def fail(code: int) -> None:
            out.append(Reply(e.request_id, AlterPartitionReply(code)))

        broker = self.brokers.get(e.broker_id)
        if broker is None or broker.broker_epoch != e.broker_epoch:
            return fail(ErrorCode.STALE_BROKER_EPOCH)
        name = self.topics_by_id.get(e.topic_id)
        p = self.topics[name].partitions.get(e.partition) if name is not None else None
        if p is None:
            return fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if p.leader != e.broker_id:
            return fail(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if e.leader_epoch != p.leader_epoch:
            return fail(ErrorCode.FENCED_LEADER_EPOCH)
        if e.partition_epoch != p.partition_epoch and not (_m.ACTIVE and _m.on("alter_partition_stale_epoch")):
            return fail(ErrorCode.INVALID_UPDATE_VERSION)
        isr = tuple(e.new_isr)
        if e.broker_id not in isr or any(b not in p.replicas for b in isr):
            return fail(ErrorCode.INVALID_REQUEST)
        for b, broker_epoch in zip(isr, e.new_isr_broker_epochs or (-1,) * len(isr)):
            # KIP-841: a fenced broker, or one in controlled shutdown, cannot join
            if not self._eligible(b) and b not in p.isr:
                return fail(ErrorCode.INELIGIBLE_REPLICA)
            if b in p.isr and not (b in self.brokers and not self.brokers[b].fenced):
                return fail(ErrorCode.INELIGIBLE_REPLICA)
            # KIP-903: the leader counts a fetch of the incarnation it names; another
            # incarnation's (delayed across a restart) says nothing of this one's log.
            if broker_epoch != -1 and self.brokers[b].broker_epoch != broker_epoch:
                return fail(ErrorCode.INELIGIBLE_REPLICA)
        if isr == p.isr:
            out.append(Reply(e.request_id, AlterPartitionReply(ErrorCode.NONE, p.leader, p.leader_epoch, p.isr, p.partition_epoch)))
            return
        if p.adding_replicas or p.removing_replicas:
            # KIP-455: the isr change that takes in the last adding replica
            # completes the reassignment in the same record.
            target = tuple(b for b in p.replicas if b not in p.removing_replicas)
            change = self._reassignment_change(name, p, target, isr)
            # (traced as the spec's CompleteReassignment when it completes, else as the isr change it is)
            completes = {0: reassign_trace.CompleteReassignment} if change is not None and (
                "adding_replicas" in change.fields or "removing_replicas" in change.fields) else None
            if change is not None and change.leader != NO_LEADER_CHANGE:
                # A new term (the leader left, or replicas were removed): the
                # leader learns it from the metadata, as Kafka's NEW_LEADER_ELECTED says.
                record = r.PartitionChangeRecord(e.partition, e.topic_id, **change.fields)
                return self._write([record], e.request_id, AlterPartitionReply(ErrorCode.NEW_LEADER_ELECTED), out,
                                   now_ms, reassignments=completes)
            if change is not None:
                record = r.PartitionChangeRecord(e.partition, e.topic_id, **change.fields)
                return self._write([record], e.request_id, AlterPartitionReply(
                    ErrorCode.NONE, p.leader, p.leader_epoch, change.isr, p.partition_epoch + 1), out, now_ms,
                    reassignments=completes)
        record = r.PartitionChangeRecord(partition_id=e.partition, topic_id=e.topic_id, isr=isr)
        base_epoch = p.partition_epoch
        self._write([record], e.request_id,
                    AlterPartitionReply(ErrorCode.NONE, p.leader, p.leader_epoch, isr, base_epoch + 1), out)

    # ------------------------------------------------------------ reassignments (KIP-455)

    def _on_alter_reassignments(self, e: AlterPartitionReassignments, now_ms: int, out: list[Effect]) -> None:
        """Each partition's change is one PartitionChangeRecord: the growth step
        (replicas = target + the ones leaving, adding/removing set, isr and
        leader kept), or at once the completion when nothing is to be added."""
        results = []
        records = []
        kinds = {}  # record index -> its trace event (spec/Replication.tla's action)
        seen = set()
        for name, pid, target in e.reassignments:
            topic = self.topics.get(name)
            p = topic.partitions.get(pid) if topic is not None else None
            if p is None:
                results.append((name, pid, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {name}-{pid}"))
                continue
            if (name, pid) in seen:
                results.append((name, pid, ErrorCode.INVALID_REQUEST, f"{name}-{pid} named twice in one request"))
                continue
            seen.add((name, pid))
            code, message, fields = self._reassign(name, p, target, e.allow_replication_factor_change)
            results.append((name, pid, code, message))
            if fields:
                kinds[len(records)] = (reassign_trace.CancelPartitionReassignment if target is None
                                       else reassign_trace.AlterPartitionReassignments)
                records.append(r.PartitionChangeRecord(pid, topic.topic_id, **fields))
        reply = ReassignmentsReply(ErrorCode.NONE, tuple(results))
        if records:
            self._write(records, e.request_id, reply, out, now_ms, reassignments=kinds)
        else:
            out.append(Reply(e.request_id, reply))

    def _reassign(self, name: str, p: Partition, target: tuple[int, ...] | None, allow_rf_change: bool = True):
        """One partition of AlterPartitionReassignments: (error_code, message, record fields or None)."""
        reassigning = bool(p.adding_replicas or p.removing_replicas)
        if target is None and not reassigning:
            return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment of {name} in progress", None
        if target is not None:
            problem = self._invalid_assignment(tuple(target))
            if problem is not None:
                return ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem, None
            replication_factor = len(p.replicas) - len(p.adding_replicas)
            if not allow_rf_change and len(target) != replication_factor:
                return ErrorCode.INVALID_REPLICATION_FACTOR, (
                    f"the replication factor of {name} would change from {replication_factor} to {len(target)}"), None
        change = self._reassignment_change(name, p, None if target is None else tuple(target), p.isr)
        if change is None:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, (
                f"cannot revert the reassignment of {name}: only added replicas are in the isr and no "
                "original replica may lead uncleanly (unclean.leader.election.enable off, or none alive)"), None
        return ErrorCode.NONE, None, change.fields

    def _invalid_assignment(self, target: tuple[int, ...]) -> str | None:
        """Kafka's checks of a manual assignment; the reason, or None if it is valid."""
        if not target:
            return "the replica list is empty"
        for b in target:
            if target.count(b) > 1:
                return f"broker {b} is named more than once"
            if b not in self.brokers:
                return f"broker {b} is not registered"
        return None

    def _reassignment_change(self, name: str, p: Partition, target: tuple[int, ...] | None,
                             isr: tuple[int, ...]) -> "_ReassignmentChange | None":
        """The partition after a new target (None: cancel) given the isr `isr`:
        a reassignment in progress is first undone (its adding replicas were
        never part of the assignment), then the target's growth step, then the
        completion once every adding replica is in the isr. None when a
        cancellation would leave no isr (only an unclean choice could)."""
        original = tuple(b for b in p.replicas if b not in p.adding_replicas)
        if target is None:
            replicas, adding, removing = original, (), ()
            isr = tuple(b for b in isr if b in original)
            if not isr:
                leader = self._choose_unclean_leader(name, original, isr)
                if leader == NO_LEADER:
                    return None
                isr = (leader,)
        else:
            adding = tuple(b for b in target if b not in original)
            removing = tuple(b for b in original if b not in target)
            replicas = target + removing
            isr = tuple(b for b in isr if b in replicas)
            if ((all(b in isr for b in adding) or _m.ACTIVE and _m.on("reassign_complete_early"))
                    and any(b in isr for b in target)):
                replicas, adding, removing = target, (), ()
                isr = tuple(b for b in isr if b in target)
        if p.leader in isr:
            leader = p.leader
        elif _m.ACTIVE and _m.on("reassign_elect_removed"):
            leader = self._choose_leader(p.replicas, p.isr)
        else:
            leader = self._choose_leader(replicas, isr)
        fields: dict = {}
        if isr != p.isr:
            fields["isr"] = isr
        if replicas != p.replicas:
            fields["replicas"] = replicas
        if adding != p.adding_replicas:
            fields["adding_replicas"] = adding
        if removing != p.removing_replicas:
            fields["removing_replicas"] = removing
        # A removed replica must not keep fetching in the old term: a replica
        # set that loses members starts a new leader_epoch, as Kafka does.
        shrunk = any(b not in replicas for b in p.replicas) and not (_m.ACTIVE and _m.on("reassign_no_epoch_bump"))
        if leader != p.leader or (shrunk and leader != NO_LEADER):
            fields["leader"] = leader
        return _ReassignmentChange(fields, isr, fields.get("leader", NO_LEADER_CHANGE))

    def _on_list_reassignments(self, e: ListPartitionReassignments, out: list[Effect]) -> None:
        """The ongoing reassignments (Kafka leaves out unknown and idle partitions)."""
        wanted = e.partitions if e.partitions is not None else tuple(
            (name, pid) for name in sorted(self.topics) for pid in sorted(self.topics[name].partitions))
        results = []
        for name, pid in wanted:
            topic = self.topics.get(name)
            p = topic.partitions.get(pid) if topic is not None else None
            if p is not None and (p.adding_replicas or p.removing_replicas):
                results.append((name, pid, p.replicas, p.adding_replicas, p.removing_replicas))
        out.append(Reply(e.request_id, ListReassignmentsReply(ErrorCode.NONE, tuple(results))))


    def _on_allocate_producer_ids(self, e: AllocateProducerIds, out: list[Effect]) -> None:
        broker = self.brokers.get(e.broker_id)
        if broker is None:
            out.append(Reply(e.request_id, ProducerIdsReply(ErrorCode.BROKER_ID_NOT_REGISTERED)))
            return
        if broker.broker_epoch != e.broker_epoch:
            # a zombie incarnation must not take ids (Kafka checks the epoch too)
            out.append(Reply(e.request_id, ProducerIdsReply(ErrorCode.STALE_BROKER_EPOCH)))
            return
        start = self.image.next_producer_id
        try:
            record = grant_block(start, e.broker_id, e.broker_epoch)
        except ProducerIdsExhaustedError:
            out.append(Reply(e.request_id, ProducerIdsReply(ErrorCode.UNKNOWN_SERVER_ERROR)))
            return
        # Applied at once (see _write): a second request before the commit gets the next block.
        self._write([record], e.request_id,
                    ProducerIdsReply(ErrorCode.NONE, start, record.next_producer_id - start), out)


@dataclass(frozen=True, slots=True)
class _ReassignmentChange:
    fields: dict  # PartitionChangeRecord fields that change
    isr: tuple[int, ...]
    leader: int  # NO_LEADER_CHANGE unless a new term starts


def delete_topic_refusal(name: str, exists: bool, *, delete_topic_enable: bool,
                         internal: bool) -> tuple[int, str] | None:
    """DeleteTopics' gates, one copy for the controller core and the single broker
    (its own controller): (error code, message) to refuse the delete with, or None.

    delete.topic.enable off refuses every delete, even of a topic that does not
    exist (Kafka checks it first); then an unknown topic; then an internal one
    (Kafka refuses __consumer_offsets: it holds every group's state)."""
    if not delete_topic_enable:
        return ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled."
    if not exists:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name}"
    if internal:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot delete internal topic {name}."
    return None


def _rack_alternated(brokers: list[Broker]) -> list[Broker]:
    """Brokers ordered rack by rack in turn (Kafka's rack-alternated list), or by id without racks."""
    if all(b.rack is None for b in brokers):
        return list(brokers)
    by_rack: dict[str, list[Broker]] = {}
    for b in brokers:
        by_rack.setdefault(b.rack or "", []).append(b)
    racks = sorted(by_rack)
    out = []
    i = 0
    while len(out) < len(brokers):
        for rack in racks:
            if i < len(by_rack[rack]):
                out.append(by_rack[rack][i])
        i += 1
    return out


def _not_controller(event: object) -> object:
    match event:
        case BrokerRegistration():
            return RegistrationReply(ErrorCode.NOT_CONTROLLER)
        case BrokerHeartbeatRequest():
            return HeartbeatReply(ErrorCode.NOT_CONTROLLER)
        case AlterPartition():
            return AlterPartitionReply(ErrorCode.NOT_CONTROLLER)
        case AllocateProducerIds():
            return ProducerIdsReply(ErrorCode.NOT_CONTROLLER)
        case ElectLeaders():
            return ElectLeadersReply(ErrorCode.NOT_CONTROLLER)
        case AlterPartitionReassignments():
            return ReassignmentsReply(ErrorCode.NOT_CONTROLLER)
        case ListPartitionReassignments():
            return ListReassignmentsReply(ErrorCode.NOT_CONTROLLER)
    return TopicReply(ErrorCode.NOT_CONTROLLER, "not the active controller")

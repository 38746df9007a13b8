"""The metadata image: what a broker knows of the cluster, built only from records.

Theory of operation
-------------------
Kafka's brokers never decide metadata; they replay it. Every fact (a topic
with this id exists, a partition has these replicas / isr / leader in this
leader_epoch and partition_epoch, a broker registered or was fenced, a
config was set) arrives as a metadata record (records.py), and
`MetadataImage.apply(records)` folds them into the image, returning a
`MetadataDelta` that says what changed. The replica manager turns the delta
into BecomeLeader / BecomeFollower and log creation and deletion; handlers
answer Metadata, ListOffsets, ... from the image.

The same records come from two sources: the single-node broker's local
source (local_source.py, a file in the first log dir) and, in a KRaft
cluster, the committed `__cluster_metadata` log. Neither the source nor the
image chooses a leader or an epoch; the image only computes epochs the way
Kafka's PartitionRegistration.merge does:

- a PartitionChangeRecord whose `leader` is set (anything but
  NO_LEADER_CHANGE = -2) starts a new leadership term: leader_epoch + 1,
  even when the leader stays the same broker (that is how a controller
  forces a new term, e.g. a single broker's restart);
- every PartitionChangeRecord bumps partition_epoch (the epoch AlterPartition
  requests are checked against);
- a PartitionRecord replaces the partition's registration as written.

Applying is pure (no I/O, no clock). The image is mutated in place, and the
delta is the only description of the change the rest of the broker reads.
This is the one replay of metadata records in kref: the controller core
(kref/controller/controller.py) keeps its brokers, topics and partitions as
a MetadataImage too, so a record means the same on every node.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kref.metadata import records as r

__all__ = ["PartitionImage", "TopicImage", "BrokerImage", "MetadataImage", "MetadataDelta", "MetadataImageError"]


class MetadataImageError(ValueError):
    """A record that does not fit the image (a partition of an unknown topic, ...)."""


@dataclass(frozen=True, slots=True)
class PartitionImage:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    # KIP-455: a reassignment in progress (replicas = target + the ones leaving)
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass(slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionImage] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BrokerImage:
    broker_id: int
    broker_epoch: int
    incarnation_id: uuid.UUID
    end_points: tuple[r.BrokerEndpoint, ...]
    rack: str | None
    fenced: bool
    # Persisted (BrokerRegistrationChangeRecord), so every controller knows: a
    # broker in controlled shutdown may neither lead nor join an isr until it
    # registers again.
    in_controlled_shutdown: bool = False


@dataclass(slots=True)
class MetadataDelta:
    """What one `apply` changed; keys are topic names and (topic, partition)."""

    created_topics: list[str] = field(default_factory=list)
    # name -> the topic as it was (its partitions are gone with it)
    deleted_topics: dict[str, TopicImage] = field(default_factory=dict)
    # (topic, partition) -> (before or None for a new partition, after)
    changed_partitions: dict[tuple[str, int], tuple[PartitionImage | None, PartitionImage]] = field(
        default_factory=dict
    )
    # (resource_type, resource_name) whose configs changed
    changed_configs: set[tuple[int, str]] = field(default_factory=set)
    changed_brokers: set[int] = field(default_factory=set)
    changed_features: set[str] = field(default_factory=set)

    def is_empty(self) -> bool:
        return not (
            self.created_topics or self.deleted_topics or self.changed_partitions or self.changed_configs
            or self.changed_brokers or self.changed_features
        )


@dataclass
class MetadataImage:
    topics: dict[str, TopicImage] = field(default_factory=dict)
    topics_by_id: dict[uuid.UUID, str] = field(default_factory=dict)
    brokers: dict[int, BrokerImage] = field(default_factory=dict)
    # (resource_type, resource_name) -> {config name: value}
    configs: dict[tuple[int, str], dict[str, str]] = field(default_factory=dict)
    features: dict[str, int] = field(default_factory=dict)
    # KIP-730: the first producer id not yet granted to any broker.
    next_producer_id: int = 0
    # Bumped by every apply(): readers that cache what they derive from the
    # image (the broker's encoded Metadata responses) key it by generation.
    generation: int = field(default=0, compare=False)

    # ------------------------------------------------------------ queries

    def topic(self, name: str) -> TopicImage | None:
        return self.topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        name = self.topics_by_id.get(topic_id)
        return self.topics.get(name) if name is not None else None

    def isr_registration(self, broker_id: int) -> tuple[int, bool]:
        """A follower's broker as a leader checks it before taking it into an isr
        (Kafka's isReplicaIsrEligible, KIP-841/903): (its broker epoch when
        registered and unfenced, else -1; whether it may join: registered,
        unfenced, not in controlled shutdown). An image with no registrations at
        all (a single broker's local metadata) has nothing to check: (-1, True)."""
        if not self.brokers:
            return -1, True
        b = self.brokers.get(broker_id)
        if b is None or b.fenced:
            return -1, False
        return b.broker_epoch, not b.in_controlled_shutdown

    def partition(self, name: str, partition: int) -> PartitionImage | None:
        topic = self.topics.get(name)
        return topic.partitions.get(partition) if topic is not None else None

    def topic_configs(self, name: str) -> dict[str, str]:
        return dict(self.configs.get((r.TOPIC_RESOURCE, name), {}))

    def alive_brokers(self) -> list[int]:
        """Registered, unfenced broker ids, in order (Kafka's "alive" brokers)."""
        return sorted(broker_id for broker_id, b in self.brokers.items() if not b.fenced)

    def ready_to_serve(self, broker_id: int, incarnation_id: uuid.UUID) -> bool:
        """Whether a broker may answer clients: this incarnation's registration is
        in the image and unfenced. Before that its Metadata answer would leave
        itself out (often every broker, at cluster start), and a client given no
        broker or a controller id it cannot reach waits for its next refresh."""
        b = self.brokers.get(broker_id)
        return b is not None and b.incarnation_id == incarnation_id and not b.fenced

    def client_controller_id(self, broker_id: int) -> int:
        """The controller_id a broker gives clients in Metadata and DescribeCluster.

        In KRaft the client's "controller" is any alive broker (they forward
        admin requests to the active controller, KIP-590); Kafka picks one at
        random. Here: this broker if alive, else the lowest alive one, so the id
        is always one of the brokers the same answer lists (-1 if none is)."""
        alive = self.alive_brokers()
        if broker_id in alive:
            return broker_id
        return alive[0] if alive else -1

    # ------------------------------------------------------------ replay

    def apply(
        self,
        records: "list[r.MetadataRecord] | tuple[r.MetadataRecord, ...]",
        *,
        on_invalid: "Callable[[object, MetadataImageError], None] | None" = None,
    ) -> MetadataDelta:
        """Fold `records` in; one delta for all. A record that does not fit raises,
        unless `on_invalid` is given: then it is reported there and skipped (a
        broker replaying a committed log must not stop at one bad record)."""
        delta = MetadataDelta()
        self.generation += 1
        for record in records:
            if on_invalid is None:
                self._apply_one(record, delta)
                continue
            try:
                self._apply_one(record, delta)
            except MetadataImageError as exc:
                on_invalid(record, exc)
        return delta

    def _apply_one(self, record: object, delta: MetadataDelta) -> None:
        match record:
            case r.TopicRecord():
                if record.name in self.topics:
                    raise MetadataImageError(f"topic {record.name} exists already")
                self.topics[record.name] = TopicImage(record.name, record.topic_id)
                self.topics_by_id[record.topic_id] = record.name
                delta.created_topics.append(record.name)
            case r.PartitionRecord():
                topic = self._topic_of(record.topic_id)
                before = topic.partitions.get(record.partition_id)
                after = PartitionImage(
                    tuple(record.replicas), tuple(record.isr), record.leader, record.leader_epoch,
                    record.partition_epoch, tuple(record.adding_replicas), tuple(record.removing_replicas),
                )
                self._set_partition(topic, record.partition_id, before, after, delta)
            case r.PartitionChangeRecord():
                topic = self._topic_of(record.topic_id)
                before = topic.partitions.get(record.partition_id)
                if before is None:
                    raise MetadataImageError(f"change of unknown partition {topic.name}-{record.partition_id}")
                after = before
                if record.isr is not None:
                    after = replace(after, isr=tuple(record.isr))
                if record.replicas is not None:
                    after = replace(after, replicas=tuple(record.replicas))
                if record.adding_replicas is not None:
                    after = replace(after, adding_replicas=tuple(record.adding_replicas))
                if record.removing_replicas is not None:
                    after = replace(after, removing_replicas=tuple(record.removing_replicas))
                if record.leader != r.NO_LEADER_CHANGE:
                    # Kafka: a leader field starts a new term, same broker or not.
                    after = replace(after, leader=record.leader, leader_epoch=before.leader_epoch + 1)
                after = replace(after, partition_epoch=before.partition_epoch + 1)
                self._set_partition(topic, record.partition_id, before, after, delta)
            case r.RemoveTopicRecord():
                name = self.topics_by_id.pop(record.topic_id, None)
                if name is None:
                    raise MetadataImageError(f"removal of unknown topic id {record.topic_id}")
                topic = self.topics.pop(name)
                self.configs.pop((r.TOPIC_RESOURCE, name), None)
                if name in delta.created_topics:
                    delta.created_topics.remove(name)
                for p in topic.partitions:
                    delta.changed_partitions.pop((name, p), None)
                delta.deleted_topics[name] = topic
            case r.ConfigRecord():
                key = (record.resource_type, record.resource_name)
                configs = self.configs.setdefault(key, {})
                if record.value is None:
                    configs.pop(record.name, None)
                else:
                    configs[record.name] = record.value
                if not configs:
                    del self.configs[key]
                delta.changed_configs.add(key)
            case r.RegisterBrokerRecord():
                self.brokers[record.broker_id] = BrokerImage(
                    record.broker_id, record.broker_epoch, record.incarnation_id, tuple(record.end_points),
                    record.rack, record.fenced,
                )
                delta.changed_brokers.add(record.broker_id)
            case r.UnregisterBrokerRecord():
                b = self.brokers.get(record.broker_id)
                if b is not None and b.broker_epoch == record.broker_epoch:
                    del self.brokers[record.broker_id]
                    delta.changed_brokers.add(record.broker_id)
            case r.FenceBrokerRecord() | r.UnfenceBrokerRecord():
                b = self.brokers.get(record.id)
                if b is not None and b.broker_epoch == record.epoch:
                    self.brokers[record.id] = replace(b, fenced=isinstance(record, r.FenceBrokerRecord))
                    delta.changed_brokers.add(record.id)
            case r.BrokerRegistrationChangeRecord():
                b = self.brokers.get(record.broker_id)
                if b is not None and b.broker_epoch == record.broker_epoch:
                    if record.fenced:
                        b = replace(b, fenced=record.fenced > 0)
                    if record.in_controlled_shutdown:
                        b = replace(b, in_controlled_shutdown=True)
                    self.brokers[record.broker_id] = b
                    delta.changed_brokers.add(record.broker_id)
            case r.FeatureLevelRecord():
                self.features[record.name] = record.feature_level
                delta.changed_features.add(record.name)
            case r.ProducerIdsRecord():
                if record.next_producer_id <= self.next_producer_id:
                    # a block granted twice would give two producers one id
                    raise MetadataImageError(
                        f"producer id block goes back: {record.next_producer_id} <= {self.next_producer_id}")
                self.next_producer_id = record.next_producer_id
            case _:
                raise MetadataImageError(f"not a metadata record: {record!r}")

    def _topic_of(self, topic_id: uuid.UUID) -> TopicImage:
        topic = self.topic_by_id(topic_id)
        if topic is None:
            raise MetadataImageError(f"partition of unknown topic id {topic_id}")
        return topic

    @staticmethod
    def _set_partition(
        topic: TopicImage, partition: int, before: PartitionImage | None, after: PartitionImage, delta: MetadataDelta
    ) -> None:
        if after.leader_epoch < (before.leader_epoch if before is not None else -1):
            raise MetadataImageError(f"{topic.name}-{partition}: leader_epoch would go back to {after.leader_epoch}")
        topic.partitions[partition] = after
        first = delta.changed_partitions.get((topic.name, partition))
        delta.changed_partitions[(topic.name, partition)] = (first[0] if first is not None else before, after)

    def copy(self) -> "MetadataImage":
        """An independent image with the same content. Partitions and brokers are
        immutable values, so only the containers are copied: O(partitions) dict
        entries, no record decoded or replayed (a controller taking over copies
        its node's committed image; 10,000 partitions cost milliseconds, a
        replay of them about a second)."""
        return MetadataImage(
            topics={n: TopicImage(t.name, t.topic_id, dict(t.partitions)) for n, t in self.topics.items()},
            topics_by_id=dict(self.topics_by_id),
            brokers=dict(self.brokers),
            configs={k: dict(v) for k, v in self.configs.items()},
            features=dict(self.features),
            next_producer_id=self.next_producer_id,
        )

    # ------------------------------------------------------------ snapshot

    def changes_to(self, target: "MetadataImage") -> list[r.MetadataRecord]:
        """Records that turn this image into `target` (a node loading a snapshot
        from the leader while it already holds an older image): what is gone is
        removed, everything else is written as the target has it."""
        out: list[r.MetadataRecord] = []
        for name, topic in self.topics.items():
            kept = target.topics.get(name)
            if kept is None or kept.topic_id != topic.topic_id:
                out.append(r.RemoveTopicRecord(topic.topic_id))
        for broker_id, b in sorted(self.brokers.items()):
            if broker_id not in target.brokers:
                out.append(r.UnregisterBrokerRecord(broker_id, b.broker_epoch))
        for key, configs in sorted(self.configs.items()):
            kept_configs = target.configs.get(key, {})
            for name in sorted(configs):
                if name not in kept_configs:
                    out.append(r.ConfigRecord(key[0], key[1], name, None))
        for record in target.to_records():
            if isinstance(record, r.TopicRecord):
                mine = self.topics.get(record.name)
                if mine is not None and mine.topic_id == record.topic_id:
                    continue
            elif isinstance(record, r.ProducerIdsRecord) and record.next_producer_id <= self.next_producer_id:
                continue
            elif isinstance(record, r.PartitionRecord):
                mine = self.topic_by_id(record.topic_id)
                before = mine.partitions.get(record.partition_id) if mine is not None else None
                if before is not None and before == PartitionImage(
                    tuple(record.replicas), tuple(record.isr), record.leader, record.leader_epoch, record.partition_epoch,
                    tuple(record.adding_replicas), tuple(record.removing_replicas),
                ):
                    continue  # unchanged: no delta for the replica manager
            out.append(record)
        return out

    def to_records(self) -> list[r.MetadataRecord]:
        """Records that rebuild this image from empty (a snapshot, as Kafka writes one)."""
        out: list[r.MetadataRecord] = []
        for name, level in sorted(self.features.items()):
            out.append(r.FeatureLevelRecord(name, level))
        for b in sorted(self.brokers.values(), key=lambda b: b.broker_id):
            out.append(r.RegisterBrokerRecord(b.broker_id, b.incarnation_id, b.broker_epoch, b.end_points, (),
                                              b.rack, b.fenced))
            if b.in_controlled_shutdown:
                out.append(r.BrokerRegistrationChangeRecord(b.broker_id, b.broker_epoch, in_controlled_shutdown=1))
        for topic in self.topics.values():
            out.append(r.TopicRecord(topic.name, topic.topic_id))
            for p, part in sorted(topic.partitions.items()):
                out.append(r.PartitionRecord(p, topic.topic_id, part.replicas, part.isr, part.leader,
                                             part.leader_epoch, part.partition_epoch,
                                             part.removing_replicas, part.adding_replicas))
        for (rtype, rname), configs in sorted(self.configs.items()):
            for name, value in sorted(configs.items()):
                out.append(r.ConfigRecord(rtype, rname, name, value))
        if self.next_producer_id:
            out.append(r.ProducerIdsRecord(-1, -1, self.next_producer_id))
        return out

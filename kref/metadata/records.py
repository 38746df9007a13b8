"""Kafka's metadata records, the contents of the metadata log `__cluster_metadata`.

Theory of operation
-------------------
KRaft (KIP-631) keeps all cluster metadata as a log of small records, each
a fact the active controller decided: a broker registered (with its epoch,
endpoints and rack), was fenced or unfenced; a topic exists with this id;
a partition has these replicas, this isr and this leader in this
leader_epoch / partition_epoch; a change to that partition; a topic was
removed; a config was set; a feature level was finalized. Replaying them in
offset order gives every node the same metadata image.

These dataclasses are named and shaped after Kafka's record schemas (its
field names in snake_case), immutable, with no behaviour: the controller
core (kref/controller/controller.py) creates them, the metadata image
applies them, and kref/metadata/serde.py frames them as Kafka does in the
log. PartitionChangeRecord carries only what changes: `isr` / `replicas`
None and `leader` NO_LEADER_CHANGE (-2) mean "unchanged"; a leader change
bumps the leader_epoch and every change bumps the partition_epoch (the
image computes both, as Kafka's does).

Defined by helper "cluster" (issue 9) ahead of the metadata image, as the
lead asked; the image is to be built on these, not on a second set.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

__all__ = [
    "NO_LEADER",
    "NO_LEADER_CHANGE",
    "BrokerEndpoint",
    "BrokerFeature",
    "RegisterBrokerRecord",
    "UnregisterBrokerRecord",
    "FenceBrokerRecord",
    "UnfenceBrokerRecord",
    "BrokerRegistrationChangeRecord",
    "TopicRecord",
    "PartitionRecord",
    "PartitionChangeRecord",
    "RemoveTopicRecord",
    "ConfigRecord",
    "FeatureLevelRecord",
    "ProducerIdsRecord",
    "MetadataRecord",
    "TOPIC_RESOURCE",
    "BROKER_RESOURCE",
]

NO_LEADER = -1
NO_LEADER_CHANGE = -2
# ConfigRecord.resource_type values (Kafka's ConfigResource.Type ids).
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    name: str  # the listener name
    host: str
    port: int
    security_protocol: int = 0  # PLAINTEXT


@dataclass(frozen=True, slots=True)
class BrokerFeature:
    name: str
    min_supported_version: int
    max_supported_version: int


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    broker_id: int
    incarnation_id: uuid.UUID
    broker_epoch: int  # the offset of this record in the metadata log
    end_points: tuple[BrokerEndpoint, ...] = ()
    features: tuple[BrokerFeature, ...] = ()
    rack: str | None = None
    fenced: bool = True


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRecord:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class FenceBrokerRecord:
    id: int
    epoch: int  # the broker epoch being fenced


@dataclass(frozen=True, slots=True)
class UnfenceBrokerRecord:
    id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class BrokerRegistrationChangeRecord:
    """A change to one registration (Kafka's apiKey 17, version 1). kref writes it
    for controlled shutdown: in_controlled_shutdown = 1 makes the broker
    ineligible to lead or join an isr (KIP-841) on every controller that
    replays it, so a failover does not forget it. `fenced`: -1 unfenced,
    0 no change, 1 fenced (kref fences with FenceBrokerRecord)."""

    broker_id: int
    broker_epoch: int
    fenced: int = 0
    in_controlled_shutdown: int = 0  # 0: no change, 1: in controlled shutdown


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    partition_id: int
    topic_id: uuid.UUID
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    partition_id: int
    topic_id: uuid.UUID
    isr: tuple[int, ...] | None = None
    leader: int = NO_LEADER_CHANGE
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    resource_type: int  # TOPIC_RESOURCE or BROKER_RESOURCE
    resource_name: str
    name: str
    value: str | None  # None deletes the config


@dataclass(frozen=True, slots=True)
class FeatureLevelRecord:
    name: str
    feature_level: int


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    """KIP-730: a block of producer ids handed to one broker.

    `next_producer_id` is the first id no broker may receive yet; the block
    just granted is [next_producer_id - block size, next_producer_id).
    """
    broker_id: int
    broker_epoch: int
    next_producer_id: int


MetadataRecord = (
    RegisterBrokerRecord
    | UnregisterBrokerRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | BrokerRegistrationChangeRecord
    | TopicRecord
    | PartitionRecord
    | PartitionChangeRecord
    | RemoveTopicRecord
    | ConfigRecord
    | FeatureLevelRecord
    | ProducerIdsRecord
)

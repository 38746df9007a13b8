"""Trace events of partition reassignment (KIP-455), named after spec/Replication.tla's actions.

Theory of operation. A reassignment is decided by the controller core and
carried out by the brokers' replica managers; each step logs the event of
the spec action it implements (spec/Replication.tla's "Partition
reassignment" section), so that trace_check/replication.py can check a
cluster run that moves a partition:

- AlterPartitionReassignments: the controller's PartitionChangeRecord for a
  new target (the growth step: replicas = target + the leaving ones, with
  adding and removing; or the completion at once when every adding replica
  is already in the isr).
- CancelPartitionReassignment: a null target: back to the original replicas.
- CompleteReassignment: the AlterPartition that took the last adding
  replica into the isr, committed with the completion in the same record
  (replicas = target, isr without the removed, maybe a new leader).
- StopReplica: a broker applied a registration that no longer names it: it
  stops its replica and deletes the log.

The controller's events carry the registration the record leaves (leader,
leader_epoch, partition_epoch, isr, replicas, adding, removing) and the
record's metadata log offset (see kref/controller/controller.py's
BrokerWrite). They live in their own module, as the group coordinator's do,
because the controller's request of the same name already has that name.
"""

from __future__ import annotations

from dataclasses import dataclass

from kref.trace.events import TraceEvent


@dataclass(frozen=True, slots=True, kw_only=True)
class RegistrationWrite(TraceEvent):
    """The partition registration a controller record leaves (its elections' events extend it too);
    replica = the controller's node id, topic/partition = the partition."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    record_offset: int = -1  # the PartitionChangeRecord's metadata log offset (see BrokerWrite)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReassignmentWrite(RegistrationWrite):
    """A reassignment's partition change: the registration and the move in progress."""

    adding: tuple[int, ...]
    removing: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionReassignments(ReassignmentWrite):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelPartitionReassignment(ReassignmentWrite):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class CompleteReassignment(ReassignmentWrite):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplica(TraceEvent):
    """The replica stopped and its log is deleted: the registration it applied (leader_epoch,
    partition_epoch) no longer names it a replica."""

    leader_epoch: int
    partition_epoch: int
    log_end_offset: int


REASSIGNMENT_EVENT_TYPES = frozenset({
    "AlterPartitionReassignments", "CancelPartitionReassignment", "CompleteReassignment", "StopReplica"})

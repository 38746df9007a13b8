"""Trace event types: one per TLA+ action, named exactly as the action.

A pure core (kref/replication/replica.py, the KRaft core, ...) emits one of
these from the transition that implements the spec action of the same name,
carrying the post-state the spec needs to replay the step: after a
LeaderAppend the trace holds the leader's new log_end_offset, after an
AdvanceHighWatermark its new high_watermark, after a ShrinkIsr the new isr
and partition_epoch. Field names are the spec's variable names, so the
NDJSON -> TLA+ converter (trace_check/) maps fields to variables one to one.

Every event also carries where and when it happened: `time_ms` (the driver's
clock, passed into step), `replica` (the node id of the replica that took the
step) and the partition (`topic`, `partition`). Events are immutable
dataclasses; `to_dict()` gives the JSON object written by the sink, with the
action name under "type".
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from kref.metadata import records as metadata_records


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceEvent:
    """Common part of every event: when, which replica, which partition."""

    time_ms: int
    replica: int
    topic: str
    partition: int

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": type(self).__name__}
        for f in fields(self):
            value = getattr(self, f.name)
            # Sets (isr) are written sorted so traces are deterministic.
            if isinstance(value, (frozenset, set)):
                value = sorted(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class BecomeLeader(TraceEvent):
    """The replica took leadership of the partition for `leader_epoch`."""

    leader_epoch: int
    partition_epoch: int
    isr: frozenset[int]
    replicas: tuple[int, ...]
    log_end_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BecomeFollower(TraceEvent):
    """The replica follows `leader` in `leader_epoch` (with the isr and replicas the
    metadata gave it, so a trace checker knows the follower's view of the isr)."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: frozenset[int]
    replicas: tuple[int, ...]
    log_end_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAppend(TraceEvent):
    """The leader appended records [first_offset, last_offset] in its epoch, for a
    produce with `acks` (0, 1 or -1 = all: trace validation checks that an
    acks=all append was admitted with min.insync.replicas in the isr)."""

    leader_epoch: int
    first_offset: int
    last_offset: int
    log_end_offset: int
    high_watermark: int
    acks: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class AdvanceHighWatermark(TraceEvent):
    """The leader's high watermark moved up to min log_end_offset over the isr."""

    leader_epoch: int
    isr: frozenset[int]
    log_end_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderHandleFetch(TraceEvent):
    """The leader answered a follower's fetch (KIP-101/279 epoch check)."""

    leader_epoch: int
    follower: int
    fetch_offset: int
    last_fetched_epoch: int
    # The follower's log_end_offset as the leader now records it (the spec's
    # remote_log_end_offset[leader][follower]; -1 when the
    # fetch was answered with a diverging epoch and so moved nothing).
    remote_log_end_offset: int
    # Set when the follower's log diverges: the epoch and end offset it must
    # truncate to (TruncateToEpochEndOffset on its side); -1 otherwise.
    diverging_epoch: int
    diverging_end_offset: int
    log_end_offset: int
    high_watermark: int
    # KIP-903: the broker epoch the fetch carried (-1: none sent); when the
    # fetch was recorded, the spec's remote_broker_epoch[leader][follower].
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class FollowerFetch(TraceEvent):
    """A follower sent its leader a Fetch from its log end offset, naming the epoch
    of its last record (KIP-320) and the leader epoch it follows."""

    leader: int
    leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    # KIP-903: the sender's broker epoch (the spec's request field broker_epoch;
    # -1: the driver did not say).
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchError(TraceEvent):
    """A follower's fetch failed (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, ...):
    it drops it and backs off."""

    leader: int
    leader_epoch: int
    error_code: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FollowerAppend(TraceEvent):
    """A follower appended what its leader returned and learned its high watermark."""

    leader: int
    leader_epoch: int
    first_offset: int
    last_offset: int
    log_end_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TruncateToEpochEndOffset(TraceEvent):
    """A follower cut its log at the leader's end offset for its last epoch."""

    leader_epoch: int
    log_end_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ShrinkIsr(TraceEvent):
    """The leader asks the controller to remove lagging replicas (`isr` is the
    proposed isr; it takes effect at HandleAlterPartitionResponse, KIP-497)."""

    leader_epoch: int
    partition_epoch: int
    isr: frozenset[int]
    removed: frozenset[int]
    high_watermark: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpandIsr(TraceEvent):
    """The leader asks the controller to add a follower that caught up to the high
    watermark (`isr` is the proposed isr; the HW counts it at once: the maximal isr)."""

    leader_epoch: int
    partition_epoch: int
    isr: frozenset[int]
    added: int
    high_watermark: int
    # KIP-903: the broker epoch sent for `added` (the one its fetch carried;
    # the spec's broker_epochs[added] in SendAlterPartition).
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class HandleAlterPartitionResponse(TraceEvent):
    """The leader applied the controller's answer to its AlterPartition (KIP-497):
    the committed isr and partition_epoch (unchanged on an error or a stale answer)."""

    leader_epoch: int
    partition_epoch: int
    isr: frozenset[int]
    error_code: int
    high_watermark: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRecord(TraceEvent):
    """The controller created the partition (Kafka's PartitionRecord, in a
    CreateTopics or CreatePartitions batch): its first registration, leader
    epoch and partition epoch 0. `replica` is the controller's node id. The
    replication check starts the partition here (the spec's first
    ElectLeader), also when no replica applied it before a later change
    (its leader was down or shutting down at creation)."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    record_offset: int = -1  # the record's metadata log offset (see the controller's BrokerEvent)



def partition_creations(records, base_offset: int, topic_names, *, replica: int, time_ms: int) -> list[PartitionRecord]:
    """The PartitionRecord trace events of a controller write (`records` at `base_offset`): one per
    metadata PartitionRecord in it, named by `topic_names` (topic id -> name).

    Both drivers of the controller core (kref/node/controller_driver.py and
    the simulator, kref/sim/replication.py) call this when they carry a write
    out, so the translation is written once. It is not an effect of the core's
    step: its data-driven scripts list the decision's effects, and the event
    says nothing the write does not."""
    return [PartitionRecord(time_ms=time_ms, replica=replica, topic=topic_names.get(rec.topic_id, str(rec.topic_id)),
                            partition=rec.partition_id, leader=rec.leader, leader_epoch=rec.leader_epoch,
                            partition_epoch=rec.partition_epoch, isr=tuple(rec.isr), replicas=tuple(rec.replicas),
                            record_offset=base_offset + i)
            for i, rec in enumerate(records) if isinstance(rec, metadata_records.PartitionRecord)]

# Every action name the replication core emits, for converters and tests.
REPLICATION_EVENT_TYPES: dict[str, type[TraceEvent]] = {
    cls.__name__: cls
    for cls in (
        BecomeLeader,
        BecomeFollower,
        LeaderAppend,
        AdvanceHighWatermark,
        LeaderHandleFetch,
        FollowerFetch,
        FetchError,
        FollowerAppend,
        TruncateToEpochEndOffset,
        ShrinkIsr,
        ExpandIsr,
        HandleAlterPartitionResponse,
    )
}

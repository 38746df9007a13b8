"""The group coordinator's vocabulary: events in, effects out, and the answers.

Events are the requests (decoded into plain dataclasses, one `request_id`
each), timer expiries, the load of a `__consumer_offsets` partition, and the
outcome of the coordinator's own writes: `WriteCommitted` once the records
are below the partition's high watermark, `WriteFailed` when they cannot be.
Effects say what the driver must do: `Respond` to a request (possibly long
after it arrived), `SetTimer` / `CancelTimer`, `WriteRecords` (append to a
`__consumer_offsets` partition and report back), `Emit` (a trace event).
Every type here is an immutable value, so scripted tests and the simulator
can compare, store and replay them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kref.protocol.errors import ErrorCode


# The group coordinator answers with Kafka's one table of error codes.
Errors = ErrorCode


# --- events ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroup:
    request_id: object
    group_id: str
    member_id: str
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int = -1
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = False  # JoinGroup v4+ (KIP-394)


@dataclass(frozen=True, slots=True)
class SyncGroup:
    request_id: object
    group_id: str
    generation_id: int
    member_id: str
    assignments: tuple[tuple[str, bytes], ...] = ()
    group_instance_id: str | None = None
    protocol_type: str | None = None  # v5+
    protocol_name: str | None = None  # v5+


@dataclass(frozen=True, slots=True)
class Heartbeat:
    request_id: object
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroup:
    request_id: object
    group_id: str
    members: tuple[tuple[str, str | None], ...]  # (member_id, group_instance_id)


@dataclass(frozen=True, slots=True)
class OffsetCommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    request_id: object
    group_id: str
    generation_id: int
    member_id: str
    partitions: tuple[OffsetCommitPartition, ...]
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetFetch:
    request_id: object
    group_id: str
    partitions: tuple[tuple[str, int], ...] | None  # None: every committed partition


@dataclass(frozen=True, slots=True)
class DescribeGroups:
    request_id: object
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ListGroups:
    request_id: object
    states_filter: tuple[str, ...] = ()
    types_filter: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DeleteGroups:
    request_id: object
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TimerExpired:
    key: tuple


@dataclass(frozen=True, slots=True)
class WriteCommitted:
    """The records of write `token` are committed (below the high watermark of
    their `__consumer_offsets` partition): only now may the coordinator apply
    them and answer. The driver sends it when the high watermark covers the
    write; with one replica that is right after the append, with several it
    is when the followers have it."""

    token: int


@dataclass(frozen=True, slots=True)
class WriteFailed:
    """Write `token` could not be appended (or timed out before it committed)."""

    token: int
    error: Errors


@dataclass(frozen=True, slots=True)
class BeginLoad:
    """The driver starts reading a `__consumer_offsets` partition it leads in
    `leader_epoch` (-1 where epochs do not matter: a single broker's start)."""

    partition: int
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class OffsetDelete:
    """KIP-496: an admin removes committed offsets of partitions the group no longer consumes."""

    request_id: object
    group_id: str
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class TopicsDeleted:
    """Topics were deleted from the cluster; their committed offsets must go too."""

    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Unload:
    """This broker stopped leading a `__consumer_offsets` partition (Kafka's
    onResignation): its groups leave this coordinator; their members find the
    new one (NOT_COORDINATOR), which loads them from the replicated log."""

    partition: int


@dataclass(frozen=True, slots=True)
class CompleteLoad:
    """All records of a partition, in log order: (key, value or None), read for
    the BeginLoad of the same leader_epoch (a load overtaken by a resignation
    or a newer leadership is ignored)."""

    partition: int
    records: tuple[tuple[bytes, bytes | None], ...]
    leader_epoch: int = -1


# --- effects and responses ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Respond:
    request_id: object
    response: object


@dataclass(frozen=True, slots=True)
class SetTimer:
    key: tuple
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class CancelTimer:
    key: tuple


@dataclass(frozen=True, slots=True)
class WriteRecords:
    partition: int
    records: tuple[tuple[bytes, bytes | None], ...]
    token: int


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: Errors
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: Errors
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: Errors


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error: Errors
    members: tuple[tuple[str, str | None, Errors], ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetCommitResult:
    partitions: tuple[tuple[str, int, Errors], ...]


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None
    error: Errors = Errors.NONE


@dataclass(frozen=True, slots=True)
class OffsetFetchResult:
    error: Errors
    partitions: tuple[FetchedOffset, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    error: Errors
    group_id: str
    state: str = ""
    protocol_type: str = ""
    protocol: str = ""
    members: tuple[DescribedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeResult:
    groups: tuple[DescribedGroup, ...]


@dataclass(frozen=True, slots=True)
class ListResult:
    error: Errors
    groups: tuple[tuple[str, str, str], ...]  # (group_id, protocol_type, state)


@dataclass(frozen=True, slots=True)
class OffsetDeleteResult:
    error: Errors
    partitions: tuple[tuple[str, int, Errors], ...] = ()


@dataclass(frozen=True, slots=True)
class DeleteResult:
    groups: tuple[tuple[str, Errors], ...]


@dataclass(frozen=True, slots=True)
class Emit:
    """A trace event for the driver's trace sink (kref/trace/group_events.py)."""

    event: object


Effect = Respond | SetTimer | CancelTimer | WriteRecords | Emit

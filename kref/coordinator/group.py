"""The classic consumer group protocol as a pure state machine.

What: Kafka's "classic" group coordinator (JoinGroup / SyncGroup / Heartbeat /
LeaveGroup, KIP-62 rebalance timeouts, KIP-134 initial rebalance delay,
KIP-345 static membership, KIP-394 MEMBER_ID_REQUIRED, KIP-814 skip
assignment) plus the offset cache behind OffsetCommit / OffsetFetch, for all
groups of one coordinator. Every group moves through Kafka's five states:

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup stored--> Stable
    Stable / CompletingRebalance --join, leave, expiry--> PreparingRebalance
    PreparingRebalance --nobody left--> Empty;   Empty --DeleteGroups--> Dead

How: `GroupCoordinator.step(event, now_ms) -> list[Effect]`. Events are the
requests (already decoded into plain dataclasses, one `request_id` each),
timer expiries, and completions of writes to `__consumer_offsets`. Effects
say what the driver must do: `Respond` to a request (possibly long after it
arrived: a JoinGroup waits for the rebalance), `SetTimer` / `CancelTimer`,
and `WriteRecords` to append key/value records to a `__consumer_offsets`
partition, whose outcome comes back as `WriteCompleted`. State that Kafka
persists (offsets, the group's generation and assignment) changes only once
its write is acknowledged, so a crash between the two never exposes state the
log does not hold. The core reads no clock and draws no randomness: member ids
come from a counter and a per-process nonce given by the driver.

Why: one implementation serves the trio broker, the simulator and scripted
interaction tests (tests/coordinator/), which check Kafka's semantics event by
event.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum

from kref.coordinator import offsets_format as fmt


class Errors(IntEnum):
    """The Kafka error codes the group coordinator answers with."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Kafka broker settings that shape group behaviour (snake_case of their names)."""

    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2**31 - 1
    offsets_topic_num_partitions: int = 50
    offset_metadata_max_bytes: int = 4096
    # a member that joined but never completes its first rebalance is dropped
    # after this (Kafka's GroupCoordinator.NewMemberJoinTimeoutMs)
    new_member_join_timeout_ms: int = 300_000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000


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
class WriteCompleted:
    token: int
    error: Errors = Errors.NONE


@dataclass(frozen=True, slots=True)
class BeginLoad:
    """The driver starts reading a `__consumer_offsets` partition."""

    partition: int


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
class CompleteLoad:
    """All records of a partition, in log order: (key, value or None)."""

    partition: int
    records: tuple[tuple[bytes, bytes | None], ...]


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


Effect = Respond | SetTimer | CancelTimer | WriteRecords


# --- group model ----------------------------------------------------------------


@dataclass(slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    awaiting_join: object | None = None  # request_id of a JoinGroup we owe an answer
    awaiting_sync: object | None = None
    is_new: bool = False
    heartbeat_satisfied: bool = False

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def vote(self, candidates: set[str]) -> str:
        return next(name for name, _ in self.protocols if name in candidates)


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group_instance_id -> member_id
    pending_members: set[str] = field(default_factory=set)
    pending_sync_members: set[str] = field(default_factory=set)
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    new_member_added: bool = False
    # the remaining budget of a KIP-134 initial delayed join
    initial_join_remaining_ms: int | None = None
    current_state_timestamp: int = -1

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join is not None)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join() and not self.pending_members

    def supported_protocols(self) -> set[str]:
        """Protocols every current member supports."""
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports_protocols(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        if self.state is GroupState.EMPTY and not self.members:
            return bool(protocol_type) and bool(protocols)
        if self.protocol_type != protocol_type:
            return False
        counts: dict[str, int] = {}
        for m in self.members.values():
            for name, _ in m.protocols:
                counts[name] = counts.get(name, 0) + 1
        return any(counts.get(name, 0) == len(self.members) for name, _ in protocols)

    def select_protocol(self) -> str:
        candidates = self.supported_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        # max() keeps the first of equal counts: ties go to the earliest-joined member's choice
        return max(votes, key=lambda name: votes[name])

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        if group_instance_id is None:
            return False
        known = self.static_members.get(group_instance_id)
        return known is not None and known != member_id

    def add_member(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id

    def remove_member(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync_members.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member


def _subscribed_topics(group: Group) -> set[str] | None:
    """Topics the members of a live "consumer" group subscribe to, or None if unknown.

    Reads each member's ConsumerProtocolSubscription for the chosen protocol:
    int16 version, then an int32 count of int16-length topic names (the same
    prefix in every version). Other protocol types carry no subscriptions.
    """
    if group.protocol_type != "consumer" or group.protocol_name is None:
        return None
    topics: set[str] = set()
    for member in group.members.values():
        data = member.metadata_for(group.protocol_name)
        try:
            count = int.from_bytes(data[2:6], "big", signed=True)
            if count < 0 or count > len(data):
                return None
            pos = 6
            for _ in range(count):
                length = int.from_bytes(data[pos : pos + 2], "big", signed=True)
                if length < 0 or pos + 2 + length > len(data):
                    return None
                topics.add(data[pos + 2 : pos + 2 + length].decode("utf-8"))
                pos += 2 + length
        except (UnicodeDecodeError, ValueError):
            return None
        if len(data) < 6:
            return None
    return topics


def _key_heartbeat(group_id: str, member_id: str) -> tuple:
    return ("heartbeat", group_id, member_id)


def _key_join(group_id: str) -> tuple:
    return ("join", group_id)


def _key_sync(group_id: str) -> tuple:
    return ("sync", group_id)


_KEY_RETENTION = ("offsets_retention",)


class GroupCoordinator:
    """All classic groups of one coordinator and their committed offsets."""

    def __init__(self, config: GroupConfig | None = None, *, member_id_nonce: str = "0") -> None:
        self.config = config or GroupConfig()
        self.groups: dict[str, Group] = {}
        self.timers: dict[tuple, int] = {}
        self.loading: set[int] = set()
        self.owned: set[int] = set()
        self._member_id_nonce = member_id_nonce
        self._member_id_seq = 0
        self._next_token = 0
        self._pending_writes: dict[int, Callable[[Errors], None]] = {}
        self._effects: list[Effect] = []
        self._now = 0

    # --- driver interface -----------------------------------------------------

    def step(self, event: object, now_ms: int) -> list[Effect]:
        self._now = now_ms
        self._effects = []
        handler = self._HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"not a group coordinator event: {event!r}")
        handler(self, event)
        effects, self._effects = self._effects, []
        return effects

    def next_deadline(self) -> int | None:
        return min(self.timers.values(), default=None)

    def partition_for(self, group_id: str) -> int:
        return fmt.partition_for(group_id, self.config.offsets_topic_num_partitions)

    # --- effect helpers ---------------------------------------------------------

    def _respond(self, request_id: object, response: object) -> None:
        self._effects.append(Respond(request_id, response))

    def _set_timer(self, key: tuple, deadline_ms: int) -> None:
        self.timers[key] = deadline_ms
        self._effects.append(SetTimer(key, deadline_ms))

    def _cancel_timer(self, key: tuple) -> None:
        if self.timers.pop(key, None) is not None:
            self._effects.append(CancelTimer(key))

    def _write(self, group_id: str, records: Iterable[tuple[bytes, bytes | None]], then: Callable[[Errors], None]) -> None:
        self._next_token += 1
        token = self._next_token
        self._pending_writes[token] = then
        self._effects.append(WriteRecords(self.partition_for(group_id), tuple(records), token))

    def _new_member_id(self, prefix: str) -> str:
        self._member_id_seq += 1
        return f"{prefix}-{self._member_id_nonce}-{self._member_id_seq:08x}"

    def _coordinator_error(self, group_id: str) -> Errors | None:
        """Whether this coordinator may serve the group right now."""
        partition = self.partition_for(group_id)
        if partition in self.loading:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.owned:
            return Errors.NOT_COORDINATOR
        return None

    # --- heartbeats ---------------------------------------------------------------

    def _schedule_heartbeat(self, group: Group, member: Member, timeout_ms: int | None = None) -> None:
        """A heartbeat arrived (or an equivalent): restart the member's session timer."""
        member.heartbeat_satisfied = True
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        self._set_timer(_key_heartbeat(group.group_id, member.member_id), self._now + timeout)
        # the next expiry needs a new heartbeat unless the member is mid-rebalance
        member.heartbeat_satisfied = False

    def _keeps_alive(self, member: Member) -> bool:
        if member.is_new:
            return member.heartbeat_satisfied
        if member.awaiting_join is not None or member.awaiting_sync is not None:
            return True
        return member.heartbeat_satisfied

    def _on_heartbeat_expired(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            if group.state is GroupState.PREPARING_REBALANCE:
                self._try_complete_join(group)
            return
        member = group.members.get(member_id)
        if member is not None and not self._keeps_alive(member):
            self._remove_member_and_update_group(group, member)

    # --- JoinGroup ---------------------------------------------------------------

    def _on_join(self, ev: JoinGroup) -> None:
        def fail(error: Errors, member_id: str = ev.member_id) -> None:
            self._respond(ev.request_id, JoinResult(error, member_id=member_id))

        if not ev.group_id:
            return fail(Errors.INVALID_GROUP_ID)
        if (error := self._coordinator_error(ev.group_id)) is not None:
            return fail(error)
        cfg = self.config
        if not cfg.group_min_session_timeout_ms <= ev.session_timeout_ms <= cfg.group_max_session_timeout_ms:
            return fail(Errors.INVALID_SESSION_TIMEOUT)
        group = self.groups.get(ev.group_id)
        if group is None:
            if ev.member_id:
                return fail(Errors.UNKNOWN_MEMBER_ID)
            group = self.groups[ev.group_id] = Group(ev.group_id, current_state_timestamp=self._now)
        if group.state is GroupState.DEAD:
            # the group was deleted while this request was in flight
            return fail(Errors.COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(ev.protocol_type, ev.protocols):
            return fail(Errors.INCONSISTENT_GROUP_PROTOCOL)
        if not ev.member_id:
            self._join_unknown_member(group, ev)
        else:
            self._join_known_member(group, ev)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    def _join_unknown_member(self, group: Group, ev: JoinGroup) -> None:
        if ev.group_instance_id is not None:
            new_member_id = self._new_member_id(ev.group_instance_id)
            old_member_id = group.static_members.get(ev.group_instance_id)
            if old_member_id is not None:
                return self._replace_static_member(group, ev, old_member_id, new_member_id)
        else:
            new_member_id = self._new_member_id(ev.client_id)
            if ev.require_known_member_id:
                # KIP-394: hand out the id first, so a client that times out
                # and retries does not leave ghost members in the group
                if len(group.members) + len(group.pending_members) >= self.config.group_max_size:
                    return self._respond(ev.request_id, JoinResult(Errors.GROUP_MAX_SIZE_REACHED))
                group.pending_members.add(new_member_id)
                self._set_timer(_key_heartbeat(group.group_id, new_member_id), self._now + ev.session_timeout_ms)
                return self._respond(ev.request_id, JoinResult(Errors.MEMBER_ID_REQUIRED, member_id=new_member_id))
        if len(group.members) >= self.config.group_max_size:
            return self._respond(ev.request_id, JoinResult(Errors.GROUP_MAX_SIZE_REACHED))
        self._add_member_and_rebalance(group, ev, new_member_id)

    def _join_known_member(self, group: Group, ev: JoinGroup) -> None:
        if ev.member_id in group.pending_members:
            group.pending_members.discard(ev.member_id)
            self._cancel_timer(_key_heartbeat(group.group_id, ev.member_id))
            if len(group.members) >= self.config.group_max_size:
                return self._respond(ev.request_id, JoinResult(Errors.GROUP_MAX_SIZE_REACHED, member_id=ev.member_id))
            return self._add_member_and_rebalance(group, ev, ev.member_id)
        if group.is_static_member_fenced(ev.member_id, ev.group_instance_id):
            return self._respond(ev.request_id, JoinResult(Errors.FENCED_INSTANCE_ID, member_id=ev.member_id))
        member = group.members.get(ev.member_id)
        if member is None or group.state in (GroupState.EMPTY, GroupState.DEAD):
            return self._respond(ev.request_id, JoinResult(Errors.UNKNOWN_MEMBER_ID, member_id=ev.member_id))
        if group.state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, ev)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            if member.protocols == ev.protocols:
                # a retried JoinGroup whose answer was lost: answer it again
                self._respond(ev.request_id, self._join_result(group, member))
            else:
                self._update_member_and_rebalance(group, member, ev)
        else:  # Stable
            if group.is_leader(member.member_id) or member.protocols != ev.protocols:
                # the leader rejoining means it wants a new assignment (e.g. metadata changed)
                self._update_member_and_rebalance(group, member, ev)
            else:
                self._respond(ev.request_id, self._join_result(group, member, include_members=False))

    def _join_result(self, group: Group, member: Member, *, include_members: bool | None = None) -> JoinResult:
        leader = group.is_leader(member.member_id)
        if include_members is None:
            include_members = leader
        members = ()
        if include_members:
            members = tuple(
                JoinMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                for m in group.members.values()
            )
        return JoinResult(
            Errors.NONE,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            members=members,
        )

    def _answer_join(self, member: Member, result: JoinResult) -> None:
        if member.awaiting_join is not None:
            self._respond(member.awaiting_join, result)
            member.awaiting_join = None
            member.is_new = False

    def _answer_sync(self, member: Member, result: SyncResult) -> None:
        if member.awaiting_sync is not None:
            self._respond(member.awaiting_sync, result)
            member.awaiting_sync = None

    def _add_member_and_rebalance(self, group: Group, ev: JoinGroup, member_id: str) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=ev.group_instance_id,
            client_id=ev.client_id,
            client_host=ev.client_host,
            rebalance_timeout_ms=ev.rebalance_timeout_ms if ev.rebalance_timeout_ms >= 0 else ev.session_timeout_ms,
            session_timeout_ms=ev.session_timeout_ms,
            protocol_type=ev.protocol_type,
            protocols=ev.protocols,
            awaiting_join=ev.request_id,
            is_new=True,
        )
        if group.state is GroupState.PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True
        group.add_member(member)
        # a new member that never finishes joining is dropped after the new-member timeout
        self._schedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group)

    def _update_member_and_rebalance(self, group: Group, member: Member, ev: JoinGroup) -> None:
        if member.awaiting_join is not None and member.awaiting_join != ev.request_id:
            # the member retried: the newer request supersedes the one we still hold
            self._respond(member.awaiting_join, JoinResult(Errors.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        member.protocols = ev.protocols
        member.rebalance_timeout_ms = ev.rebalance_timeout_ms if ev.rebalance_timeout_ms >= 0 else ev.session_timeout_ms
        member.session_timeout_ms = ev.session_timeout_ms
        member.awaiting_join = ev.request_id
        self._maybe_prepare_rebalance(group)

    def _replace_static_member(self, group: Group, ev: JoinGroup, old_member_id: str, new_member_id: str) -> None:
        """KIP-345: a static member restarted; it takes over its old identity under a new member id."""
        old = group.members[old_member_id]
        self._answer_join(old, JoinResult(Errors.FENCED_INSTANCE_ID, member_id=old_member_id))
        self._answer_sync(old, SyncResult(Errors.FENCED_INSTANCE_ID))
        self._cancel_timer(_key_heartbeat(group.group_id, old_member_id))
        was_leader = group.is_leader(old_member_id)
        del group.members[old_member_id]
        group.pending_sync_members.discard(old_member_id)
        old.member_id = new_member_id
        old.protocols = ev.protocols
        old.rebalance_timeout_ms = ev.rebalance_timeout_ms if ev.rebalance_timeout_ms >= 0 else ev.session_timeout_ms
        old.session_timeout_ms = ev.session_timeout_ms
        old.client_id, old.client_host = ev.client_id, ev.client_host
        group.members[new_member_id] = old
        group.static_members[ev.group_instance_id] = new_member_id
        if was_leader:
            group.leader_id = new_member_id
        member = old

        if group.state is GroupState.STABLE:
            if group.select_protocol() == group.protocol_name:
                # nothing the assignment depends on changed: persist the new
                # member id and hand back the current generation, no rebalance
                self._schedule_heartbeat(group, member)

                def done(error: Errors) -> None:
                    if error is not Errors.NONE:
                        self._respond(ev.request_id, JoinResult(error, member_id=new_member_id))
                        return
                    result = self._join_result(group, member, include_members=was_leader)
                    # KIP-814: a returning leader gets the members but must not reassign
                    self._respond(ev.request_id, dataclasses.replace(result, skip_assignment=was_leader))

                self._store_group(group, done)
                return
            member.awaiting_join = ev.request_id
            self._prepare_rebalance(group)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            member.awaiting_join = ev.request_id
            self._prepare_rebalance(group)
        else:  # PreparingRebalance: wait for the join to complete like everyone else
            member.awaiting_join = ev.request_id
            self._schedule_heartbeat(group, member)

    # --- rebalance ---------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: Group) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(group, Errors.REBALANCE_IN_PROGRESS)
        group.pending_sync_members.clear()
        self._cancel_timer(_key_sync(group.group_id))
        rebalance_timeout = group.rebalance_timeout_ms
        if group.state is GroupState.EMPTY:
            # KIP-134: wait a little for more members before the first generation
            delay = min(self.config.group_initial_rebalance_delay_ms, rebalance_timeout)
            group.initial_join_remaining_ms = max(rebalance_timeout - self.config.group_initial_rebalance_delay_ms, 0)
            group.new_member_added = False
            self._set_timer(_key_join(group.group_id), self._now + delay)
        else:
            group.initial_join_remaining_ms = None
            self._set_timer(_key_join(group.group_id), self._now + rebalance_timeout)
        self._transition(group, GroupState.PREPARING_REBALANCE)

    def _transition(self, group: Group, state: GroupState) -> None:
        group.state = state
        group.current_state_timestamp = self._now

    def _try_complete_join(self, group: Group) -> None:
        # an initial delayed join waits out its delay even when everyone is in
        if group.initial_join_remaining_ms is None and group.has_all_members_joined():
            self._cancel_timer(_key_join(group.group_id))
            self._complete_join(group)

    def _on_join_timer(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.state is not GroupState.PREPARING_REBALANCE:
            return
        remaining = group.initial_join_remaining_ms
        if remaining is not None and group.new_member_added and remaining > 0:
            # KIP-134: another member arrived during the delay; extend it, within the rebalance timeout
            delay = min(self.config.group_initial_rebalance_delay_ms, remaining)
            group.initial_join_remaining_ms = max(remaining - self.config.group_initial_rebalance_delay_ms, 0)
            group.new_member_added = False
            self._set_timer(_key_join(group_id), self._now + delay)
            return
        group.initial_join_remaining_ms = None
        self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        # dynamic members that did not rejoin in time are out; static ones keep their place (KIP-345)
        for member in [m for m in group.members.values() if m.awaiting_join is None and m.group_instance_id is None]:
            self._cancel_timer(_key_heartbeat(group.group_id, member.member_id))
            group.remove_member(member.member_id)
        if group.state is GroupState.DEAD:
            return
        if group.members and not self._elect_joined_leader(group):
            # nobody rejoined: keep waiting until session expiry clears the stragglers
            self._set_timer(_key_join(group.group_id), self._now + group.rebalance_timeout_ms)
            return
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            self._transition(group, GroupState.EMPTY)
            self._store_group(group, lambda error: None)
            return
        group.protocol_name = group.select_protocol()
        self._transition(group, GroupState.COMPLETING_REBALANCE)
        for member in group.members.values():
            self._answer_join(member, self._join_result(group, member))
            self._schedule_heartbeat(group, member)
        # members that never send SyncGroup must not stall the group forever
        group.pending_sync_members = set(group.members)
        self._set_timer(_key_sync(group.group_id), self._now + group.rebalance_timeout_ms)

    def _elect_joined_leader(self, group: Group) -> bool:
        leader = group.members.get(group.leader_id) if group.leader_id is not None else None
        if leader is not None and leader.awaiting_join is not None:
            return True
        for member in group.members.values():
            if member.awaiting_join is not None:
                group.leader_id = member.member_id
                return True
        return False

    def _on_sync_timer(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        if not group.pending_sync_members:
            return
        for member_id in list(group.pending_sync_members):
            member = group.members.get(member_id)
            if member is not None:
                self._cancel_timer(_key_heartbeat(group_id, member_id))
                group.remove_member(member_id)
        group.pending_sync_members.clear()
        self._prepare_rebalance(group)
        self._try_complete_join(group)

    def _reset_and_propagate_assignment_error(self, group: Group, error: Errors) -> None:
        for member in group.members.values():
            member.assignment = b""
            self._answer_sync(member, SyncResult(error))

    def _remove_member_and_update_group(self, group: Group, member: Member) -> None:
        self._answer_join(member, JoinResult(Errors.UNKNOWN_MEMBER_ID, member_id=member.member_id))
        self._answer_sync(member, SyncResult(Errors.UNKNOWN_MEMBER_ID))
        self._cancel_timer(_key_heartbeat(group.group_id, member.member_id))
        group.remove_member(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
            self._try_complete_join(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    # --- SyncGroup ---------------------------------------------------------------

    def _on_sync(self, ev: SyncGroup) -> None:
        def reply(error: Errors) -> None:
            self._respond(ev.request_id, SyncResult(error))

        if (error := self._coordinator_error(ev.group_id)) is not None:
            return reply(error)
        group = self.groups.get(ev.group_id)
        if group is None:
            return reply(Errors.UNKNOWN_MEMBER_ID)
        if group.state is GroupState.DEAD:
            return reply(Errors.COORDINATOR_NOT_AVAILABLE)
        if group.is_static_member_fenced(ev.member_id, ev.group_instance_id):
            return reply(Errors.FENCED_INSTANCE_ID)
        member = group.members.get(ev.member_id)
        if member is None:
            return reply(Errors.UNKNOWN_MEMBER_ID)
        if ev.generation_id != group.generation_id:
            return reply(Errors.ILLEGAL_GENERATION)
        if ev.protocol_type is not None and ev.protocol_type != group.protocol_type:
            return reply(Errors.INCONSISTENT_GROUP_PROTOCOL)
        if ev.protocol_name is not None and ev.protocol_name != group.protocol_name:
            return reply(Errors.INCONSISTENT_GROUP_PROTOCOL)
        if group.state is GroupState.EMPTY:
            return reply(Errors.UNKNOWN_MEMBER_ID)
        if group.state is GroupState.PREPARING_REBALANCE:
            return reply(Errors.REBALANCE_IN_PROGRESS)
        self._remove_pending_sync_member(group, ev.member_id)
        if group.state is GroupState.STABLE:
            self._respond(ev.request_id, SyncResult(Errors.NONE, member.assignment, group.protocol_type, group.protocol_name))
            self._schedule_heartbeat(group, member)
            return
        # CompletingRebalance
        if member.awaiting_sync is not None:
            self._respond(member.awaiting_sync, SyncResult(Errors.REBALANCE_IN_PROGRESS))
        member.awaiting_sync = ev.request_id
        if not group.is_leader(ev.member_id):
            return
        given = dict(ev.assignments)
        assignment = {mid: given.get(mid, b"") for mid in group.members}
        generation = group.generation_id

        def stored(error: Errors) -> None:
            # the group may have moved on while the write was in flight
            if group.state is not GroupState.COMPLETING_REBALANCE or group.generation_id != generation:
                return
            if error is not Errors.NONE:
                self._reset_and_propagate_assignment_error(group, error)
                self._maybe_prepare_rebalance(group)
                return
            for mid, m in group.members.items():
                m.assignment = assignment.get(mid, b"")
                if m.awaiting_sync is not None:
                    self._answer_sync(m, SyncResult(Errors.NONE, m.assignment, group.protocol_type, group.protocol_name))
                    self._schedule_heartbeat(group, m)
            self._transition(group, GroupState.STABLE)

        self._store_group(group, stored, assignment)

    def _remove_pending_sync_member(self, group: Group, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self._cancel_timer(_key_sync(group.group_id))

    # --- Heartbeat ---------------------------------------------------------------

    def _on_heartbeat(self, ev: Heartbeat) -> None:
        def reply(error: Errors) -> None:
            self._respond(ev.request_id, HeartbeatResult(error))

        if (error := self._coordinator_error(ev.group_id)) is not None:
            return reply(error)
        group = self.groups.get(ev.group_id)
        if group is None:
            return reply(Errors.UNKNOWN_MEMBER_ID)
        if group.state is GroupState.DEAD:
            return reply(Errors.COORDINATOR_NOT_AVAILABLE)
        if group.is_static_member_fenced(ev.member_id, ev.group_instance_id):
            return reply(Errors.FENCED_INSTANCE_ID)
        member = group.members.get(ev.member_id)
        if member is None or group.state is GroupState.EMPTY:
            return reply(Errors.UNKNOWN_MEMBER_ID)
        if ev.generation_id != group.generation_id:
            return reply(Errors.ILLEGAL_GENERATION)
        self._schedule_heartbeat(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            # tells the member to rejoin
            return reply(Errors.REBALANCE_IN_PROGRESS)
        reply(Errors.NONE)

    # --- LeaveGroup -----------------------------------------------------------------

    def _on_leave(self, ev: LeaveGroup) -> None:
        if (error := self._coordinator_error(ev.group_id)) is not None:
            return self._respond(ev.request_id, LeaveResult(error))
        group = self.groups.get(ev.group_id)
        if group is None:
            results = tuple((mid, iid, Errors.UNKNOWN_MEMBER_ID) for mid, iid in ev.members)
            return self._respond(ev.request_id, LeaveResult(Errors.NONE, results))
        if group.state is GroupState.DEAD:
            return self._respond(ev.request_id, LeaveResult(Errors.COORDINATOR_NOT_AVAILABLE))
        results = []
        for member_id, instance_id in ev.members:
            results.append((member_id, instance_id, self._leave_one(group, member_id, instance_id)))
        self._respond(ev.request_id, LeaveResult(Errors.NONE, tuple(results)))

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None) -> Errors:
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                return Errors.UNKNOWN_MEMBER_ID
            if member_id and member_id != known:
                return Errors.FENCED_INSTANCE_ID
            member_id = known
        elif member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._cancel_timer(_key_heartbeat(group.group_id, member_id))
            if group.state is GroupState.PREPARING_REBALANCE:
                self._try_complete_join(group)
            return Errors.NONE
        member = group.members.get(member_id)
        if member is None:
            return Errors.UNKNOWN_MEMBER_ID
        self._remove_member_and_update_group(group, member)
        return Errors.NONE

    # --- persistence of group metadata -------------------------------------------

    def _group_metadata_value(self, group: Group, assignment: dict[str, bytes] | None = None) -> bytes:
        members = tuple(
            fmt.MemberMetadata(
                member_id=m.member_id,
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata_for(group.protocol_name),
                assignment=assignment[m.member_id] if assignment is not None else m.assignment,
                rebalance_timeout=m.rebalance_timeout_ms,
                group_instance_id=m.group_instance_id,
            )
            for m in group.members.values()
        )
        return fmt.encode_group_metadata_value(
            fmt.GroupMetadataValue(
                protocol_type=group.protocol_type or "",
                generation=group.generation_id,
                protocol=group.protocol_name,
                leader=group.leader_id if group.members else None,
                members=members,
                current_state_timestamp=group.current_state_timestamp,
            )
        )

    def _store_group(self, group: Group, then: Callable[[Errors], None], assignment: dict[str, bytes] | None = None) -> None:
        key = fmt.encode_group_metadata_key(group.group_id)
        self._write(group.group_id, [(key, self._group_metadata_value(group, assignment))], then)

    def _on_write_completed(self, ev: WriteCompleted) -> None:
        then = self._pending_writes.pop(ev.token, None)
        if then is not None:
            then(ev.error)

    # --- offsets ------------------------------------------------------------------

    def _on_offset_commit(self, ev: OffsetCommit) -> None:
        def reply_all(error: Errors) -> None:
            self._respond(ev.request_id, OffsetCommitResult(tuple((p.topic, p.partition, error) for p in ev.partitions)))

        if (error := self._coordinator_error(ev.group_id)) is not None:
            return reply_all(error)
        group = self.groups.get(ev.group_id)
        if group is None:
            if ev.generation_id >= 0:
                # a member of a generation this coordinator never saw
                return reply_all(Errors.ILLEGAL_GENERATION)
            # standalone consumers (assign(), not subscribe()) only store offsets here
            group = self.groups[ev.group_id] = Group(ev.group_id, current_state_timestamp=self._now)
        elif group.state is GroupState.DEAD:
            return reply_all(Errors.COORDINATOR_NOT_AVAILABLE)
        elif group.is_static_member_fenced(ev.member_id, ev.group_instance_id):
            return reply_all(Errors.FENCED_INSTANCE_ID)
        elif ev.generation_id < 0 and group.state is GroupState.EMPTY:
            pass
        elif group.state is GroupState.COMPLETING_REBALANCE:
            return reply_all(Errors.REBALANCE_IN_PROGRESS)
        elif ev.member_id not in group.members:
            return reply_all(Errors.UNKNOWN_MEMBER_ID)
        elif ev.generation_id != group.generation_id:
            return reply_all(Errors.ILLEGAL_GENERATION)
        else:
            self._schedule_heartbeat(group, group.members[ev.member_id])
        self._commit_offsets(group, ev)

    def _commit_offsets(self, group: Group, ev: OffsetCommit) -> None:
        errors: dict[tuple[str, int], Errors] = {}
        records = []
        accepted: list[tuple[tuple[str, int], OffsetAndMetadata]] = []
        for p in ev.partitions:
            metadata = p.metadata or ""
            if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                errors[(p.topic, p.partition)] = Errors.OFFSET_METADATA_TOO_LARGE
                continue
            value = OffsetAndMetadata(p.offset, p.leader_epoch, metadata, self._now)
            records.append(
                (
                    fmt.encode_offset_commit_key(group.group_id, p.topic, p.partition),
                    fmt.encode_offset_commit_value(fmt.OffsetCommitValue(p.offset, metadata, self._now, p.leader_epoch)),
                )
            )
            accepted.append(((p.topic, p.partition), value))

        def reply(write_error: Errors) -> None:
            if write_error is Errors.NONE:
                for tp, value in accepted:
                    group.offsets[tp] = value
            for tp, _ in accepted:
                errors[tp] = write_error
            self._respond(
                ev.request_id,
                OffsetCommitResult(tuple((p.topic, p.partition, errors[(p.topic, p.partition)]) for p in ev.partitions)),
            )

        if not records:
            return reply(Errors.NONE)
        self._write(group.group_id, records, reply)

    def _on_offset_fetch(self, ev: OffsetFetch) -> None:
        if (error := self._coordinator_error(ev.group_id)) is not None:
            return self._respond(ev.request_id, OffsetFetchResult(error))
        group = self.groups.get(ev.group_id)
        offsets = group.offsets if group is not None and group.state is not GroupState.DEAD else {}
        wanted = ev.partitions if ev.partitions is not None else tuple(offsets)
        result = []
        for topic, partition in wanted:
            committed = offsets.get((topic, partition))
            if committed is None:
                result.append(FetchedOffset(topic, partition, -1, -1, ""))
            else:
                result.append(FetchedOffset(topic, partition, committed.offset, committed.leader_epoch, committed.metadata))
        self._respond(ev.request_id, OffsetFetchResult(Errors.NONE, tuple(result)))

    # --- admin ----------------------------------------------------------------------

    def _on_describe(self, ev: DescribeGroups) -> None:
        out = []
        for group_id in ev.group_ids:
            if (error := self._coordinator_error(group_id)) is not None:
                out.append(DescribedGroup(error, group_id))
                continue
            group = self.groups.get(group_id)
            if group is None:
                out.append(DescribedGroup(Errors.NONE, group_id, GroupState.DEAD.value))
                continue
            stable = group.state is GroupState.STABLE
            members = tuple(
                DescribedMember(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata_for(group.protocol_name) if stable else b"",
                    m.assignment if stable else b"",
                )
                for m in group.members.values()
            )
            out.append(
                DescribedGroup(
                    Errors.NONE,
                    group_id,
                    group.state.value,
                    group.protocol_type or "",
                    (group.protocol_name or "") if stable else "",
                    members,
                )
            )
        self._respond(ev.request_id, DescribeResult(tuple(out)))

    def _on_list(self, ev: ListGroups) -> None:
        if self.loading:
            return self._respond(ev.request_id, ListResult(Errors.COORDINATOR_LOAD_IN_PROGRESS, ()))
        states = {s.lower() for s in ev.states_filter}
        types = {t.lower() for t in ev.types_filter}
        groups = []
        for group in self.groups.values():
            if group.state is GroupState.DEAD:
                continue
            if states and group.state.value.lower() not in states:
                continue
            # classic groups report their protocol type; the types filter is about group types ("classic")
            if types and "classic" not in types:
                continue
            groups.append((group.group_id, group.protocol_type or "", group.state.value))
        self._respond(ev.request_id, ListResult(Errors.NONE, tuple(groups)))

    def _on_delete(self, ev: DeleteGroups) -> None:
        results: dict[str, Errors] = {}
        waiting = set()

        def finish() -> None:
            if not waiting:
                self._respond(ev.request_id, DeleteResult(tuple((g, results[g]) for g in ev.group_ids)))

        for group_id in ev.group_ids:
            if group_id in results or group_id in waiting:
                continue
            if (error := self._coordinator_error(group_id)) is not None:
                results[group_id] = error
                continue
            group = self.groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                results[group_id] = Errors.GROUP_ID_NOT_FOUND
                continue
            if group.state is not GroupState.EMPTY:
                results[group_id] = Errors.NON_EMPTY_GROUP
                continue
            # tombstones for every offset and the metadata let compaction forget the group
            records = [(fmt.encode_offset_commit_key(group_id, t, p), None) for t, p in group.offsets]
            records.append((fmt.encode_group_metadata_key(group_id), None))
            self._transition(group, GroupState.DEAD)
            waiting.add(group_id)

            def deleted(error: Errors, group: Group = group) -> None:
                results[group.group_id] = error
                waiting.discard(group.group_id)
                if error is Errors.NONE:
                    if self.groups.get(group.group_id) is group:
                        del self.groups[group.group_id]
                else:
                    self._transition(group, GroupState.EMPTY)
                finish()

            self._write(group_id, records, deleted)
        finish()

    def _on_offset_delete(self, ev: OffsetDelete) -> None:
        # Kafka's handleDeleteOffsets: an Empty group may lose any offset; a
        # live consumer group only those of topics no member subscribes to
        # (GROUP_SUBSCRIBED_TO_TOPIC for the others), because a consumer of a
        # subscribed topic would otherwise restart from auto.offset.reset.
        # A live group whose subscriptions cannot be read is NON_EMPTY_GROUP.
        if (error := self._coordinator_error(ev.group_id)) is not None:
            return self._respond(ev.request_id, OffsetDeleteResult(error))
        group = self.groups.get(ev.group_id)
        if group is None or group.state is GroupState.DEAD:
            return self._respond(ev.request_id, OffsetDeleteResult(Errors.GROUP_ID_NOT_FOUND))
        subscribed: set[str] = set()
        if group.state is not GroupState.EMPTY:
            topics = _subscribed_topics(group)
            if topics is None:
                return self._respond(ev.request_id, OffsetDeleteResult(Errors.NON_EMPTY_GROUP))
            subscribed = topics
        results = []
        gone = []
        for topic, partition in ev.partitions:
            if topic in subscribed:
                results.append((topic, partition, Errors.GROUP_SUBSCRIBED_TO_TOPIC))
                continue
            results.append((topic, partition, Errors.NONE))
            if group.offsets.pop((topic, partition), None) is not None:
                gone.append((topic, partition))
        if gone:
            # As in Kafka the cache forgets at once; the tombstones let
            # compaction and the next load forget too.
            tombstones = [(fmt.encode_offset_commit_key(group.group_id, t, p), None) for t, p in gone]
            self._write(group.group_id, tombstones, lambda error: None)
        self._respond(ev.request_id, OffsetDeleteResult(Errors.NONE, tuple(results)))

    def _on_topics_deleted(self, ev: TopicsDeleted) -> None:
        # Kafka's coordinator drops the offsets of deleted partitions
        # (onPartitionsDeleted). Without this a topic re-created under the same
        # name inherits them, and its consumers start at offsets of the old
        # topic: OFFSET_OUT_OF_RANGE at best, skipped records at worst. As in
        # Kafka the cache forgets them at once and the tombstones are best
        # effort: the offsets are wrong whatever the write's outcome.
        deleted = set(ev.topics)
        for group in self.groups.values():
            gone = [tp for tp in group.offsets if tp[0] in deleted]
            if not gone:
                continue
            for tp in gone:
                del group.offsets[tp]
            if self._coordinator_error(group.group_id) is None:
                tombstones = [(fmt.encode_offset_commit_key(group.group_id, t, p), None) for t, p in gone]
                self._write(group.group_id, tombstones, lambda error: None)

    # --- loading __consumer_offsets ------------------------------------------------

    def _on_begin_load(self, ev: BeginLoad) -> None:
        self.loading.add(ev.partition)

    def _on_complete_load(self, ev: CompleteLoad) -> None:
        offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        metadata: dict[str, fmt.GroupMetadataValue | None] = {}
        for key_bytes, value_bytes in ev.records:
            key, value = fmt.decode_record(key_bytes, value_bytes)
            if isinstance(key, fmt.OffsetCommitKey):
                group_offsets = offsets.setdefault(key.group, {})
                if value is None:
                    group_offsets.pop((key.topic, key.partition), None)
                else:
                    group_offsets[(key.topic, key.partition)] = OffsetAndMetadata(
                        value.offset, value.leader_epoch, value.metadata, value.commit_timestamp
                    )
            else:
                metadata[key.group] = value
        for group_id in set(offsets) | set(metadata):
            if self.partition_for(group_id) != ev.partition:
                continue
            value = metadata.get(group_id)
            group_offsets = offsets.get(group_id, {})
            if value is None and not group_offsets:
                continue
            group = self._group_from_metadata(group_id, value)
            group.offsets = group_offsets
            self.groups[group_id] = group
        self.loading.discard(ev.partition)
        self.owned.add(ev.partition)
        if _KEY_RETENTION not in self.timers:
            self._set_timer(_KEY_RETENTION, self._now + self.config.offsets_retention_check_interval_ms)

    def _group_from_metadata(self, group_id: str, value: fmt.GroupMetadataValue | None) -> Group:
        group = Group(group_id, current_state_timestamp=self._now)
        if value is None:
            return group
        if value.current_state_timestamp >= 0:
            group.current_state_timestamp = value.current_state_timestamp
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        for m in value.members:
            member = Member(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout,
                session_timeout_ms=m.session_timeout,
                protocol_type=value.protocol_type,
                protocols=((value.protocol or "", m.subscription),),
                assignment=m.assignment,
            )
            group.add_member(member)
            self._schedule_heartbeat(group, member)
        group.leader_id = value.leader if value.leader in group.members else next(iter(group.members), None)
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        return group

    # --- offset retention (KIP-211) ------------------------------------------------

    def _expire_offsets(self) -> None:
        """Tombstone offsets past offsets.retention.minutes; drop groups left with nothing.

        An Empty consumer group's offsets all expire once the group has been
        empty for the retention time; a group that only stores offsets
        (no protocol type) loses each offset retention after its commit.
        Active groups keep theirs.
        """
        retention = self.config.offsets_retention_ms
        for group in list(self.groups.values()):
            if group.state is not GroupState.EMPTY or self._coordinator_error(group.group_id) is not None:
                continue
            if group.protocol_type is not None:
                # a consumer group: everything goes once it has been empty long enough
                if group.current_state_timestamp + retention > self._now:
                    continue
                expired = list(group.offsets)
            else:
                expired = [tp for tp, o in group.offsets.items() if o.commit_timestamp + retention <= self._now]
                if not expired:
                    continue
            remove_group = len(expired) == len(group.offsets)
            records = [(fmt.encode_offset_commit_key(group.group_id, t, p), None) for t, p in expired]
            if remove_group:
                records.append((fmt.encode_group_metadata_key(group.group_id), None))

            def done(error: Errors, group: Group = group, expired: list = expired, remove_group: bool = remove_group) -> None:
                if error is not Errors.NONE:
                    return
                for tp in expired:
                    group.offsets.pop(tp, None)
                # a member may have joined while the tombstones were written
                if remove_group and group.state is GroupState.EMPTY and not group.offsets:
                    self._transition(group, GroupState.DEAD)
                    if self.groups.get(group.group_id) is group:
                        del self.groups[group.group_id]

            self._write(group.group_id, records, done)

    # --- timers ---------------------------------------------------------------------

    def _on_timer(self, ev: TimerExpired) -> None:
        deadline = self.timers.get(ev.key)
        if deadline is None or deadline > self._now:
            return  # cancelled or pushed back since the driver armed it
        del self.timers[ev.key]
        kind = ev.key[0]
        if kind == "heartbeat":
            self._on_heartbeat_expired(ev.key[1], ev.key[2])
        elif kind == "join":
            self._on_join_timer(ev.key[1])
        elif kind == "sync":
            self._on_sync_timer(ev.key[1])
        elif kind == "offsets_retention":
            self._expire_offsets()
            self._set_timer(_KEY_RETENTION, self._now + self.config.offsets_retention_check_interval_ms)

    def expire_due_timers(self, now_ms: int) -> list[Effect]:
        """Step every timer whose deadline has passed, earliest first."""
        effects: list[Effect] = []
        while True:
            due = [(d, k) for k, d in self.timers.items() if d <= now_ms]
            if not due:
                return effects
            _, key = min(due)
            effects.extend(self.step(TimerExpired(key), now_ms))

    _HANDLERS: dict[type, Callable] = {
        JoinGroup: _on_join,
        SyncGroup: _on_sync,
        Heartbeat: _on_heartbeat,
        LeaveGroup: _on_leave,
        OffsetCommit: _on_offset_commit,
        OffsetFetch: _on_offset_fetch,
        DescribeGroups: _on_describe,
        ListGroups: _on_list,
        DeleteGroups: _on_delete,
        OffsetDelete: _on_offset_delete,
        TopicsDeleted: _on_topics_deleted,
        TimerExpired: _on_timer,
        WriteCompleted: _on_write_completed,
        BeginLoad: _on_begin_load,
        CompleteLoad: _on_complete_load,
    }

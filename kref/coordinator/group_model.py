"""The group coordinator's state: groups, members, committed offsets, pending writes.

Theory of operation. A `Group` moves through Kafka's five classic states and
only along Kafka's edges (ClassicGroupState's valid previous states):

    Empty               <- PreparingRebalance (and Dead, see below)
    PreparingRebalance  <- Empty, Stable, CompletingRebalance
    CompletingRebalance <- PreparingRebalance
    Stable              <- CompletingRebalance
    Dead                <- any state

`Group.transition_to` checks every move against that table and raises
IllegalStateTransition otherwise, so a bug shows up at the step that made it
rather than as a group that no client can leave. One edge is kref's own:
Dead -> Empty, taken only when the tombstones of a DeleteGroups fail to
commit (the log still holds the group, so the coordinator must too).

A write the coordinator waits for is data, not a callback: `PendingWrite`
holds the records and a follow-up value saying what to do once they are
committed or have failed (answer an OffsetCommit, finish a SyncGroup, ...).
The whole coordinator state is therefore plain values that tests can
compare and a simulator can snapshot.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kref.coordinator.group_events import Errors

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



class IllegalStateTransition(RuntimeError):
    """A group was moved along an edge Kafka's state machine does not have."""


_S = GroupState
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE, _S.DEAD}),
    _S.PREPARING_REBALANCE: frozenset({_S.EMPTY, _S.STABLE, _S.COMPLETING_REBALANCE}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset(GroupState),
}


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

    def transition_to(self, state: GroupState, now_ms: int) -> GroupState:
        """Move to `state` along one of Kafka's edges; returns the previous state."""
        previous = self.state
        if previous not in VALID_PREVIOUS_STATES[state]:
            raise IllegalStateTransition(f"group {self.group_id}: {previous.value} -> {state.value}")
        self.state = state
        self.current_state_timestamp = now_ms
        return previous

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


def subscribed_topics(group: Group) -> set[str] | None:
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


def key_heartbeat(group_id: str, member_id: str) -> tuple:
    return ("heartbeat", group_id, member_id)


def key_join(group_id: str) -> tuple:
    return ("join", group_id)


def key_sync(group_id: str) -> tuple:
    return ("sync", group_id)


KEY_RETENTION = ("offsets_retention",)


# --- pending writes, as data --------------------------------------------------


@dataclass(frozen=True, slots=True)
class AnswerOffsetCommit:
    """Answer an OffsetCommit: partitions with an error were refused up front;
    the others get NONE once committed, the write's error otherwise."""

    request_id: object
    partitions: tuple[tuple[str, int, Errors | None], ...]


@dataclass(frozen=True, slots=True)
class AnswerOffsetDelete:
    """Answer an OffsetDelete with its per-partition results once the tombstones are committed."""

    request_id: object
    partitions: tuple[tuple[str, int, Errors], ...]


@dataclass(frozen=True, slots=True)
class FinishSync:
    """The leader's assignment for `generation_id` is stored: hand it out, go Stable."""

    group_id: str
    generation_id: int
    assignment: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class AnswerStaticRejoin:
    """A restarted static member's new member id is stored (KIP-345): answer its JoinGroup."""

    group_id: str
    request_id: object
    member_id: str
    was_leader: bool


@dataclass(frozen=True, slots=True)
class FinishDelete:
    """One group of a DeleteGroups request is tombstoned."""

    batch: int
    group_id: str


@dataclass(frozen=True, slots=True)
class NoFollowUp:
    """Best-effort writes (tombstones of deleted topics, an emptied group's metadata)."""


FollowUp = AnswerOffsetCommit | AnswerOffsetDelete | FinishSync | AnswerStaticRejoin | FinishDelete | NoFollowUp


@dataclass(frozen=True, slots=True)
class PendingWrite:
    token: int
    partition: int
    records: tuple[tuple[bytes, bytes | None], ...]
    follow_up: FollowUp


@dataclass(slots=True)
class DeleteBatch:
    """A DeleteGroups request waiting for some of its groups' tombstones."""

    request_id: object
    group_ids: tuple[str, ...]
    results: dict[str, Errors] = field(default_factory=dict)
    waiting: set[str] = field(default_factory=set)

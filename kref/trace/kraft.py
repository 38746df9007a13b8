"""Trace events of the KRaft quorum: one per action of spec/KRaft.tla.

The quorum core (kref/controller/quorum.py) emits these from the transition
that implements the spec action of the same name. The partition is always
the metadata partition, `__cluster_metadata-0`; `replica` is the node id of
the node that took the step. Field names are spec/KRaft.tla's variable names
(`leader_epoch`, `voted_for`, `leader_id`, `state`, `high_watermark`,
`votes_granted`, `end_offsets`), plus the log position that stands for the
spec's `log[v]` (`log_end_offset` and `last_epoch`, the epoch of the last
entry). `state` takes the spec's values ("Unattached", "Candidate", "Leader",
"Follower", "Resigned", "Prospective"): kref's Voted state is the spec's
Unattached with a `voted_for`.

The names collide on purpose with kref.trace.events for the two actions the
two specs share (AdvanceHighWatermark, TruncateToEpochEndOffset): the spec
module tells which is meant, so these live in their own module.
"""

from __future__ import annotations

from dataclasses import dataclass

from kref.trace.events import TraceEvent

METADATA_TOPIC = "__cluster_metadata"


@dataclass(frozen=True, slots=True, kw_only=True)
class QuorumEvent(TraceEvent):
    """The post-state of the node's quorum variables, common to every action."""

    leader_epoch: int
    voted_for: int  # -1 = Nil
    leader_id: int  # -1 = Nil
    state: str
    log_end_offset: int
    last_epoch: int
    high_watermark: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestVote(QuorumEvent):
    """The election timer fired: candidate in leader_epoch, voting for itself."""

    votes_granted: frozenset[int]
    voters: frozenset[int] = frozenset()  # the configured voters (spec: Voters), what a majority is of
    pre_vote: bool = False  # KIP-996 on (spec: PreVoteEnabled): it stood after a majority of pre-votes


@dataclass(frozen=True, slots=True, kw_only=True)
class PreVote(QuorumEvent):
    """KIP-996: the election timer fired: Prospective in leader_epoch (not bumped), asking for pre-votes."""

    votes_granted: frozenset[int]
    voters: frozenset[int] = frozenset()  # the configured voters (spec: Voters)


@dataclass(frozen=True, slots=True, kw_only=True)
class GrantPreVote(QuorumEvent):
    """This voter would vote for prospective `candidate` in leader_epoch; its own state is unchanged."""

    candidate: int


@dataclass(frozen=True, slots=True, kw_only=True)
class GrantVote(QuorumEvent):
    """This voter granted its vote in leader_epoch to `candidate`."""

    candidate: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BecomeUnattached(QuorumEvent):
    """This node learnt the higher leader_epoch from node `source` and moved to it."""

    source: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BecomeActiveController(QuorumEvent):
    """A majority voted: leader of leader_epoch, LeaderChange appended."""

    votes_granted: frozenset[int]
    voters: frozenset[int] = frozenset()  # the configured voters (spec: Voters)


@dataclass(frozen=True, slots=True, kw_only=True)
class BeginQuorumEpoch(QuorumEvent):
    """This node now follows `leader_id` in leader_epoch (told by the leader)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchFromLeader(QuorumEvent):
    """This follower appended [first_offset, log_end_offset) fetched from leader_id."""

    first_offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TruncateToEpochEndOffset(QuorumEvent):
    """The leader answered with a diverging epoch; this follower truncated."""

    diverging_epoch: int
    diverging_end_offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AdvanceHighWatermark(QuorumEvent):
    """The leader's HW moved to the offset a majority of voters hold."""

    end_offsets: dict[int, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class Resign(QuorumEvent):
    """The leader gave up its epoch (shutdown, or lost its quorum): not in the spec model."""

    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateSnapshot(QuorumEvent):
    """This node wrote a snapshot of its image at a committed offset (KIP-630): its latest now."""

    snapshot_end_offset: int
    snapshot_epoch: int  # the epoch of the entry at snapshot_end_offset - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class AdvanceLogStart(QuorumEvent):
    """Retention: this node's log now starts at log_start_offset (its latest snapshot)."""

    log_start_offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class InstallSnapshot(QuorumEvent):
    """This follower fetched leader_id's snapshot (FetchSnapshot) and replaced its log with it."""

    snapshot_end_offset: int
    snapshot_epoch: int


KRAFT_EVENT_TYPES: dict[str, type[TraceEvent]] = {
    cls.__name__: cls
    for cls in (
        RequestVote,
        PreVote,
        GrantPreVote,
        GrantVote,
        BecomeUnattached,
        BecomeActiveController,
        BeginQuorumEpoch,
        FetchFromLeader,
        TruncateToEpochEndOffset,
        AdvanceHighWatermark,
        Resign,
        CreateSnapshot,
        AdvanceLogStart,
        InstallSnapshot,
    )
}

"""The follower decisions of the replica core (kref/replication/follower.py)
that the cluster scripts do not reach: truncation edge cases, stale and failed
responses, out-of-range fetches and the leader's log start offset."""

from __future__ import annotations

from kref.protocol.errors import ErrorCode
from kref.replication import follower as f
from kref.replication import replica as r


def _follower(log_end_offset: int = 5, high_watermark: int = 3, last_epoch: int = 2) -> r.PartitionReplica:
    core = r.PartitionReplica("t", 0, 2, tracing=False)
    core.step(
        r.BecomeFollower(1, 4, 0, frozenset({1, 2}), (1, 2), 0, log_end_offset, high_watermark, last_epoch), 0
    )
    return core


def test_truncation_offset_cases() -> None:
    # Same epoch on both sides: the smaller end offset wins.
    assert f.truncation_offset(2, 7, (2, 5), 9, 3) == (5, True)
    assert f.truncation_offset(2, 4, (2, 5), 9, 3) == (4, True)
    # The follower does not know the leader's epoch: cut to the end of its own
    # largest epoch below it and ask again.
    assert f.truncation_offset(3, 7, (1, 4), 9, 3) == (4, False)
    # The leader knows no epoch that old: keep only what is committed.
    assert f.truncation_offset(1, f.UNKNOWN_OFFSET, (1, 4), 9, 3) == (3, True)
    # No local entry: trust the leader, never past our own end.
    assert f.truncation_offset(1, 12, None, 9, 3) == (9, True)


def test_fetch_carries_log_end_offset_epochs_and_log_start() -> None:
    core = _follower()
    assert core.step(f.FollowerFetchDue(), 0) == [f.SendFetch(1, 5, 2, 4, 0)]


def test_stale_response_is_dropped() -> None:
    core = _follower()
    # Sent before a truncation (fetch offset 6 is not our end) or in an older epoch.
    assert core.step(f.FetchResponseReceived(4, 6, ErrorCode.NONE, 9, 0, True), 0) == []
    assert core.step(f.FetchResponseReceived(3, 5, ErrorCode.NONE, 9, 0, True), 0) == []


def test_append_then_high_watermark_is_bounded_by_own_log_end() -> None:
    core = _follower()
    [append] = core.step(f.FetchResponseReceived(4, 5, ErrorCode.NONE, 9, 2, True), 0)
    assert append == f.AppendAsFollower(5, 9, 2)
    effects = core.step(r.FollowerAppended(5, 6, 7, 9, 4, 2), 0)
    assert (core.log_end_offset, core.high_watermark, core.last_fetched_epoch) == (7, 7, 4)
    # The leader's log start offset (2) is followed, below our high watermark.
    assert f.IncrementLogStartOffset(2) in effects and core.log_start_offset == 2


def test_out_of_range_below_leader_start_restarts_the_log_there() -> None:
    core = _follower()
    out = core.step(f.FetchResponseReceived(4, 5, ErrorCode.OFFSET_OUT_OF_RANGE, 20, 12), 0)
    assert out == [f.TruncateFullyAndStartAt(12)]
    core.step(r.FollowerTruncated(12, f.NO_EPOCH, log_start_offset=12), 0)
    assert (core.log_start_offset, core.log_end_offset, core.high_watermark) == (12, 12, 12)


def test_fenced_waits_for_metadata_other_errors_back_off() -> None:
    core = _follower()
    assert core.step(f.FetchResponseReceived(4, 5, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1), 0) == [
        f.FetchBackoff(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    ]
    assert core.step(f.FollowerFetchDue(), 0) != []
    core.step(f.FetchResponseReceived(4, 5, ErrorCode.FENCED_LEADER_EPOCH, -1, -1), 0)
    assert core.fetch_state is f.FetchState.FENCED and core.step(f.FollowerFetchDue(), 0) == []
    # A newer epoch from the metadata resumes fetching.
    core.step(r.BecomeFollower(1, 5, 1, frozenset({1, 2}), (1, 2), 0, 5, 3, 2), 0)
    assert core.step(f.FollowerFetchDue(), 0) == [f.SendFetch(1, 5, 2, 5, 0)]


def test_empty_log_without_epochs_keeps_only_the_high_watermark() -> None:
    core = r.PartitionReplica("t", 0, 2, tracing=False)
    out = core.step(r.BecomeFollower(1, 0, 0, frozenset({1, 2}), (1, 2), 0, 4, 2, f.NO_EPOCH), 0)
    assert out == [f.TruncateLog(2)]

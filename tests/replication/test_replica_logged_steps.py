"""Steps of spec/Replication.tla the replica core logs itself (trace_check used to infer them).

- A leader applying a registration of its own leader epoch with a newer
  partition epoch (the controller changed the isr) takes the spec's
  BecomeLeader of the same epoch: followers' offsets kept, its own
  AlterPartition in flight dropped (Kafka's makeLeader replaces a pending isr
  state with the committed one), and the step is traced.
- A fetch refused with OFFSET_OUT_OF_RANGE because its last fetched epoch is
  older than every epoch the leader knows is the spec's LeaderHandleFetch
  answering diverging epoch -1, end offset 0 (EndOffsetForEpoch finds none).
"""

from __future__ import annotations

from kref.protocol.errors import ErrorCode
from kref.replication import replica as r
from kref.trace import events as trace

NOW = 1_000


def traced(effects, kind):
    return [e.event for e in effects if isinstance(e, r.Emit) and isinstance(e.event, kind)]


def leader_of_three() -> r.PartitionReplica:
    core = r.PartitionReplica("t", 0, 1, replica_lag_time_max_ms=100)
    core.step(r.BecomeLeader(2, 5, frozenset({1, 2, 3}), (1, 2, 3), 0, 10, 10), NOW)
    for f in (2, 3):
        core.step(r.FetchFromFollower(f, 10, 2, 2, (2, 10)), NOW)
    return core


def test_isr_only_registration_of_the_own_epoch_is_a_traced_become_leader():
    core = leader_of_three()
    # Follower 3 stops fetching; the leader proposes the shrink.
    core.step(r.LogAppended(1, 1, 10, 11, 11), NOW)
    core.step(r.FetchFromFollower(2, 11, 2, 2, (2, 11)), NOW + 50)
    out = core.step(r.Tick(), NOW + 500)
    assert any(isinstance(e, r.AlterPartition) for e in out) and core.pending_isr == frozenset({1, 2})
    # Meanwhile the controller committed another change (it fenced 2 and 3): partition epoch 6.
    out = core.step(r.BecomeLeader(2, 6, frozenset({1}), (1, 2, 3), 0, 11, 10), NOW + 510)
    [step] = traced(out, trace.BecomeLeader)
    assert (step.leader_epoch, step.partition_epoch, step.isr) == (2, 6, frozenset({1}))
    assert core.pending_isr is None  # the spec's alter_partition' = None
    assert core.followers[2].log_end_offset == 11  # same term: offsets kept
    # A smaller isr lets the high watermark move (min.insync.replicas 1).
    [hw] = traced(out, trace.AdvanceHighWatermark)
    assert hw.high_watermark == 11
    # The answer to the dropped AlterPartition is stale: nothing happens.
    assert core.step(r.AlterPartitionResponse(ErrorCode.NONE, 2, frozenset({1, 2}), 7), NOW + 520) == []
    assert core.isr == frozenset({1}) and core.partition_epoch == 6


def test_same_or_older_partition_epoch_of_the_own_term_is_no_step():
    core = leader_of_three()
    assert traced(core.step(r.BecomeLeader(2, 5, frozenset({1, 2, 3}), (1, 2, 3), 0, 10, 10), NOW), trace.TraceEvent) == []
    assert core.step(r.BecomeLeader(2, 4, frozenset({1}), (1, 2, 3), 0, 10, 10), NOW) == []
    assert core.isr == frozenset({1, 2, 3}) and core.partition_epoch == 5


def test_fetch_with_an_epoch_older_than_all_the_leader_knows_is_traced():
    core = r.PartitionReplica("t", 0, 1)
    core.step(r.BecomeLeader(3, 0, frozenset({1, 2}), (1, 2), 0, 0, 0), NOW)
    # The follower's last epoch 1 is older than every epoch the leader's cache holds.
    out = core.step(r.FetchFromFollower(2, 4, 1, 3, (r.NO_EPOCH, r.UNKNOWN_OFFSET)), NOW)
    [answer] = [e for e in out if isinstance(e, r.RespondFollowerFetch)]
    assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    [step] = traced(out, trace.LeaderHandleFetch)
    assert (step.follower, step.fetch_offset, step.last_fetched_epoch) == (2, 4, 1)
    assert (step.diverging_epoch, step.diverging_end_offset, step.remote_log_end_offset) == (-1, 0, -1)
    assert core.followers[2].log_end_offset == r.UNKNOWN_OFFSET  # nothing recorded

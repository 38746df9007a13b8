"""KIP-903 in the replica core: a follower's fetch carries its broker epoch, the leader
records it with the follower's offset, refuses a fetch of an incarnation older than
the one its metadata knows, expands the isr only on a fetch of the registered
incarnation of an eligible broker (KIP-841), and names each member's epoch in
AlterPartition so that the controller can refuse the rest (tests/controller/
testdata/controller/kip903.txt). spec/Replication.tla: remote_broker_epoch,
SendAlterPartition, AlterPartitionError.

The story of every test: broker 3 was killed and restarted quickly. Its old
incarnation (broker epoch 5) had fetched up to offset 10; the new one
(broker epoch 9) lost its unflushed tail and holds 4 records. A fetch the old
incarnation sent before it died reaches the leader late.
"""

from __future__ import annotations

from kref.protocol.errors import ErrorCode
from kref.replication import follower as f
from kref.replication import replica as r
from kref.trace import events as trace

NOW = 1_000
OLD, NEW = 5, 9


def leader() -> r.PartitionReplica:
    """Broker 1 leads t-0 (epoch 2) with isr {1, 2}; 2 has fetched everything (HW 10)."""
    core = r.PartitionReplica("t", 0, 1)
    core.step(r.BecomeLeader(2, 7, frozenset({1, 2}), (1, 2, 3), 0, 10, 0), NOW)
    core.step(r.FetchFromFollower(2, 10, 2, 2, (2, 10), broker_epoch=4, registered_broker_epoch=4), NOW)
    assert core.high_watermark == 10
    return core


def delayed_old_fetch(**metadata) -> r.FetchFromFollower:
    return r.FetchFromFollower(3, 10, 2, 2, (2, 10), broker_epoch=OLD, **metadata)


def expansions(effects) -> list[r.AlterPartition]:
    return [e for e in effects if isinstance(e, r.AlterPartition)]


def test_a_fetch_of_an_older_incarnation_than_the_leader_knows_is_refused():
    core = leader()
    out = core.step(delayed_old_fetch(registered_broker_epoch=NEW), NOW + 10)
    [answer] = [e for e in out if isinstance(e, r.RespondFollowerFetch)]
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert expansions(out) == [] and core.followers[3].log_end_offset == r.UNKNOWN_OFFSET
    assert not [e for e in out if isinstance(e, r.Emit)]  # no spec step: the spec's Restart dropped it


def test_a_fenced_or_shutting_down_broker_is_not_taken_into_the_isr():
    core = leader()
    # The new registration is fenced (not caught up yet): the old fetch is recorded, nothing proposed.
    out = core.step(delayed_old_fetch(registered_broker_epoch=r.NO_BROKER_EPOCH, isr_eligible=False), NOW + 10)
    assert expansions(out) == []
    assert (core.followers[3].log_end_offset, core.followers[3].broker_epoch) == (10, OLD)
    # Unfenced now: the recorded offset is of another incarnation, so it still justifies nothing.
    out = core.step(r.LogAppended(1, 1, 10, 10, 11), NOW + 20)
    out = core.step(r.FetchFromFollower(2, 11, 2, 2, (2, 11), broker_epoch=4, registered_broker_epoch=4), NOW + 30)
    assert expansions(out) == []
    # The new incarnation fetches from what it really holds; it catches up and joins, named with its epoch.
    out = core.step(r.FetchFromFollower(3, 4, 2, 2, (2, 11), broker_epoch=NEW, registered_broker_epoch=NEW), NOW + 40)
    assert expansions(out) == [] and core.followers[3].log_end_offset == 4
    out = core.step(r.FetchFromFollower(3, 11, 2, 2, (2, 11), broker_epoch=NEW, registered_broker_epoch=NEW), NOW + 50)
    [alter] = expansions(out)
    assert alter.new_isr == frozenset({1, 2, 3})
    assert dict(alter.broker_epochs) == {1: r.NO_BROKER_EPOCH, 2: 4, 3: NEW}
    [expand] = [e.event for e in out if isinstance(e, r.Emit) and isinstance(e.event, trace.ExpandIsr)]
    assert (expand.added, expand.broker_epoch) == (3, NEW)
    # A broker in controlled shutdown is not eligible either, whatever its epoch (KIP-841).
    core = leader()
    out = core.step(r.FetchFromFollower(3, 10, 2, 2, (2, 10), broker_epoch=NEW, registered_broker_epoch=NEW,
                                        isr_eligible=False), NOW + 10)
    assert expansions(out) == []


def test_a_leader_that_has_not_applied_the_restart_names_the_old_epoch():
    """The leader's metadata still has the old registration: it takes the delayed fetch
    and proposes the expansion, but with the epoch the fetch carried: the controller,
    which registered the new incarnation, refuses it (INELIGIBLE_REPLICA)."""
    core = leader()
    out = core.step(delayed_old_fetch(registered_broker_epoch=OLD), NOW + 10)
    [alter] = expansions(out)
    assert dict(alter.broker_epochs)[3] == OLD
    [handled] = [e.event for e in out if isinstance(e, r.Emit) and isinstance(e.event, trace.LeaderHandleFetch)]
    assert (handled.follower, handled.broker_epoch, handled.remote_log_end_offset) == (3, OLD, 10)
    # The refusal leaves the isr as it was; the HW counted 3 while the change was in flight
    # (KIP-497), which is the spec's behaviour too (its fault assumption covers it).
    out = core.step(r.AlterPartitionResponse(ErrorCode.INELIGIBLE_REPLICA, 2, frozenset(), -1), NOW + 20)
    assert core.isr == frozenset({1, 2}) and core.pending_isr is None


def test_fetches_without_epochs_are_not_compared():
    """Fetch before v15 and drivers that know no registrations: Kafka skips the check (-1)."""
    core = leader()
    out = core.step(r.FetchFromFollower(3, 10, 2, 2, (2, 10)), NOW + 10)
    [alter] = expansions(out)
    assert dict(alter.broker_epochs)[3] == r.NO_BROKER_EPOCH


def test_the_follower_sends_its_broker_epoch():
    core = r.PartitionReplica("t", 0, 3)
    core.step(r.BecomeFollower(1, 2, 7, frozenset({1, 2}), (1, 2, 3), 0, 4, 0, last_fetched_epoch=2), NOW)
    out = core.step(f.FollowerFetchDue(NEW), NOW)
    [send] = [e for e in out if isinstance(e, f.SendFetch)]
    assert (send.fetch_offset, send.broker_epoch) == (4, NEW)
    [fetch] = [e.event for e in out if isinstance(e, r.Emit) and isinstance(e.event, trace.FollowerFetch)]
    assert fetch.broker_epoch == NEW

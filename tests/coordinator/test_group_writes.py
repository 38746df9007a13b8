"""The group core's writes, replay, transitions and trace events.

- An OffsetCommit is answered only when its write is committed
  (WriteCommitted from the driver), never after a mere append; until then
  OffsetFetch does not show it. Commits apply in log order.
- One replay: the coordinator's state after live writes equals the state a
  fresh coordinator loads from the same records.
- Pending writes are data (frozen values, no callables): the whole
  coordinator state can be copied and compared.
- Transitions follow Kafka's table (IllegalStateTransition otherwise), and
  each is emitted as a GroupStateChange trace event.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest

from kref.coordinator import group as g
from kref.trace.group_events import GroupStateChange, GroupWriteCommitted


E = g.Errors


def commit(h, offset, group_id="solo"):
    return h.request(
        g.OffsetCommit, group_id=group_id, generation_id=-1, member_id="",
        partitions=(g.OffsetCommitPartition("t", 0, offset),),
    )


def fetched(h, group_id="solo"):
    return h.response(h.request(g.OffsetFetch, group_id=group_id, partitions=(("t", 0),))).partitions[0].offset


def test_offset_commit_is_answered_only_when_committed(make_harness):
    h = make_harness()
    h.hold_commits = True
    first, second = commit(h, 5), commit(h, 6)
    assert h.response(first) is None and h.response(second) is None
    assert fetched(h) == -1  # appended is not committed
    h.commit_writes()
    assert h.response(first).partitions == (("t", 0, E.NONE),)
    assert h.response(second).partitions == (("t", 0, E.NONE),)
    assert fetched(h) == 6  # log order: the later commit wins
    assert [type(e) for e in h.trace].count(GroupWriteCommitted) == 2


def test_failed_write_answers_with_its_error_and_changes_nothing(make_harness):
    h = make_harness()
    h.hold_commits = True
    rid = commit(h, 5)
    token = h.uncommitted.pop()
    h.step(g.WriteFailed(token, E.COORDINATOR_NOT_AVAILABLE))
    assert h.response(rid).partitions == (("t", 0, E.COORDINATOR_NOT_AVAILABLE),)
    assert fetched(h) == -1


def _state(coordinator):
    return {
        gid: (grp.state, grp.generation_id, grp.protocol_name, grp.leader_id,
              sorted((m.member_id, m.assignment) for m in grp.members.values()), dict(grp.offsets))
        for gid, grp in coordinator.groups.items()
    }


def test_live_state_equals_state_loaded_from_the_same_records(make_harness):
    h = make_harness()
    ids, generation, _ = h.form_group()
    for i, member in enumerate(ids):
        h.request(g.OffsetCommit, group_id="g", generation_id=generation, member_id=member,
                  partitions=(g.OffsetCommitPartition("t", i, 10 + i),))
    commit(h, 3, group_id="standalone")
    h.request(g.OffsetDelete, group_id="standalone", partitions=(("t", 0),))
    commit(h, 4, group_id="gone")
    h.request(g.DeleteGroups, group_ids=("gone",))

    loaded = make_harness(h.config, load=False)
    loaded.step(g.BeginLoad(0))
    loaded.step(g.CompleteLoad(0, tuple((k, v) for _, k, v in h.log)))
    assert _state(loaded.coordinator) == _state(h.coordinator)
    assert "gone" not in loaded.coordinator.groups


def test_pending_writes_are_data(make_harness):
    h = make_harness()
    h.hold_commits = True
    commit(h, 1)
    [write] = h.coordinator.pending_writes.values()
    assert dataclasses.is_dataclass(write) and write.follow_up == g.AnswerOffsetCommit(1, (("t", 0, None),))
    assert not any(callable(getattr(write, f.name)) for f in dataclasses.fields(write))
    assert copy.deepcopy(h.coordinator.pending_writes) == h.coordinator.pending_writes


def test_transitions_follow_kafkas_table_and_are_traced(make_harness):
    h = make_harness()
    h.form_group()
    changes = [(e.previous_state, e.state) for e in h.trace if isinstance(e, GroupStateChange)]
    assert changes == [
        ("Empty", "PreparingRebalance"),
        ("PreparingRebalance", "CompletingRebalance"),
        ("CompletingRebalance", "Stable"),
    ]
    stable = [e for e in h.trace if isinstance(e, GroupStateChange)][-1]
    assert stable.generation_id == 1 and len(stable.members) == 2 and stable.leader in stable.members
    with pytest.raises(g.IllegalStateTransition, match="Stable -> Empty"):
        h.group().transition_to(g.GroupState.EMPTY, 0)
    assert h.group().state is g.GroupState.STABLE
    for state, allowed in g.VALID_PREVIOUS_STATES.items():
        group = g.Group("x", state=next(iter(set(g.GroupState) - allowed), state))
        if group.state not in allowed:
            with pytest.raises(g.IllegalStateTransition):
                group.transition_to(state, 0)


def test_unload_hands_the_groups_to_the_next_leader(make_harness):
    """Resignation (Kafka's onResignation): a broker that stops leading the
    group's __consumer_offsets partition forgets its groups, answers what it
    still owes with NOT_COORDINATOR (clients look the coordinator up again),
    fails uncommitted writes the same way, and then refuses the group; the new
    leader loads the same records and serves the same state."""
    h = make_harness()
    (a, b), generation, _ = h.form_group()
    done = commit(h, 5)
    h.hold_commits = True
    pending = commit(h, 6)
    waiting = h.join(member_id=a)  # a rebalance: a's JoinGroup waits for b
    assert h.response(waiting) is None and h.response(pending) is None
    h.step(g.Unload(0))
    assert h.response(waiting).error is E.NOT_COORDINATOR
    assert h.response(pending).partitions == (("t", 0, E.NOT_COORDINATOR),)
    assert h.coordinator.groups == {} and not [k for k in h.coordinator.timers if len(k) > 1]
    assert h.heartbeat(b, generation) is E.NOT_COORDINATOR
    assert h.response(done).partitions == (("t", 0, E.NONE),)

    # A load overtaken by a newer leadership is ignored; the newer one counts.
    records = tuple((k, v) for _, k, v in h.log[:-1])  # the uncommitted write never reached the new leader
    h2 = make_harness(load=False)
    h2.step(g.BeginLoad(0, 4))
    h2.step(g.BeginLoad(0, 5))
    h2.step(g.CompleteLoad(0, (), 4))
    assert h2.response(h2.request(g.OffsetFetch, group_id="solo", partitions=None)).error is E.COORDINATOR_LOAD_IN_PROGRESS
    h2.step(g.CompleteLoad(0, records, 5))
    assert fetched(h2) == 5
    assert set(h2.group("g").members) == {a, b}
    h2.step(g.Unload(0))
    h2.step(g.CompleteLoad(0, records, 5))  # a load finishing after the resignation changes nothing
    assert h2.response(h2.request(g.OffsetFetch, group_id="solo", partitions=None)).error is E.NOT_COORDINATOR

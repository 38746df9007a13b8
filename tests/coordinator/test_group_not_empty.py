"""When DeleteGroups answers NON_EMPTY_GROUP although every client has closed.

DeleteGroups deletes only an Empty group (Kafka's handleDeleteGroups: Dead
-> GROUP_ID_NOT_FOUND, Empty -> deleted, anything else -> NON_EMPTY_GROUP).
A closed dynamic member sends LeaveGroup and is gone at once
(tests/clients/test_group_lifecycle.py); these are the cases where a group
is still not Empty right after its clients closed, each one Kafka's rule:

- a static member (KIP-345) does not send LeaveGroup on close: it stays
  until its session times out;
- the last member leaves during the initial rebalance delay (KIP-134): the
  join phase of an initial rebalance completes only when the delay ends
  (Kafka: InitialDelayedJoin.tryComplete is false; the new coordinator's
  maybeCompleteJoinPhase skips a rebalance whose previous state is Empty).

A KIP-394 pending member (given a member id with MEMBER_ID_REQUIRED, never
back) keeps a rebalance open only while other members remain
(hasAllMembersJoined needs no pending members); once every member has left,
the rebalance timeout is 0 and the group is Empty at once.
"""

from __future__ import annotations

from kref.coordinator import group as g

E = g.Errors


def delete(h, group_id="g"):
    return h.response(h.request(g.DeleteGroups, group_ids=(group_id,))).groups[0][1]


def memberless_rebalance_blocks_delete_for(h, ms):
    """No member left, yet the rebalance stays open for `ms`: not Empty until then."""
    assert h.group().members == {} and h.group().state is g.GroupState.PREPARING_REBALANCE
    assert delete(h) is E.NON_EMPTY_GROUP
    h.advance(ms - 1)
    assert delete(h) is E.NON_EMPTY_GROUP
    h.advance(1)
    assert h.group().state is g.GroupState.EMPTY
    assert delete(h) is E.NONE


def test_static_member_stays_until_its_session_expires(make_harness):
    h = make_harness()
    rid = h.join(group_instance_id="inst", session_timeout_ms=6000)
    h.advance(0)
    joined = h.response(rid)
    h.sync(joined.member_id, 1, assignments=((joined.member_id, b"A"),), group_instance_id="inst")
    assert h.group().state is g.GroupState.STABLE
    # the client closed without LeaveGroup (a static member's close)
    assert delete(h) is E.NON_EMPTY_GROUP
    h.advance(5999)
    assert delete(h) is E.NON_EMPTY_GROUP
    h.advance(1)
    assert h.group().state is g.GroupState.EMPTY
    assert delete(h) is E.NONE


def test_last_member_leaving_during_the_initial_delay_waits_for_the_delay(make_harness):
    h = make_harness(g.GroupConfig(group_initial_rebalance_delay_ms=3000, offsets_topic_num_partitions=1))
    first = h.join(client_id="a")
    member_id = next(iter(h.group().members))
    assert h.group().state is g.GroupState.PREPARING_REBALANCE
    h.request(g.LeaveGroup, group_id="g", members=((member_id, None),))
    assert h.response(first).error is E.UNKNOWN_MEMBER_ID
    memberless_rebalance_blocks_delete_for(h, 3000)


def test_pending_member_does_not_hold_a_group_whose_members_all_left(make_harness):
    # The rebalance the last leave starts has the largest rebalance timeout of
    # the remaining members: none, so 0 (Kafka's rebalanceTimeoutMs), and it
    # ends at once although a pending member has not come back.
    h = make_harness()
    (a,), _, _ = h.form_group(n=1)
    assert h.response(h.join(client_id="b", require_known_member_id=True)).error is E.MEMBER_ID_REQUIRED
    h.request(g.LeaveGroup, group_id="g", members=((a, None),))
    h.advance(0)
    assert h.group().state is g.GroupState.EMPTY
    assert delete(h) is E.NONE


def test_pending_member_that_leaves_releases_the_rebalance_at_once(make_harness):
    h = make_harness()
    (a,), _, _ = h.form_group(n=1)
    pending = h.response(h.join(client_id="b", require_known_member_id=True)).member_id
    h.request(g.LeaveGroup, group_id="g", members=((a, None), (pending, None)))
    assert h.group().state is g.GroupState.EMPTY
    assert delete(h) is E.NONE

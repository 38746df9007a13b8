"""Scripted interactions with the classic group coordinator (kref/coordinator/group.py).

Each test replays a sequence of requests and clock moves and checks the
answers against Kafka's classic protocol: KIP-62 rebalance/session timeouts,
KIP-134 initial rebalance delay, KIP-345 static membership, KIP-394
MEMBER_ID_REQUIRED, and that group state is only changed once the
__consumer_offsets write is acknowledged (and can be reloaded from it).
"""

from __future__ import annotations

from kref.coordinator import group as g
from kref.coordinator import offsets_format as fmt

E = g.Errors


def form_group(h, n=2, **join_kwargs):
    """n dynamic members join and sync; returns (member_ids, generation, leader)."""
    return h.form_group(n, **join_kwargs)


def test_member_id_required_then_join_completes(make_harness):
    h = make_harness()
    first = h.join(require_known_member_id=True)
    r = h.response(first)
    assert r.error is E.MEMBER_ID_REQUIRED and r.member_id
    assert h.group().members == {} and r.member_id in h.group().pending_members
    second = h.join(member_id=r.member_id, require_known_member_id=True)
    h.advance(0)
    joined = h.response(second)
    assert joined.error is E.NONE and joined.member_id == r.member_id
    assert joined.generation_id == 1 and joined.leader == r.member_id
    assert [m.member_id for m in joined.members] == [r.member_id]
    assert h.group().state is g.GroupState.COMPLETING_REBALANCE


def test_pending_member_expires_after_session_timeout(make_harness):
    h = make_harness()
    pending = h.response(h.join(require_known_member_id=True)).member_id
    h.advance(10_000)
    assert pending not in h.group().pending_members
    late = h.response(h.join(member_id=pending))
    assert late.error is E.UNKNOWN_MEMBER_ID


def test_two_members_leader_assigns_and_group_is_stored(make_harness):
    h = make_harness()
    ids, generation, leader = form_group(h)
    assert generation == 1 and leader == ids[0]
    assert h.group().state is g.GroupState.STABLE
    partition, key, value = h.log[-1]
    assert fmt.decode_key(key) == fmt.GroupMetadataKey("g")
    stored = fmt.decode_group_metadata_value(value)
    assert stored.generation == 1 and stored.leader == leader and stored.protocol == "range"
    assert [(m.member_id, m.assignment) for m in stored.members] == [(mid, f"assign-{mid}".encode()) for mid in ids]


def test_follower_sync_waits_for_leader(make_harness):
    h = make_harness()
    rids = [h.join(client_id="a"), h.join(client_id="b")]
    h.advance(0)
    leader, follower = (h.response(r) for r in rids)
    pending = h.sync(follower.member_id, 1)
    assert h.response(pending) is None
    h.sync(leader.member_id, 1, assignments=((follower.member_id, b"x"),))
    assert h.response(pending).assignment == b"x"


def test_leave_triggers_rebalance_and_survivor_gets_everything(make_harness):
    h = make_harness()
    (a, b), generation, _ = form_group(h)
    leave = h.request(g.LeaveGroup, group_id="g", members=((a, None),))
    assert h.response(leave) == g.LeaveResult(E.NONE, ((a, None, E.NONE),))
    assert h.group().state is g.GroupState.PREPARING_REBALANCE
    assert h.heartbeat(b, generation) is E.REBALANCE_IN_PROGRESS
    rejoin = h.join(member_id=b)
    joined = h.response(rejoin)
    assert joined.error is E.NONE and joined.generation_id == generation + 1
    assert joined.leader == b and [m.member_id for m in joined.members] == [b]


def test_session_timeout_removes_silent_member(make_harness):
    h = make_harness()
    (a, b), generation, _ = form_group(h)
    h.advance(6_000)
    assert h.heartbeat(a, generation) is E.NONE
    assert b in h.group().members
    h.advance(6_000)  # b's last sign of life was 12 s ago, its session is 10 s
    assert b not in h.group().members
    assert h.heartbeat(a, generation) is E.REBALANCE_IN_PROGRESS
    assert h.heartbeat(b, generation) is E.UNKNOWN_MEMBER_ID


def test_rebalance_timeout_drops_member_that_does_not_rejoin(make_harness):
    h = make_harness()
    (a, b), generation, _ = form_group(h)
    rejoin = h.join(member_id=a)  # leader rejoins: a new rebalance starts
    assert h.response(rejoin) is None
    # b keeps heartbeating but never rejoins; the join completes at the rebalance timeout
    for _ in range(5):
        h.advance(5_000)
        h.heartbeat(b, generation)
    assert h.response(rejoin) is None
    h.advance(5_000)
    result = h.response(rejoin)
    assert result.error is E.NONE and result.generation_id == generation + 1
    assert [m.member_id for m in result.members] == [a]


def test_member_that_never_syncs_is_removed_after_rebalance_timeout(make_harness):
    h = make_harness()
    rids = [h.join(client_id=c, session_timeout_ms=60_000) for c in "ab"]
    h.advance(0)
    leader, follower = (h.response(r) for r in rids)
    h.sync(leader.member_id, 1, assignments=())
    h.advance(29_999)
    assert follower.member_id in h.group().members
    h.advance(1)
    assert follower.member_id not in h.group().members
    assert h.group().state is g.GroupState.PREPARING_REBALANCE


def test_initial_rebalance_delay_waits_and_extends(make_harness):
    h = make_harness(g.GroupConfig(group_initial_rebalance_delay_ms=3000, offsets_topic_num_partitions=1))
    first = h.join(client_id="a")
    h.advance(2000)
    second = h.join(client_id="b")
    h.advance(1000)
    assert h.response(first) is None  # a member arrived during the delay: it is extended
    h.advance(3000)
    assert h.response(first).generation_id == 1
    assert len(h.response(first).members) == 2 and h.response(second).error is E.NONE


def test_static_member_rejoin_keeps_generation_and_fences_old_id(make_harness):
    h = make_harness()
    a = h.response(h.join(group_instance_id="inst-a", client_id="a"))
    b = h.response(h.join(group_instance_id="inst-b", client_id="b"))
    h.advance(0)
    a = h.response(1)
    b = h.response(2)
    h.sync(a.member_id, 1, assignments=((a.member_id, b"A"), (b.member_id, b"B")), group_instance_id="inst-a")
    h.sync(b.member_id, 1, group_instance_id="inst-b")
    assert h.group().state is g.GroupState.STABLE
    # inst-b restarts and joins without its member id
    again = h.response(h.join(group_instance_id="inst-b", client_id="b"))
    assert again.error is E.NONE and again.member_id != b.member_id
    assert again.generation_id == 1 and h.group().state is g.GroupState.STABLE
    assert h.response(h.sync(again.member_id, 1, group_instance_id="inst-b")).assignment == b"B"
    assert h.heartbeat(b.member_id, 1, group_instance_id="inst-b") is E.FENCED_INSTANCE_ID
    assert h.heartbeat(again.member_id, 1, group_instance_id="inst-b") is E.NONE
    # the restarted leader is told to skip assignment (KIP-814)
    leader_again = h.response(h.join(group_instance_id="inst-a", client_id="a"))
    assert leader_again.skip_assignment and len(leader_again.members) == 2
    assert leader_again.leader == leader_again.member_id


def test_static_member_survives_session_of_rejoin_but_not_leave(make_harness):
    h = make_harness()
    a = h.join(group_instance_id="inst-a")
    h.advance(0)
    member = h.response(a).member_id
    leave = h.request(g.LeaveGroup, group_id="g", members=(("wrong-id", "inst-a"),))
    assert h.response(leave).members == (("wrong-id", "inst-a", E.FENCED_INSTANCE_ID),)
    leave = h.request(g.LeaveGroup, group_id="g", members=(("", "inst-a"),))
    assert h.response(leave).members == (("", "inst-a", E.NONE),)
    assert member not in h.group().members and h.group().state is g.GroupState.EMPTY


def test_join_validation_errors(make_harness):
    h = make_harness()
    assert h.response(h.join(session_timeout_ms=1000)).error is E.INVALID_SESSION_TIMEOUT
    assert h.response(h.join(group_id="")).error is E.INVALID_GROUP_ID
    assert h.response(h.join(member_id="ghost")).error is E.UNKNOWN_MEMBER_ID
    form_group(h, n=1)
    assert h.response(h.join(protocols=(("roundrobin", b""),))).error is E.INCONSISTENT_GROUP_PROTOCOL


def test_offset_commit_rules_and_fetch(make_harness):
    h = make_harness()
    (a, b), generation, _ = form_group(h)
    p = (g.OffsetCommitPartition("t", 0, 42, 3, "meta"),)
    ok = h.request(g.OffsetCommit, group_id="g", generation_id=generation, member_id=a, partitions=p)
    assert h.response(ok).partitions == (("t", 0, E.NONE),)
    stale = h.request(g.OffsetCommit, group_id="g", generation_id=generation - 1, member_id=a, partitions=p)
    assert h.response(stale).partitions == (("t", 0, E.ILLEGAL_GENERATION),)
    ghost = h.request(g.OffsetCommit, group_id="g", generation_id=generation, member_id="x", partitions=p)
    assert h.response(ghost).partitions == (("t", 0, E.UNKNOWN_MEMBER_ID),)
    big = (g.OffsetCommitPartition("t", 1, 1, -1, "x" * 5000),)
    too_big = h.request(g.OffsetCommit, group_id="g", generation_id=generation, member_id=a, partitions=big)
    assert h.response(too_big).partitions == (("t", 1, E.OFFSET_METADATA_TOO_LARGE),)
    fetch = h.request(g.OffsetFetch, group_id="g", partitions=(("t", 0), ("t", 1)))
    assert h.response(fetch).partitions == (
        g.FetchedOffset("t", 0, 42, 3, "meta"),
        g.FetchedOffset("t", 1, -1, -1, ""),
    )


def test_failed_write_changes_nothing(make_harness):
    h = make_harness()
    commit = h.request(g.OffsetCommit, group_id="solo", generation_id=-1, member_id="",
                       partitions=(g.OffsetCommitPartition("t", 0, 7),))
    assert h.response(commit).partitions == (("t", 0, E.NONE),)
    h.write_error = E.NOT_COORDINATOR
    commit = h.request(g.OffsetCommit, group_id="solo", generation_id=-1, member_id="",
                       partitions=(g.OffsetCommitPartition("t", 0, 9),))
    assert h.response(commit).partitions == (("t", 0, E.NOT_COORDINATOR),)
    fetch = h.request(g.OffsetFetch, group_id="solo", partitions=None)
    assert h.response(fetch).partitions == (g.FetchedOffset("t", 0, 7, -1, ""),)


def test_reload_from_log_restores_group_and_offsets(make_harness):
    h = make_harness()
    (a, b), generation, leader = form_group(h)
    h.request(g.OffsetCommit, group_id="g", generation_id=generation, member_id=a,
              partitions=(g.OffsetCommitPartition("t", 0, 10), g.OffsetCommitPartition("t", 1, 20)))
    h.request(g.OffsetCommit, group_id="solo", generation_id=-1, member_id="",
              partitions=(g.OffsetCommitPartition("u", 0, 5),))

    h2 = make_harness(load=False)
    assert h2.response(h2.request(g.OffsetFetch, group_id="g", partitions=None)).error is E.NOT_COORDINATOR
    h2.step(g.BeginLoad(0))
    assert h2.response(h2.join()).error is E.COORDINATOR_LOAD_IN_PROGRESS
    assert h2.response(h2.request(g.OffsetFetch, group_id="g", partitions=None)).error is E.COORDINATOR_LOAD_IN_PROGRESS
    h2.step(g.CompleteLoad(0, tuple((k, v) for _, k, v in h.log)))
    fetched = h2.response(h2.request(g.OffsetFetch, group_id="g", partitions=None))
    assert {(p.topic, p.partition, p.offset) for p in fetched.partitions} == {("t", 0, 10), ("t", 1, 20)}
    group = h2.group()
    assert group.state is g.GroupState.STABLE and group.generation_id == generation and group.leader_id == leader
    assert h2.heartbeat(a, generation) is E.NONE
    # b does not come back: its session expires and a rebalance follows
    h2.advance(10_000)
    assert b not in group.members
    assert h2.group("solo").state is g.GroupState.EMPTY


def test_delete_groups(make_harness):
    h = make_harness()
    (a,), generation, _ = form_group(h, n=1)
    h.request(g.OffsetCommit, group_id="g", generation_id=generation, member_id=a,
              partitions=(g.OffsetCommitPartition("t", 0, 1),))
    busy = h.request(g.DeleteGroups, group_ids=("g", "nope"))
    assert h.response(busy).groups == (("g", E.NON_EMPTY_GROUP), ("nope", E.GROUP_ID_NOT_FOUND))
    h.request(g.LeaveGroup, group_id="g", members=((a, None),))
    assert h.group().state is g.GroupState.EMPTY
    done = h.request(g.DeleteGroups, group_ids=("g",))
    assert h.response(done).groups == (("g", E.NONE),)
    tombstones = [fmt.decode_key(k) for _, k, v in h.log[-2:] if v is None]
    assert tombstones == [fmt.OffsetCommitKey("g", "t", 0), fmt.GroupMetadataKey("g")]
    assert "g" not in h.coordinator.groups
    h2 = make_harness(load=False)
    h2.step(g.BeginLoad(0))
    h2.step(g.CompleteLoad(0, tuple((k, v) for _, k, v in h.log)))
    assert "g" not in h2.coordinator.groups


def test_describe_and_list(make_harness):
    h = make_harness()
    (a, b), _, _ = form_group(h)
    described = h.response(h.request(g.DescribeGroups, group_ids=("g", "missing"))).groups
    assert described[0].state == "Stable" and described[0].protocol == "range"
    assert [(m.member_id, m.assignment) for m in described[0].members] == [(a, f"assign-{a}".encode()), (b, f"assign-{b}".encode())]
    assert described[1].state == "Dead"
    listed = h.response(h.request(g.ListGroups)).groups
    assert listed == (("g", "consumer", "Stable"),)
    assert h.response(h.request(g.ListGroups, states_filter=("empty",))).groups == ()


def test_topics_deleted_drops_their_offsets_with_tombstones(make_harness):
    # Kafka's onPartitionsDeleted: a re-created topic must not inherit offsets
    h = make_harness()
    h.request(g.OffsetCommit, group_id="solo", generation_id=-1, member_id="",
              partitions=(g.OffsetCommitPartition("t", 0, 7), g.OffsetCommitPartition("u", 0, 3)))
    h.step(g.TopicsDeleted(("t",)))
    fetched = h.response(h.request(g.OffsetFetch, group_id="solo", partitions=None))
    assert [(p.topic, p.offset) for p in fetched.partitions] == [("u", 3)]
    assert [fmt.decode_key(k) for _, k, v in h.log if v is None] == [fmt.OffsetCommitKey("solo", "t", 0)]
    h2 = make_harness(load=False)
    h2.step(g.BeginLoad(0))
    h2.step(g.CompleteLoad(0, tuple((k, v) for _, k, v in h.log)))
    assert set(h2.group("solo").offsets) == {("u", 0)}


def test_offsets_expire_after_retention_and_empty_group_is_removed(make_harness):
    cfg = g.GroupConfig(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=1,
                        offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000)
    h = make_harness(cfg)
    (a,), generation, _ = form_group(h, n=1)
    h.request(g.OffsetCommit, group_id="g", generation_id=generation, member_id=a,
              partitions=(g.OffsetCommitPartition("t", 0, 5),))
    h.request(g.OffsetCommit, group_id="solo", generation_id=-1, member_id="",
              partitions=(g.OffsetCommitPartition("u", 0, 1),))
    # an active group keeps its offsets however old they are
    for _ in range(8):
        h.advance(9_000)
        h.heartbeat(a, generation)
    assert "solo" not in h.coordinator.groups  # standalone: expired one retention after its commit
    assert h.group().offsets
    h.request(g.LeaveGroup, group_id="g", members=((a, None),))
    h.advance(50_000)
    assert h.group().offsets  # empty for less than the retention time
    h.advance(20_000)
    assert "g" not in h.coordinator.groups
    tombstones = {fmt.decode_key(k) for _, k, v in h.log if v is None}
    assert {fmt.OffsetCommitKey("g", "t", 0), fmt.GroupMetadataKey("g"), fmt.OffsetCommitKey("solo", "u", 0),
            fmt.GroupMetadataKey("solo")} <= tombstones

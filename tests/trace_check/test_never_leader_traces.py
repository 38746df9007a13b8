"""A fetch sent to a broker that never led its epoch: no leader answered it, so it changed nothing.

testdata/never-leader: a run of tests/controller/test_isr_batch_processes.py (session 13, load
~20, strict check passed; gzip), cut to partitions 50 and 51 of the topic, the controllers'
membership events and each run's last event. Node 2 was killed (kill -9), restarted and rejoined
every isr. In the final SIGTERMs node 1's controlled shutdown named node 2 leader, and node 2's
own controlled shutdown came before node 2 applied that leadership: it never led the epoch. Node
3 applied the registration, fetched from node 2 in that epoch and logged no FetchError: its next
step was the leaderless registration of node 2's shutdown (BecomeFollower, leader -1).

The reading (session 11's, kept): a request no leader ever answered changes no state, as a lost
message does in Kafka, so the converter leaves out a FollowerFetch that no take, answer or error
matches before its sender's reset of its fetching, its Restart or the trace's end; the spec's
FollowerFetch, which needs a leader of the follower's epoch, is not asked to take it. The doctored
copies show what that does not excuse: a take by the broker that never led, and records appended
as if it had answered.
"""

from __future__ import annotations

import pytest

from tests.trace_check.recorded import TESTDATA, events_by_node, partition_verdict

RUN = TESTDATA / "never-leader"
ABANDONED = "FollowerFetch never answered (dropped by a metadata change or crash)"


def _fetch(nodes, partition):
    """Node 3's fetch from node 2 in the epoch node 2 never led."""
    led = {e["leader_epoch"] for e in nodes["node-2"] if e["type"] == "BecomeLeader" and e.get("partition") == partition}
    fetch = [e for e in nodes["node-3"] if e["type"] == "FollowerFetch" and e["partition"] == partition
             and e["leader"] == 2][-1]
    assert fetch["leader_epoch"] not in led, "the recorded run changed: node 2 led that epoch"
    return fetch


@pytest.mark.parametrize("partition", [50, 51])
def test_a_fetch_to_a_never_leader_is_left_out(tmp_path, partition):
    nodes = events_by_node(RUN)
    fetch = _fetch(nodes, partition)
    after = [e for e in nodes["node-3"] if e.get("partition") == partition and e["mono_ns"] > fetch["mono_ns"]]
    assert (after[0]["type"], after[0]["leader"]) == ("BecomeFollower", -1), after[:1]  # no FetchError logged
    steps, verdict = partition_verdict(tmp_path, nodes, "wide", partition)
    assert verdict.accepted, verdict
    assert steps.skipped[ABANDONED] >= 1
    assert not any(s["type"] == "FollowerFetch" and s["replica"] == 3 and s["leader"] == 2
                   and s["leader_epoch"] == fetch["leader_epoch"] for s in steps.steps)


def _inserted_after(nodes, node, anchor, event):
    """`event` put into `node`'s file just after `anchor` (a step of another node) in the merged order."""
    event = {"time_ms": anchor["time_ms"], "topic": "wide", "partition": anchor["partition"],
             "seq": 0, "mono_ns": anchor["mono_ns"] + 1} | event
    at = next(i for i, e in enumerate(nodes[node]) if e.get("mono_ns", 0) > anchor["mono_ns"])
    nodes[node].insert(at, event)


def test_a_take_by_the_never_leader_is_rejected(tmp_path):
    """Node 2 doctored to take node 3's request in the epoch it never led: rejected."""
    nodes = events_by_node(RUN)
    fetch = _fetch(nodes, 51)
    _inserted_after(nodes, "node-2", fetch, {
        "type": "LeaderHandleFetch", "replica": 2, "leader_epoch": fetch["leader_epoch"], "follower": 3,
        "fetch_offset": 0, "last_fetched_epoch": fetch["last_fetched_epoch"], "remote_log_end_offset": 0,
        "diverging_epoch": -1, "diverging_end_offset": -1, "log_end_offset": 0, "high_watermark": 0,
        "broker_epoch": fetch["broker_epoch"]})
    steps, verdict = partition_verdict(tmp_path, nodes, "wide", 51)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert (bad["type"], bad["replica"]) in (("FollowerFetch", 3), ("LeaderHandleFetch", 2)), bad


def test_records_appended_from_the_never_leader_are_rejected(tmp_path):
    """Node 3 doctored to append a record after its fetch, as if node 2 had answered: rejected."""
    nodes = events_by_node(RUN)
    fetch = _fetch(nodes, 51)
    _inserted_after(nodes, "node-3", fetch, {
        "type": "FollowerAppend", "replica": 3, "leader": 2, "leader_epoch": fetch["leader_epoch"],
        "first_offset": 0, "last_offset": 0, "log_end_offset": 1, "high_watermark": 0})
    steps, verdict = partition_verdict(tmp_path, nodes, "wide", 51)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert (bad["type"], bad["replica"]) in (("FollowerFetch", 3), ("FollowerAppend", 3)), bad

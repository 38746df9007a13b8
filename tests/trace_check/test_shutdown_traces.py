"""A SIGTERM during topic creation is a behaviour of spec/Replication.tla (ControlledShutdown,
PartitionRecord), and doctored copies of it are rejected at their line.

testdata/shutdown-creation: the nodes' traces of
tests/controller/test_scale_creation.py::test_sigterm_during_log_creation_then_every_log
(session 12, load ~20 on 2 cores; gzip), cut to partitions 0 and 1 of the topic and the
controllers' membership events (heartbeats and quorum events left out: no controller write was
truncated in this run). Node 3, the active controller then, got its SIGTERM before any replica
applied the creation of either partition: it took itself out of both isrs and moved partition
0's leadership (created on 3) to node 1; the others applied the creation afterwards
(registrations older than the controller's latest, in order). Node 3 restarted and was unfenced
(node 2 controlled by then); at the end nodes 2 and 1 shut down under control (their fencing is
taken as a repeat), node 3 was elected and stopped before it applied that leadership: its
followers' last requests to it were never answered (left out at the trace's end).

What is checked: both partitions whole (from the PartitionRecord, through every controlled
shutdown); a shutting-down broker elected, the fencing of another incarnation after a controlled
shutdown, a creation naming another leader than the one the replicas applied, and an append of
the answer to a request nobody answered are rejected.
"""

from __future__ import annotations

from pathlib import Path

from trace_check.replication import load_events, normalise
from trace_check.tlc import check_and_explain_batch
from tests.trace_check.recorded import TESTDATA, events_by_node, partition_verdict, write_run

RUN = TESTDATA / "shutdown-creation"
PARTITIONS = (0, 1)


def _events_by_node() -> dict[str, list[dict]]:
    return events_by_node(RUN)


def _write_run(tmp_path: Path, nodes: dict[str, list[dict]]) -> list[Path]:
    return write_run(tmp_path, nodes)


def _first(nodes, predicate) -> dict:
    """The first event (in the merged order) of any node that satisfies predicate."""
    return min((e for events in nodes.values() for e in events if predicate(e)), key=lambda e: e["mono_ns"])


def _verdict(tmp_path, nodes, partition):
    return partition_verdict(tmp_path, nodes, "many", partition)


def test_a_sigterm_during_creation_is_a_behaviour_of_replication_tla(tmp_path):
    files = _write_run(tmp_path, _events_by_node())
    batch = [normalise(load_events(files), "many", p) for p in PARTITIONS]
    verdicts = check_and_explain_batch(batch, min_insync_replicas=1, timeout_s=300)
    for steps, v in zip(batch, verdicts):
        assert v.accepted, v
        kinds = [s["type"] for s in steps.steps]
        # Not vacuous: the check starts at the controller's PartitionRecord, takes node 3's controlled
        # shutdown before any replica applied the creation, and runs to the end (four shutdowns).
        assert "PartitionRecord" in steps.origin[0] and kinds[0] == "ElectLeader", steps.origin[0]
        assert kinds[1] == "ControlledShutdown" and steps.steps[1]["broker"] == 3, steps.steps[1]
        assert kinds.count("ControlledShutdown") == 3 and not steps.stopped
        assert steps.skipped["FenceBroker ending a controlled shutdown (a repeat of its ControlledShutdown)"] == 2
        assert steps.skipped["FollowerFetch never answered before the trace ends"] == 1
    # Partition 0 was created on node 3, which never led it: node 1 applied the creation (following 3)
    # after the controller had moved the leadership to it.
    first = batch[0].steps
    assert first[0]["leader"] == 3 and first[2]["type"] == "ElectLeader" and first[2]["leader"] == 1
    assert not any(s["type"] == "BecomeLeader" and s["replica"] == 3 for s in first)


def test_a_shutting_down_broker_elected_is_rejected(tmp_path):
    """The controller moves leadership off a broker in controlled shutdown: an election naming
    it (partition 0's, right after node 3's ControlledShutdown) is rejected there."""
    nodes = _events_by_node()
    election = _first(nodes, lambda e: e["type"] == "ElectLeader" and e.get("partition") == 0)
    election["leader"] = 3
    steps, verdict = _verdict(tmp_path, nodes, 0)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert (bad["type"], bad["leader"], verdict.reached) == ("ElectLeader", 3, 3), bad


def test_a_fencing_of_another_incarnation_after_a_controlled_shutdown_is_rejected(tmp_path):
    """Only the fencing that ends a controlled shutdown (same broker, same broker epoch) is left out
    as a repeat: one of another broker epoch is the spec's FenceBroker of a broker already fenced."""
    nodes = _events_by_node()
    fence = _first(nodes, lambda e: e["type"] == "FenceBroker" and e["broker"] == 3)
    register = max((e for events in nodes.values() for e in events
                    if e["type"] == "RegisterBroker" and e["broker"] == 3), key=lambda e: e["mono_ns"])
    fence["broker_epoch"] = register["broker_epoch"]  # the next incarnation's, not the one shutting down
    steps, verdict = _verdict(tmp_path, nodes, 1)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert bad["type"] == "FenceBroker" and bad["broker"] == 3, bad
    assert steps.skipped["FenceBroker ending a controlled shutdown (a repeat of its ControlledShutdown)"] == 1


def test_a_creation_naming_another_leader_is_rejected(tmp_path):
    """The PartitionRecord is the spec's first ElectLeader: one naming node 2 as partition 1's
    leader is rejected where the first replica applies the creation (node 2 following node 1)."""
    nodes = _events_by_node()
    created = _first(nodes, lambda e: e["type"] == "PartitionRecord" and e.get("partition") == 1)
    created["leader"] = 2
    steps, verdict = _verdict(tmp_path, nodes, 1)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert (bad["type"], bad["leader"], bad["leader_epoch"], verdict.reached) == ("BecomeFollower", 1, 0, 3), bad


def test_an_append_of_a_request_nobody_answered_is_rejected(tmp_path):
    """A follower's request left unanswered at the trace's end is left out only because no later
    step reads it: an append after it (records no leader sent) is rejected there."""
    nodes = _events_by_node()
    last = max((e for events in nodes.values() for e in events
                if e["type"] == "FollowerFetch" and e.get("partition") == 0), key=lambda e: e["mono_ns"])
    node = f"node-{last['replica']}"
    append = {"type": "FollowerAppend", "time_ms": last["time_ms"], "replica": last["replica"], "topic": "many",
              "partition": 0, "leader_epoch": last["leader_epoch"], "first_offset": last["fetch_offset"],
              "last_offset": last["fetch_offset"], "log_end_offset": last["fetch_offset"] + 1, "high_watermark": 0,
              "mono_ns": last["mono_ns"] + 1}
    nodes[node].insert(nodes[node].index(last) + 1, append)
    steps, verdict = _verdict(tmp_path, nodes, 0)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert (bad["type"], bad["replica"]) == ("FollowerAppend", last["replica"]), bad

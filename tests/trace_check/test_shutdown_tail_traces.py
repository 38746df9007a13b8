"""The final SIGTERMs of a cluster, checked past every controlled shutdown: three converter
readings they needed are behaviours of spec/Replication.tla, and doctored copies are rejected.

testdata/shutdown-tail: a run of
tests/controller/test_scale_creation.py::test_sigterm_during_log_creation_then_every_log
(session 12, load ~20 on 2 cores; gzip), cut to partitions 52, 103 and 126 of the topic and the
controllers' membership events (no controller write was truncated). Node 3 shut down during the
creation (the first controlled shutdown); at the end nodes 1, 2 and 3
shut down under control one after the other, so leaderships move twice in a second:
- many-52: node 2 fetches from node 3 before node 3 applied its leadership, then applies an
  isr-only registration (`same_leader`) before node 3 takes the request: the fetch is moved to
  its take across it;
- many-103: node 1 completes a fetch it had parked after node 2 became leader and then followed
  node 3 (two resets, no fetch between): the completion is left out, as after one reset;
- many-126: node 1 fetches from node 3 before node 3 applied its leadership, then follows a
  leaderless registration; node 3 takes the request late: the fetch is moved up to node 1's reset.
"""

from __future__ import annotations

from pathlib import Path

from trace_check.replication import load_events, normalise
from trace_check.tlc import check_and_explain_batch
from tests.trace_check.recorded import TESTDATA, events_by_node, partition_verdict, write_run

RUN = TESTDATA / "shutdown-tail"
PARTITIONS = (52, 103, 126)


def _events_by_node() -> dict[str, list[dict]]:
    return events_by_node(RUN)


def _write_run(tmp_path: Path, nodes: dict[str, list[dict]]) -> list[Path]:
    return write_run(tmp_path, nodes)


def _verdict(tmp_path, nodes, partition):
    return partition_verdict(tmp_path, nodes, "many", partition)


def _event(nodes, node, **match) -> dict:
    return next(e for e in nodes[node] if all(e.get(k) == v for k, v in match.items()))


def test_the_shutdown_tails_are_behaviours_of_replication_tla(tmp_path):
    files = _write_run(tmp_path, _events_by_node())
    batch = [normalise(load_events(files), "many", p) for p in PARTITIONS]
    verdicts = check_and_explain_batch(batch, min_insync_replicas=1, timeout_s=300)
    assert all(v.accepted for v in verdicts), verdicts
    for steps in batch:
        assert [s["type"] for s in steps.steps].count("ControlledShutdown") == 4 and not steps.stopped
    # many-103: the completion after two moves is the one left out.
    assert batch[1].skipped["LeaderHandleFetch completing a parked fetch after its follower moved on"] == 1


def test_a_moved_fetch_still_meets_its_take(tmp_path):
    """many-52: the take of node 2's request by node 3 with another offset is rejected there."""
    nodes = _events_by_node()
    take = _event(nodes, "node-3", type="LeaderHandleFetch", partition=52, follower=2, leader_epoch=1)
    take["fetch_offset"] = 1
    steps, verdict = _verdict(tmp_path, nodes, 52)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert (bad["type"], bad["follower"], bad["fetch_offset"]) == ("LeaderHandleFetch", 2, 1), bad


def test_a_completion_of_another_request_after_two_moves_is_rejected(tmp_path):
    """many-103: only a completion of the very request the follower left behind is left out."""
    nodes = _events_by_node()
    takes = [e for e in nodes["node-1"] if e["type"] == "LeaderHandleFetch" and e["partition"] == 103
             and e["follower"] == 2]
    takes[-1]["fetch_offset"] = 5
    steps, verdict = _verdict(tmp_path, nodes, 103)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert (bad["type"], bad["follower"], bad["fetch_offset"]) == ("LeaderHandleFetch", 2, 5), bad


def test_a_late_take_of_another_request_is_rejected(tmp_path):
    """many-126: node 3's late take of node 1's request, doctored to another last fetched epoch, is
    rejected (the fetch moved up to node 1's reset is what it must match)."""
    nodes = _events_by_node()
    take = _event(nodes, "node-3", type="LeaderHandleFetch", partition=126, follower=1, leader_epoch=2)
    take["last_fetched_epoch"] = 0
    steps, verdict = _verdict(tmp_path, nodes, 126)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert bad["type"] in ("LeaderHandleFetch", "FollowerFetch") and 1 in (bad.get("follower"), bad.get("replica")), bad

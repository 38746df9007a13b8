"""A request its sender's Restart abandoned is not the one a later take answers.

testdata/restart-take: a run of tests/controller/test_scale_creation.py (session 12, load ~20;
gzip), cut to partition 43 of the topic, the controllers' membership events and each run's last
event (where the converter infers a crash). Node 3 got its SIGTERM while following node 1, which
had not applied its leadership yet: node 3's fetch from its first process was never answered.
Restarted, node 3 fetched again with the same offsets, and node 1 took that request. The
spec's Restart drops what the old process sent, so the converter leaves the old request out
(abandoned at the Restart) and reads the take as the new one's; before, it read it as a late take
of the old request, which no behaviour allows.
"""

from __future__ import annotations


from tests.trace_check.recorded import TESTDATA, events_by_node, partition_verdict

RUN = TESTDATA / "restart-take"


def _events_by_node() -> dict[str, list[dict]]:
    return events_by_node(RUN)


def _verdict(tmp_path, nodes):
    return partition_verdict(tmp_path, nodes, "many", 43)


def test_a_take_after_a_restart_answers_the_new_process(tmp_path):
    steps, verdict = _verdict(tmp_path, _events_by_node())
    assert verdict.accepted, verdict
    assert steps.skipped["FollowerFetch never answered (dropped by a metadata change or crash)"] >= 1
    assert "Restart" in [s["type"] for s in steps.steps]


def test_a_take_of_another_request_after_the_restart_is_rejected(tmp_path):
    """Node 1's take of node 3's request from its second process, doctored to another offset, is
    rejected there: the abandoned request does not stand in for it."""
    nodes = _events_by_node()
    restarted = [e for e in nodes["node-3"] if e["type"] == "TraceRun"][1]["mono_ns"]
    take = next(e for e in nodes["node-1"] if e["type"] == "LeaderHandleFetch" and e.get("partition") == 43
                and e["follower"] == 3 and e["mono_ns"] > restarted)
    take["fetch_offset"] = 7
    steps, verdict = _verdict(tmp_path, nodes)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert (bad["type"], bad["follower"], bad["fetch_offset"]) == ("LeaderHandleFetch", 3, 7), bad

"""A fetch that overtook its leader's BecomeLeader in the merged order, taken late by that leader.

testdata/late-leadership: the run of tests/controller/test_scale_creation.py that session 12
kept rejected (/work/notes/s12/shutdown-scale-rejected, load ~20; gzip), cut to partitions 4
and 6 of the topic, the controllers' membership events and each run's last event. In the final
SIGTERMs node 1 applied the registration naming node 3 leader and fetched from it; node 3,
lagging on the metadata log, applied its leadership only after node 1 had moved on to the next
epoch, then took node 1's request late. In partition 6, node 3 also logged, in between, the
FetchError of its own fetch to the old leader (an answer lost after the leader's take).

The fetch and node 3's BecomeLeader have no causal link, so the converter takes the leader's
BecomeLeader first (trace_check.replication._late_leadership_first) when that leader takes that
very request in that epoch and did nothing else in between. The doctored copies show what it
does not excuse: a take of another request, a leader that never applied its leadership, and
records appended from a broker that never led.
"""

from __future__ import annotations

import pytest

from tests.trace_check.recorded import TESTDATA, events_by_node, partition_verdict
from trace_check import replication

RUN = TESTDATA / "late-leadership"


def _fetch(nodes, partition):
    """Node 1's last fetch from node 3 (the one node 3 takes late) and node 3's take of it."""
    fetch = [e for e in nodes["node-1"] if e["type"] == "FollowerFetch" and e["partition"] == partition
             and e["leader"] == 3][-1]
    take = next(e for e in nodes["node-3"] if e["type"] == "LeaderHandleFetch" and e["partition"] == partition
                and e["follower"] == 1 and e["leader_epoch"] == fetch["leader_epoch"])
    return fetch, take


@pytest.mark.parametrize("partition", [4, 6])
def test_the_late_leaders_leadership_goes_before_the_fetch(tmp_path, partition):
    nodes = events_by_node(RUN)
    fetch, take = _fetch(nodes, partition)
    assert fetch["mono_ns"] < next(e["mono_ns"] for e in nodes["node-3"] if e["type"] == "BecomeLeader"
                                   and e["partition"] == partition and e["leader_epoch"] == fetch["leader_epoch"])
    steps, verdict = partition_verdict(tmp_path, nodes, "many", partition)
    assert verdict.accepted, verdict
    assert steps.skipped["BecomeLeader moved before a fetch it took late (sent before that leader applied it)"] >= 1
    epoch = fetch["leader_epoch"]
    led = next(i for i, s in enumerate(steps.steps) if s["type"] == "BecomeLeader" and s["leader_epoch"] == epoch)
    sent = next(i for i, s in enumerate(steps.steps) if s["type"] == "FollowerFetch" and s["replica"] == 1
                and s["leader_epoch"] == epoch and s["fetch_offset"] == fetch["fetch_offset"])
    assert steps.steps[led]["replica"] == 3 and led < sent, steps.steps[led:sent + 1]


def test_without_the_reading_the_recorded_run_is_rejected(tmp_path, monkeypatch):
    """The rule is what accepts it: the merged order alone has no leader of the fetch's epoch."""
    monkeypatch.setattr(replication, "_late_leadership_first", lambda mine, skipped: mine)
    steps, verdict = partition_verdict(tmp_path, events_by_node(RUN), "many", 4)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert (bad["type"], bad["replica"], bad["leader"]) == ("FollowerFetch", 1, 3), bad


def test_a_late_take_of_another_request_is_rejected(tmp_path):
    """Node 3's take doctored to another fetch offset: not that request, so node 1's fetch is left
    out as abandoned at its reset and the take, of a request nobody sent, is rejected."""
    nodes = events_by_node(RUN)
    _, take = _fetch(nodes, 4)
    take["fetch_offset"] = 3
    steps, verdict = partition_verdict(tmp_path, nodes, "many", 4)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert (bad["type"], bad["replica"], bad["fetch_offset"]) == ("LeaderHandleFetch", 3, 3), bad


def test_a_take_by_a_broker_that_never_applied_its_leadership_is_rejected(tmp_path):
    """Node 3's BecomeLeader removed: nobody leads that epoch, neither the fetch nor the take is a step."""
    nodes = events_by_node(RUN)
    fetch, _ = _fetch(nodes, 4)
    nodes["node-3"] = [e for e in nodes["node-3"] if not (e["type"] == "BecomeLeader" and e.get("partition") == 4
                                                         and e["leader_epoch"] == fetch["leader_epoch"])]
    steps, verdict = partition_verdict(tmp_path, nodes, "many", 4)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert bad["type"] in ("FollowerFetch", "LeaderHandleFetch"), bad


def test_records_appended_from_a_broker_that_never_led_are_rejected(tmp_path):
    """Node 3 never applies its leadership nor takes the request, and node 1 appends a record as
    if answered: rejected (the unanswered fetch is left out, the append has no answer to take)."""
    nodes = events_by_node(RUN)
    fetch, take = _fetch(nodes, 4)
    nodes["node-3"] = [e for e in nodes["node-3"] if e is not take and not (
        e["type"] == "BecomeLeader" and e.get("partition") == 4 and e["leader_epoch"] == fetch["leader_epoch"])]
    append = {"type": "FollowerAppend", "time_ms": fetch["time_ms"], "replica": 1, "topic": "many", "partition": 4,
              "leader": 3, "leader_epoch": fetch["leader_epoch"], "first_offset": 0, "last_offset": 0, "high_watermark": 0,
              "log_end_offset": 1, "seq": fetch["seq"], "mono_ns": fetch["mono_ns"] + 1}
    at = nodes["node-1"].index(fetch)
    nodes["node-1"].insert(at + 1, append)
    steps, verdict = partition_verdict(tmp_path, nodes, "many", 4)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert (bad["type"], bad["replica"]) in (("FollowerFetch", 1), ("FollowerAppend", 1)), bad

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

import gzip
import json
from pathlib import Path

from trace_check.replication import load_events, normalise
from trace_check.tlc import check_and_explain_batch

RUN = Path(__file__).parent / "testdata" / "restart-take"


def _events_by_node() -> dict[str, list[dict]]:
    return {f.name.split(".")[0]: [json.loads(line) for line in gzip.open(f, "rt") if line.strip()]
            for f in sorted(RUN.glob("node-*.ndjson.gz"))}


def _verdict(tmp_path, nodes):
    files = []
    for node, events in nodes.items():
        (tmp_path / node).mkdir()
        path = tmp_path / node / "trace.ndjson"
        path.write_text("".join(json.dumps(e) + "\n" for e in events))
        files.append(path)
    steps = normalise(load_events(files), "many", 43)
    verdict, = check_and_explain_batch([steps], min_insync_replicas=1, timeout_s=300)
    return steps, verdict


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

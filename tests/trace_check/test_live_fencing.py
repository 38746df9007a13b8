"""A real fault run where the controller fences a broker that is up is a behaviour of
spec/Replication.tla (LiveBrokerFencing), and doctored copies of it are rejected at their line.

testdata/faults-livefence-303: the nodes' traces of `python -m tests.faults.run --seed 303
--trace` (session 9, load ~20 on 2 cores; gzip): node 1 was paused for 3.9 s, longer than the
4 s session once load is counted, and the controller fenced it while its process lived; the
quorum leader was then cut off, went on writing (an unfencing, elections, a controlled
shutdown) that the next controller never saw, and truncated them when it followed. Partitions 1
and 2 are kept (partition 0's trace shows the lost-AlterPartition-answer bug of issue 10, which
this run predates); quorum events are cut to those the converter reads, heartbeats left out.
What is checked: broker 1 goes on fetching while fenced and is unfenced by the next controller
with the same broker epoch; the first controller's writes are left out (truncated from the
metadata log: never committed). The run predates issue 10's fix: both partitions are rejected
later, where a leader that lost an AlterPartition answer proposed anew (asserted).
"""

from __future__ import annotations

from pathlib import Path

from trace_check.replication import load_events, normalise
from trace_check.tlc import check_and_explain_batch
from tests.trace_check.recorded import TESTDATA, events_by_node, write_run
from tests.trace_check.test_fault_traces import rejected_at_a_proposal_after_a_lost_answer

RUN = TESTDATA / "faults-livefence-303"
PARTITIONS = (1, 2)


def _events_by_node() -> dict[str, list[dict]]:
    return events_by_node(RUN)


def _write_run(tmp_path: Path, nodes: dict[str, list[dict]]) -> list[Path]:
    return write_run(tmp_path, nodes)


def _steps(files, partition):
    return normalise(load_events(files), "jepsen", partition)


def test_a_run_with_a_live_fencing_is_a_behaviour_of_replication_tla_up_to_issue_10s_bug(tmp_path):
    """Recorded before issue 10's fix: each partition is a behaviour of the spec through the live
    fencing of broker 1, its fetching while fenced and its unfencing, and is rejected only later,
    where a leader that lost an AlterPartition answer proposed anew (the bug the fix removes)."""
    files = _write_run(tmp_path, _events_by_node())
    batch = [_steps(files, p) for p in PARTITIONS]
    verdicts = check_and_explain_batch(batch, min_insync_replicas=2, timeout_s=300)
    unfenced_taken = []
    for steps, v in zip(batch, verdicts):
        assert not v.accepted and rejected_at_a_proposal_after_a_lost_answer(steps, v.reached), v.reached
        after = steps.steps[fenced_at(steps):v.reached - 1]
        # Not vacuous: broker 1 was up (no Crash) and kept fetching while fenced ...
        assert "Crash" not in [s["type"] for s in steps.steps]
        assert any(s["type"] == "FollowerFetch" and s["replica"] == 1 for s in after)
        assert any("never committed" in k for k in steps.skipped), steps.skipped
        unfenced_taken.append(any(s["type"] == "UnfenceBroker" and s["broker"] == 1 for s in after))
    # ... and its unfencing was taken before the bug's step (partition 1: step 660 of 672).
    assert unfenced_taken[0], unfenced_taken


def fenced_at(steps) -> int:
    return next(i for i, s in enumerate(steps.steps) if s["type"] == "FenceBroker" and s["broker"] == 1)


def _doctored_verdict(tmp_path, nodes, partition):
    steps = _steps(_write_run(tmp_path, nodes), partition)
    verdict, = check_and_explain_batch([steps], min_insync_replicas=2, timeout_s=300)
    return steps, verdict


def test_a_live_broker_fenced_twice_is_rejected(tmp_path):
    """FenceBroker of a live broker is the controller's step on an unfenced registration: a
    second FenceBroker of broker 1 while it is fenced (a controller acting on a stale image) is
    rejected at its line."""
    nodes = _events_by_node()
    fence = next(e for e in nodes["node-3"] if e["type"] == "FenceBroker" and e["broker"] == 1)
    fetch = next(e for e in nodes["node-1"] if e["type"] == "FollowerFetch" and e["partition"] == 1
                 and e["mono_ns"] > fence["mono_ns"])
    again = {**fence, "time_ms": fetch["time_ms"], "mono_ns": fetch["mono_ns"] + 1}
    nodes["node-3"].insert(nodes["node-3"].index(fence) + 1, again)
    steps, verdict = _doctored_verdict(tmp_path, nodes, 1)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert bad["type"] == "FenceBroker" and bad["broker"] == 1 and verdict.reached - 1 > fenced_at(steps), bad


def test_a_fetch_with_another_broker_epoch_is_rejected(tmp_path):
    """KIP-903: a fetch carries its sender's registration. Broker 1 registers again while fenced
    (a new incarnation: the trace's RegisterBroker is no step of the replication spec, which
    counts it only with a Restart), and its next fetch carries the new epoch: rejected there."""
    nodes = _events_by_node()
    fence = next(e for e in nodes["node-3"] if e["type"] == "FenceBroker" and e["broker"] == 1)
    register = next(e for e in nodes["node-3"] if e["type"] == "RegisterBroker" and e["broker"] == 1)
    later = {**register, "broker_epoch": register["broker_epoch"] + 1000, "time_ms": fence["time_ms"],
             "mono_ns": fence["mono_ns"] + 1}
    nodes["node-3"].insert(nodes["node-3"].index(fence) + 1, later)
    fetch = next(e for e in nodes["node-1"] if e["type"] == "FollowerFetch" and e["partition"] == 1
                 and e["mono_ns"] > fence["mono_ns"])
    fetch["broker_epoch"] = later["broker_epoch"]
    steps, verdict = _doctored_verdict(tmp_path, nodes, 1)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert (bad["type"], bad["replica"], bad["fetch_offset"]) == ("FollowerFetch", 1, fetch["fetch_offset"]), bad
    assert bad["broker_epoch"] == 1

"""Partition reassignment (KIP-455) against spec/Replication.tla's reassignment section, with the real TLC.

The trace is a real run's (tests/controller/test_reassignment_processes.py,
seed 531003623, 1 controller + 4 brokers: the partition moved from brokers
1, 2 to 3, 4 under acks=all writes, and back), cut to the partition's
events, the brokers' registration and fencing and the controlled shutdown
that ends the check: the controller's AlterPartitionReassignments (adding
3, 4; removing 1, 2), the leader's ExpandIsr of each new replica, the
controller's CompleteReassignment (the commit of the last one: replicas 3,
4, a new leader and leader epoch), the removed brokers' StopReplica, then
the same back to 1, 2 (their logs deleted: they start empty), with the
removed leader's NEW_LEADER_ELECTED answer. It must be accepted; each
doctored copy changes one event the way a bug would show, and must be
rejected at exactly that event.
"""

from __future__ import annotations

import json
from pathlib import Path

from trace_check.replication import load_events, normalise
from trace_check.tlc import check_and_explain

TRACE = Path(__file__).parent / "testdata" / "reassignment" / "moved.ndjson"


def events() -> list[dict]:
    return [json.loads(line) for line in TRACE.read_text().splitlines() if line.strip()]


def index_of(evs, kind, **match) -> int:
    return next(i for i, e in enumerate(evs) if e["type"] == kind and all(e.get(k) == v for k, v in match.items()))


def verdict_for(path: Path):
    steps = normalise(load_events([path]))
    return steps, check_and_explain(steps, timeout_s=300)


def assert_rejected_at(tmp_path: Path, evs: list[dict], index: int) -> None:
    path = tmp_path / "doctored.ndjson"
    path.write_text("".join(json.dumps(e) + "\n" for e in evs))
    steps, verdict = verdict_for(path)
    assert not verdict.accepted, "a doctored trace was accepted"
    assert steps.origin[verdict.reached - 1].endswith(f"doctored.ndjson:{index + 1}"), (
        steps.origin[verdict.reached - 1], steps.steps[verdict.reached - 1])


def test_a_real_reassignment_is_a_behaviour_of_the_spec():
    steps, verdict = verdict_for(TRACE)
    kinds = {s["type"] for s in steps.steps}
    assert {"AlterPartitionReassignments", "ExpandIsr", "CompleteReassignment", "StopReplica"} <= kinds
    assert sum(s["type"] == "CompleteReassignment" for s in steps.steps) == 2  # there and back
    assert steps.replicas == [1, 2, 3, 4]
    assert verdict.accepted, f"rejected at step {verdict.reached}: {steps.steps[verdict.reached - 1]}"


def test_completion_with_a_target_replica_out_of_the_isr_is_rejected(tmp_path):
    """The controller completes the first move when the first new replica joins the isr, the other not yet."""
    evs = events()
    complete = index_of(evs, "CompleteReassignment")
    first_expansion = index_of(evs, "ExpandIsr")
    joined = evs[first_expansion]["added"]
    assert set(evs[complete]["replicas"]) - {joined}, "the move has a second new replica"
    early = {**evs[complete], "isr": [joined], "partition_epoch": evs[first_expansion]["partition_epoch"] + 1,
             "mono_ns": evs[first_expansion]["mono_ns"] + 1}
    del evs[complete]
    evs.insert(first_expansion + 1, early)
    assert_rejected_at(tmp_path, evs, first_expansion + 1)


def test_a_removed_replica_elected_leader_is_rejected(tmp_path):
    """The completion keeps the removed leader (2) as the partition's leader."""
    evs = events()
    complete = index_of(evs, "CompleteReassignment")
    removed_leader = evs[index_of(evs, "BecomeLeader")]["replica"]
    assert removed_leader not in evs[complete]["replicas"]
    evs[complete] = {**evs[complete], "leader": removed_leader}
    assert_rejected_at(tmp_path, evs, complete)


def test_a_replica_still_assigned_cannot_stop(tmp_path):
    """A StopReplica of a replica the registration it names still assigns (3, a new one)."""
    evs = events()
    stop = index_of(evs, "StopReplica")
    # (its own log end offset then, so that only the assignment is wrong)
    leo = next(e["log_end_offset"] for e in reversed(evs[:stop]) if e.get("replica") == 3 and "log_end_offset" in e)
    evs[stop] = {**evs[stop], "replica": 3, "log_end_offset": leo}
    assert_rejected_at(tmp_path, evs, stop)


def test_the_removed_leaders_new_leader_elected_answer_is_a_step_of_the_spec(tmp_path):
    """The leader whose AlterPartition completed the move is answered NEW_LEADER_ELECTED (108) and keeps its
    proposal until the metadata removes it: in this run it stopped first; an answer that came before is
    the spec's HandleAlterPartitionResponse to the CompleteReassignment's commit (AwaitMetadata)."""
    evs = events()
    complete = index_of(evs, "CompleteReassignment")
    expansion = evs[index_of(evs, "ExpandIsr", added=4)]
    leader = expansion["replica"]
    before = next(e for e in reversed(evs[:complete]) if e.get("replica") == leader and "isr" in e
                  and e["type"] in ("BecomeLeader", "HandleAlterPartitionResponse"))
    answer = {"type": "HandleAlterPartitionResponse", "time_ms": evs[complete]["time_ms"], "replica": leader,
              "topic": "moved", "partition": 0, "leader_epoch": expansion["leader_epoch"],
              "partition_epoch": before["partition_epoch"], "isr": before["isr"], "error_code": 108,
              "high_watermark": expansion["high_watermark"], "mono_ns": evs[complete]["mono_ns"] + 1}
    evs.insert(complete + 1, answer)
    path = tmp_path / "answered.ndjson"
    path.write_text("".join(json.dumps(e) + "\n" for e in evs))
    steps, verdict = verdict_for(path)
    assert any(s["type"] == "HandleAlterPartitionResponse" and s.get("error_code") == 108 for s in steps.steps)
    assert verdict.accepted, f"rejected at step {verdict.reached}: {steps.steps[verdict.reached - 1]}"

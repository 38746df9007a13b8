"""A restarted broker replays the metadata log from the registration committed when it registered.

testdata/restart-registration: a run of tests/controller/test_scale_creation.py (session 13,
seed 118043374, load 2-8: the strict check rejected 200 of 200 partitions before this reading;
gzip), cut to partitions 0 and 1 of the topic, the controllers' membership events and each run's
last event. Node 3 was SIGTERMed during the creation (controlled shutdown: partition epoch 1
moved its leaderships away), started again and registered (RegisterBroker, fenced) while the
partitions were still at epoch 1. Then the final SIGTERMs shut down nodes 2 and 1 (partition
epochs 2 and 3, leaderless), and only after that did node 3, catching up on the metadata log,
apply epoch 1 (BecomeFollower), then 2 and 3.

spec/Replication.tla lets a restarted broker apply any committed registration from the one
committed when it registered again (controller.restarted_at; Kafka's broker publishes nothing
before its metadata log caught up with the high watermark it found at start). The converter used
to take the Restart right before the broker's first step, after the final shutdowns, so epoch 1 was
older than the floor: rejected. It now takes the Restart at the new life's RegisterBroker when the
controller logged one before that first step (trace_check.replication._infer_crashes,
_restart_when_it_counts). The doctored copies show what that does not excuse: a registration older
than the floor applied, and the same apply when the registration came after the shutdowns.
"""

from __future__ import annotations

import pytest

from tests.trace_check.recorded import TESTDATA, events_by_node, partition_verdict
from trace_check import replication

RUN = TESTDATA / "restart-registration"


def _second_life(nodes):
    """Node 3's events after its restart (its file's second run)."""
    runs = [i for i, e in enumerate(nodes["node-3"]) if e["type"] == "TraceRun"]
    assert len(runs) == 2, "the recorded run changed: node 3 should have two lives"
    return nodes["node-3"][runs[1] + 1:]


def _replayed(nodes, partition):
    """Node 3's first BecomeFollower of `partition` after its restart."""
    return next(e for e in _second_life(nodes) if e["type"] == "BecomeFollower" and e["partition"] == partition)


@pytest.mark.parametrize("partition", [0, 1])
def test_the_restart_is_taken_at_the_registration(tmp_path, partition):
    nodes = events_by_node(RUN)
    replayed = _replayed(nodes, partition)
    shutdowns = [e for e in nodes["node-2"] if e["type"] == "ControlledShutdown" and e["broker"] in (1, 2)]
    assert shutdowns and all(s["mono_ns"] < replayed["mono_ns"] for s in shutdowns), \
        "the recorded run changed: node 3 applied epoch 1 before the final shutdowns"
    assert replayed["partition_epoch"] == 1
    steps, verdict = partition_verdict(tmp_path, nodes, "many", partition)
    assert verdict.accepted, verdict
    kinds = [(s["type"], s.get("broker", s.get("replica"))) for s in steps.steps]
    restart = kinds.index(("Restart", 3))
    assert restart < kinds.index(("ControlledShutdown", 2)) < kinds.index(("ControlledShutdown", 1))


def test_without_the_registration_the_restart_comes_too_late(tmp_path, monkeypatch):
    """Taken at the broker's first step (the old placement), the Restart's floor is past epoch 1."""
    nodes = events_by_node(RUN)
    monkeypatch.setattr(replication, "_registrations_when_fenced", lambda merged, node: [])
    steps, verdict = partition_verdict(tmp_path, nodes, "many", 0)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert (bad["type"], bad["replica"]) == ("BecomeFollower", 3), bad


def test_a_registration_older_than_the_floor_is_rejected(tmp_path):
    """Node 3 doctored to replay the creation (epoch 0, itself leader), committed before it registered
    again: a restarted broker taking back the leadership it had before. Rejected. (An older
    registration of the same leader epoch that differs in the isr only is the same step for the
    spec, spec/TraceReplication.tla's TBecomeFollower: no follower action reads the isr.)"""
    nodes = events_by_node(RUN)
    replayed = _replayed(nodes, 0)
    creation = next(e for e in nodes["node-2"] if e["type"] == "PartitionRecord" and e["partition"] == 0)
    assert creation["leader"] == 3
    del replayed["leader"]
    replayed.update(type="BecomeLeader", leader_epoch=0, partition_epoch=0, isr=creation["isr"])
    steps, verdict = partition_verdict(tmp_path, nodes, "many", 0)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert (bad["type"], bad["replica"]) == ("BecomeLeader", 3), bad


def test_a_registration_after_the_shutdowns_does_not_excuse_epoch_1(tmp_path):
    """Node 3's registration doctored to after the final shutdowns: epoch 1 is then below its floor."""
    nodes = events_by_node(RUN)
    replayed = _replayed(nodes, 0)
    register = [e for e in nodes["node-2"] if e["type"] == "RegisterBroker" and e["broker"] == 3][-1]
    last_shutdown = max(e["mono_ns"] for e in nodes["node-2"]
                        if e["type"] == "ControlledShutdown" and e["broker"] in (1, 2))
    register["mono_ns"] = last_shutdown + 1
    assert register["mono_ns"] < replayed["mono_ns"]
    nodes["node-2"].sort(key=lambda e: e.get("mono_ns", 0))
    steps, verdict = partition_verdict(tmp_path, nodes, "many", 0)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert (bad["type"], bad["replica"]) == ("BecomeFollower", 3), bad

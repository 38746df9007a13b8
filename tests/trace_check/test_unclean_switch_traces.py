"""A run that switches unclean.leader.election.enable on while a partition is leaderless is
checked whole: the controller logs the switch (ConfigRecord, spec/Replication.tla's action of
that name) and the unclean election that follows in the same batch.

testdata/unclean-switch: a run of tests/controller/test_cluster_configs.py's
test_enabling_unclean_election_elects_an_offline_partition[topic] (session 13, load ~12; gzip),
cut to the topic `offline` (2 replicas), the controllers' membership events and each run's last
event (where the converter infers a crash): node 2 shut down and restarted, node 1 (the leader,
its last isr member) killed: with unclean election off the controller wrote leader -1 of a new
leader epoch; the test then enabled it for the topic and the controller wrote the ConfigRecord
and elected node 2 unclean in one batch; the run ends with the nodes' controlled shutdowns.
"""

from __future__ import annotations

from tests.trace_check.recorded import TESTDATA, events_by_node, partition_verdict

RUN = TESTDATA / "unclean-switch"


def _verdict(tmp_path, nodes):
    return partition_verdict(tmp_path, nodes, "offline", 0)


def _config_record(nodes) -> dict:
    return next(e for events in nodes.values() for e in events
                if e["type"] == "ConfigRecord" and e.get("topic") == "offline")


def test_a_run_that_switches_unclean_election_on_is_checked_whole(tmp_path):
    steps, verdict = _verdict(tmp_path, events_by_node(RUN))
    assert verdict.accepted, verdict
    assert not steps.stopped and not steps.unclean  # off at the start, switched by the ConfigRecord
    kinds = [s["type"] for s in steps.steps]
    assert kinds.index("ConfigRecord") + 1 == kinds.index("UncleanElectLeader"), kinds
    assert {"ControlledShutdown", "Crash", "FenceBroker"} <= set(kinds), kinds


def test_an_unclean_election_while_the_switch_is_off_is_rejected(tmp_path):
    """The config write switched it off, not on: the unclean election after it is rejected there."""
    nodes = events_by_node(RUN)
    _config_record(nodes)["unclean_leader_election_enable"] = False
    steps, verdict = _verdict(tmp_path, nodes)
    assert not verdict.accepted
    assert steps.steps[verdict.reached - 1]["type"] == "UncleanElectLeader", steps.steps[verdict.reached - 1]


def test_an_unclean_election_before_the_switch_is_rejected(tmp_path):
    """The ConfigRecord logged after the election it allowed: the check takes unclean election
    as on from the start, and the fencing that left the partition leaderless with a new leader
    epoch (what the controller writes with it off) is then no step of the spec."""
    nodes = events_by_node(RUN)
    record = _config_record(nodes)
    events = next(ev for ev in nodes.values() if record in ev)
    events.remove(record)
    election = next(i for i, e in enumerate(events) if e["type"] == "UncleanElectLeader")
    events.insert(election + 1, {**record, "seq": events[election]["seq"], "mono_ns": events[election]["mono_ns"] + 1})
    steps, verdict = _verdict(tmp_path, nodes)
    assert not verdict.accepted
    kinds = [s["type"] for s in steps.steps]
    assert steps.unclean and verdict.reached <= kinds.index("UncleanElectLeader") + 1, (verdict.reached, kinds)

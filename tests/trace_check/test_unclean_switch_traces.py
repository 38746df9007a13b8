"""A run that switches unclean.leader.election.enable on while a partition is leaderless is
checked up to its leaderless registration (spec/Replication.tla's switch is a constant).

testdata/unclean-switch: a run of tests/controller/test_cluster_configs.py's
test_enabling_unclean_election_elects_an_offline_partition[topic] (session 12, load ~20; gzip),
cut to the topic `offline` (2 replicas), the controllers' membership events and each run's last event
(where the converter infers a crash): node 2 shut down
and restarted, node 1 (the leader, its last isr member) killed: with unclean election off the
controller wrote leader -1 of a new leader epoch; the test then enabled it and the controller
elected node 2 unclean. The spec with unclean election on expects that election in the fencing's
own record, with it off no unclean election at all, so the check stops at the leaderless
registration node 2 applied (reported as `stopped`); what comes before is checked as usual.
"""

from __future__ import annotations


from tests.trace_check.recorded import TESTDATA, events_by_node, partition_verdict

RUN = TESTDATA / "unclean-switch"


def _events_by_node() -> dict[str, list[dict]]:
    return events_by_node(RUN)


def _verdict(tmp_path, nodes):
    return partition_verdict(tmp_path, nodes, "offline", 0)


def test_a_run_that_switches_unclean_election_on_is_checked_up_to_its_leaderless_registration(tmp_path):
    steps, verdict = _verdict(tmp_path, _events_by_node())
    assert verdict.accepted, verdict
    assert steps.stopped.startswith("leaderless registration"), steps.stopped
    kinds = [s["type"] for s in steps.steps]
    assert "UncleanElectLeader" not in kinds and {"ControlledShutdown", "Crash", "FenceBroker"} <= set(kinds), kinds


def test_a_wrong_step_before_the_cut_is_rejected(tmp_path):
    """Only what follows the leaderless registration is left unchecked: node 2 following node 2
    (itself) in the partition's first epoch is rejected at that BecomeFollower."""
    nodes = _events_by_node()
    first = next(e for e in nodes["node-2"] if e["type"] == "BecomeFollower" and e.get("topic") == "offline")
    first["leader"] = 2
    steps, verdict = _verdict(tmp_path, nodes)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert (bad["type"], bad["replica"], bad["leader"]) == ("BecomeFollower", 2, 2), bad

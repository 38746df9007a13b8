"""Jepsen-style fault tests on real kref processes (issue 10's proof).

Three combined controller+broker nodes behind the fault proxy
(tests/faults/cluster.py, proxy.py); acks=all idempotent confluent-kafka
producers and observing consumers (workload.py); a seeded nemesis that
kill -9s, SIGSTOPs and partitions leaders, followers and the active
controller (nemesis.py); a checker that reads everything back
(checker.py). Every wait is bounded; the seed and a one-line repro are
printed (KREF_FAULT_SEED=N reruns a seed in pytest).

- test_proxy_partitions_the_controller_quorum: the proxy's per-node cuts are
  real: isolating the active controller makes the others elect a new one,
  healing brings it back as a follower.
- test_clean_election_loses_nothing: replication factor 3, min.insync 2,
  clean election: the checker must find no anomaly, and every partition's
  merged node traces must be a behaviour of spec/Replication.tla (issue 15;
  tests/faults/traces.py; required since session 11).
- test_unclean_election_loses_acknowledged_records: the unclean variant
  (unclean.leader.election.enable=true, the leader's replication cut until
  its isr is itself, then killed): the checker must REPORT loss, and every
  partition's traces must be a behaviour of spec/Replication.tla with
  unclean election (required since session 12).

The last two need followers that replicate (issue 10's data path); without
kref/broker/replica_fetcher.py they are skipped with that reason.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.clusterkit import describe_quorum, wait_until
from tests.faults.cluster import FaultCluster
from tests.faults.run import BASE_SETTINGS, TOPIC, fault_run, replication_factor
from tests.faults.traces import validate_run

NEMESIS_S = 12
PARTITIONS = 3  # fault_run's default
UNCLEAN_S = 14
needs_replication = pytest.mark.skipif(
    replication_factor() < 3, reason="followers do not replicate yet (issue 10's data path: no replica fetcher)")


def controller_elects_unclean() -> bool:
    """Whether the controller core reads unclean.leader.election.enable (issue 9's item)."""
    source = (Path(__file__).resolve().parents[2] / "kref/controller/controller.py").read_text()
    return "unclean_leader_election" in source or "unclean.leader.election" in source


def seed() -> int:
    value = int(os.environ.get("KREF_FAULT_SEED", random.randrange(1 << 30)))
    print(f"seed={value} (KREF_FAULT_SEED={value} reruns it)")
    return value


def quorum_leader(cluster, exclude=()):
    best = None
    for s in cluster.specs:
        if s.node_id in exclude:
            continue
        p = describe_quorum(s.controller_port)
        if p is not None and p.leader_id >= 0 and (best is None or p.leader_epoch > best.leader_epoch):
            best = p
    return best


def test_proxy_partitions_the_controller_quorum(tmp_path):
    with FaultCluster(tmp_path, overrides=BASE_SETTINGS) as cluster:
        first = wait_until(lambda: quorum_leader(cluster), "an active controller", timeout=60)
        victim, others = first.leader_id, [n for n in cluster.by_id if n != first.leader_id]
        cluster.block([(a, b, "*") for o in others for a, b in ((victim, o), (o, victim))])
        stats = cluster.stats()
        print("links after block:", stats)
        # Every CONTROLLER connection is a node's: one the proxy could not attribute
        # would cross the partition unseen and keep the old leader in power.
        assert not any(k.startswith("0->") and k.endswith("/CONTROLLER") for k in stats["links"]), stats
        second = wait_until(
            lambda: (q := quorum_leader(cluster, exclude=(victim,))) and q.leader_epoch > first.leader_epoch
            and q.leader_id != victim and q, "a new active controller on the majority side", timeout=60)
        assert second.leader_id in others
        links = cluster.stats()["links"]
        assert any(k.startswith(f"{o}->") for o in others for k in links), links  # sources told apart
        cluster.heal()
        try:
            wait_until(
                lambda: (q := quorum_leader(cluster)) and q.leader_id != victim
                and all(v.log_end_offset >= q.high_watermark for v in q.current_voters)
                and any(v.replica_id == victim for v in q.current_voters), "the isolated node to follow again",
                timeout=60)
        except TimeoutError as exc:
            # Name the likely cause: a node that exited when the heal closed its held connections.
            raise AssertionError(f"{exc}; nodes that exited by themselves: {cluster.note_crashes() or 'none'}") from exc


@needs_replication
def test_clean_election_loses_nothing(tmp_path):
    result = fault_run(seed(), NEMESIS_S, tmp_path, mode="clean", trace=True)
    assert result.report.acked >= 100, "the workload made too little progress to prove anything"
    assert result.report.ok, f"{result.summary()}\n{result.report.table()}\nrepro: {result.repro}"
    # Issue 15: what the nodes did under kill -9, SIGSTOP and partitions is a behaviour of
    # spec/Replication.tla, partition by partition (tests/faults/traces.py; one TLC run for all).
    verdicts, cpu_s = validate_run(tmp_path, TOPIC, PARTITIONS, min_insync_replicas=2)
    print(f"trace validation: {sum(v.code == 0 for v in verdicts)} of {len(verdicts)} partitions accepted, "
          f"{sum(v.steps for v in verdicts)} steps, {cpu_s:.1f} CPU s")
    for v in verdicts:
        print(v.text)
    repro = f"\nrepro: {result.repro} --trace --dir D; python -m tests.faults.traces D/run-SEED"
    # Every partition must be accepted (session 11: the clean seeds run, 501-516, all were, once
    # the spec let brokers apply registrations behind their controller and keep a fetch request
    # on the wire across new metadata; docs/trace-validation.md, "Session 11"). A rejection is a
    # finding: read it as that chapter says (kref bug, spec gap or converter gap), do not retry.
    bad = [v.text for v in verdicts if v.code != 0]
    assert not bad, "\n".join(bad) + repro
    if os.environ.get("KREF_FAULT_STRICT"):
        # Opt-in until cluster's controller_rpc survives a reset connection (a node exit is a bug too).
        assert not result.crashes, f"{result.crashes}\nrepro: {result.repro}"


@needs_replication
@pytest.mark.skipif(not controller_elects_unclean(),
                    reason="the controller core has no unclean leader election yet (a dead isr leaves the partition leaderless)")
def test_unclean_election_loses_acknowledged_records(tmp_path):
    result = fault_run(seed(), UNCLEAN_S, tmp_path, mode="unclean", trace=True)
    # The unclean election and the old leader's truncation are checked too (spec/Replication.tla with
    # UncleanLeaderElectionEnable, as the trace shows an UncleanElectLeader; min.insync.replicas 1).
    verdicts, cpu_s = validate_run(tmp_path, TOPIC, PARTITIONS, min_insync_replicas=1)
    for v in verdicts:
        print(v.text)
    print(f"trace validation: {sum(v.code == 0 for v in verdicts)} of {len(verdicts)} accepted, {cpu_s:.1f} CPU s")
    # Every partition must be accepted (session 12: unclean seeds 701-704, final controlled shutdowns
    # included, all were; the opt-in KREF_FAULT_TRACE_STRICT is gone). A rejection is a finding.
    assert all(v.code == 0 for v in verdicts), "\n".join(v.text for v in verdicts)
    assert result.report.lost, (
        "the unclean schedule should have made an out-of-sync replica the leader and lost records acknowledged "
        f"by the old leader alone; the checker saw none:\n{result.report.table()}\nevents: {result.events}")

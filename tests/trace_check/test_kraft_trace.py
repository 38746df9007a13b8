"""Trace validation of the KRaft controller quorum with the real TLC: the voters' traces
are behaviours of spec/KRaft.tla (through spec/TraceKRaft.tla), and doctored ones are not.

Two sources of traces:
- a real quorum of three `kref broker` processes (process.roles=controller, the
  tests/controller fixture `running_cluster`): an election, kill -9 of the
  leader, a re-election, the killed node restarted; its three trace files are
  checked as written;
- a recorded trace of the same kind (testdata/kraft: four elections, a kill -9
  and restart, a SIGSTOPped leader), doctored the way a real bug would show:
  a vote granted twice in one epoch, two leaders in one epoch, a high
  watermark advanced without a majority. Each must be rejected at exactly the
  doctored line.
- the quorum simulator (kref/sim/quorum.py: the same QuorumCore under crashes,
  pauses, isolation, dropped/duplicated/delayed messages), fixed seeds, with
  and without client proposals (AppendMetadata entries);
- a real cluster of three combined broker+controller processes that creates
  a topic and kills -9 and restarts a broker (AppendMetadata, re-registration,
  controlled shutdown at the end), and doctored membership traces.
Every TLC run is bounded (timeout_s); a check takes a few seconds.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kref.sim.quorum import QuorumSettings, QuorumSim
from tests.clusterkit import QUORUM_TIMEOUTS as TIMEOUTS, describe_quorum, running_cluster, wait_for_leader, wait_listed, \
    wait_until
from trace_check import kraft
from trace_check.cli import validate
from trace_check.replication import TraceError

RECORDED = Path(__file__).parent / "testdata" / "kraft"
TIMEOUT_S = 240


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def recorded() -> dict[int, list[dict]]:
    return {n: read(RECORDED / f"node-{n}.ndjson") for n in (1, 2, 3)}


def write(tmp_path: Path, files: dict[int, list[dict]]) -> list[Path]:
    paths = []
    for n, events in sorted(files.items()):
        path = tmp_path / f"node-{n}.ndjson"
        path.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events))
        paths.append(path)
    return paths


def find(events: list[dict], kind: str, **match) -> int:
    for i, e in enumerate(events):
        if e["type"] == kind and all(e.get(k) == v for k, v in match.items()):
            return i
    raise AssertionError(f"no {kind} {match}")


def rejected_at(tmp_path, files, node: int, index: int) -> str:
    """Check the doctored files; assert the report names files[node][index] (its file:line) first."""
    code, report = validate(write(tmp_path, files), timeout_s=TIMEOUT_S)
    print(report)
    assert code == 1, report
    assert f"  event:  {tmp_path / f'node-{node}.ndjson'}:{index + 1}" in report, report
    assert "spec state before it" in report and "voted_for |->" in report  # the state was shown
    return report


def test_recorded_quorum_trace_is_a_behaviour_of_kraft_tla():
    paths = [RECORDED / f"node-{n}.ndjson" for n in (1, 2, 3)]
    steps = kraft.normalise(kraft.load(paths))
    kinds = {s["type"] for s in steps.steps}
    assert {"RequestVote", "GrantVote", "BecomeActiveController", "BeginQuorumEpoch", "FetchFromLeader",
            "AdvanceHighWatermark", "Crash", "Restart", "Resign"} <= kinds
    # The command line, which picks the spec by the events.
    run = subprocess.run([sys.executable, "-m", "kref.cli", "trace", "check", *map(str, paths), "--voters", "1,2,3",
                          "--timeout", str(TIMEOUT_S)], capture_output=True, text=True, timeout=TIMEOUT_S + 60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "are a behaviour of spec/KRaft.tla" in run.stdout and "voters [1, 2, 3]" in run.stdout


def _node_3_stands_in_epoch_1(files):
    """Node 3 stands in epoch 1 instead of voting for node 2 (a split vote): a legal start."""
    n3 = files[3]
    i = find(n3, "BecomeUnattached", leader_epoch=1)
    j = find(n3, "GrantVote", leader_epoch=1)
    assert j == i + 1
    n3[i:j + 1] = [{**n3[i], "type": "RequestVote", "voted_for": 3, "state": "Candidate", "votes_granted": [3]}]
    n3[i].pop("source")
    return n3[i]


def test_a_vote_granted_twice_in_one_epoch_is_rejected(tmp_path):
    files = recorded()
    candidate = _node_3_stands_in_epoch_1(files)
    n1 = files[1]
    i = find(n1, "GrantVote", leader_epoch=1, candidate=2)
    # A step of its own, after node 3 stood and before node 1's next event.
    twice = {**n1[i], "candidate": 3, "voted_for": 3, "time_ms": n1[i]["time_ms"] + 1,
             "mono_ns": max(n1[i]["mono_ns"], candidate["mono_ns"]) + 1}
    assert twice["mono_ns"] < n1[i + 1]["mono_ns"]
    n1.insert(i + 1, twice)
    report = rejected_at(tmp_path, files, 1, i + 1)
    assert "'type': 'GrantVote'" in report and "'candidate': 3" in report


def test_two_leaders_in_one_epoch_are_rejected(tmp_path):
    files = recorded()
    _node_3_stands_in_epoch_1(files)
    n2, n3 = files[2], files[3]
    leader = n2[find(n2, "BecomeActiveController", leader_epoch=1)]
    i = find(n3, "BeginQuorumEpoch", leader_epoch=1)
    # Node 3 claims epoch 1 too, with node 1's vote (which went to node 2).
    second = {**leader, "replica": 3, "leader_id": 3, "voted_for": 3, "votes_granted": [1, 3],
              "mono_ns": n3[i]["mono_ns"] - 1, "time_ms": n3[i]["time_ms"] - 1}
    n3.insert(i, second)
    report = rejected_at(tmp_path, files, 3, i)
    assert "'type': 'BecomeActiveController'" in report


def test_a_high_watermark_advanced_without_a_majority_is_rejected(tmp_path):
    files = recorded()
    n2 = files[2]
    i = find(n2, "AdvanceHighWatermark", leader_epoch=1)
    assert n2[i]["high_watermark"] == 1
    # The leader says no other voter had fetched its LeaderChange record yet.
    n2[i] = {**n2[i], "end_offsets": {str(v): 0 for v in n2[i]["end_offsets"]}}
    report = rejected_at(tmp_path, files, 2, i)
    assert "'type': 'AdvanceHighWatermark'" in report


def test_a_metadata_record_appended_by_a_non_leader_is_rejected(tmp_path):
    files = recorded()
    n3 = files[3]
    i = find(n3, "BeginQuorumEpoch", leader_epoch=1)
    # Node 3, a follower, says its log grew by a record of its own (a topic record it wrote).
    n3[i] = {**n3[i], "log_end_offset": n3[i]["log_end_offset"] + 1, "last_epoch": n3[i]["leader_epoch"]}
    report = rejected_at(tmp_path, files, 3, i)
    assert "'type': 'BeginQuorumEpoch'" in report


def test_a_leaders_metadata_records_are_appended_and_long_traces_refused(monkeypatch):
    files = recorded()
    n2 = files[2]
    i = find(n2, "AdvanceHighWatermark", leader_epoch=1)
    grown = {**n2[i], "log_end_offset": n2[i]["log_end_offset"] + 5}  # topic and partition records
    n2[i] = grown
    events = [(e, f"node-{n}:{k + 1}") for n in (1, 2, 3) for k, e in enumerate(files[n])]
    events.sort(key=lambda x: x[0]["mono_ns"])
    steps = kraft.normalise(events, voters=[1, 2, 3])
    at = steps.origin.index(f"node-2:{i + 1}")
    appended = [k for k, o in enumerate(steps.origin) if o.startswith("inferred: AppendMetadata by leader 2")]
    assert len(appended) == 5 and max(appended) < at, (appended, at)
    monkeypatch.setattr(kraft, "MAX_STEPS", 10)
    with pytest.raises(TraceError, match="more than 10"):
        kraft.normalise(kraft.load([RECORDED / f"node-{n}.ndjson" for n in (1, 2, 3)]))


def test_a_real_quorum_with_a_killed_leader_is_a_behaviour_of_kraft_tla(tmp_path):
    """Three controller processes: election, kill -9 of the leader, re-election, restart; then TLC."""
    with running_cluster(tmp_path, 3, 0, TIMEOUTS) as (specs, processes, start):
        by_id = {s.node_id: s for s in specs}
        def replicated():
            # Whoever leads now: under load the first leader may resign before its record spreads.
            leader, p = wait_for_leader(specs)
            return (leader, p) if all(v.log_end_offset >= p.high_watermark > 0 for v in p.current_voters) else None

        leader, p = wait_until(replicated, "the voters to replicate a leader's LeaderChange record")
        processes[leader].send_signal(signal.SIGKILL)
        processes[leader].wait(timeout=10)
        second, p2 = wait_for_leader(specs, exclude={leader}, above_epoch=p.leader_epoch)
        start(by_id[leader])
        wait_until(lambda: (q := describe_quorum(by_id[second].controller_port)) is not None
                   and q.leader_epoch == p2.leader_epoch
                   and all(v.log_end_offset == q.high_watermark for v in q.current_voters),
                   "the restarted node to catch up with the new leader")
    paths = [s.dir / "trace.ndjson" for s in specs]
    steps = kraft.normalise(kraft.load(paths))
    assert {"Crash", "Restart"} <= {s["type"] for s in steps.steps}
    assert len([s for s in steps.steps if s["type"] == "BecomeActiveController"]) >= 2
    code, report = validate(paths, timeout_s=TIMEOUT_S, voters=sorted(by_id))
    print(report)
    assert code == 0, report


# Seed 10 (5 voters) needs a restarted node's own steps taken back with a late BeginQuorumEpoch; seed 41
# (3 voters) has two core steps of one node at one virtual millisecond (a vote, then BeginQuorumEpoch).
SIM_SEEDS = [(5, 5), (10, 5), (2, 3), (41, 3)]
# Seeds run with the simulator's client proposals (every 25 ms: the leader's log grows by AppendMetadata).
PROPOSING_SEEDS = [(1, 3), (2, 5)]


def test_simulated_quorums_under_faults_are_behaviours_of_kraft_tla(tmp_path):
    """The seeds' traces are checked in one TLC run per quorum size (trace_check.tlc batches)."""
    batch = []
    runs = [(seed, voters, 10**9) for seed, voters in SIM_SEEDS] + [(seed, voters, 25) for seed, voters in PROPOSING_SEEDS]
    for seed, voters, propose_ms in runs:
        sim = QuorumSim(seed, QuorumSettings(voters=voters, propose_interval_ms=propose_ms), trace=True)
        sim.run()
        assert sim.world.faults, f"seed {seed} injected no fault"
        path = tmp_path / f"sim-{seed}-{propose_ms}.ndjson"
        path.write_text("".join(line + "\n" for line in sim.world.lines))
        steps = kraft.normalise(kraft.load([path]), voters=range(1, voters + 1))
        assert len([s for s in steps.steps if s["type"] == "BecomeActiveController"]) >= 2
        assert (propose_ms == 25) == any(s["type"] == "AppendMetadata" for s in steps.steps)
        batch.append(steps)
    verdicts = kraft.check_and_explain_batch(batch, timeout_s=TIMEOUT_S)
    for (seed, voters, _), steps, v in zip(runs, batch, verdicts):
        print(f"seed={seed} voters={voters}: {len(steps.steps)} steps, accepted={v.accepted}")
        assert v.accepted, (f"seed {seed} ({voters} voters) rejected at step {v.reached}: "
                            f"{steps.origin[v.reached - 1]} {steps.steps[v.reached - 1]}\n{v.state}")


MEMBERSHIP = Path(__file__).parent / "testdata" / "kraft-membership"


def test_recorded_broker_membership_is_a_behaviour_of_kraft_tla():
    """Three broker+controller nodes (tests/controller/test_controller_processes.py's registration
    test): elections and RegisterBroker, BrokerHeartbeat, FenceBroker, UnfenceBroker, a broker's
    re-registration (a new incarnation) and controlled shutdowns, checked whole."""
    paths = [MEMBERSHIP / f"node-{n}.ndjson" for n in (1, 2, 3)]
    steps = kraft.normalise(kraft.load(paths), voters=[1, 2, 3])
    kinds = {s["type"] for s in steps.steps}
    assert {"RegisterBroker", "UnfenceBroker", "FenceBroker", "BrokerHeartbeat", "ExpireBrokerSession",
            "BrokerFetchMetadata", "BecomeActiveController"} <= kinds
    assert "ControlledShutdown" in kinds and not steps.stopped
    assert len([s for s in steps.steps if s["type"] == "RegisterBroker" and s["broker"] == 1]) == 2
    code, report = validate(paths, voters=[1, 2, 3], timeout_s=TIMEOUT_S)
    assert code == 0, report
    assert "checked up to" not in report


def test_a_broker_unfenced_before_it_caught_up_is_rejected(tmp_path):
    files = {n: read(MEMBERSHIP / f"node-{n}.ndjson") for n in (1, 2, 3)}
    n3 = files[3]
    i = find(n3, "RegisterBroker", broker=1)
    # The controller unfences broker 1 right after registering it, before the high watermark
    # covered the registration (the broker cannot have read it).
    n3.insert(i + 1, {**n3[i], "type": "UnfenceBroker", "fenced": False, "metadata_offset": 0,
                      "time_ms": n3[i]["time_ms"] + 1, "mono_ns": n3[i]["mono_ns"] + 1})
    code, report = validate(write(tmp_path, files), voters=[1, 2, 3], timeout_s=TIMEOUT_S)
    print(report)
    assert code == 1, report
    assert f"  event:  {tmp_path / 'node-3.ndjson'}:{i + 2}" in report, report
    assert "broker_metadata_offset |->" in report


CLUSTER_SETTINGS = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "3000",
}


def test_a_real_cluster_with_topics_and_a_restarted_broker_is_a_behaviour_of_kraft_tla(tmp_path):
    """Three combined broker+controller processes: a topic created (TopicRecord, PartitionRecords:
    AppendMetadata), a node that is not the active controller killed -9 and restarted at once (a new
    incarnation registers again, within or after the old one's session), then every process stopped
    with SIGTERM (controlled shutdowns). The three files' quorum and membership steps, checked whole."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from kref.node.local_cluster import bootstrap_servers
    from tests.controller.test_controller_processes import current_leader

    with running_cluster(tmp_path, 3, 3, CLUSTER_SETTINGS) as (specs, processes, start):
        by_id = {s.node_id: s for s in specs}
        wait_listed(specs, processes)
        admin = AdminClient({"bootstrap.servers": bootstrap_servers(specs)})
        admin.create_topics([NewTopic("traced", num_partitions=3, replication_factor=3)])["traced"].result(timeout=30)
        leader, _ = wait_until(lambda: current_leader(specs), "an active controller")
        victim = next(s.node_id for s in specs if s.node_id != leader)
        processes[victim].send_signal(signal.SIGKILL)
        processes[victim].wait(timeout=10)
        start(by_id[victim])
        wait_until(lambda: by_id[victim].log_file.read_text().count("registered and unfenced") >= 2,
                   "the new incarnation registered and unfenced")
    paths = [s.dir / "trace.ndjson" for s in specs]
    steps = kraft.normalise(kraft.load(paths))  # the voters as RequestVote/BecomeActiveController name them
    assert steps.voters == sorted(by_id) and not steps.voters_inferred
    kinds = [s["type"] for s in steps.steps]
    assert {"AppendMetadata", "Crash", "Restart", "UnfenceBroker"} <= set(kinds)
    assert len([s for s in steps.steps if s["type"] == "RegisterBroker" and s["broker"] == victim]) >= 2
    code, report = validate(paths, spec="kraft", timeout_s=TIMEOUT_S)
    assert "as the trace shows them" not in report
    # The SIGTERMs at the end usually log ControlledShutdowns too (not asserted: which node stops first varies).
    print(f"{len(steps.steps)} steps, {kinds.count('AppendMetadata')} AppendMetadata, "
          f"{kinds.count('ControlledShutdown')} ControlledShutdown: {report}")
    assert code == 0, report


def test_a_new_incarnation_unfenced_before_it_caught_up_is_rejected(tmp_path):
    """The broker's metadata offset passed its first registration, not its second: the spec's
    UnfenceBroker reads the latest registration (the new broker epoch)."""
    files = {n: read(MEMBERSHIP / f"node-{n}.ndjson") for n in (1, 2, 3)}
    node, i = next((n, k) for n in (1, 2, 3) for k, e in enumerate(files[n])
                   if e["type"] == "RegisterBroker" and e["broker"] == 1
                   and any(x["type"] == "RegisterBroker" and x["broker"] == 1 for n2 in (1, 2, 3)
                           for x in files[n2] if x["mono_ns"] < e["mono_ns"]))
    events = files[node]
    events.insert(i + 1, {**events[i], "type": "UnfenceBroker", "fenced": False, "metadata_offset": events[i]["broker_epoch"],
                          "time_ms": events[i]["time_ms"] + 1, "mono_ns": events[i]["mono_ns"] + 1})
    code, report = validate(write(tmp_path, files), voters=[1, 2, 3], timeout_s=TIMEOUT_S)
    print(report)
    assert code == 1, report
    assert f"  event:  {tmp_path / f'node-{node}.ndjson'}:{i + 2}" in report, report


def test_the_configured_voters_come_from_the_events(tmp_path):
    """A 5-voter simulator trace names its voters in RequestVote/BecomeActiveController; voter sets
    that disagree are refused."""
    sim = QuorumSim(4, QuorumSettings(voters=5, propose_interval_ms=10**9), trace=True)
    sim.run()
    path = tmp_path / "sim.ndjson"
    path.write_text("".join(line + "\n" for line in sim.world.lines))
    events = kraft.load([path])
    steps = kraft.normalise(events)
    assert steps.voters == [1, 2, 3, 4, 5] and not steps.voters_inferred
    i = next(k for k, (e, _) in enumerate(events) if e["type"] == "RequestVote")
    events[i] = ({**events[i][0], "voters": [1, 2, 3]}, events[i][1])
    with pytest.raises(TraceError, match="different voter sets"):
        kraft.normalise(events)


def _cluster_like_files(tmp_path: Path, doctor=None) -> list[Path]:
    """A cluster's files in miniature: the recorded quorum's three files and a simulated run's
    replication trace (3 brokers, one partition) beside them, on one clock (the simulator's virtual
    milliseconds given as mono_ns: the two runs never meet, each spec reads its own events)."""
    from tests.trace_check.test_trace_check import simulated_trace

    files = recorded()
    if doctor:
        doctor(files)
    paths = write(tmp_path, files)
    sim = tmp_path / "partitions.ndjson"
    events = simulated_trace(sim)
    sim.write_text("".join(json.dumps({**e, "mono_ns": e["time_ms"] * 1_000_000 + i}) + "\n"
                           for i, e in enumerate(events)))
    return paths + [sim]


def test_auto_mode_checks_every_spec_the_files_hold_events_for(tmp_path):
    """Without --spec, files holding the quorum's events and a user partition's are checked against
    both specs, each verdict reported; a rejection by either makes the exit status 1."""
    paths = _cluster_like_files(tmp_path)
    code, report = validate(paths, voters=[1, 2, 3], timeout_s=TIMEOUT_S)
    print(report)
    assert code == 0, report
    assert report.startswith("2 checks of 4 file(s)") and "2 accepted, 0 rejected" in report
    assert "[spec/KRaft.tla] OK:" in report and "is a behaviour of" not in report
    assert "are a behaviour of spec/KRaft.tla" in report and "are a behaviour of spec/Replication.tla" in report

    def no_majority(files):  # as test_a_high_watermark_advanced_without_a_majority_is_rejected
        n2 = files[2]
        i = find(n2, "AdvanceHighWatermark", leader_epoch=1)
        n2[i] = {**n2[i], "end_offsets": {str(v): 0 for v in n2[i]["end_offsets"]}}

    doctored = tmp_path / "doctored"
    doctored.mkdir()
    code, report = validate(_cluster_like_files(doctored, no_majority), voters=[1, 2, 3], timeout_s=TIMEOUT_S)
    print(report)
    assert code == 1, report
    assert "1 accepted, 1 rejected" in report
    assert "[spec/KRaft.tla] REJECTED" in report and "are a behaviour of spec/Replication.tla" in report


SNAPSHOTS = Path(__file__).parent / "testdata" / "kraft-snapshot"


def test_recorded_snapshot_installs_are_a_behaviour_of_kraft_tla():
    """A run of tests/controller/test_snapshot_processes.py's FetchSnapshot catch-up (3 combined
    nodes and observer 4, a 1-byte retention: every snapshot moves the log start; a voter and the
    observer killed -9, 40 topics created, both restarted behind the leader's log start): the
    voters' CreateSnapshot and AdvanceLogStart, the restarted voter's InstallSnapshot, checked
    whole with the elections, membership and metadata records around them."""
    paths = sorted(SNAPSHOTS.glob("node-*.ndjson"))
    steps = kraft.normalise(kraft.load(paths))
    kinds = [s["type"] for s in steps.steps]
    assert {"CreateSnapshot", "AdvanceLogStart", "InstallSnapshot", "Crash", "Restart"} <= set(kinds), set(kinds)
    assert any(s["snapshot_end_offset"] > 0 for s in steps.steps if s["type"] == "InstallSnapshot")
    code, report = validate(paths, spec="kraft", timeout_s=TIMEOUT_S)
    print(report)
    assert code == 0, report


def test_a_snapshot_past_the_high_watermark_is_rejected(tmp_path):
    """The same trace doctored: a voter's first snapshot claims an offset its high watermark never
    covered (a snapshot of records not yet committed): rejected at that line."""
    files = {n: read(SNAPSHOTS / f"node-{n}.ndjson") for n in (1, 2, 3, 4)}
    n3 = files[3]
    i = find(n3, "CreateSnapshot")
    n3[i] = {**n3[i], "snapshot_end_offset": n3[i]["log_end_offset"] + 1}
    code, report = validate(write(tmp_path, files), spec="kraft", timeout_s=TIMEOUT_S)
    print(report)
    assert code == 1, report
    assert f"  event:  {tmp_path / 'node-3.ndjson'}:{i + 1}" in report, report
    assert "'type': 'CreateSnapshot'" in report

def test_a_zombie_controller_that_commits_a_write_in_its_old_epoch_is_rejected(tmp_path):
    """The recorded trace's zombie (node 3 leads epoch 2, is SIGSTOPped, node 1 wins epoch 3, node 3
    resumes and learns epoch 3) doctored: on resuming, node 3 appends a record in epoch 2 and
    advances its high watermark over it, counting the voters that had fetched everything from it
    before the pause. No behaviour of spec/KRaft.tla does that (NoZombieWrite): they never fetched
    the new record in epoch 2, and have left that epoch."""
    files = recorded()
    n3 = files[3]
    i = find(n3, "BecomeUnattached", leader_epoch=3)
    leader = n3[find(n3, "AdvanceHighWatermark", leader_epoch=2)]
    assert n3[i - 1] is leader  # the zombie's last step as the leader of epoch 2
    zombie_write = {**leader, "log_end_offset": 3, "high_watermark": 3, "end_offsets": {"1": 3, "2": 3},
                    "time_ms": n3[i]["time_ms"] - 1, "mono_ns": n3[i]["mono_ns"] - 1}
    n3.insert(i, zombie_write)
    steps = kraft.normalise(kraft.load(write(tmp_path, files)))
    assert any(o.startswith("inferred: AppendMetadata by leader 3") for o in steps.origin)  # the zombie's append
    report = rejected_at(tmp_path, files, 3, i)
    assert "'type': 'AdvanceHighWatermark'" in report and "'leader_epoch': 2" in report


def test_a_candidate_that_stood_without_a_majority_of_pre_votes_is_rejected(tmp_path):
    """KIP-996: RequestVote needs the pre-votes of a majority (spec/KRaft.tla's GrantPreVote). The
    simulated run (pre-vote on, as in Kafka 4) validates; without the grants that let its first
    candidate stand, it is rejected at that RequestVote."""
    sim = QuorumSim(2, QuorumSettings(voters=3, propose_interval_ms=10**9), trace=True)
    sim.run()
    events = [json.loads(line) for line in sim.world.lines]
    i = find(events, "RequestVote", pre_vote=True)
    stood = events[i]
    grants = [j for j, e in enumerate(events[:i]) if e["type"] == "GrantPreVote"
              and e["candidate"] == stood["replica"] and e["leader_epoch"] == stood["leader_epoch"] - 1]
    assert grants and any(e["type"] == "PreVote" for e in events[:i])
    whole = tmp_path / "whole.ndjson"
    whole.write_text("".join(json.dumps(e) + "\n" for e in events))
    code, report = validate([whole], timeout_s=TIMEOUT_S)
    assert code == 0, report
    doctored = [e for j, e in enumerate(events) if j not in grants]
    path = tmp_path / "doctored.ndjson"
    path.write_text("".join(json.dumps(e) + "\n" for e in doctored))
    code, report = validate([path], timeout_s=TIMEOUT_S)
    print(report)
    assert code == 1, report
    assert f"  event:  {path}:{i - len(grants) + 1}" in report, report
    assert "'type': 'RequestVote'" in report

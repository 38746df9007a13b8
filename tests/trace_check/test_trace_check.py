"""Trace validation with the real TLC: kref's traces are behaviours of spec/Replication.tla,
and doctored ones are not.

The traces come from the deterministic simulator running the same cores as
the broker (3 brokers, replication factor 3, no faults, a fixed seed), cut
to their first few hundred events so that one TLC run takes seconds, and
from a real `kref broker` process written to by confluent-kafka. Each
doctored trace changes one event the way a real bug would show, and must
be rejected at exactly that event.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import sys
from pathlib import Path

import pytest

from kref.sim.replication import ClusterSim, Settings
from trace_check.replication import TraceError, load_events, normalise
from trace_check.tlc import check_and_explain

SEED = 1
EVENTS = 300  # events of the simulated run kept: ~240 steps, a few seconds of TLC


def simulated_trace(path: Path, seed: int = SEED, events: int = EVENTS) -> list[dict]:
    sim = ClusterSim(seed, Settings(faults=False, duration_ms=1500), trace=True)
    sim.world.net.drop = 0.0
    sim.world.net.duplicate = 0.0
    sim.run()
    lines = [json.loads(line) for line in sim.world.lines[:events]]
    write(path, lines)
    return lines


def write(path: Path, events: list[dict]) -> None:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))


def verdict_for(path: Path):
    steps = normalise(load_events([path]))
    return steps, check_and_explain(steps, timeout_s=300)


def first_index(events, kind, after=0, **match):
    for i, e in enumerate(events):
        if i >= after and e["type"] == kind and all(e.get(k) == v for k, v in match.items()):
            return i
    raise AssertionError(f"no {kind} {match} in the trace")


def test_simulated_trace_is_a_behaviour_of_the_spec(tmp_path):
    path = tmp_path / "sim.ndjson"
    simulated_trace(path)
    steps, verdict = verdict_for(path)
    assert len(steps.steps) > 150
    kinds = {s["type"] for s in steps.steps}
    assert {"LeaderAppend", "FollowerFetch", "LeaderHandleFetch", "FollowerAppend", "AdvanceHighWatermark",
            "BecomeLeader", "BecomeFollower"} <= kinds
    assert verdict.accepted, f"rejected at step {verdict.reached}: {steps.steps[verdict.reached - 1]}"


def test_high_watermark_past_the_isr_is_rejected(tmp_path):
    events = simulated_trace(tmp_path / "sim.ndjson")
    i = first_index(events, "AdvanceHighWatermark", after=100)
    events[i] = {**events[i], "high_watermark": events[i]["high_watermark"] + 1}
    write(tmp_path / "doctored.ndjson", events)
    steps, verdict = verdict_for(tmp_path / "doctored.ndjson")
    assert not verdict.accepted
    assert steps.steps[verdict.reached - 1]["type"] == "AdvanceHighWatermark"
    assert steps.steps[verdict.reached - 1]["high_watermark"] == events[i]["high_watermark"]
    assert "high_watermark" in verdict.state  # the state before the step is shown


def test_two_leaders_in_one_epoch_are_rejected(tmp_path):
    events = simulated_trace(tmp_path / "sim.ndjson")
    leader = first_index(events, "BecomeLeader")
    follower = first_index(events, "BecomeFollower")
    # A follower that also takes leadership of the leader's epoch.
    usurper = {**events[leader], "replica": events[follower]["replica"],
               "log_end_offset": events[follower]["log_end_offset"]}
    events.insert(leader + 1, usurper)
    write(tmp_path / "doctored.ndjson", events)
    steps, verdict = verdict_for(tmp_path / "doctored.ndjson")
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert bad["type"] == "BecomeLeader" and bad["replica"] == events[follower]["replica"]


def test_follower_appending_what_the_leader_never_had_is_rejected(tmp_path):
    events = simulated_trace(tmp_path / "sim.ndjson")
    i = first_index(events, "FollowerAppend", after=100)
    grown = events[i]["log_end_offset"] + 5
    events[i] = {**events[i], "log_end_offset": grown, "last_offset": grown - 1}
    write(tmp_path / "doctored.ndjson", events)
    steps, verdict = verdict_for(tmp_path / "doctored.ndjson")
    assert not verdict.accepted
    assert steps.steps[verdict.reached - 1]["type"] == "FollowerAppend"


def test_traces_with_unmodelled_faults_are_refused(tmp_path):
    events = simulated_trace(tmp_path / "sim.ndjson", events=80)
    events.insert(10, {"type": "MessageDropped", "time_ms": events[10]["time_ms"], "source": 1, "destination": 2})
    write(tmp_path / "faulty.ndjson", events)
    with pytest.raises(TraceError, match="MessageDropped"):
        normalise(load_events([tmp_path / "faulty.ndjson"]))


def test_cli_exit_codes(tmp_path):
    good = tmp_path / "sim.ndjson"
    events = simulated_trace(good, events=120)
    run = [sys.executable, "-m", "kref.cli", "trace", "check"]
    ok = subprocess.run(run + [str(good)], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith("OK:")
    i = first_index(events, "LeaderAppend", after=20)
    events[i] = {**events[i], "leader_epoch": events[i]["leader_epoch"] + 1}
    bad = tmp_path / "bad.ndjson"
    write(bad, events)
    rejected = subprocess.run(run + [str(bad)], capture_output=True, text=True, timeout=300)
    assert rejected.returncode == 1, rejected.stdout + rejected.stderr
    assert "REJECTED" in rejected.stdout and "LeaderAppend" in rejected.stdout
    missing = subprocess.run(run + [str(tmp_path / "nope.ndjson")], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_real_single_broker_trace_is_a_behaviour_of_the_spec(tmp_path):
    """A `kref broker` process with --trace-file, written to by confluent-kafka."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    trace = tmp_path / "broker.ndjson"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kref.cli", "broker", "--trace-file", str(trace),
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
         "--override", f"log.dirs={tmp_path / 'data'}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        bootstrap = f"127.0.0.1:{port}"
        for _ in range(300):  # bounded: 30 s for the broker to listen
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("traced", 1, 1)])["traced"].result(30)
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        for n in range(20):
            producer.produce("traced", f"v{n}".encode(), partition=0)
            if n % 5 == 4:
                producer.flush(10)
        assert producer.flush(10) == 0
    finally:
        proc.terminate()
        proc.wait(30)
    steps = normalise(load_events([trace]), topic="traced", partition=0)
    assert sum(1 for s in steps.steps if s["type"] == "LeaderAppend") >= 4
    verdict = check_and_explain(steps, timeout_s=300)
    assert verdict.accepted, f"rejected at step {verdict.reached}: {steps.steps[verdict.reached - 1]}"



def test_origins_name_the_file_line_after_run_headers(tmp_path):
    """A broker restarted on the same --trace-file appends a run: origins count every line, and the
    end of the first run (a kill -9 logs nothing) becomes an inferred Crash, its successor a Restart."""

    ev = {"type": "BecomeLeader", "replica": 1, "topic": "t", "partition": 0, "leader_epoch": 0,
          "partition_epoch": 0, "isr": [1], "replicas": [1], "log_end_offset": 0, "high_watermark": 0}
    header = {"type": "TraceRun", "run": "r", "node": 1, "start_time_ms": 0, "kref_version": "0"}
    lines = [header, dict(ev, seq=1, time_ms=1), header, dict(ev, seq=1, time_ms=2), dict(ev, seq=2, time_ms=3)]
    path = tmp_path / "two-runs.ndjson"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    events = load_events([path])
    assert [origin for _, origin in events if not origin.startswith("inferred")] == [
        f"{path}:2", f"{path}:4", f"{path}:5"]
    assert [(e["type"], e.get("replica")) for e, _ in events] == [
        ("BecomeLeader", 1), ("Crash", 1), ("Restart", 1), ("BecomeLeader", 1), ("BecomeLeader", 1)]
    assert f"{path}:2" in events[1][1]  # the Crash names the run's last line


# A simulated cluster whose only faults are crashes and restarts (the faults spec/Replication.tla
# models): the whole seed validates, and within its first 200 events a restarted old leader's
# follower truncates (with high watermark 9) and the leader expands the isr again (high watermark 9).
CRASH_SEED = 129


def crash_only_trace(path: Path, events: int | None = None) -> list[dict]:
    sim = ClusterSim(CRASH_SEED, Settings(crashes_only=True, duration_ms=3000, quiet_ms=1500), trace=True)
    sim.run()
    lines = [json.loads(line) for line in sim.world.lines]
    lines = lines[:events] if events else lines
    write(path, lines)
    return lines


def verdict_min_isr_2(path: Path):
    steps = normalise(load_events([path]))
    return steps, check_and_explain(steps, min_insync_replicas=2, timeout_s=300)


def assert_rejected_at(tmp_path: Path, events: list[dict], index: int, kind: str, **fields) -> None:
    """The doctored trace is rejected at exactly events[index] (0-based), a `kind` step with `fields`."""
    write(tmp_path / "doctored.ndjson", events)
    steps, verdict = verdict_min_isr_2(tmp_path / "doctored.ndjson")
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert bad["type"] == kind and all(bad[k] == v for k, v in fields.items()), bad
    assert steps.origin[verdict.reached - 1].endswith(f"doctored.ndjson:{index + 1}")


def test_crash_only_seed_prefix_is_a_behaviour_of_the_spec(tmp_path):
    crash_only_trace(tmp_path / "sim.ndjson", events=200)
    steps, verdict = verdict_min_isr_2(tmp_path / "sim.ndjson")
    kinds = {s["type"] for s in steps.steps}
    assert {"Crash", "Restart", "FenceBroker", "ElectLeader", "TruncateToEpochEndOffset", "ExpandIsr"} <= kinds
    assert verdict.accepted, f"rejected at step {verdict.reached}: {steps.steps[verdict.reached - 1]}"


def test_whole_crash_only_seed_is_a_behaviour_of_the_spec(tmp_path):
    # Before the KAFKA-15583 rule in the replica core (98a8dc7) this seed was rejected at
    # exactly the AdvanceHighWatermark of a leader alone in its isr (sim line 853).
    crash_only_trace(tmp_path / "sim.ndjson")
    steps, verdict = verdict_min_isr_2(tmp_path / "sim.ndjson")
    assert verdict.accepted, f"rejected at step {verdict.reached}: {steps.steps[verdict.reached - 1]}"


def test_isr_expanded_with_a_follower_behind_is_rejected(tmp_path):
    events = crash_only_trace(tmp_path / "sim.ndjson", events=200)
    expand = first_index(events, "ExpandIsr", after=100)
    follower = events[expand]["added"]
    # The leader's answer to that follower while it was still below the high watermark.
    behind = max(i for i, e in enumerate(events[:expand]) if e["type"] == "LeaderHandleFetch"
                 and e["follower"] == follower and e["remote_log_end_offset"] < e["high_watermark"])
    events.insert(behind + 1, events.pop(expand))  # the leader expands the isr right then
    assert_rejected_at(tmp_path, events, behind + 1, "ExpandIsr", added=follower)


def test_truncation_below_the_high_watermark_is_rejected(tmp_path):
    events = crash_only_trace(tmp_path / "sim.ndjson", events=200)
    i = first_index(events, "TruncateToEpochEndOffset", after=100)
    below = events[i]["high_watermark"] - 1
    assert below >= 0
    events[i] = {**events[i], "log_end_offset": below, "high_watermark": below}
    assert_rejected_at(tmp_path, events, i, "TruncateToEpochEndOffset", log_end_offset=below)


# Many traces, one TLC run (trace_check/tlc.py check_and_explain_batch): valid and doctored traces of
# several simulator seeds side by side, each with its own verdict, each doctored one rejected at
# exactly its doctored step with the spec state before it, as when checked alone.
BATCH_SEEDS = (1, 2, 3, 4, 5, 6)
BATCH_EVENTS = 130  # ~100 steps each


def test_a_batch_gives_each_trace_its_own_verdict(tmp_path):
    from trace_check.tlc import check_and_explain_batch

    paths = []
    for seed in BATCH_SEEDS:
        paths.append(tmp_path / f"seed{seed}.ndjson")
        simulated_trace(paths[-1], seed=seed, events=BATCH_EVENTS)
    doctored = {}  # index in the batch -> (event index doctored, type)
    events = [json.loads(line) for line in paths[1].read_text().splitlines()]
    i = first_index(events, "AdvanceHighWatermark", after=40)
    events[i] = {**events[i], "high_watermark": events[i]["high_watermark"] + 1}
    write(paths[1], events)
    doctored[1] = (i, "AdvanceHighWatermark")
    events = [json.loads(line) for line in paths[4].read_text().splitlines()]
    i = first_index(events, "FollowerAppend", after=40)
    grown = events[i]["log_end_offset"] + 5
    events[i] = {**events[i], "log_end_offset": grown, "last_offset": grown - 1}
    write(paths[4], events)
    doctored[4] = (i, "FollowerAppend")
    batch = [normalise(load_events([p])) for p in paths]
    verdicts = check_and_explain_batch(batch, timeout_s=300)
    assert len(verdicts) == len(batch)
    for n, (steps, verdict) in enumerate(zip(batch, verdicts)):
        if n not in doctored:
            assert verdict.accepted, f"seed {BATCH_SEEDS[n]} rejected at step {verdict.reached}"
            continue
        index, kind = doctored[n]
        assert not verdict.accepted, f"doctored seed {BATCH_SEEDS[n]} accepted"
        assert steps.steps[verdict.reached - 1]["type"] == kind
        assert steps.origin[verdict.reached - 1].endswith(f"seed{BATCH_SEEDS[n]}.ndjson:{index + 1}")
        assert "log_end_offset" in verdict.state  # the state before the doctored step is shown
    # The same report as a check of that trace alone.
    alone = check_and_explain(batch[1], timeout_s=300)
    assert (alone.accepted, alone.reached, alone.state) == (False, verdicts[1].reached, verdicts[1].state)

"""Simulator seeds' traces validated by TLC in batches (trace_check/seeds.py), as CI and
`kref sim --seeds A..B --validate` (local process pool and Spark) do: several seeds per TLC run,
one verdict per seed.

The fixed seeds are crashes-only runs (the faults spec/Replication.tla models) whose whole traces
are behaviours of the spec; docs/trace-validation.md lists the seeds of that scenario that are not
(findings of trace validation, each with its first rejected event).
"""

from __future__ import annotations

import pytest

from kref.sim.campaign import run_campaign
from trace_check.seeds import validate_seeds

# Crashes-only seeds whose whole traces (190-880 steps each) are accepted, checked in one TLC run.
# 8: a restarted life that crashed before it registered; 10: the leader counts a crashed follower's last
# fetch for the HW; 13: a crashed follower's fetch still on the wire is handled; 21: an isr-only change the
# leader applied silently; 42: a broker down before the partition's first event; 44: a fetch refused with
# OFFSET_OUT_OF_RANGE (not logged by the leader); 7: a restarted broker catching up on the metadata log
# applies a registration older than the controller's latest (same term, another isr); 18, 36: the leader
# fenced with no replica to take over: leader none with a new leader epoch (spec/Replication.tla FenceBroker).
FIXED_SEEDS = (1, 3, 4, 5, 6, 7, 8, 10, 13, 17, 18, 19, 20, 21, 36, 42, 44, 129)


def test_fixed_simulator_seeds_validate_in_one_batch():
    rows = validate_seeds(FIXED_SEEDS)
    assert [r["seed"] for r in rows] == list(FIXED_SEEDS)
    bad = [r for r in rows if r["trace_verdict"] != "accepted"]
    assert not bad, bad
    assert all(r["trace_steps"] > 150 for r in rows), rows


def test_local_campaign_validates_each_seeds_trace(tmp_path):
    summary = run_campaign(range(3, 5), engine="local", scenarios=("quorum",), workers=1, validate=True,
                           output=str(tmp_path / "out"))
    assert summary["traces"] == {"accepted": 2}, summary["rows"]
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(str(tmp_path / "out"))
    assert table.column("trace_verdict").to_pylist() == ["accepted", "accepted"]
    assert all(n > 200 for n in table.column("trace_steps").to_pylist())


def test_spark_campaign_validates_each_seeds_trace(tmp_path):
    pytest.importorskip("pyspark")
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "campaign.parquet"
    summary = run_campaign(range(3, 5), engine="spark", master="local[2]", output=str(out), scenarios=("quorum",),
                           validate=True)
    assert summary["runs"] == 2 and summary["traces"] == {"accepted": 2}, summary["rows"]
    table = pq.read_table(str(out))
    assert sorted(table.column("trace_verdict").to_pylist()) == ["accepted", "accepted"]


def test_make_mutation_catches_hw_max_by_trace_validation():
    """`make mutation`'s second detector (kref/sim/mutation.py trace_catches): with hw_max on, seed 1's
    crashes-only trace is rejected at an AdvanceHighWatermark; without it (the baseline) accepted."""
    from kref.sim.mutation import trace_catches

    found, baseline = trace_catches(["hw_max"], seeds=1, workers=1)
    assert baseline == {"replication": []}, baseline
    assert found["hw_max"]["trace"].startswith("AdvanceHighWatermark"), found
    assert found["hw_max"]["trace_seeds"] == 1

"""Running seeds: one seed, a range on a process pool, or a range on Spark.

Theory of operation
-------------------
A seed is one run of each scenario (kref/sim/replication.py: controller +
replica cores; kref/sim/quorum.py: the KRaft quorum), with faults, each
checking its invariants after every event. `run_seed` returns one flat row
(seed, events, faults, verdict, first violation, seconds) -- the schema of
the Parquet table a campaign writes -- and never raises for a protocol bug:
a spec invariant (Violation) or a core's own assertion (InvariantViolation)
is the verdict "violation"; any other exception is "error" (a simulator or
core crash, also a finding). A failing row carries `repro`, the one command
line that runs it again (the same seed gives a byte-identical trace).
"""

from __future__ import annotations

import time
import traceback
from concurrent.futures import ProcessPoolExecutor

from kref import mutations
from kref.controller.controller import InvariantViolation as ControllerInvariant
from kref.controller.quorum import InvariantViolation as QuorumInvariant
from kref.replication.replica import InvariantViolation as ReplicaInvariant
from kref.sim.quorum import QuorumSim
from kref.sim.replication import ClusterSim, Settings
from kref.sim.world import Violation

from kref.sim import ALL_SCENARIOS, SCENARIOS, TRACED_SCENARIO  # noqa: F401  (SCENARIOS re-exported)
ROW_FIELDS = ("seed", "scenario", "mutation", "events", "faults", "verdict", "invariant", "violation", "seconds", "repro",
              # trace validation of the seed (campaign --validate; trace_check/seeds.py), empty without it
              "trace_steps", "trace_verdict", "trace_detail")


def repro(seed: int, mutation: str | None, scenario: str | None = None) -> str:
    line = f"kref sim --seed {seed}"
    if scenario:
        line += f" --scenario {scenario}"
    if mutation:
        line += f" --mutation {mutation}"
    return line


def make(scenario: str, seed: int, trace: bool):
    if scenario == "replication":
        return ClusterSim(seed, trace=trace)
    if scenario == "quorum":
        return QuorumSim(seed, trace=trace)
    if scenario == TRACED_SCENARIO:
        return ClusterSim(seed, Settings(crashes_only=True, duration_ms=3000, quiet_ms=1500), trace=trace)
    raise ValueError(f"unknown scenario {scenario!r} (one of {', '.join(ALL_SCENARIOS)})")


def run_seed(seed: int, mutation: str | None = None, scenarios=SCENARIOS, trace: bool = False) -> tuple[dict, list[str]]:
    """Run `seed` through `scenarios` (stopping at the first violation): (row, trace lines)."""
    mutations.activate([mutation] if mutation else [])
    started = time.process_time()
    row = {"seed": seed, "scenario": "", "mutation": mutation or "", "events": 0, "faults": 0,
           "verdict": "ok", "invariant": "", "violation": "", "seconds": 0.0, "repro": "",
           "trace_steps": 0, "trace_verdict": "", "trace_detail": ""}
    lines: list[str] = []
    try:
        for scenario in scenarios:
            row["scenario"] = scenario
            sim = make(scenario, seed, trace)
            try:
                sim.run()
            finally:
                row["events"] += sim.world.events
                row["faults"] += sim.world.faults
                lines += sim.world.lines
    except Violation as exc:
        row.update(verdict="violation", invariant=exc.invariant, violation=f"t={sim.world.now_ms}ms {exc.detail}")
    except (ReplicaInvariant, QuorumInvariant, ControllerInvariant) as exc:
        row.update(verdict="violation", invariant=f"core:{type(exc).__module__.rsplit('.', 1)[-1]}",
                   violation=f"t={sim.world.now_ms}ms {exc}")
    except Exception as exc:  # a crash of a core or the simulator: a bug too
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        row.update(verdict="error", invariant=type(exc).__name__,
                   violation=f"t={sim.world.now_ms}ms {exc} at {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}")
    finally:
        mutations.activate([])
    row["seconds"] = round(time.process_time() - started, 3)
    if row["verdict"] != "ok":
        row["repro"] = repro(seed, mutation, row["scenario"])
    return row, lines


def _row_only(args: tuple) -> dict:
    seed, mutation, scenarios = args
    return run_seed(seed, mutation, scenarios)[0]


def run_local(seeds, mutation: str | None = None, scenarios=SCENARIOS, workers: int | None = None, on_row=None,
              stop_on_violation: bool = False) -> list[dict]:
    """Seeds on a process pool (workers=1: in this process); rows in seed order."""
    rows = []
    jobs = [(s, mutation, tuple(scenarios)) for s in seeds]
    if workers == 1:
        for job in jobs:
            rows.append(_row_only(job))
            if on_row:
                on_row(rows[-1])
            if stop_on_violation and rows[-1]["verdict"] != "ok":
                break
        return rows
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for row in pool.map(_row_only, jobs, chunksize=max(1, len(jobs) // 64)):
            rows.append(row)
            if on_row:
                on_row(row)
    return rows


def summarize(rows: list[dict]) -> dict:
    bad = [r for r in rows if r["verdict"] != "ok"]
    traces = {}
    for r in rows:
        if r.get("trace_verdict"):
            traces[r["trace_verdict"]] = traces.get(r["trace_verdict"], 0) + 1
    return {
        "runs": len(rows),
        "events": sum(r["events"] for r in rows),
        "faults": sum(r["faults"] for r in rows),
        "violations": len(bad),
        "first": bad[0] if bad else None,
        "traces": traces,  # trace verdict -> seeds (campaign --validate)
    }

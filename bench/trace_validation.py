"""Trace validation throughput: traces of ~100 steps per second, one TLC run per trace vs batches.

Issue 15's goal is >= 20 traces/s on 2 cores for traces of about 100 events
(etcd's anchor: 10-20/s), which a JVM start per trace cannot reach. The
traces are simulator runs without faults (the spec models all they do), one
seed each, cut to their first --events events (~100 steps). In one run:

- one-per-run: trace_check.tlc.check for each of --single traces, one TLC
  JVM each (what `kref trace check FILE` does);
- batch: trace_check.tlc.check_batch over all --traces traces, as many TLC
  runs as trace_check.tlc.plan_runs makes (one per BATCH_STEPS steps);
- batch x2: the same traces in two halves, two TLC runs side by side (the
  2 cores).

CPU seconds are this process's (normalising, writing modules) plus TLC's
(RUSAGE_CHILDREN); traces per CPU second x 2 is the rate two busy cores
would give, the figure to compare with the goal when other work shares the
machine (wall-clock figures are printed too, with the load average).
Not a test: numbers for docs/trace-validation.md.

    python bench/trace_validation.py [--traces 200] [--single 4] [--events 130]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kref.sim.replication import ClusterSim, Settings
from trace_check.replication import load_events, normalise
from trace_check.tlc import check, check_batch, plan_runs

GOAL = 20.0  # traces/s on 2 cores


def write_traces(where: Path, count: int, events: int) -> list[Path]:
    paths = []
    for seed in range(1, count + 1):
        sim = ClusterSim(seed, Settings(faults=False, duration_ms=1500), trace=True)
        sim.world.net.drop = sim.world.net.duplicate = 0.0
        sim.run()
        path = where / f"seed{seed}.ndjson"
        path.write_text("".join(line + "\n" for line in sim.world.lines[:events]))
        paths.append(path)
    return paths


def cpu_now() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def measure(label: str, run) -> dict:
    cpu, wall = cpu_now(), time.monotonic()
    verdicts = run()
    cpu, wall = cpu_now() - cpu, time.monotonic() - wall
    bad = sum(not v.accepted for v in verdicts)
    return {"mode": label, "traces": len(verdicts), "rejected": bad, "wall_s": wall, "cpu_s": cpu,
            "traces_per_s": len(verdicts) / wall, "traces_per_cpu_s": len(verdicts) / cpu}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--traces", type=int, default=200, help="traces in the batch modes")
    p.add_argument("--single", type=int, default=4, help="traces checked one TLC run each")
    p.add_argument("--events", type=int, default=130, help="events kept per trace (~0.75 steps each)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="kref-bench-trace-") as tmp:
        paths = write_traces(Path(tmp), args.traces, args.events)

        def steps_of(ps):
            return [normalise(load_events([q])) for q in ps]

        sizes = [len(s.steps) for s in steps_of(paths)]
        results = [measure("one-per-run", lambda: [check(s) for s in steps_of(paths[:args.single])])]

        def batch(ps):
            steps = steps_of(ps)
            out = [None] * len(steps)
            for run in plan_runs(steps):
                for i, v in zip(run, check_batch([steps[i] for i in run])):
                    out[i] = v
            return out

        results.append(measure("batch", lambda: batch(paths)))
        half = len(paths) // 2

        def two_at_once():
            with ThreadPoolExecutor(2) as pool:
                parts = list(pool.map(batch, [paths[:half], paths[half:]]))
            return parts[0] + parts[1]

        results.append(measure("batch x2", two_at_once))
    load_after = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"results": results, "steps_mean": sum(sizes) / len(sizes), "load": [load_before, load_after]}))
        return
    print(f"traces of {min(sizes)}-{max(sizes)} steps (mean {sum(sizes) / len(sizes):.0f}); "
          f"load average {load_before:.1f} before, {load_after:.1f} after (2 cores)")
    print(f"{'mode':12} {'traces':>6} {'rejected':>8} {'wall s':>7} {'cpu s':>7} {'traces/s':>9} "
          f"{'per cpu s':>9} {'2 cores':>8} {'x goal':>6}")
    for r in results:
        two = 2 * r["traces_per_cpu_s"]
        print(f"{r['mode']:12} {r['traces']:>6} {r['rejected']:>8} {r['wall_s']:>7.1f} {r['cpu_s']:>7.1f} "
              f"{r['traces_per_s']:>9.2f} {r['traces_per_cpu_s']:>9.2f} {two:>8.1f} {two / GOAL:>6.2f}")
    print(f"batch vs one-per-run, CPU per trace: {results[0]['cpu_s'] / results[0]['traces'] / (results[1]['cpu_s'] / results[1]['traces']):.1f}x less")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

"""`kref sim`: run one seed (with its trace) or a campaign of seeds.

    kref sim --seed 42 [--trace-file t.ndjson] [--mutation hw_max] [--scenario replication]
    kref sim --seeds 1..1000 [--engine local|spark] [--master URL] [--output results.parquet]
    kref sim --seeds 1..1000 --validate [--keep-traces DIR]   (each seed's trace checked by TLC too)

Exit status: 0 when every run kept every invariant (and, with --validate,
every trace checked was accepted), 1 when one did not (the failing seed's
one-line reproduction is printed), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys

from kref import mutations
from kref.sim import ALL_SCENARIOS, SCENARIOS


def add_arguments(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--seed", type=int, help="run one seed")
    which.add_argument("--seeds", help="run a range of seeds, A..B inclusive")
    p.add_argument("--scenario", choices=ALL_SCENARIOS, action="append",
                   help="scenario(s) to run (default: all: " + ", ".join(SCENARIOS) + ")")
    p.add_argument("--mutation", choices=sorted(mutations.CATALOGUE), help="switch one catalogued bug into the cores")
    p.add_argument("--trace-file", help="--seed: write the run's trace (NDJSON, one event a line) here")
    p.add_argument("--engine", choices=("local", "spark"), default="local", help="--seeds: process pool or Spark")
    p.add_argument("--master", default="local[*]", help="--engine spark: the Spark master URL")
    p.add_argument("--workers", type=int, default=None, help="--engine local: processes (default: CPU count)")
    p.add_argument("--output", help="--seeds: write the results table as Parquet to this directory")
    p.add_argument("--validate", action="store_true",
                   help="--seeds: also check each seed's trace (its crashes-only run) against spec/Replication.tla "
                        "with TLC, many seeds per TLC run")
    p.add_argument("--keep-traces", metavar="DIR", help="--validate: write rejected seeds' traces here")
    p.add_argument("--json", action="store_true", help="print rows/summary as JSON")


def run(args: argparse.Namespace) -> int:
    scenarios = tuple(args.scenario) if args.scenario else SCENARIOS
    if args.seed is not None:
        from kref.sim.runner import run_seed

        row, lines = run_seed(args.seed, args.mutation, scenarios, trace=bool(args.trace_file))
        if args.trace_file:
            with open(args.trace_file, "w", encoding="utf-8") as f:
                f.writelines(line + "\n" for line in lines)
        if args.json:
            print(json.dumps(row, sort_keys=True))
        else:
            print(f"seed {row['seed']}: {row['verdict']}, {row['events']} events, {row['faults']} faults"
                  + (f", {len(lines)} trace events -> {args.trace_file}" if args.trace_file else ""))
            if row["verdict"] != "ok":
                print(f"{row['invariant']} violated ({row['scenario']}): {row['violation']}")
                print(f"reproduce: {row['repro']} --trace-file seed{row['seed']}.ndjson")
        return 0 if row["verdict"] == "ok" else 1
    from kref.sim.campaign import parse_range, run_campaign

    try:
        seeds = parse_range(args.seeds)
    except ValueError as exc:
        print(f"kref sim: {exc}", file=sys.stderr)
        return 2
    summary = run_campaign(seeds, engine=args.engine, mutation=args.mutation, scenarios=scenarios,
                           master=args.master, output=args.output, workers=args.workers, validate=args.validate,
                           keep_traces=args.keep_traces)
    bad = [r for r in summary["rows"] if r["verdict"] != "ok"]
    rejected = [r for r in summary["rows"] if r["trace_verdict"] == "rejected"]
    if args.json:
        print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, sort_keys=True, default=str))
    else:
        print(f"runs {summary['runs']}, events {summary['events']}, faults injected {summary['faults']}, "
              f"violations {summary['violations']}" + (f" (results: {args.output})" if args.output else ""))
        for r in bad[:10]:
            print(f"  seed {r['seed']}: {r['invariant']} ({r['scenario']}): {r['violation'][:160]}  -> {r['repro']}")
        if len(bad) > 10:
            print(f"  ... {len(bad) - 10} more")
        if args.validate:
            print("traces checked by TLC: " + (", ".join(f"{v} {n}" for v, n in sorted(summary["traces"].items()))
                                               or "none"))
            for r in rejected[:10]:
                print(f"  seed {r['seed']}: REJECTED at {r['trace_detail'][:400]}")
            if len(rejected) > 10:
                print(f"  ... {len(rejected) - 10} more")
    return 0 if not bad and not rejected else 1

"""`kref trace check FILE...`: the command line of trace_check.

Theory of operation. Parsing the arguments imports nothing heavy (the
parser is built in every kref process); run() loads the events of every
file, merges them into one order, normalises one partition's events into
the steps of spec/TraceReplication.tla and has TLC check them. Exit 0: the
trace is a behaviour of spec/Replication.tla. Exit 1: it is not; the first
event no action can take, its origin (file:line) and the spec state before
it are printed. Exit 2: the trace cannot be checked (unreadable, faults the
spec does not model, too long, TLC gave no verdict in its time limit).
"""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    tsub = parser.add_subparsers(dest="trace_command", required=True)
    check = tsub.add_parser("check", help="check NDJSON traces against spec/Replication.tla with TLC")
    check.add_argument("files", nargs="+", help="trace files (one per node; merged by mono_ns or time_ms)")
    check.add_argument("--topic", help="the partition's topic (needed when the trace holds several)")
    check.add_argument("--partition", type=int, help="the partition number")
    check.add_argument("--min-insync-replicas", type=int, default=1, help="the topic's min.insync.replicas")
    check.add_argument("--timeout", type=float, default=300.0, help="TLC time limit in seconds (default 300)")
    check.add_argument("--keep-dir", help="keep the generated TraceRun.tla/.cfg in this directory")


def run(args: argparse.Namespace) -> int:
    from trace_check.replication import TraceError, load_events, normalise
    from trace_check.tlc import TlcError, check

    try:
        steps = normalise(load_events(args.files), args.topic, args.partition)
        verdict = check(steps, min_insync_replicas=args.min_insync_replicas, timeout_s=args.timeout,
                        keep_dir=args.keep_dir)
    except (TraceError, TlcError) as exc:
        print(f"kref trace check: {exc}", file=sys.stderr)
        return 2
    where = f"{steps.topic}-{steps.partition}, replicas {steps.replicas}"
    if verdict.accepted:
        print(f"ACCEPTED: {verdict.steps} steps of {where} are a behaviour of spec/Replication.tla "
              f"({verdict.distinct_states} distinct states, {verdict.seconds:.1f} s)")
        return 0
    i = verdict.reached - 1
    print(f"REJECTED: {where}: no action of spec/Replication.tla can take step {verdict.reached} "
          f"of {verdict.steps} ({steps.origin[i]}):")
    print("  " + json.dumps(steps.steps[i], sort_keys=True))
    print("  spec state before it: " + (verdict.state or "(initial state)"))
    if i > 0:
        print(f"  the step before it ({steps.origin[i - 1]}): " + json.dumps(steps.steps[i - 1], sort_keys=True))
    return 1

"""`kref trace check FILE...`: validate a trace against spec/Replication.tla with TLC.

    kref trace check broker1.ndjson broker2.ndjson broker3.ndjson [--topic t --partition 0]

Exit status: 0 when the trace is a behaviour of the spec; 1 when it is not
(the first event no action can take is named, with the spec state before
it); 2 when it cannot be checked (unreadable, several partitions and none
chosen, faults the spec does not model, too long, TLC gave no verdict).
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="trace_command", required=True)
    c = sub.add_parser("check", help="check NDJSON trace file(s) (one per node) against spec/Replication.tla")
    c.add_argument("files", nargs="+", metavar="FILE")
    c.add_argument("--topic", help="the partition's topic (needed when the trace holds several)")
    c.add_argument("--partition", type=int, help="the partition (with --topic)")
    c.add_argument("--min-insync-replicas", type=int, default=1,
                   help="the topic's min.insync.replicas (default 1: the spec then never holds the HW back)")
    c.add_argument("--timeout", type=float, default=600.0, help="seconds TLC may take (default 600)")


def run(args: argparse.Namespace) -> int:
    # Imported here: building the command-line parser must stay cheap (every broker builds it).
    from trace_check.replication import TraceError, load_events, normalise
    from trace_check.tlc import TlcError, check_and_explain

    try:
        steps = normalise(load_events(args.files), args.topic, args.partition)
        if args.min_insync_replicas < 1 or args.min_insync_replicas > max(1, len(steps.replicas)):
            print(f"kref trace check: --min-insync-replicas must be within 1..{len(steps.replicas)}",
                  file=sys.stderr)
            return 2
        verdict = check_and_explain(steps, min_insync_replicas=args.min_insync_replicas,
                                    timeout_s=args.timeout)
    except (TraceError, TlcError) as exc:
        print(f"kref trace check: {exc}", file=sys.stderr)
        return 2
    where = f"{steps.topic}-{steps.partition}, replicas {steps.replicas}"
    skipped = ", ".join(f"{k} x{n}" for k, n in sorted(steps.skipped.items())) or "none"
    if verdict.accepted:
        print(f"OK: {len(steps.steps)} steps of {where} are a behaviour of spec/Replication.tla "
              f"({verdict.distinct_states} spec states explored, {verdict.seconds:.1f} s); "
              f"not in the spec, left out: {skipped}")
        return 0
    i = verdict.reached - 1
    print(f"REJECTED: no behaviour of spec/Replication.tla takes step {verdict.reached} of {len(steps.steps)} "
          f"({where}; {verdict.seconds:.1f} s)")
    print(f"  event:  {steps.origin[i]}")
    print(f"  step:   {steps.steps[i]}")
    if i > 0:
        print(f"  after:  {steps.steps[i - 1]} ({steps.origin[i - 1]})")
    print(f"  spec state before it (one behaviour that took every step before it):\n    {verdict.state or '(not shown)'}")
    print("  docs/trace-validation.md explains how to read this.")
    return 1

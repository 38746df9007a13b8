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
    code, text = validate(args.files, topic=args.topic, partition=args.partition,
                          min_insync_replicas=args.min_insync_replicas, timeout_s=args.timeout)
    print(text, file=sys.stderr if code == 2 else sys.stdout)
    return code


def validate(files, *, topic: str | None = None, partition: int | None = None, min_insync_replicas: int = 1,
             timeout_s: float = 600.0) -> tuple[int, str]:
    """Check trace files (one per node) against spec/Replication.tla: (exit status, report).

    The command line's whole decision, also called by the tests that run
    real broker processes and validate their traces."""
    # Imported here: building the command-line parser must stay cheap (every broker builds it).
    from trace_check.replication import TraceError, load_events, normalise
    from trace_check.tlc import TlcError, check_and_explain

    try:
        steps = normalise(load_events(files), topic, partition)
        if min_insync_replicas < 1 or min_insync_replicas > max(1, len(steps.replicas)):
            return 2, f"kref trace check: --min-insync-replicas must be within 1..{len(steps.replicas)}"
        verdict = check_and_explain(steps, min_insync_replicas=min_insync_replicas, timeout_s=timeout_s)
    except (TraceError, TlcError) as exc:
        return 2, f"kref trace check: {exc}"
    where = f"{steps.topic}-{steps.partition}, replicas {steps.replicas}"
    skipped = ", ".join(f"{k} x{n}" for k, n in sorted(steps.skipped.items())) or "none"
    stopped = f"; checked up to the {steps.stopped} (not in the spec)" if steps.stopped else ""
    if verdict.accepted:
        return 0, (f"OK: {len(steps.steps)} steps of {where} are a behaviour of spec/Replication.tla "
                   f"({verdict.distinct_states} spec states explored, {verdict.seconds:.1f} s){stopped}; "
                   f"not in the spec, left out: {skipped}")
    i = verdict.reached - 1
    lines = [f"REJECTED: no behaviour of spec/Replication.tla takes step {verdict.reached} of {len(steps.steps)} "
             f"({where}; {verdict.seconds:.1f} s)",
             f"  event:  {steps.origin[i]}",
             f"  step:   {steps.steps[i]}"]
    if i > 0:
        lines.append(f"  after:  {steps.steps[i - 1]} ({steps.origin[i - 1]})")
    lines.append(f"  spec state before it (one behaviour that took every step before it):\n"
                 f"    {verdict.state or '(not shown)'}")
    lines.append("  docs/trace-validation.md explains how to read this.")
    return 1, "\n".join(lines)

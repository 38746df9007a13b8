"""`kref trace check FILE...`: validate a trace against spec/Replication.tla or spec/KRaft.tla with TLC.

    kref trace check broker1.ndjson broker2.ndjson broker3.ndjson [--topic t --partition 0]
    kref trace check node-1.ndjson node-2.ndjson node-3.ndjson [--spec kraft]

The spec is picked by the events or by --spec. By default every spec the
files hold events for is checked (specs_held): a cluster's files, which
hold the controller quorum's events and user partitions' events, are
checked against spec/KRaft.tla and against spec/Replication.tla for every
user partition (or the one --topic/--partition names), each with its own
verdict.

Exit status: 0 when the trace is a behaviour of the spec (of every spec
checked); 1 when it is not (of any: the first event no action can take is
named, with the spec state before it); 2 when it cannot be checked (unreadable, several partitions and none
chosen, faults the spec does not model, too long, TLC gave no verdict).
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="trace_command", required=True)
    c = sub.add_parser("check", help="check NDJSON trace file(s) (one per node) against spec/Replication.tla "
                                     "or spec/KRaft.tla")
    c.add_argument("files", nargs="+", metavar="FILE")
    c.add_argument("--topic", help="the partition's topic (needed when the trace holds several)")
    c.add_argument("--partition", type=int, help="the partition (with --topic)")
    c.add_argument("--min-insync-replicas", type=int, default=1,
                   help="the topic's min.insync.replicas (default 1: the spec then never holds the HW back)")
    c.add_argument("--timeout", type=float, default=600.0, help="seconds TLC may take (default 600)")
    c.add_argument("--spec", choices=("auto", "replication", "kraft"), default="auto",
                   help="the spec to check against (default: picked by the events)")
    c.add_argument("--voters", type=lambda s: [int(x) for x in s.split(",") if x],
                   help="the controller quorum's voter ids, e.g. 1,2,3 (--spec kraft; default: as the trace shows them)")


def run(args: argparse.Namespace) -> int:
    code, text = validate(args.files, topic=args.topic, partition=args.partition,
                          min_insync_replicas=args.min_insync_replicas, timeout_s=args.timeout,
                          spec=args.spec, voters=args.voters)
    print(text, file=sys.stderr if code == 2 else sys.stdout)
    return code


def validate(files, *, topic: str | None = None, partition: int | None = None, min_insync_replicas: int = 1,
             timeout_s: float = 600.0, spec: str = "auto", voters=None) -> tuple[int, str]:
    """Check trace files (one per node) against spec/Replication.tla or spec/KRaft.tla: (exit status, report).

    The command line's whole decision, also called by the tests that run
    real broker processes and validate their traces."""
    # Imported here: building the command-line parser must stay cheap (every broker builds it).
    from trace_check import kraft
    from trace_check.replication import TraceError, load_events, normalise
    from trace_check.tlc import TlcError, check_and_explain

    if spec == "auto":
        try:
            events = load_events(files)
        except TraceError as exc:
            return 2, f"kref trace check: {exc}"
        held = specs_held(events)
        if len(held) > 1:
            return _validate_every_spec(files, events, topic=topic, partition=partition,
                                        min_insync_replicas=min_insync_replicas, timeout_s=timeout_s, voters=voters)
        spec = "kraft" if held == ["kraft"] else "replication"
    if spec == "kraft":
        return _validate_kraft(files, voters=voters, timeout_s=timeout_s)

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
    return _report(steps, verdict, "spec/Replication.tla", where, f"{stopped}; not in the spec, left out: {skipped}")

def _report(steps, verdict, spec: str, where: str, note: str) -> tuple[int, str]:
    """The verdict as `kref trace check` prints it: OK, or REJECTED with the first event no action can take."""
    if verdict.accepted:
        return 0, (f"OK: {len(steps.steps)} steps of {where} are a behaviour of {spec} "
                   f"({verdict.distinct_states} spec states explored, {verdict.seconds:.1f} s){note}")
    i = verdict.reached - 1
    lines = [f"REJECTED: no behaviour of {spec} takes step {verdict.reached} of {len(steps.steps)} "
             f"({where}; {verdict.seconds:.1f} s)",
             f"  event:  {steps.origin[i]}",
             f"  step:   {steps.steps[i]}"]
    if i > 0:
        lines.append(f"  after:  {steps.steps[i - 1]} ({steps.origin[i - 1]})")
    lines.append(f"  spec state before it (one behaviour that took every step before it):\n"
                 f"    {verdict.state or '(not shown)'}")
    lines.append("  docs/trace-validation.md explains how to read this.")
    return 1, "\n".join(lines)


def _validate_kraft(files, *, voters, timeout_s: float) -> tuple[int, str]:
    """The quorum's events against spec/KRaft.tla (trace_check.kraft, spec/TraceKRaft.tla)."""
    from trace_check import kraft
    from trace_check.replication import TraceError
    from trace_check.tlc import TlcError

    try:
        steps = kraft.normalise(kraft.load(files), voters)
        verdict = kraft.check_and_explain(steps, timeout_s=timeout_s)
    except (TraceError, TlcError) as exc:
        return 2, f"kref trace check: {exc}"
    skipped = ", ".join(f"{k} x{n}" for k, n in sorted(steps.skipped.items())) or "none"
    stopped = f"; checked up to the {steps.stopped} (not in the spec)" if steps.stopped else ""
    note = (f"{stopped}; {steps.moved} late deliveries taken before their timestamp; not in the spec, left out: "
            f"{skipped}")
    return _report(steps, verdict, "spec/KRaft.tla", steps.where(), note)


def specs_held(events) -> list[str]:
    """The specs the events hold steps for: "kraft" (the controller quorum's events) and
    "replication" (a user partition's), in that order."""
    from trace_check import kraft

    held = ["kraft"] if kraft.has_quorum_events(events) else []
    return held + (["replication"] if _partitions_held(events) or not held else [])


def _partitions_held(events) -> set[tuple[str, int]]:
    """The user partitions the events hold replication steps for (trace_check.replication's own test)."""
    from trace_check.replication import _partitions

    return _partitions(events)


def _validate_every_spec(files, events, *, topic, partition, min_insync_replicas: int, timeout_s: float,
                         voters) -> tuple[int, str]:
    """Auto mode on files that hold events for both specs (a cluster's): the quorum against
    spec/KRaft.tla and each user partition against spec/Replication.tla (one TLC run for all the
    partitions that share constants), every verdict reported. Exit 1 if any rejects, else 2 if any
    could not be checked, else 0."""
    from trace_check.replication import TraceError, normalise
    from trace_check.tlc import TlcError, check_and_explain_batch

    files = list(files)
    results = [("spec/KRaft.tla", *_validate_kraft(files, voters=voters, timeout_s=timeout_s))]
    chosen = sorted(tp for tp in _partitions_held(events)
                    if topic is None or (tp[0] == topic and (partition is None or tp[1] == partition)))
    if not chosen:
        results.append(("spec/Replication.tla", 2, "kref trace check: no replication events of a user partition"
                        + (f" for {topic}" if topic else "")))
    batch = []
    for t, p in chosen:
        try:
            steps = normalise(events, t, p)
            if min_insync_replicas < 1 or min_insync_replicas > max(1, len(steps.replicas)):
                raise TraceError(f"--min-insync-replicas must be within 1..{len(steps.replicas)}")
            batch.append(steps)
        except TraceError as exc:
            results.append((f"spec/Replication.tla, {t}-{p}", 2, f"kref trace check: {exc}"))
    try:
        verdicts = check_and_explain_batch(batch, min_insync_replicas=min_insync_replicas, timeout_s=timeout_s)
    except TlcError as exc:
        verdicts = None
        results += [(f"spec/Replication.tla, {s.topic}-{s.partition}", 2, f"kref trace check: {exc}") for s in batch]
    for steps, verdict in zip(batch, verdicts or ()):
        skipped = ", ".join(f"{k} x{n}" for k, n in sorted(steps.skipped.items())) or "none"
        stopped = f"; checked up to the {steps.stopped} (not in the spec)" if steps.stopped else ""
        where = f"{steps.topic}-{steps.partition}, replicas {steps.replicas}"
        code, text = _report(steps, verdict, "spec/Replication.tla", where,
                             f"{stopped}; not in the spec, left out: {skipped}")
        results.append((f"spec/Replication.tla, {steps.topic}-{steps.partition}", code, text))
    codes = [code for _, code, _ in results]
    code = 1 if 1 in codes else 2 if 2 in codes else 0
    counts = f"{codes.count(0)} accepted, {codes.count(1)} rejected, {codes.count(2)} not checked"
    lines = [f"{len(results)} checks of {len(list(files))} file(s) (every spec they hold events for): {counts}"]
    lines += [f"[{name}] {text}" for name, _, text in results]
    return code, "\n".join(lines)

"""Trace validation of a fault run (issue 15): every partition of the topic against spec/Replication.tla.

Theory of operation
-------------------
With `trace=True` every node of a fault run writes node-N/trace.ndjson (spec
action names, one run header per process start). The nemesis itself writes
nothing: a proxy partition or a SIGSTOP is not a step of any node, and the
replication spec has no action for it. What the spec sees is what the nodes
did about it: fetches that failed or whose answers were lost, an isr shrunk,
an AlterPartition that got no decision (NOT_CONTROLLER while the quorum
moved, a timeout behind a cut link: the spec's AlterPartitionLost), fencing
and elections, and for a kill -9 the end of a run of a node's file (a Crash
and a Restart inferred by trace_check). So the merged node traces of one
partition are checked like any real cluster trace (`kref trace check`), and
all partitions of the run in one TLC run (check_and_explain_batch: one JVM,
one parse of the specs). The check stops at the first ControlledShutdown
(the end of the run's SIGTERM), which neither spec models.

    python -m tests.faults.traces DIR [--partitions 3] [--min-insync-replicas 2]

checks a kept run directory (`python -m tests.faults.run --trace --dir D`
keeps D/run-SEED); exit 0 when every partition is accepted, 1 when one is
rejected, 2 when one cannot be checked.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from trace_check.cli import _report
from trace_check.replication import TraceError, load_events, normalise
from trace_check.tlc import TlcError, check_and_explain_batch

# A check of one fault run must end: a run's traces are a few hundred steps a partition, checked in
# seconds; more than this is a bug to report, not to wait for.
TIMEOUT_S = 300.0


@dataclass
class PartitionVerdict:
    partition: int
    code: int  # as `kref trace check`: 0 accepted, 1 rejected, 2 not checkable
    text: str
    steps: int = 0


def trace_files(base_dir: Path) -> list[Path]:
    return sorted(p for p in Path(base_dir).glob("node-*/trace.ndjson"))


def validate_run(base_dir: Path, topic: str, partitions: int, min_insync_replicas: int,
                 timeout_s: float = TIMEOUT_S) -> tuple[list[PartitionVerdict], float]:
    """Each partition's verdict, and the CPU seconds the check took (this process and TLC)."""
    files = trace_files(base_dir)
    cpu0 = _cpu_s()
    if not files:
        return [PartitionVerdict(p, 2, f"no node traces under {base_dir}") for p in range(partitions)], 0.0
    try:
        events = load_events(files)
    except TraceError as exc:
        return [PartitionVerdict(p, 2, f"kref trace check: {exc}") for p in range(partitions)], 0.0
    verdicts: list[PartitionVerdict | None] = [None] * partitions
    batch, which = [], []
    for p in range(partitions):
        try:
            batch.append(normalise(events, topic, p))
            which.append(p)
        except TraceError as exc:
            verdicts[p] = PartitionVerdict(p, 2, f"kref trace check: {exc}")
    if batch:
        try:
            results = check_and_explain_batch(batch, min_insync_replicas=min_insync_replicas, timeout_s=timeout_s)
        except TlcError as exc:
            results = None
            for p in which:
                verdicts[p] = PartitionVerdict(p, 2, f"kref trace check: {exc}")
        for p, steps, v in zip(which, batch, results or ()):
            where = f"{steps.topic}-{steps.partition}, replicas {steps.replicas}"
            stopped = f"; checked up to the {steps.stopped} (not in the spec)" if steps.stopped else ""
            left = ", ".join(f"{k} x{n}" for k, n in sorted(steps.skipped.items())) or "none"
            code, text = _report(steps, v, "spec/Replication.tla", where, f"{stopped}; left out: {left}")
            verdicts[p] = PartitionVerdict(p, code, text, len(steps.steps))
    return [v for v in verdicts if v is not None], _cpu_s() - cpu0


def _cpu_s() -> float:
    """CPU seconds of this process and its waited-for children (TLC's JVMs)."""
    t = __import__("os").times()
    return t.user + t.system + t.children_user + t.children_system


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dir", help="a kept run directory (holding node-N/trace.ndjson)")
    parser.add_argument("--topic", default="jepsen")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--min-insync-replicas", type=int, default=2)
    args = parser.parse_args(argv)
    started = time.monotonic()
    verdicts, cpu = validate_run(Path(args.dir), args.topic, args.partitions, args.min_insync_replicas)
    for v in verdicts:
        print(v.text)
    print(f"{sum(v.code == 0 for v in verdicts)} of {len(verdicts)} partitions accepted "
          f"({sum(v.steps for v in verdicts)} steps; {cpu:.1f} CPU s, {time.monotonic() - started:.1f} s wall)")
    return max((v.code for v in verdicts), default=2)


if __name__ == "__main__":
    sys.exit(main())

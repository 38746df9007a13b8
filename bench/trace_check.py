"""Trace validation throughput: traces of about 100 steps per second.

Theory of operation. Simulator seeds (replication scenario) give traces;
each seed's events with the network-fault events left out, cut to a prefix
of about `--steps` spec steps, is one trace (whole seeds hold faults the
replication spec does not model, see docs/trace-validation.md). The same
traces are checked twice: one TLC run per trace (trace_check.tlc.check, a
JVM start each) and all in one TLC run (check_many, -continue). Prints
both rates and their ratio. Not a timed test: a figure for the note.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# This file's name is the package's: keep bench/ off the import path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from trace_check.replication import load_events, normalise
from trace_check.tlc import check, check_many

FAULTS = {"MessageDropped", "MessageDuplicated", "Partition", "Heal", "Pause", "Resume"}


def traces(seeds: int, steps: int, tmp: Path):
    out = []
    for seed in range(1, seeds + 1):
        f = tmp / f"seed{seed}.ndjson"
        subprocess.run([sys.executable, "-m", "kref.cli", "sim", "--seed", str(seed), "--scenario", "replication",
                        "--trace-file", str(f)], check=True, capture_output=True, timeout=300)
        events = [json.loads(x) for x in f.read_text().splitlines()]
        events = [e for e in events if e["type"] not in FAULTS]
        n = steps
        while True:  # grow the prefix until it normalises to about `steps` steps
            g = tmp / f"seed{seed}.prefix.ndjson"
            g.write_text("".join(json.dumps(e) + "\n" for e in events[:n]))
            s = normalise(load_events([g]))
            if len(s.steps) >= steps or n >= len(events):
                break
            n += 10
        out.append(s)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--copies", type=int, default=4, help="each trace checked this many times in the batch")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = traces(args.seeds, args.steps, Path(tmp))
    batch = base * args.copies
    mean = sum(len(s.steps) for s in batch) / len(batch)
    t0 = time.monotonic()
    single = [check(s, timeout_s=300).accepted for s in base]
    t1 = time.monotonic()
    many = check_many(batch, timeout_s=600)
    t2 = time.monotonic()
    one_rate = len(base) / (t1 - t0)
    batch_rate = len(batch) / (t2 - t1)
    print(f"traces: {len(base)} distinct (mean {mean:.0f} steps), accepted one-by-one {sum(single)}/{len(base)}, "
          f"in the batch {sum(many)}/{len(batch)}")
    print(f"one JVM per trace: {one_rate:.2f} traces/s; one JVM for {len(batch)}: {batch_rate:.2f} traces/s; "
          f"ratio {batch_rate / one_rate:.1f}x")
    return 0 if many == single * args.copies else 1


if __name__ == "__main__":
    sys.exit(main())

"""Validate simulator seeds' traces with TLC, many seeds per TLC run.

Theory of operation. A campaign (`kref sim --seeds A..B --validate`, local
process pool or Spark) and CI check that what the simulated cores did is a
behaviour of spec/Replication.tla. The campaign's own runs inject network
faults the spec does not model, so each seed is run once more in the
scenario whose faults the spec does model (TRACED_SCENARIO: crashes and
restarts only, a network that neither loses nor duplicates), with its trace
on; the traces of a chunk of seeds are normalised (replication.normalise)
and checked together by trace_check.tlc.check_and_explain_batch: one JVM and
one parse of the real specs for the whole chunk instead of one per seed
(docs/trace-validation.md, Throughput). A rejected seed's row names the
first step no behaviour takes, its trace line and the line that reproduces
the trace; the trace file itself is kept when the caller gives a directory.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kref import mutations
from kref.sim import TRACED_SCENARIO
from trace_check.replication import TraceError, load_events, normalise

# The traced scenario's min.insync.replicas (kref/sim/replication.py Settings): the spec needs it to
# decide whether the high watermark may advance.
MIN_INSYNC_REPLICAS = 2
TRACE_FIELDS = ("trace_steps", "trace_verdict", "trace_detail")


def repro(seed: int, mutation: str | None) -> str:
    m = f" --mutation {mutation}" if mutation else ""
    return (f"kref sim --seed {seed} --scenario {TRACED_SCENARIO}{m} --trace-file seed{seed}.ndjson && "
            f"kref trace check --min-insync-replicas {MIN_INSYNC_REPLICAS} seed{seed}.ndjson")


def traced_run(seed: int, mutation: str | None = None) -> tuple[list[str], str]:
    """The seed's trace in TRACED_SCENARIO: (lines, "" or why the run itself failed)."""
    from kref.sim.runner import run_seed

    row, lines = run_seed(seed, mutation, (TRACED_SCENARIO,), trace=True)
    failed = "" if row["verdict"] == "ok" else f"{row['invariant']}: {row['violation']}"
    return lines, failed


def validate_seeds(seeds, mutation: str | None = None, *, keep_dir: str | os.PathLike[str] | None = None,
                   timeout_s: float = 600.0) -> list[dict]:
    """One row per seed: seed, trace_steps, trace_verdict (accepted/rejected/refused/error), trace_detail.

    "refused": the trace cannot be checked (trace_check.replication.TraceError);
    "error": the traced run broke an invariant first (the campaign row says
    which) or TLC gave no verdict for the chunk. Rejected traces' files are
    kept in keep_dir when given."""
    from trace_check.tlc import TlcError, check_and_explain_batch

    seeds = list(seeds)
    rows = {s: {"seed": s, "trace_steps": 0, "trace_verdict": "error", "trace_detail": ""} for s in seeds}
    with tempfile.TemporaryDirectory(prefix="kref-seeds-") as tmp:
        where = Path(tmp)
        batch, owners = [], []
        try:
            for seed in seeds:
                lines, failed = traced_run(seed, mutation)
                path = where / f"seed{seed}.ndjson"
                path.write_text("".join(line + "\n" for line in lines))
                if failed:
                    rows[seed]["trace_detail"] = f"the traced run failed first: {failed}"
                    continue
                try:
                    steps = normalise(load_events([path]))
                except TraceError as exc:
                    rows[seed].update(trace_verdict="refused", trace_detail=str(exc))
                    continue
                rows[seed]["trace_steps"] = len(steps.steps)
                batch.append(steps)
                owners.append(seed)
        finally:
            mutations.activate([])
        try:
            verdicts = check_and_explain_batch(batch, min_insync_replicas=MIN_INSYNC_REPLICAS, timeout_s=timeout_s)
        except TlcError as exc:
            for seed in owners:
                rows[seed]["trace_detail"] = f"TLC gave no verdict: {str(exc).splitlines()[0]}"
            verdicts = []
        for seed, steps, verdict in zip(owners, batch, verdicts):
            if verdict.accepted:
                rows[seed]["trace_verdict"] = "accepted"
                continue
            i = verdict.reached - 1
            rows[seed].update(trace_verdict="rejected", trace_detail=(
                f"step {verdict.reached} of {len(steps.steps)}: {steps.steps[i]} at "
                f"{Path(steps.origin[i]).name}; state before: {verdict.state or '(not shown)'}; "
                f"reproduce: {repro(seed, mutation)}"))
            if keep_dir is not None:
                os.makedirs(keep_dir, exist_ok=True)
                (Path(keep_dir) / f"seed{seed}.ndjson").write_bytes((where / f"seed{seed}.ndjson").read_bytes())
    return [rows[s] for s in seeds]

"""`make mutation`: how many catalogued bugs the simulator catches.

Theory of operation
-------------------
For every mutation of kref/mutations.py's catalogue, run simulation seeds
1..N of the scenario that exercises the mutated core (quorum mutations: the
KRaft quorum scenario; replica, follower and controller mutations: the
replication scenario) with that one bug switched on, stopping at the first
violation, within a CPU budget per mutation. Mutations run in parallel on a
small process pool. The table says what caught each one (the invariant, the
seed, the event time) or "missed", then `caught C of N mutations`.

Trace validation is the second detector, run for every mutation whatever
the first found: the traces of seeds 1..T (`--trace-seeds`) of the scenario
whose traces the specs check (replica, follower and controller mutations:
`replication-crashes` against spec/Replication.tla; quorum mutations: the
quorum scenario against spec/KRaft.tla), each whole or up to the violation
that stopped it, are checked by TLC, all mutations' traces of one spec in
one batch (trace_check.tlc.check_and_explain_batch: one JVM for all). The
table's "trace" column names the first rejected step (event type, seed,
step) or says that every trace was accepted. The same seeds without a
mutation are checked too (the baseline): a rejection there is a spec or
converter gap, not a catch, and the table says so.

A mutation both miss goes to the third detector, the cores' interaction
scripts (tests/replication, tests/controller: scripted schedules written
for exactly these rules), run with the mutation switched on; the table
names the first failing script. The score is printed per detector and for
all; the final line is `caught C of N mutations`. A mutation missed by all
is a finding: the note says what would catch it. Exit status 0 (the table
is the result).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from kref import mutations
from kref.sim.runner import run_seed

_NO_REASSIGNMENT = ("a simulator scenario with AlterPartitionReassignments (and its traces checked: "
                    "spec/Replication.tla's IsrWithinReplicas and the leader-epoch rules of CompleteReassignment)")
_NO_SHUTDOWN = ("a simulator scenario whose brokers shut down under control (want_shut_down), its traces "
                "checked (ControlledShutdown)")

# What would catch a mutation these seeds miss (kept next to the catalogue's names).
WOULD_CATCH = {
    "skip_fetch_epoch_check": "a traced scenario with a zombie leader (preferred elections or pauses): only then does a "
                              "fetch of another leader epoch reach a leader, where LeaderHandleFetch needs the epochs equal",
    "alter_partition_stale_epoch": "a traced seed with a fence and an ISR change racing (the logged answer is then one "
                                   "the spec's CommitAlterPartition refuses)",
    "commit_earlier_epoch": "a directed Raft figure-8 schedule (5 voters, two crashes), or TLC on KRaft.tla",
    "vote_twice": "more quorum seeds with split votes (trace: GrantVote twice in one epoch)",
    "hw_committed_isr_only": "a scenario where AlterPartition shrinks are refused while the HW advances",
    "acks_all_ignores_min_isr": "LeaderAppend logging the produce's acks: the trace matcher then checks min.insync.replicas "
                                "at the append (today it takes acks=1, which has no such check)",
    "expand_isr_early": "more leader crashes right after an ISR expand; trace validation of ExpandIsr",
    "truncate_ignores_local_epoch": "a zombie leader appending in an epoch the next leader never saw, then more seeds",
    # Session 13: no simulator scenario moves partitions or shuts brokers down under control (its brokers
    # never send want_shut_down, its clients never AlterPartitionReassignments), so neither the invariants
    # nor the traced seeds reach these rules; the controller scripts (reassign.txt, elect.txt) do.
    "reassign_no_epoch_bump": _NO_REASSIGNMENT,
    "reassign_complete_early": _NO_REASSIGNMENT,
    "reassign_elect_removed": _NO_REASSIGNMENT,
    "shutdown_keeps_isr": _NO_SHUTDOWN,
    "shutdown_leader_outside_isr": _NO_SHUTDOWN,
    "shutdown_empties_isr": _NO_SHUTDOWN,
}


def _spec_of(name: str) -> str:
    """The spec a mutation's traces are checked against."""
    return "kraft" if mutations.CATALOGUE[name][0] == "quorum" else "replication"


def _traced_steps(job: tuple[str | None, int, str]) -> tuple[str | None, int, str, object]:
    """(mutation, seed, spec, Steps or why not): one seed's trace (mutation None: the baseline), normalised.

    The trace is taken whole, or up to the violation that stopped the run (a
    prefix of a behaviour is what TLC checks then)."""
    import tempfile
    from pathlib import Path

    from kref.sim import TRACED_SCENARIO
    from trace_check import kraft
    from trace_check.replication import TraceError, load_events, normalise

    name, seed, spec = job
    _, lines = run_seed(seed, name, ("quorum",) if spec == "kraft" else (TRACED_SCENARIO,), trace=True)
    with tempfile.TemporaryDirectory(prefix="kref-mutation-") as tmp:
        path = Path(tmp) / "trace.ndjson"
        path.write_text("".join(line + "\n" for line in lines))
        try:
            steps = kraft.normalise(kraft.load([path])) if spec == "kraft" else normalise(load_events([path]))
        except TraceError as exc:
            return name, seed, spec, f"refused: {exc}"
    return name, seed, spec, steps


def trace_catches(names: list[str], seeds: int, workers: int) -> tuple[dict[str, dict], dict[str, list[str]]]:
    """Per mutation, what trace validation of seeds 1..`seeds` found; and the baseline's rejections per spec.

    Every trace of one spec is checked in one batch (one TLC run, or a few
    when the batch passes trace_check.tlc.BATCH_STEPS)."""
    from trace_check import kraft, seeds as seed_check
    from trace_check.tlc import TlcError, check_and_explain_batch

    specs = sorted({_spec_of(n) for n in names})
    jobs = [(n, s, _spec_of(n)) for n in names for s in range(1, seeds + 1)]
    jobs += [(None, s, spec) for spec in specs for s in range(1, seeds + 1)]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        done = list(pool.map(_traced_steps, jobs))
    found: dict[str, dict] = {n: {"trace": "accepted", "trace_seeds": 0} for n in names}
    baseline: dict[str, list[str]] = {spec: [] for spec in specs}
    checkers = {"replication": (check_and_explain_batch, {"min_insync_replicas": seed_check.MIN_INSYNC_REPLICAS}),
                "kraft": (kraft.check_and_explain_batch, {})}
    for spec in specs:
        mine = []
        for n, s, sp, st in done:
            if sp != spec:
                continue
            if isinstance(st, str):
                _note(found, baseline, n, spec, f"seed {s} {st}"[:120], refused=True)
            else:
                mine.append((n, s, st))
        if not mine:
            continue
        check, kwargs = checkers[spec]
        try:
            verdicts = check([st for _, _, st in mine], timeout_s=900.0, **kwargs)
        except TlcError as exc:
            for n, _, _ in mine:
                _note(found, baseline, n, spec, f"TLC gave no verdict: {str(exc).splitlines()[0]}", refused=True)
            continue
        for (n, s, st), v in zip(mine, verdicts):
            if n is not None:
                found[n]["trace_seeds"] += 1
            if not v.accepted:
                step = st.steps[v.reached - 1]
                who = step.get("replica", step.get("node", step.get("broker", "?")))
                _note(found, baseline, n, spec,
                      f"{step['type']} of {who} (seed {s}, step {v.reached} of {len(st.steps)})")
    return found, baseline


def _note(found, baseline, name, spec, what: str, refused: bool = False) -> None:
    """Record the first rejection of a mutation's traces (or of the baseline's: a gap, not a catch)."""
    if name is None:
        baseline[spec].append(what)
    elif refused:
        found[name].setdefault("trace_refused", what)
    elif found[name]["trace"] == "accepted":
        found[name]["trace"] = what


def _scenario(name: str) -> tuple[str, ...]:
    return ("quorum",) if mutations.CATALOGUE[name][0] == "quorum" else ("replication",)


def hunt(args: tuple[str, int, float]) -> dict:
    name, seeds, budget_s = args
    started = time.process_time()
    tried = 0
    for seed in range(1, seeds + 1):
        tried += 1
        row, _ = run_seed(seed, name, _scenario(name))
        if row["verdict"] != "ok":
            return {"mutation": name, "caught": True, "by": f"{row['invariant']} (seed {seed})",
                    "detail": row["violation"], "seeds": tried, "seconds": time.process_time() - started,
                    "repro": row["repro"], "error": row["verdict"] == "error"}
        if time.process_time() - started > budget_s:
            break
    return {"mutation": name, "caught": False, "by": "-", "detail": WOULD_CATCH.get(name, ""), "seeds": tried,
            "seconds": time.process_time() - started, "repro": "", "error": False}


INTERACTION_TESTS = (
    "tests/replication/test_replica_scripts.py", "tests/replication/test_cluster_scripts.py",
    "tests/replication/test_follower.py", "tests/replication/test_replica_decisions.py",
    "tests/controller/test_controller_scripts.py", "tests/controller/test_quorum_scripts.py",
)


def interaction_tests(name: str, timeout_s: float = 240.0) -> str | None:
    """The first interaction test that fails with `name` switched on, or None."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "KREF_MUTATIONS": name}
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                               *INTERACTION_TESTS], cwd=root, env=env, capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
    failed = re.search(r"^(?:FAILED|ERROR) (\S+)", done.stdout, re.M)
    return failed.group(1).rsplit("/", 1)[-1] if failed else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kref.sim.mutation", description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=60, help="seeds per mutation (stop at the first catch)")
    p.add_argument("--budget", type=float, default=15.0, help="CPU seconds per mutation")
    p.add_argument("--trace-seeds", type=int, default=4,
                   help="seeds whose traces TLC checks per mutation (and without one: the baseline); 0: none")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--only", action="append", help="run only these mutations")
    args = p.parse_args(argv)
    names = args.only or list(mutations.CATALOGUE)
    jobs = [(n, args.seeds, args.budget) for n in names]
    cpu0 = _cpu_s()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        results = list(pool.map(hunt, jobs))
    traced, baseline = trace_catches(names, args.trace_seeds, args.workers) if args.trace_seeds else ({}, {})
    for r in results:
        r.update(traced.get(r["mutation"], {"trace": "not run", "trace_seeds": 0}))
        gap = baseline.get(_spec_of(r["mutation"]))
        r["trace_caught"] = r["trace"] not in ("accepted", "not run") and not gap
    missed = [r for r in results if not r["caught"] and not r["trace_caught"]]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for r, test in zip(missed, pool.map(interaction_tests, [r["mutation"] for r in missed])):
            r["test"] = test
    print(f"{'mutation':30} {'core':10} {'result':7} {'simulator invariant':40} {'trace validation':58} "
          f"{'seeds':>5} {'cpu s':>6}")
    for r in results:
        core = mutations.CATALOGUE[r["mutation"]][0]
        caught = r["caught"] or r["trace_caught"] or r.get("test")
        sim = r["by"] if r["caught"] else ("script " + r["test"] if r.get("test") else "-")
        print(f"{r['mutation']:30} {core:10} {'caught' if caught else 'MISSED':7} {sim[:40]:40} "
              f"{r['trace'][:58]:58} {r['seeds']:>5} {r['seconds']:>6.1f}")
        if "trace_refused" in r:
            print(f"{'':30} trace validation could not check every trace: {r['trace_refused']}")
        if not (r["caught"] or r["trace_caught"]) and r["detail"]:
            print(f"{'':30} seeds and traces missed it ({r['seeds']} seeds, {r['trace_seeds']} traces); "
                  f"would catch it there: {r['detail']}")
    for spec, gaps in sorted(baseline.items()):
        print(f"baseline ({spec}, no mutation, seeds 1..{args.trace_seeds}): "
              + ("every trace accepted" if not gaps else f"{len(gaps)} rejected: {gaps[0]} (a spec or converter "
                                                          "gap: rejections of this spec's mutations not counted)"))
    by_sim = sum(r["caught"] for r in results)
    by_trace = sum(r["trace_caught"] for r in results)
    caught = sum(bool(r["caught"] or r["trace_caught"] or r.get("test")) for r in results)
    print(f"simulator invariants: caught {by_sim} of {len(results)}; trace validation: caught {by_trace} of "
          f"{len(results)} ({args.trace_seeds} traces each); both missed, caught by a script: "
          f"{sum(bool(r.get('test')) for r in results)}; {_cpu_s() - cpu0:.0f} CPU s")
    print(f"caught {caught} of {len(results)} mutations")
    return 0


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


if __name__ == "__main__":
    sys.exit(main())

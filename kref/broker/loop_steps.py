"""How long one step of the event loop runs: a bound (StepBudget) and a measure (LoopStepMonitor).

Theory of operation
-------------------
Everything a node does runs on one trio loop. A task runs from one
checkpoint to the next without giving the loop back, so the longest such
step bounds how late anything else can be served: a Vote or a quorum Fetch
that arrives during a 900 ms replica-Fetch step waits 900 ms, and the
quorum's election timeout is 1 s (Kafka runs the quorum on its own thread,
which is why it never waits behind the data path there).

`StepBudget` is the bound. Work over many partitions (a replica Fetch's
reads on the leader, a follower's FollowerFetch steps and its answer's
deliveries) calls `await budget.spend()` after each partition; once the
step has run `STEP_BUDGET_MS` it gives the loop back (a trio checkpoint),
so every other runnable task, the quorum's among them, runs before the
next slice. Kafka needs none of this (the quorum has its own thread, and
each fetcher its own); here one step of O(partitions) work was what let a
10,000-partition cluster starve its quorum (docs/kraft.md). A slice is the
partitions one budget covers; between slices other tasks may change a
partition, so the callers look each partition up again after a
checkpoint rather than keeping one across it.

`LoopStepMonitor` times every task step (trio's before_task_step /
after_task_step hooks) and logs, every `report_s`, how many steps ran, the
longest and the task it belonged to, and how many exceeded 50, 100, 500 and
1000 ms; the whole run's longest step is logged at the end. It decides
nothing and changes no behaviour: a node installs it only when the
environment says KREF_LOOP_STEPS=<report seconds> (bench/kraft_failover.py
sets it and reads the lines back). The cost is two perf_counter calls per
step.
"""

from __future__ import annotations

import logging
import os
import time

import trio

log = logging.getLogger("kref.loop_steps")

THRESHOLDS_MS = (50, 100, 500, 1000)
# How long a slice of per-partition work may hold the loop: small next to
# the quorum's timeouts (election 1 s), large next to a checkpoint's cost
# (tens of microseconds), so slicing costs well under 1%.
STEP_BUDGET_MS = 5.0
ENV = "KREF_LOOP_STEPS"


class StepBudget:
    """Gives the event loop back once a step has run `budget_ms` (wall clock, as the quorum's timers see it)."""

    __slots__ = ("budget_s", "since")

    def __init__(self, budget_ms: float = STEP_BUDGET_MS) -> None:
        self.budget_s = budget_ms / 1000
        self.since = time.perf_counter()

    async def spend(self) -> bool:
        """After one unit of work: a checkpoint if the budget is spent (True), else nothing."""
        if time.perf_counter() - self.since < self.budget_s:
            return False
        await trio.lowlevel.checkpoint()
        self.since = time.perf_counter()
        return True


class LoopStepMonitor(trio.abc.Instrument):
    def __init__(self, report_s: float = 10.0) -> None:
        self.report_s = max(0.5, report_s)
        self._started: float | None = None  # None: installed in mid-step, that step is not timed
        self._started_cpu = 0.0
        self._window_start = time.perf_counter()
        self._reset_window()
        self.run_longest_ms = 0.0
        self.run_longest_task = ""

    def _reset_window(self) -> None:
        self.steps = 0
        self.longest_ms = 0.0
        self.longest_task = ""
        self.longest_cpu_ms = 0.0
        self.over = [0] * len(THRESHOLDS_MS)

    def before_task_step(self, task) -> None:
        self._started = time.perf_counter()
        self._started_cpu = time.thread_time()

    def after_task_step(self, task) -> None:
        if self._started is None:
            return
        now = time.perf_counter()
        step_ms = (now - self._started) * 1000
        self.steps += 1
        if step_ms > self.longest_ms:
            self.longest_ms = step_ms
            self.longest_task = task.name
            # CPU next to wall: a long step with little CPU waited in a system call
            # (an fsync on a busy disk) or for a core, not for Python work.
            self.longest_cpu_ms = (time.thread_time() - self._started_cpu) * 1000
            if step_ms > self.run_longest_ms:
                self.run_longest_ms = step_ms
                self.run_longest_task = task.name
        for i, threshold in enumerate(THRESHOLDS_MS):
            if step_ms > threshold:
                self.over[i] += 1
        if now - self._window_start >= self.report_s:
            self.report(now - self._window_start)
            self._window_start = now
            self._reset_window()

    def report(self, window_s: float) -> None:
        over = ", ".join(f">{t} ms: {n}" for t, n in zip(THRESHOLDS_MS, self.over))
        log.info("loop steps in %.1f s: %d, longest %.1f ms (%s; CPU %.1f ms); %s", window_s, self.steps,
                 self.longest_ms, self.longest_task, self.longest_cpu_ms, over)

    def after_run(self) -> None:
        log.info("loop steps: longest of the run %.1f ms (%s)", self.run_longest_ms, self.run_longest_task)


def install_from_env() -> LoopStepMonitor | None:
    """Add the monitor to the running trio loop when KREF_LOOP_STEPS names a report interval."""
    value = os.environ.get(ENV, "")
    if not value:
        return None
    try:
        report_s = float(value)
    except ValueError:
        log.warning("%s=%r is not a number of seconds: loop steps not measured", ENV, value)
        return None
    monitor = LoopStepMonitor(report_s)
    trio.lowlevel.add_instrument(monitor)
    return monitor

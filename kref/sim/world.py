"""The simulated world: a virtual clock, a seeded scheduler and a faulty network.

Theory of operation
-------------------
Everything random in a simulation run comes from ONE `random.Random(seed)`
owned by `World`; everything that happens is a callback in one heap ordered
by (deadline_ms, sequence number), so two runs of the same seed execute the
same callbacks in the same order and write byte-identical traces. The clock
is virtual: it jumps to the next deadline, so a run of ten simulated seconds
takes as long as its events take to compute.

The network delivers a message after a random delay (reordering follows from
independent delays), drops it with probability `drop`, delivers it twice
with probability `duplicate`, and drops everything across a cut link (a
partition). Nodes that are down or paused receive nothing: a paused node's
deliveries are dropped as a real stopped process's socket buffer would
eventually be, and its timers do not fire (the driver checks `paused`).

A violated invariant raises `Violation(name, detail)`; the runner turns it
into the one-line reproduction `kref sim --seed N [--mutation M]`.
"""

from __future__ import annotations

import heapq
import json
import random
from dataclasses import dataclass, field
from typing import Any, Callable

MAX_QUEUE = 200_000  # bound on scheduled callbacks (a runaway schedule is a bug)


class Violation(AssertionError):
    """A safety invariant (named as in the specs) failed."""

    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail


def check_log_matching(a: int, log_a: list, b: int, log_b: list, who: str = "nodes") -> None:
    """LogMatching of two logs of (epoch, ...) entries (both simulators): where they
    hold the same epoch at an offset, they hold the same prefix up to it."""
    n = min(len(log_a), len(log_b))
    k = 0
    while k < n and log_a[k] == log_b[k]:
        k += 1
    for o in range(k, n):
        if log_a[o][0] == log_b[o][0]:
            raise Violation("LogMatching", f"{who} {a} and {b} both hold epoch {log_a[o][0]} at offset {o} "
                            f"but differ at offset {k}: {log_a[k]} vs {log_b[k]}")


@dataclass
class NetworkFaults:
    drop: float = 0.0
    duplicate: float = 0.0
    min_delay_ms: int = 1
    max_delay_ms: int = 10


@dataclass
class World:
    seed: int
    trace: bool = False
    max_trace_lines: int = 500_000
    now_ms: int = 0
    events: int = 0
    faults: int = 0
    rng: random.Random = field(init=False)
    net: NetworkFaults = field(default_factory=NetworkFaults)
    cut: set = field(default_factory=set)  # frozenset({a, b}) links that drop everything
    lines: list[str] = field(default_factory=list)
    _queue: list = field(default_factory=list)
    _seq: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    # ------------------------------------------------------------ scheduling

    def at(self, deadline_ms: int, fn: Callable, *args: Any) -> None:
        if len(self._queue) >= MAX_QUEUE:
            raise Violation("BoundedQueue", f"more than {MAX_QUEUE} scheduled callbacks")
        self._seq += 1
        heapq.heappush(self._queue, (deadline_ms, self._seq, fn, args))

    def after(self, delay_ms: int, fn: Callable, *args: Any) -> None:
        self.at(self.now_ms + delay_ms, fn, *args)

    def run_until(self, end_ms: int, after_each: Callable[[], None] | None = None) -> None:
        queue = self._queue
        while queue and queue[0][0] <= end_ms:
            deadline, _, fn, args = heapq.heappop(queue)
            self.now_ms = deadline
            self.events += 1
            fn(*args)
            if after_each is not None:
                after_each()
        self.now_ms = max(self.now_ms, end_ms)

    # ------------------------------------------------------------ network

    def send(self, source: int, destination: int, deliver: Callable, *args: Any) -> None:
        """Carry a message; `deliver(*args)` runs at the destination if it arrives."""
        net = self.net
        if frozenset((source, destination)) in self.cut:
            return
        rng = self.rng
        if net.drop and rng.random() < net.drop:
            self.fault("MessageDropped", source=source, destination=destination)
            return
        self.after(rng.randint(net.min_delay_ms, net.max_delay_ms), deliver, *args)
        if net.duplicate and rng.random() < net.duplicate:
            self.fault("MessageDuplicated", source=source, destination=destination)
            self.after(rng.randint(net.min_delay_ms, net.max_delay_ms), deliver, *args)

    # ------------------------------------------------------------ trace

    def fault(self, kind: str, **fields: Any) -> None:
        self.faults += 1
        if self.trace:
            self.record({"type": kind, "time_ms": self.now_ms, **fields})

    def record(self, event: dict) -> None:
        if len(self.lines) < self.max_trace_lines:
            self.lines.append(json.dumps(event, sort_keys=True, separators=(",", ":")))

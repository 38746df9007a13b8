"""Keep the start-up heap out of the cyclic garbage collector's full collections.

Theory of operation
-------------------
CPython's cyclic collector runs a full (generation 2) collection once
enough objects have survived into the oldest generation, and a full
collection walks every tracked object of the process: the imported
modules (kio's generated message classes for 89 API keys, trio, the
broker's own), the configuration, the metadata image, the open logs. In a
kref node that is on the order of 10^5 objects, and one full collection
held the event loop for 80 ms on these machines (measured with a gc
callback in a node serving acks=all produces, its processes at real-time
priority so that the other load could not stretch it; 250-590 ms at normal
priority under load). Nothing else on the acks=all path takes more than
a millisecond, so these pauses were the p99 of bench/cluster.py's latency
phase: every request in flight while one broker of the three collects
waits for it.

Almost all of those objects are created at start-up and live as long as
the process. `freeze_startup_heap()`, called once the node serves, moves
every object the collector tracks to the permanent generation
(gc.freeze(), Python 3.7+), which it never walks again. Later collections
only walk what was allocated after start, and full collections become
short. Objects allocated afterwards are collected as before. No collection
runs first: on a loaded machine one took 0.5-1.3 s, and a node whose loop
stops that long at start misses its quorum's fetch timeouts (the process
tests' elections churned). Bound: start-up garbage that sat in reference
cycles at the freeze, and start-up objects in cycles dropped later, are
never reclaimed (reference counting still frees everything else); a
one-off, start-up-sized amount, not a growth.

This decides nothing about Kafka's semantics: it is the process's memory
policy, applied once by the node's and the single broker's entry points.

Measuring the collector (bench/cluster.py): with KREF_GC_STATS=PREFIX in
the environment, `freeze_startup_heap()` also installs a gc callback that
counts each generation's collections and their pause time (CLOCK_MONOTONIC,
which every process of the machine shares) and keeps the last
`LONG_PAUSES_KEPT` pauses of at least `LONG_PAUSE_MS` with when they ended.
It rewrites PREFIX.PID as JSON after a collection, at most every
`STATS_WRITE_INTERVAL_S` (the file lags by at most that, or until the next
collection: a serving node collects its youngest generation many times a
second). Off by default: it costs a callback per collection and a small
file write.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import time

__all__ = ["freeze_startup_heap", "GcPauseMeter", "read_gc_stats"]

log = logging.getLogger("kref.broker")


def freeze_startup_heap() -> int:
    """Exclude every object alive now from later collections (no collection first).

    Returns how many objects the permanent generation now holds.
    """
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("start-up heap frozen out of the cyclic garbage collector: %d objects", frozen)
    prefix = os.environ.get(GC_STATS_ENV)
    if prefix:
        GcPauseMeter(f"{prefix}.{os.getpid()}").install()
    return frozen


GC_STATS_ENV = "KREF_GC_STATS"
LONG_PAUSE_MS = 2.0
LONG_PAUSES_KEPT = 64
STATS_WRITE_INTERVAL_S = 0.1


class GcPauseMeter:
    """Collections and pause time per generation, written to `path` (see the module doc)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.collections = [0, 0, 0]
        self.pause_ms = [0.0, 0.0, 0.0]
        # (generation, pause ms, CLOCK_MONOTONIC s at its end), oldest first; bounded.
        self.long_pauses: list[tuple[int, float, float]] = []
        self._started = 0.0
        self._written = 0.0

    def install(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        now = time.monotonic()
        if phase == "start":
            self._started = now
            return
        generation = int(info.get("generation", 0))
        pause_ms = (now - self._started) * 1000
        self.collections[generation] += 1
        self.pause_ms[generation] += pause_ms
        if pause_ms >= LONG_PAUSE_MS:
            self.long_pauses.append((generation, round(pause_ms, 3), now))
            del self.long_pauses[:-LONG_PAUSES_KEPT]
        if now - self._written >= STATS_WRITE_INTERVAL_S:
            self._written = now
            self.write()

    def stats(self) -> dict:
        return {"collections": list(self.collections), "pause_ms": [round(v, 3) for v in self.pause_ms],
                "long_pauses": [list(p) for p in self.long_pauses], "at": time.monotonic()}

    def write(self) -> None:
        tmp = f"{self.path}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(self.stats(), f)
            os.replace(tmp, self.path)
        except OSError as exc:  # a diagnostic: never let it harm the node
            log.warning("cannot write gc stats to %s: %s", self.path, exc)
            self.uninstall()


def read_gc_stats(path: str) -> dict | None:
    """What a GcPauseMeter last wrote (None: nothing yet)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

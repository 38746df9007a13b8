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
"""

from __future__ import annotations

import gc
import logging

__all__ = ["freeze_startup_heap"]

log = logging.getLogger("kref.broker")


def freeze_startup_heap() -> int:
    """Exclude every object alive now from later collections (no collection first).

    Returns how many objects the permanent generation now holds.
    """
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("start-up heap frozen out of the cyclic garbage collector: %d objects", frozen)
    return frozen

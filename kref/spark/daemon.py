"""A PySpark daemon that imports, once, what every kref Python worker imports.

Theory of operation: with `spark.python.use.daemon` (the default on Linux)
Spark starts a daemon process that forks one Python worker per executor
task slot (reused across tasks, retired after a minute idle). pyspark's
daemon imports nothing before it forks, so each new worker imports
pyspark's worker module, pyspark.sql, confluent-kafka and kref's connector
itself: about 0.7 s of CPU per worker on a quiet machine, several seconds
under load, paid by the first query of a session and again after idle
workers are retired.

Setting `spark.python.daemon.module=kref.spark.daemon` makes the executor's
daemon import those modules once, before it forks, so that every worker
starts with them loaded (fork shares the pages). Everything else is
pyspark's own daemon (`pyspark.daemon.manager`), unchanged. The driver's
planning workers (create, plan the read, write, commit) do not read this
setting in Spark 4 (their daemons are always `pyspark.daemon`, one per
step, each forking one worker), so nothing is saved there.

Only modules that start no thread are imported here: a process that forks
must hold no other thread (a lock held by a thread that does not exist in
the child deadlocks it). pyarrow (a jemalloc background thread) and numpy
(OpenBLAS threads) start threads at import, so each worker still imports
those itself, as with pyspark's daemon. `preload()` checks this and
refuses to leave a forking process with threads.
"""

from __future__ import annotations

import importlib
import os
import threading

# Thread-free at import (checked by preload()); what a kref read or write
# task's worker would otherwise import after the fork.
PRELOAD = ("pyspark.worker", "confluent_kafka", "kref.spark.source")
# The columnar fast paths (native_source, native_sink, wire, kio's Fetch v12,
# the codecs): importing kref.spark.wire alone takes ~0.9 s
# (kio.static.primitive imports hypothesis), which a fresh worker's first read
# or write task would pay.
PRELOAD += ("kref.spark.wire", "kref.spark.native_source", "kref.spark.native_sink",
            "kio.schema.fetch.v12.request", "kio.schema.fetch.v12.response", "kref.records.compression")


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))  # every thread, C ones included
    except OSError:  # no /proc: Python's own threads only
        return threading.active_count()


def preload(modules=PRELOAD) -> None:
    """Import `modules`; raise if that left this process with more than one thread."""
    for name in modules:
        importlib.import_module(name)
        if _threads() > 1:
            raise RuntimeError(
                f"kref.spark.daemon: importing {name} started a thread; a daemon "
                "that forks workers must not hold threads"
            )


def main() -> None:
    preload()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()

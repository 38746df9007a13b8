"""What a move between log dirs (AlterReplicaLogDirs, KIP-113) costs: CPU seconds per MB copied.

Builds a partition log of `--megabytes` MB of 1 KiB-record batches in one
temporary log dir on the real disk, then moves it to a second one with the
broker's own mover (kref/broker/alter_log_dirs.py: LogDirMover, the same
copy, truncate and swap steps the broker runs, without the trio loop and
the throttle) and, as the peer in the same run, copies the same directory
with shutil.copytree (a plain file copy: no validation, no index, no
producer state). Figures are CPU seconds of this process (getrusage), which
hold on a loaded machine better than wall time; the ratio kref/copytree is
the result. The move's copy validates every batch (CRC-32C), rebuilds
indexes and producer state, and fsyncs the future log once at the swap.

    .venv/bin/python bench/log_dirs_move.py [--megabytes 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile

from kref.broker.alter_log_dirs import LogDirMover
from kref.records.batch import Record, build_batch
from kref.storage.config import LogConfig
from kref.storage.log_manager import LogManager
from kref.storage.producer_state import ProducerStateManager

MAX_MEGABYTES = 1024  # a bound on the disk the bench may use


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def build(root: str, megabytes: int) -> LogManager:
    dirs = [os.path.join(root, "a"), os.path.join(root, "b")]
    manager = LogManager(dirs, LogConfig(), 0,
                         producer_state_factory=lambda path, p, t: ProducerStateManager(path))
    manager.load_logs(0)
    log = manager.get_or_create_log("bench", 0)
    value = b"v" * 1024
    batches = megabytes * 16  # 64 records of 1 KiB per batch
    for i in range(batches):
        records = [Record(timestamp=1_000 + i, value=value) for _ in range(64)]
        log.append_as_leader(build_batch(records), 0, i)
    log.flush()
    return manager


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not 1 <= args.megabytes <= MAX_MEGABYTES:
        parser.error(f"--megabytes must be within 1..{MAX_MEGABYTES}")
    for round_ in range(max(1, args.rounds)):
        with tempfile.TemporaryDirectory(prefix="kref-move-bench-") as root:
            manager = build(root, args.megabytes)
            log = manager.get_log("bench", 0)
            size = log.size_in_bytes
            started = cpu_seconds()
            shutil.copytree(log.dir, os.path.join(root, "peer-copy"))
            peer = cpu_seconds() - started
            mover = LogDirMover(manager, now_ms=lambda: 0)
            started = cpu_seconds()
            assert mover.alter(("bench", 0), os.path.join(root, "b")) == 0
            steps = 0
            while mover.moving and steps < 100_000:
                mover.tick(("bench", 0))
                steps += 1
            moved = cpu_seconds() - started
            assert mover.swaps == 1 and manager.get_log("bench", 0).log_end_offset == log.log_end_offset
            manager.shutdown()
            mb = size / 1e6
            print(f"round {round_ + 1}: {mb:.1f} MB  move {moved:.3f} CPU-s ({mb / moved:.0f} MB/CPU-s, {steps} steps)  "
                  f"copytree {peer:.3f} CPU-s ({mb / max(peer, 1e-9):.0f} MB/CPU-s)  ratio move/copytree "
                  f"{moved / max(peer, 1e-9):.1f}x CPU", flush=True)
    print(f"load average during the run: {os.getloadavg()}")


if __name__ == "__main__":
    main()

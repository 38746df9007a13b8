"""Storage CPU benchmark: CPU seconds per message of the log's hot paths.

The machine is shared, so wall-clock rates swing; the CPU time this process
spends (time.process_time) per message is what a change to the storage code
can move. Measured in one process, on one log:

- append: Log.append_as_leader of small batches (`--records` records of
  `--value-bytes` bytes each), rolling every `--segment-mib` MiB, one flush
  at the end (as a broker with the default flush settings);
- read: Log.read of `--fetch-kib` KiB fetches from offset 0 to the end (the
  consumer's path, page-cache warm);
- recover: Log.open after an unclean stop from recovery point 0 (every batch
  CRC-checked, indexes rebuilt).

`--fs memory` runs the same on MemoryFileSystem (the port's in-memory disk).
Prints one line per phase: messages, CPU seconds, microseconds of CPU per
message. Bounded by --messages; the log directory is removed at the end.

    .venv/bin/python bench/storage_cpu.py [--messages 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402

from kref.storage.config import LogConfig  # noqa: E402
from kref.storage.log import Log  # noqa: E402


def batch(records: int, value_bytes: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 30)
    for i in range(records):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=None, value=os.urandom(value_bytes), headers=[])
    return bytes(builder.build())


def open_log(directory: str, config: LogConfig, fs, **kw) -> Log:
    if fs is None:
        return Log.open(directory, config, 0, **kw)
    return Log.open(directory, config, 0, fs=fs, **kw)


def one_round(args: argparse.Namespace, fs) -> dict[str, float]:
    root = tempfile.mkdtemp(prefix="kref-storage-cpu-")
    if fs is not None:
        fs.makedirs(root)
    directory = os.path.join(root, "bench-0")
    config = LogConfig(segment_bytes=args.segment_mib << 20)
    data = batch(args.records, args.value_bytes)
    appends = args.messages // args.records
    out: dict[str, float] = {}
    try:
        log = open_log(directory, config, fs)
        t0 = time.process_time()
        for _ in range(appends):
            log.append_as_leader(bytearray(data), 0, 1)
        log.flush()
        out["append"] = time.process_time() - t0
        end = log.log_end_offset
        t0 = time.process_time()
        offset = 0
        while offset < end:
            info = log.read(offset, args.fetch_kib << 10)
            offset = info.next_offset
        out["read"] = time.process_time() - t0
        log.close_uncleanly()
        t0 = time.process_time()
        log = open_log(directory, config, fs, recovery_point=0, had_clean_shutdown=False)
        out["recover"] = time.process_time() - t0
        log.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--records", type=int, default=10, help="records per batch")
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--segment-mib", type=int, default=8)
    p.add_argument("--fetch-kib", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--fs", choices=["real", "memory", "default"], default="default",
                   help="default: Log.open without an fs argument (works before the port existed)")
    args = p.parse_args()
    if not 0 < args.messages <= 5_000_000:
        p.error("--messages must be in 1..5000000")
    rounds = []
    for _ in range(args.repeat):
        fs = None
        if args.fs != "default":
            from kref.ports.fs import MemoryFileSystem, RealFileSystem

            fs = RealFileSystem() if args.fs == "real" else MemoryFileSystem(max_bytes=4 << 30)
        rounds.append(one_round(args, fs))
    n = (args.messages // args.records) * args.records
    print(f"storage_cpu: {n} messages, {args.records} records/batch, {args.value_bytes} B values, fs={args.fs}, "
          f"median of {args.repeat}")
    for phase in ("append", "read", "recover"):
        secs = statistics.median(r[phase] for r in rounds)
        each = " ".join(f"{r[phase]:.3f}" for r in rounds)
        print(f"  {phase:8s} cpu {secs:7.3f} s  {secs / n * 1e6:6.3f} us/msg   (rounds: {each})")


if __name__ == "__main__":
    main()

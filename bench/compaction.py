"""Compaction benchmark: the log cleaner against raw sequential read, and a bounded
__consumer_offsets.

Two figures, each beside its peer measured in the same run:

1. Cleaner throughput. A compacted log of --mib MiB (default 256) whose
   records use --distinct-percent (default 10) distinct keys, written as a
   producer batches them (--batch-records records of --value-bytes each),
   (keys drawn uniformly, seeded) is cleaned once, from the first dirty
   offset 0 to the active segment,
   with Kafka's default offset-map budget (log.cleaner.dedupe.buffer.size
   128 MiB, load factor 0.9: 5.0M keys). Throughput = log bytes / cleaning
   seconds. Peer: raw sequential read of the same segment files (1 MiB
   os.read calls) right before. Both from the page cache (the files were
   just written; the cleaner's figure is its own cost, not the disk's).
   Goal from the issue: cleaner >= 0.3x raw read.
2. __consumer_offsets size. --commits offset commits (default 1,000,000)
   spread over --partitions group partitions (default 1,000), written as
   the group coordinator writes them (one batch per commit request, keys
   and values in Kafka's offsets format) to a log with
   cleanup.policy=compact and offsets.topic.segment.bytes segments, the
   cleaner running after every --clean-every-mib MiB appended (the broker
   runs it every log.cleaner.backoff.ms). Reported: total bytes written,
   the log's size after the last cleaning, and the bound: distinct keys x
   bytes per record (+ the active segment, which is never cleaned).

Bounded: everything lives under one temp dir removed at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kref.coordinator.offsets_format import OffsetCommitValue, encode_offset_commit_key, encode_offset_commit_value  # noqa: E402
from kref.records.batch import Record, build_batch  # noqa: E402
from bench.storage import drop_cache  # noqa: E402
from kref.storage.cleaner import DOUBLE_MAX, Cleaner, ReadAhead, Throttler, clean_log_now, summarize  # noqa: E402
from kref.storage.cleaner_planner import OffsetMap, cleanable_offsets, offset_map_capacity  # noqa: E402
from kref.storage.config import LogConfig  # noqa: E402
from kref.storage.log import Log  # noqa: E402
from kref.storage.producer_state import ProducerStateManager  # noqa: E402
from kref.storage.segment import REAL_FILE_SYSTEM  # noqa: E402

MIB = 1024 * 1024
KAFKA_DEDUPE_BUFFER = 128 * MIB
IO_BUFFER = MIB  # the cleaner's read buffer, and the peer's


def new_cleaner() -> Cleaner:
    return Cleaner(OffsetMap(offset_map_capacity(KAFKA_DEDUPE_BUFFER, 1, 0.9)), Throttler(DOUBLE_MAX), io_buffer_size=IO_BUFFER)


def raw_read(paths: list[str], buffer_size: int = IO_BUFFER) -> tuple[int, float, float]:
    """The peer: read the same segment files exactly as the cleaner's reader does
    (through the FileSystem port, one reused buffer of the cleaner's
    io_buffer_size, preadv, the same read-ahead hints), doing nothing with the
    bytes. Returns (bytes, wall seconds, CPU seconds of this process)."""
    total = 0
    store = bytearray(buffer_size)
    view = memoryview(store)
    start, cpu = time.perf_counter(), time.process_time()
    for path in paths:
        fh = REAL_FILE_SYSTEM.open(path)
        try:
            size, position = fh.size(), 0
            ahead = ReadAhead(fh, buffer_size)
            while position < size:
                n = fh.readinto(view[: min(buffer_size, size - position)], position)
                if n <= 0:
                    break
                position += n
                ahead.done_to(position)
            total += position
        finally:
            fh.close()
    return total, time.perf_counter() - start, time.process_time() - cpu


def _write_dirty_log(directory: str, args: argparse.Namespace) -> tuple[int, int, int, float]:
    """The dirty log every run cleans a copy of: (bytes, records, distinct keys, seconds)."""
    config = _throughput_config()
    log = Log.open(directory, config, 0, producer_state=ProducerStateManager(directory))
    target = args.mib * MIB
    n_keys = max(1, int(args.records_estimate(target) * args.distinct_percent / 100))
    value = os.urandom(args.value_bytes)
    rng = random.Random(args.seed)  # keys drawn uniformly: survivors spread over the whole log
    i = 0
    t0 = time.perf_counter()
    while log.size_in_bytes < target:
        records = [Record(timestamp=1_000 + i + j, key=b"key-%09d" % rng.randrange(n_keys), value=value) for j in range(args.batch_records)]
        log.append_as_leader(build_batch(records), 0, 1_000 + i)
        i += args.batch_records
    log.roll(10_000)
    log.flush()
    size = log.size_in_bytes
    log.close()
    return size, i, n_keys, time.perf_counter() - t0


def _throughput_config() -> LogConfig:
    return LogConfig.from_properties(
        {"cleanup.policy": "compact", "segment.bytes": str(64 * MIB), "retention.ms": "-1", "min.cleanable.dirty.ratio": "0.01"}
    )


@dataclass
class Pair:
    """One paired run: the peer's read and the cleaning, on the same copy in the same page-cache state."""

    size: int
    raw_s: float
    raw_cpu: float
    clean_s: float
    clean_cpu: float
    map_s: float
    load: float

    @property
    def wall_ratio(self) -> float:  # cleaner MiB/s over raw read MiB/s
        return self.raw_s / self.clean_s

    @property
    def cpu_ratio(self) -> float:  # cleaner MiB per CPU-s over raw read MiB per CPU-s
        return self.raw_cpu / self.clean_cpu


def _clean_copy(pristine: str, work: str, cold: bool) -> tuple[Pair, Cleaner, int]:
    """Copy the dirty log, then time a raw sequential read of the copy and its whole
    cleaning, each starting from the same page-cache state: the copy's pages
    dropped (cold: both read from disk; the cleaner's second pass then finds
    what its first pass read, as it would in a broker) or all resident
    (cached: one untimed read first). Wall and CPU seconds of each side:
    on a loaded machine wall time also counts waiting for a core."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(pristine, work)
    log = Log.open(work, _throughput_config(), 0, producer_state=ProducerStateManager(work))
    try:
        paths = [seg.log_path for seg in log.segments if seg.size]
        size = sum(os.path.getsize(p) for p in paths)
        to_clean = cleanable_offsets(summarize(log), None, 20_000)
        for p in paths:  # the copy's writeback must not run during the timed part
            fd = os.open(p, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        if cold:
            for p in paths:
                drop_cache(p)
        else:
            raw_read(paths)
        read_bytes, read_s, read_cpu = raw_read(paths)
        assert read_bytes == size
        if cold:
            for p in paths:
                drop_cache(p)
        cleaner = new_cleaner()
        start, cpu = time.perf_counter(), time.process_time()
        end, _ = clean_log_now(log, cleaner, to_clean, 20_000)
        clean_s = time.perf_counter() - start
        cleaner.stats.cpu_seconds = time.process_time() - cpu
        pair = Pair(size, read_s, read_cpu, clean_s, cleaner.stats.cpu_seconds, cleaner.stats.map_seconds, os.getloadavg()[0])
        return pair, cleaner, end
    finally:
        log.close()


def _spread(values: list[float], unit: str = "x") -> str:
    return f"median {statistics.median(values):.3f}{unit} (min {min(values):.3f}{unit}, max {max(values):.3f}{unit}, {len(values)} runs)"


def throughput(root: str, args: argparse.Namespace) -> None:
    pristine = os.path.join(root, "dirty")
    size, n_records, n_keys, build_s = _write_dirty_log(os.path.join(pristine, "compact-0"), args)
    print(f"seed {args.seed}; log: {size / MIB:.0f} MiB, {n_records:,} records of {args.value_bytes} B in batches of {args.batch_records}, "
          f"{n_keys:,} distinct keys ({args.distinct_percent}%), written in {build_s:.1f}s")  # fmt: skip
    cold_ok = all(drop_cache(os.path.join(pristine, "compact-0", n)) for n in os.listdir(os.path.join(pristine, "compact-0")))
    print(f"page cache dropped for the cold rows (posix_fadvise DONTNEED): {'yes' if cold_ok else 'no'}; "
          f"{args.runs} paired runs, each on a fresh copy of the dirty log; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    print(f"peer: raw sequential read of the same files as the cleaner reads them ({IO_BUFFER // 1024} KiB buffer, read-ahead hints); "
          "ratio = cleaner MiB/s over raw MiB/s (wall) and cleaner MiB per CPU-s over raw MiB per CPU-s (CPU)")  # fmt: skip
    pairs: dict[str, list[Pair]] = {"cold": [], "cached": []}
    for run in range(args.runs):
        for mode in ("cold", "cached"):
            pair, cleaner, end = _clean_copy(os.path.join(pristine, "compact-0"), os.path.join(root, "work-0"), mode == "cold")
            pairs[mode].append(pair)
            print(f"run {run + 1} {mode:6s}: raw read {pair.raw_s:.3f}s / {pair.raw_cpu:.3f} CPU-s, "
                  f"cleaning {pair.clean_s:.3f}s / {pair.clean_cpu:.3f} CPU-s (map pass {pair.map_s:.3f}s); "
                  f"ratio wall {pair.wall_ratio:.3f}x, CPU {pair.cpu_ratio:.3f}x; load {pair.load:.1f}")  # fmt: skip
    s = cleaner.stats
    print(f"  each cleaning: map pass + rewrite read {s.bytes_read / MIB:.0f} MiB, wrote {s.bytes_written / MIB:.1f} MiB, "
          f"kept {s.records_kept:,} of {s.records_read:,} records, cleaned to offset {end:,}")  # fmt: skip
    per_256 = 256 * MIB / size
    for mode in ("cold", "cached"):
        ps = pairs[mode]
        print(f"{mode:6s}: cleaner CPU-s per 256 MiB {_spread([p.clean_cpu * per_256 for p in ps], ' s')}")
        print(f"{mode:6s}: ratio by wall time {_spread([p.wall_ratio for p in ps])}   (goal >= 0.3x)")
        print(f"{mode:6s}: ratio by CPU time  {_spread([p.cpu_ratio for p in ps])}")
    loads = [p.load for ps in pairs.values() for p in ps]
    print(f"load average during the runs: {min(loads):.1f} .. {max(loads):.1f}")


def consumer_offsets(root: str, args: argparse.Namespace) -> None:
    directory = os.path.join(root, "__consumer_offsets-0")
    config = LogConfig.from_properties(
        {"cleanup.policy": "compact", "segment.bytes": str(args.offsets_segment_mib * MIB), "min.cleanable.dirty.ratio": "0.5"}
    )
    log = Log.open(directory, config, 0)
    cleaner = new_cleaner()
    per_request = args.commits_per_request
    written = 0
    since_clean = 0
    cleanings = 0
    record_size = 0
    t0 = time.perf_counter()
    keys = [encode_offset_commit_key("bench-group", f"topic-{p // 100}", p % 100) for p in range(args.partitions)]
    commits = 0
    now = 1_000
    while commits < args.commits:
        records = []
        for j in range(per_request):
            p = (commits + j) % args.partitions
            records.append(Record(timestamp=now, key=keys[p], value=encode_offset_commit_value(OffsetCommitValue(commits + j, "", now))))
        batch = build_batch(records)
        log.append_as_leader(batch, 0, now)
        record_size = max(record_size, (len(batch) - 61) // len(records))
        written += len(batch)
        since_clean += len(batch)
        commits += per_request
        now += 1
        if since_clean >= args.clean_every_mib * MIB:
            to_clean = cleanable_offsets(summarize(log), None if not cleanings else last_end, now)
            if to_clean.cleanable_ratio > config.min_cleanable_dirty_ratio:
                last_end, _ = clean_log_now(log, cleaner, to_clean, now)
                cleanings += 1
            since_clean = 0
    to_clean = cleanable_offsets(summarize(log), None, now)
    clean_log_now(log, cleaner, to_clean, now)
    elapsed = time.perf_counter() - t0
    active = log.active_segment.size
    cleaned_part = log.size_in_bytes - active
    bound = args.partitions * (record_size + 61)
    print(f"__consumer_offsets: {commits:,} commits over {args.partitions:,} partitions in {commits // per_request:,} "
          f"requests, {written / MIB:.1f} MiB written, {cleanings + 1} cleanings, {elapsed:.1f}s")  # fmt: skip
    print(f"  size after cleaning: {log.size_in_bytes / MIB:.2f} MiB = cleaned part {cleaned_part / 1024:.0f} KiB "
          f"+ active segment {active / 1024:.0f} KiB (never cleaned, <= segment.bytes {args.offsets_segment_mib} MiB)")  # fmt: skip
    print(f"  bound for the cleaned part: {args.partitions:,} keys x <= {record_size + 61} B = {bound / 1024:.0f} KiB "
          f"-> {'within' if cleaned_part <= bound else 'ABOVE'} the bound; {written / max(1, log.size_in_bytes):.0f}x smaller than written")  # fmt: skip
    log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--distinct-percent", type=float, default=10.0)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--batch-records", type=int, default=64)
    parser.add_argument("--commits", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=1_000)
    parser.add_argument("--commits-per-request", type=int, default=100)
    parser.add_argument("--offsets-segment-mib", type=int, default=4)
    parser.add_argument("--clean-every-mib", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3, help="paired runs (cold and cached) of the throughput figure")
    parser.add_argument("--skip", choices=["throughput", "offsets"], default=None)
    parser.add_argument("--dir", default=None, help="where to write (default: the system temp dir)")
    args = parser.parse_args()
    args.records_estimate = lambda target: target // (args.value_bytes + 30)
    root = tempfile.mkdtemp(prefix="kref-bench-compaction-", dir=args.dir)
    try:
        if args.skip != "throughput":
            throughput(root, args)
        if args.skip != "offsets":
            consumer_offsets(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

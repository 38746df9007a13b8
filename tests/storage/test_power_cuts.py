"""Power cuts on the in-memory disk: storage recovers whatever the cut hits.

The storage code reaches files only through the file-system port, so these
tests run it on MemoryFileSystem, which keeps written and synced bytes
apart and loses the unsynced ones in `crash()` (each file keeping a seeded
random prefix of its unsynced tail: a torn write). A workload is run once to
count its mutating file operations (writes, truncates, fsyncs, renames,
unlinks); then, for a seeded sample of cut points, it runs again with the
power cut at that operation (mid-append, mid-roll, mid-flush, mid-checkpoint,
mid-clean), the disk crashes, and the log dir is opened as the next start
would. What must hold after every cut:

- no flushed record is lost, and nothing else appears: the log is a prefix
  of what was appended (an append cut half-way may survive whole or not at
  all), with contiguous offsets; the log end is at least the flushed offset;
- the indexes agree with the log (every entry points at the batch ending at
  its offset, every batch is found through them);
- the recovery-point checkpoint is either the last one written completely or
  the one being written when the power went, never torn, and never above
  what survived;
- after a cut mid-clean, compaction's guarantees hold: every record is the
  original at its offset, offsets increase, the last record of every key is
  still there.

Seeded and bounded: each test prints its seed and runs a fixed number of
cut points on a workload of fixed length.
"""

from __future__ import annotations

import os
import random

import pytest

from kref.ports.fs import MemoryFileSystem, PowerCut
from kref.records.batch import Record, build_batch
from kref.storage.checkpoint import read_offset_checkpoint
from kref.storage.cleaner import DOUBLE_MAX, Cleaner, Throttler, clean_log_now
from kref.storage.cleaner_planner import LogToClean, OffsetMap
from kref.storage.config import LogConfig
from kref.storage.log import RECOVERY_POINT_CHECKPOINT_FILE
from kref.storage.log_manager import LogManager
from kref.storage.producer_state import ProducerStateManager

from .batches import decode_values, make_batch
from .test_cleaner_stateful import read_all

ROOT = "/data"
CONFIG = LogConfig.from_properties(
    {"segment.bytes": "1200", "index.interval.bytes": "150", "segment.index.bytes": "4096"}
)
PARTITIONS = [("t", 0), ("t", 1)]
CUTS_PER_SEED = 25


def open_manager(fs: MemoryFileSystem, config: LogConfig = CONFIG, now_ms: int = 0) -> LogManager:
    manager = LogManager(
        [ROOT], config, now_ms, fs=fs, producer_state_factory=lambda path, p, t: ProducerStateManager(path, fs=fs)
    )
    manager.load_logs(now_ms)
    return manager


class Model:
    """What the workload did, as far as the disk's durability contract goes."""

    def __init__(self) -> None:
        self.written: dict[tuple[str, int], dict[int, bytes]] = {k: {} for k in PARTITIONS}
        self.flushed: dict[tuple[str, int], int] = {k: 0 for k in PARTITIONS}
        self.in_flight: dict[tuple[str, int], dict[int, bytes]] = {k: {} for k in PARTITIONS}
        self.checkpoint_done: dict | None = None
        self.checkpoint_writing: dict | None = None


def workload(manager: LogManager, model: Model, rng: random.Random, steps: int, tag: str) -> None:
    logs = {k: manager.get_or_create_log(*k, CONFIG) for k in PARTITIONS}
    for step in range(steps):
        key = rng.choice(PARTITIONS)
        log = logs[key]
        action = rng.random()
        if action < 0.6:
            values = [f"{tag}-{step}-{i}".encode() for i in range(rng.randint(1, 3))]
            leo = log.log_end_offset
            model.in_flight[key] = {leo + i: v for i, v in enumerate(values)}
            info = log.append_as_leader(make_batch(values), 0, step)
            assert info.first_offset == leo
            model.written[key].update(model.in_flight[key])
            model.in_flight[key] = {}
        elif action < 0.75:
            log.flush(step)
            model.flushed[key] = log.log_end_offset
        elif action < 0.85:
            log.roll(step)
            model.flushed[key] = max(model.flushed[key], log.recovery_point)
        else:
            model.checkpoint_writing = {k: logs[k].recovery_point for k in PARTITIONS}
            manager.checkpoint()
            model.checkpoint_done, model.checkpoint_writing = model.checkpoint_writing, None


def check_indexes(log) -> None:
    for seg in log.segments:
        batches = list(seg.iter_batches(0))
        by_last = {h.last_offset: h for h in batches}
        entries = seg.offset_index.entries()
        assert [o for o, _ in entries] == sorted({o for o, _ in entries})
        for offset, position in entries:
            assert offset in by_last and by_last[offset].position == position, f"{seg}: entry ({offset}, {position})"
        for ts, offset in seg.time_index.entries():
            assert seg.base_offset <= offset < seg.next_offset
        for h in batches:
            found = seg.translate_offset(h.base_offset)
            assert found is not None and found.position == h.position
        if batches:
            assert seg.next_offset == batches[-1].next_offset


def check_recovered(fs: MemoryFileSystem, model: Model, where: str) -> LogManager:
    rp_path = os.path.join(ROOT, RECOVERY_POINT_CHECKPOINT_FILE)
    checkpoint = read_offset_checkpoint(rp_path, fs) if fs.exists(rp_path) else None  # never torn: must parse
    manager = open_manager(fs)
    for key in PARTITIONS:
        log = manager.get_log(*key)
        if log is None:
            assert not model.written[key] or model.flushed[key] == 0, f"{where}: {key} lost"
            continue
        got = decode_values(log.read(0, 1 << 30).records) if log.log_end_offset else []
        offsets = [o for o, _ in got]
        assert offsets == list(range(len(got))), f"{where}: {key} offsets {offsets}"
        assert log.log_end_offset == len(got) >= model.flushed[key], f"{where}: {key} lost flushed records"
        for offset, value in got:
            expected = model.written[key].get(offset, model.in_flight[key].get(offset))
            assert value == expected, f"{where}: {key} offset {offset} holds {value!r}, expected {expected!r}"
        check_indexes(log)
        if checkpoint is not None and key in checkpoint:
            assert checkpoint[key] <= log.log_end_offset, f"{where}: checkpointed recovery point above the log end"
    if checkpoint is not None and model.checkpoint_done is not None:
        assert checkpoint in (model.checkpoint_done, model.checkpoint_writing), f"{where}: checkpoint {checkpoint}"
    return manager


def run_cycle(fs: MemoryFileSystem, model: Model, seed: int, cycle: int, cut: int | None, rng: random.Random) -> bool:
    """One broker life on `fs`: open, work, maybe lose power; True if the power was cut."""
    manager = open_manager(fs)
    for key in PARTITIONS:  # what survived the last cut is the new truth
        log = manager.get_log(*key)
        if log is not None:
            model.written[key] = dict(decode_values(log.read(0, 1 << 30).records)) if log.log_end_offset else {}
            model.flushed[key] = log.log_end_offset  # recovery flushed what it kept
        model.in_flight[key] = {}
    model.checkpoint_done = read_offset_checkpoint(os.path.join(ROOT, RECOVERY_POINT_CHECKPOINT_FILE), fs)
    model.checkpoint_writing = None
    fs.cut_power_after(cut)
    try:
        workload(manager, model, random.Random(seed * 100 + cycle), 40, f"c{cycle}")
    except PowerCut:
        fs.crash(rng=rng)
        return True
    fs.cut_power_after(None)
    fs.crash(rng=rng)  # the power goes at a quiet moment: unflushed appends may go with it
    return False


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_power_cut_at_any_write_of_appends_rolls_flushes_and_checkpoints(seed):
    print(f"seed {seed}")
    # Count the workload's mutating operations once (same seeds, no cut).
    fs = MemoryFileSystem()
    fs.makedirs(ROOT)
    open_manager(fs)
    before = fs.mutations
    workload(open_manager(fs), Model(), random.Random(seed * 100), 40, "c0")
    total = fs.mutations - before
    assert total > 50
    cuts = sorted(random.Random(seed).sample(range(1, total + 1), min(CUTS_PER_SEED, total)))
    for cut in cuts:
        fs = MemoryFileSystem()
        fs.makedirs(ROOT)
        model = Model()
        rng = random.Random(seed * 7919 + cut)
        # Three lives: a cut at `cut`, then two more at random points of their own.
        for cycle, cycle_cut in enumerate([cut, rng.randint(1, total), rng.randint(1, total)]):
            run_cycle(fs, model, seed, cycle, cycle_cut, rng)
            check_recovered(fs, model, f"seed {seed}, cut {cut}, life {cycle}")


def test_a_flushed_roll_survives_and_an_unflushed_tail_is_cut_at_a_batch():
    fs = MemoryFileSystem()
    fs.makedirs(ROOT)
    manager = open_manager(fs)
    log = manager.get_or_create_log("t", 0, CONFIG)
    for i in range(30):
        log.append_as_leader(make_batch([b"x%d" % i]), 0, i)
    log.flush()
    assert len(log.segments) > 1  # rolled on the way (segment.bytes)
    for i in range(8):
        log.append_as_leader(make_batch([b"y%d" % i]), 0, 100 + i)
    durable = log.recovery_point  # a roll among these appends flushed the segment it closed
    assert 30 < durable < log.log_end_offset
    fs.crash(keep_torn_bytes=37)  # part of the next batch reached the disk
    log = open_manager(fs).get_log("t", 0)
    values = [v for _, v in decode_values(log.read(0, 1 << 30).records)]
    assert values == ([b"x%d" % i for i in range(30)] + [b"y%d" % i for i in range(8)])[:durable]
    assert log.log_end_offset == durable
    check_indexes(log)


# ------------------------------------------------------------------ cleaning

COMPACT = LogConfig.from_properties(
    {"cleanup.policy": "compact", "segment.bytes": "900", "index.interval.bytes": "100", "delete.retention.ms": "100"}
)


def keyed_records(seed: int) -> list[tuple[bytes, bytes | None, int]]:
    rng = random.Random(seed)
    out = [(b"written-once", b"first", 999)]
    for i in range(1, 120):
        key = b"key-%d" % rng.randrange(6)
        out.append((key, None if rng.random() < 0.15 else b"value-%d" % i, 1000 + i))
    return out


def compacted_log(fs: MemoryFileSystem, seed: int):
    manager = LogManager([ROOT], COMPACT, 0, fs=fs)
    manager.load_logs(0)
    log = manager.get_or_create_log("k", 0, COMPACT)
    for key, value, ts in keyed_records(seed):
        log.append_as_leader(build_batch([Record(timestamp=ts, key=key, value=value)]), 0, ts)
    log.flush()
    manager.checkpoint()
    return log


def clean(log) -> None:
    cleaner = Cleaner(OffsetMap(1000), Throttler(DOUBLE_MAX), io_buffer_size=512)
    clean_log_now(log, cleaner, LogToClean(("k", 0), 0, log.active_segment.base_offset, 0, 0), 10_000)


@pytest.mark.parametrize("seed", [11, 12])
def test_power_cut_at_any_write_of_a_cleaning(seed):
    print(f"seed {seed}")
    fs = MemoryFileSystem()
    fs.makedirs(ROOT)
    log = compacted_log(fs, seed)
    before = fs.mutations
    clean(log)
    total = fs.mutations - before
    assert total > 10
    model = [(i, key, value, ts) for i, (key, value, ts) in enumerate(keyed_records(seed))]
    last_of_key = {key: i for i, key, _, _ in model}
    rng = random.Random(seed)
    for cut in sorted(rng.sample(range(1, total + 1), min(30, total))) + [total + 1]:
        fs = MemoryFileSystem()
        fs.makedirs(ROOT)
        log = compacted_log(fs, seed)
        fs.cut_power_after(cut)
        try:
            clean(log)
            fs.cut_power_after(None)
        except PowerCut:
            pass
        fs.crash(rng=random.Random(cut))
        manager = LogManager([ROOT], COMPACT, 20_000, fs=fs)
        manager.load_logs(20_000, {"k": COMPACT})
        log = manager.get_log("k", 0)
        where = f"seed {seed}, cut {cut} of {total}"
        leftovers = [n for n in fs.listdir(log.dir) if n.endswith((".cleaned", ".swap"))]
        assert not leftovers, f"{where}: recovery left {leftovers}"
        data = [r for r in read_all(log) if r[1] != b"<empty>"]
        offsets = [r[0] for r in data]
        assert offsets == sorted(set(offsets)), where
        for o, k, v, t, _ in data:
            assert model[o] == (o, k, v, t), f"{where}: record {o} changed"
        kept = set(offsets)
        for key, i in last_of_key.items():
            assert i in kept, f"{where}: the last record of {key!r} (offset {i}) is gone"
        assert log.log_end_offset == len(model), where
        check_indexes(log)


def _prepared(fs: MemoryFileSystem) -> tuple[LogManager, Model]:
    """Two partitions with flushed, unflushed and checkpointed data, deterministically."""
    manager = open_manager(fs)
    model = Model()
    workload(manager, model, random.Random(5), 30, "prep")
    model.checkpoint_writing = {k: manager.get_log(*k).recovery_point for k in PARTITIONS}
    manager.checkpoint()
    model.checkpoint_done, model.checkpoint_writing = model.checkpoint_writing, None
    log = manager.get_log("t", 0)
    for i in range(3):  # an unflushed tail in the active segment
        values = [b"tail-%d" % i]
        model.written[("t", 0)][log.log_end_offset] = values[0]
        log.append_as_leader(make_batch(values), 0, 100 + i)
    return manager, model


def _append(manager: LogManager, model: Model) -> None:
    log = manager.get_log("t", 0)
    model.in_flight[("t", 0)] = {log.log_end_offset: b"in-flight"}
    log.append_as_leader(make_batch([b"in-flight"]), 0, 200)


def _roll(manager: LogManager, model: Model) -> None:
    manager.get_log("t", 0).roll(200)


def _flush(manager: LogManager, model: Model) -> None:
    manager.get_log("t", 0).flush(200)


def _checkpoint(manager: LogManager, model: Model) -> None:
    model.checkpoint_writing = {k: manager.get_log(*k).recovery_point for k in PARTITIONS}
    manager.checkpoint()


def _shutdown(manager: LogManager, model: Model) -> None:
    # Shutdown flushes every log first: the checkpoint it writes holds the log ends.
    model.checkpoint_writing = {k: manager.get_log(*k).log_end_offset for k in PARTITIONS}
    manager.shutdown()


@pytest.mark.parametrize("operation", [_append, _roll, _flush, _checkpoint, _shutdown], ids=lambda f: f.__name__[1:])
def test_power_cut_at_every_write_of_one_operation(operation):
    fs = MemoryFileSystem()
    fs.makedirs(ROOT)
    manager, model = _prepared(fs)
    before = fs.mutations
    operation(manager, model)
    total = fs.mutations - before
    assert total >= 1
    for cut in range(1, total + 2):  # total + 1: the operation completes, then the power goes
        fs = MemoryFileSystem()
        fs.makedirs(ROOT)
        manager, model = _prepared(fs)
        fs.cut_power_after(cut)
        completed = False
        try:
            operation(manager, model)
            completed = True
        except PowerCut:
            pass
        if completed and operation in (_flush, _roll, _shutdown):
            for key in PARTITIONS:
                model.flushed[key] = manager.get_log(*key).recovery_point
        fs.crash(rng=random.Random(cut))
        check_recovered(fs, model, f"{operation.__name__[1:]}: cut {cut} of {total}")

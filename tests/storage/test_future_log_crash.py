"""A replica moving between log dirs (AlterReplicaLogDirs, KIP-113) survives a crash at every step.

The move's storage steps (kref/storage/future_log.py) driven by the broker's
synchronous mover (kref/broker/alter_log_dirs.py: LogDirMover, the same
object the broker runs) on MemoryFileSystem, while the partition keeps
appending: create the `-future` log, copy batch by batch, truncate/restart
it, swap (flush and close the future, rename the current dir `-delete`,
rename the future dir into place, reopen), remove the `-delete` dir. A
workload is run once to count its mutating file operations; then, for every
cut point, it runs again and stops at that operation,
either as a SIGKILL (the process dies, everything written stays, as in the
page cache) or as a power cut (MemoryFileSystem.crash(): what was not
fsynced is lost, a seeded torn tail kept). The log dirs are then opened as
the next start would (LogManager.load_logs, which promotes a future dir
whose swap was cut short, then the mover's resume) and the move is run to
its end. What must hold after every cut:

- never two live copies: at most one `t-0` directory in the two log dirs at
  any point after the cut, and after recovery exactly one, no `-future` and
  no `-delete` dir left;
- no acknowledged record lost: after a SIGKILL every record appended before
  the cut is there; after a power cut every flushed one is (the future log
  is flushed before the swap, so a completed move is durable); nothing else
  appears, offsets are contiguous, values are the ones appended at them;
- leader epochs and producer state moved with the batches.

Seeded and bounded: each case prints its seed; the workload has a fixed length.
"""

from __future__ import annotations

import os
import random

import pytest

from kref.broker.alter_log_dirs import LogDirMover
from kref.ports.fs import MemoryFileSystem, PowerCut
from kref.protocol.errors import ErrorCode
from kref.storage.config import LogConfig
from kref.storage.log_manager import LogManager
from kref.storage.producer_state import ProducerStateManager

from .batches import decode_values, make_batch

DIRS = ["/a", "/b"]
KEY = ("t", 0)
CONFIG = LogConfig.from_properties({"segment.bytes": "1200", "index.interval.bytes": "150", "segment.index.bytes": "4096"})
PRODUCER_ID = 7


def open_manager(fs: MemoryFileSystem) -> LogManager:
    manager = LogManager(DIRS, CONFIG, 0, fs=fs,
                         producer_state_factory=lambda path, p, t: ProducerStateManager(path, fs=fs))
    manager.load_logs(0)
    return manager


def new_mover(manager: LogManager) -> LogDirMover:
    return LogDirMover(manager, now_ms=lambda: 0, copy_max_bytes=400, usable=lambda path: True)


class Model:
    def __init__(self) -> None:
        self.values: dict[int, bytes] = {}  # offset -> value of every completed append
        self.epochs: dict[int, int] = {}  # offset -> leader epoch
        self.in_flight: dict[int, bytes] = {}
        self.flushed = 0
        self.sequence = 0


def plain_dirs(fs: MemoryFileSystem) -> list[str]:
    return [d for d in DIRS if fs.is_dir(os.path.join(d, "t-0"))]


def suffixed(fs: MemoryFileSystem) -> list[str]:
    return [n for d in DIRS for n in fs.listdir(d) if n.startswith("t-0.")]


def append(log, model: Model, rng: random.Random, step: int, epoch: int) -> None:
    values = [f"v{step}-{i}".encode() for i in range(rng.randint(1, 3))]
    leo = log.log_end_offset
    model.in_flight = {leo + i: v for i, v in enumerate(values)}
    batch = make_batch(values, producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=model.sequence)
    info = log.append_as_leader(batch, epoch, step)
    assert info.first_offset == leo
    model.sequence += len(values)
    model.values.update(model.in_flight)
    model.epochs.update({o: epoch for o in model.in_flight})
    model.in_flight = {}


def workload(fs: MemoryFileSystem, model: Model, seed: int) -> None:
    """Create, fill, move (while appending), then keep appending to the moved log."""
    rng = random.Random(seed)
    manager = open_manager(fs)
    log = manager.get_or_create_log(*KEY, CONFIG)
    assert log.dir.startswith("/a/")
    for step in range(12):
        append(log, model, rng, step, epoch=0 if step < 6 else 1)
        if step == 7:
            log.flush(step)
            model.flushed = log.log_end_offset
    mover = new_mover(manager)
    assert mover.alter(KEY, "/b") == ErrorCode.NONE
    for step in range(12, 200):
        if not mover.moving:
            break
        if rng.random() < 0.3:
            append(manager.get_log(*KEY), model, rng, step, epoch=1 if step < 20 else 2)
        mover.tick(KEY)
    assert mover.swaps == 1
    log = manager.get_log(*KEY)
    assert log.dir == "/b/t-0"
    model.flushed = max(model.flushed, log.recovery_point)
    for step in range(200, 204):
        append(log, model, rng, step, epoch=2)


def recover(fs: MemoryFileSystem) -> LogManager:
    manager = open_manager(fs)
    mover = new_mover(manager)
    mover.resume()
    for _ in range(200):
        if not mover.moving:
            break
        mover.tick(KEY)
    assert not mover.moving
    return manager


def check(fs: MemoryFileSystem, model: Model, *, killed: bool, where: str) -> None:
    assert len(plain_dirs(fs)) <= 1, f"{where}: two live copies {plain_dirs(fs)}"
    manager = recover(fs)
    assert len(plain_dirs(fs)) <= 1 and not suffixed(fs), f"{where}: {plain_dirs(fs)} {suffixed(fs)}"
    log = manager.get_log(*KEY)
    if log is None:
        assert not model.values or (not killed and model.flushed == 0), f"{where}: the partition is gone"
        return
    got = decode_values(log.read(0, 1 << 30).records) if log.log_end_offset else []
    assert [o for o, _ in got] == list(range(len(got))), f"{where}: offsets {[o for o, _ in got]}"
    for offset, value in got:
        assert value == model.values.get(offset, model.in_flight.get(offset)), f"{where}: offset {offset} holds {value!r}"
    if killed:
        assert len(got) >= len(model.values), f"{where}: {len(model.values) - len(got)} acknowledged records lost"
    else:
        assert len(got) >= model.flushed, f"{where}: flushed records lost ({len(got)} < {model.flushed})"
    for offset, _ in got:
        epoch = model.epochs.get(offset)
        if epoch is not None:
            assert log.leader_epoch_cache.epoch_for_offset(offset) == epoch, f"{where}: epoch of offset {offset}"
    if got:
        entry = log.producer_state.last_entry(PRODUCER_ID)
        assert entry is not None and entry.last_sequence == len(got) - 1, f"{where}: producer state {entry}"


def count_mutations(seed: int) -> int:
    fs = MemoryFileSystem()
    workload(fs, Model(), seed)
    return fs.mutations


@pytest.mark.parametrize("seed", [11, 12])
def test_move_completes_and_keeps_everything(seed):
    print(f"seed={seed}")
    fs = MemoryFileSystem()
    model = Model()
    workload(fs, model, seed)
    check(fs, model, killed=True, where="no crash")


@pytest.mark.parametrize("seed", [21])
@pytest.mark.parametrize("kind", ["sigkill", "power-cut"])
def test_crash_at_every_step_of_a_move(seed, kind):
    """Every mutating operation of the workload is a cut point (about 130)."""
    print(f"seed={seed} kind={kind}")
    total = count_mutations(seed)
    points = range(1, total + 1)
    for point in points:
        fs = MemoryFileSystem()
        model = Model()
        fs.cut_power_after(point)
        with pytest.raises(PowerCut):
            workload(fs, model, seed)
        if kind == "power-cut":
            fs.crash(rng=random.Random(seed * 1000 + point))
        else:
            fs.cut_power_after(None)  # a SIGKILL: every byte written so far stays (the page cache)
        check(fs, model, killed=kind == "sigkill", where=f"seed {seed} {kind} at mutation {point}/{total}")


def test_move_follows_truncation_and_a_new_log_start():
    """The current log is truncated (a follower's TruncateToEpochEndOffset) and loses a
    prefix (DeleteRecords) while it is copied: the moved log is exactly the current one."""
    fs = MemoryFileSystem()
    model = Model()
    rng = random.Random(5)
    manager = open_manager(fs)
    log = manager.get_or_create_log(*KEY, CONFIG)
    for step in range(20):
        append(log, model, rng, step, epoch=0 if step < 10 else 1)
    mover = new_mover(manager)
    assert mover.alter(KEY, "/b") == ErrorCode.NONE
    while mover.futures[KEY].log_end_offset < log.log_end_offset - 5:
        mover.tick(KEY)
    # The current log drops its tail from the middle of epoch 1 and goes on in epoch 2.
    cut = log.leader_epoch_cache.end_offset_for(0, log.log_end_offset)[1] + 3
    assert mover.futures[KEY].log_end_offset > cut  # the future holds records the current log is about to lose
    log.truncate_to(cut)
    model.values = {o: v for o, v in model.values.items() if o < log.log_end_offset}
    model.sequence = len(model.values)
    for step in range(20, 24):
        append(log, model, rng, step, epoch=2)
    log.maybe_increment_log_start_offset(4)
    for _ in range(100):
        if not mover.moving:
            break
        mover.tick(KEY)
    assert mover.swaps == 1
    moved = manager.get_log(*KEY)
    assert moved.dir == "/b/t-0" and moved.log_start_offset == 4
    assert moved.leader_epoch_cache.entries() == log.leader_epoch_cache.entries()
    got = decode_values(moved.read(4, 1 << 30).records)
    assert {o: v for o, v in got if o >= 4} == {o: v for o, v in model.values.items() if o >= 4}
    assert moved.log_end_offset == max(model.values) + 1


def test_a_start_keeps_one_future_dir_and_finishes_its_move():
    """Two future dirs of one partition (a retarget whose removal never happened) and a
    `-delete` leftover: the start keeps one future, removes the rest, and the move completes."""
    from kref.storage.future_log import create_future_log, delete_dir_name

    fs = MemoryFileSystem()
    model = Model()
    rng = random.Random(9)
    manager = open_manager(fs)
    log = manager.get_or_create_log(*KEY, CONFIG)
    for step in range(8):
        append(log, model, rng, step, epoch=0)
    for unique_id in ("1" * 32, "2" * 32):
        create_future_log(manager, log, "/b", unique_id, 0).close()
    fs.makedirs(os.path.join("/a", delete_dir_name(*KEY)))
    manager.shutdown()
    check(fs, model, killed=True, where="two future dirs")

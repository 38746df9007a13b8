"""Crash recovery and index rebuild: after an unclean stop the log re-validates
batches (header, CRC-32C, growing offsets) from the recovery point and truncates
at the first invalid one. Invariants checked: the load never crashes; every
batch that ends before the damage survives byte for byte; nothing after the
damage is served; deleting or garbling index files (or the leader-epoch
checkpoint) changes no read result, because indexes are rebuilt from the log."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from kref.storage.config import LogConfig
from kref.storage.log import Log

from .batches import decode_values, make_batch

# A small segment.index.bytes keeps the preallocated index files (copied per case) small.
CONFIG = LogConfig.from_properties({"segment.bytes": "700", "index.interval.bytes": "60", "segment.index.bytes": "240"})


def build_log(path: str, batches: int = 24) -> tuple[list[tuple[int, bytes]], list[int]]:
    """A flushed multi-segment log closed uncleanly; returns records and batch end offsets."""
    log = Log.open(path, CONFIG, 0)
    rng = random.Random(7)
    for i in range(batches):
        values = [bytes([65 + i % 26]) * rng.randint(1, 40) for _ in range(rng.randint(1, 3))]
        log.append_as_leader(make_batch(values, timestamp=1000 + i), i // 5, 1000 + i)
    log.flush()
    records = decode_values(log.read(0, 1 << 30).records)
    ends = [h.next_offset for seg in log.segments for h in seg.iter_batches()]
    log.close_uncleanly()
    return records, ends


def reopen(path: str, *, clean: bool = False, recovery_point: int = 0) -> Log:
    return Log.open(path, CONFIG, 0, recovery_point=recovery_point, log_start_offset=0, had_clean_shutdown=clean)


def read_all(log: Log) -> list[tuple[int, bytes]]:
    return decode_values(log.read(log.log_start_offset, 1 << 30).records) if log.log_end_offset > log.log_start_offset else []


def segment_files(path: str, suffix: str) -> list[str]:
    return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(suffix))


@pytest.fixture(autouse=True)
def _fast(no_fsync):
    pass


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("pristine") / "t-0")
    records, ends = build_log(path)
    return path, records, ends


def copy_log(pristine_path: str, tmp_path) -> str:
    dst = str(tmp_path / "t-0")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(pristine_path, dst)
    return dst


def batch_spans(path: str) -> list[tuple[str, int, int, int]]:
    """(log file, start position, end position, next offset) of every batch, in order."""
    log = reopen(path, clean=True)
    spans = [(seg.log_path, h.position, h.next_position, h.next_offset) for seg in log.segments for h in seg.iter_batches()]
    log.close_uncleanly()
    return spans


def test_cut_every_position_of_every_segment(pristine, scratch):
    tmp_path = scratch
    path, records, _ = pristine
    spans = batch_spans(path)
    files = segment_files(path, ".log")
    assert len(files) >= 3
    for file_index, log_file in enumerate(files):
        size = os.path.getsize(log_file)
        positions = range(size) if file_index == len(files) - 1 else sorted(random.Random(file_index).sample(range(size), 40))
        for cut in positions:
            work = copy_log(path, tmp_path)
            target = os.path.join(work, os.path.basename(log_file))
            with open(target, "r+b") as f:
                f.truncate(cut)
            log = reopen(work)
            # everything that ended before the cut survives, nothing after it
            survivors = [s for s in spans if (s[0] < log_file) or (s[0] == log_file and s[2] <= cut)]
            expected_end = survivors[-1][3] if survivors else 0
            assert log.log_end_offset == expected_end, (os.path.basename(log_file), cut)
            assert read_all(log) == [r for r in records if r[0] < expected_end]
            assert log.leader_epoch_cache.entries() == [e for e in log.leader_epoch_cache.entries() if e[1] < max(expected_end, 1)]
            # and the log keeps working
            info = log.append_as_leader(make_batch([b"after"]), 9, 0)
            assert info.first_offset == expected_end
            log.close()


def test_flipped_bytes_never_crash_and_keep_the_prefix(pristine, scratch):
    tmp_path = scratch
    path, records, _ = pristine
    spans = batch_spans(path)
    rng = random.Random(11)
    for _ in range(150):
        work = copy_log(path, tmp_path)
        log_file, start, end, _ = rng.choice(spans)
        target = os.path.join(work, os.path.basename(log_file))
        position = rng.randrange(start, end)
        with open(target, "r+b") as f:
            f.seek(position)
            byte = f.read(1)[0]
            f.seek(position)
            f.write(bytes([byte ^ (1 << rng.randrange(8))]))
        log = reopen(work)
        batch_start_offset = next(s[3] for s in reversed(spans) if (s[0], s[2]) <= (log_file, start)) if (log_file, start) != (spans[0][0], 0) else 0
        got = read_all(log)
        kept = [r for r in records if r[0] < batch_start_offset]
        assert got[: len(kept)] == kept
        # 12 <= position - start < 16 is the partition leader epoch, which no checksum covers
        if not (12 <= position - start < 16) and not (position - start < 8):
            assert got == kept
        log.append_as_leader(make_batch([b"after"]), 9, 0)
        log.close()


@pytest.mark.parametrize("damage", ["delete", "garble", "truncate", "zero", "extend"])
@pytest.mark.parametrize("clean", [True, False])
def test_damaged_indexes_are_rebuilt(pristine, tmp_path, damage, clean):
    path, records, _ = pristine
    reference = reopen(copy_log(path, tmp_path / "ref"))
    ref_entries = [(s.offset_index.entries(), s.time_index.entries()) for s in reference.segments]
    reference.close()
    work = copy_log(path, tmp_path)
    rng = random.Random(damage)
    for index_file in segment_files(work, ".index") + segment_files(work, ".timeindex"):
        size = os.path.getsize(index_file)
        if damage == "delete":
            os.unlink(index_file)
        elif damage == "garble":
            with open(index_file, "r+b") as f:
                f.write(rng.randbytes(max(size, 24)))
        elif damage == "truncate":
            with open(index_file, "r+b") as f:
                f.truncate(size // 2 + 3)
        elif damage == "zero":
            with open(index_file, "r+b") as f:
                f.write(bytes(size))
        elif damage == "extend":
            with open(index_file, "ab") as f:
                f.write(rng.randbytes(96))
    with open(os.path.join(work, "leader-epoch-checkpoint"), "w") as f:
        f.write("garbage\n")
    log = reopen(work, clean=clean, recovery_point=records[-1][0] + 1)
    assert read_all(log) == records
    for offset, _ in records:
        assert decode_values(log.read(offset, 1).records)[0][0] <= offset
    assert [(s.offset_index.entries(), s.time_index.entries()) for s in log.segments] == ref_entries
    assert [e for e, _ in log.leader_epoch_cache.entries()] == [0, 1, 2, 3, 4]
    assert log.fetch_offset_by_timestamp(1010)[0] == 1010
    log.close()


def test_recovery_point_limits_revalidation(pristine, tmp_path):
    """Segments wholly below the recovery point are trusted (only their index is checked)."""
    path, records, _ = pristine
    work = copy_log(path, tmp_path)
    first = segment_files(work, ".log")[0]
    # a flipped CRC byte in the first, flushed segment is not revalidated ...
    with open(first, "r+b") as f:
        f.seek(30)
        b = f.read(1)[0]
        f.seek(30)
        f.write(bytes([b ^ 1]))
    log = reopen(work, recovery_point=records[-1][0] + 1)
    assert log.log_end_offset == records[-1][0] + 1
    log.close_uncleanly()
    # ... but from recovery point 0 it is, and the log truncates there
    log = reopen(work, recovery_point=0)
    assert log.log_end_offset == 0
    log.close()


def test_recovery_that_drops_bytes_says_so(pristine, tmp_path, caplog):
    """Truncation on recovery loses data by design; it must never be silent."""
    path = copy_log(pristine[0], tmp_path)
    first_log = segment_files(path, ".log")[0]
    with open(first_log, "r+b") as f:
        f.truncate(os.path.getsize(first_log) // 2)
    with caplog.at_level("WARNING", logger="kref.storage.log"):
        log = reopen(path)
    log.close_uncleanly()
    messages = [r.getMessage() for r in caplog.records if r.name == "kref.storage.log"]
    assert any("recovery truncated segment" in m and "later segment(s) deleted" in m for m in messages), messages


def test_clean_recovery_logs_no_warning(pristine, tmp_path, caplog):
    path = copy_log(pristine[0], tmp_path)
    with caplog.at_level("WARNING", logger="kref.storage.log"):
        reopen(path).close_uncleanly()
    assert not [r for r in caplog.records if r.name == "kref.storage.log"]

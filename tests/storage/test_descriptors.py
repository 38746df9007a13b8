"""Descriptors a log holds: at most one per segment (its `.log`), none for
indexes, and no more than the process-wide bound of `open_segment_files`
however many segments exist; running out of descriptors costs old segments
their descriptor, not the append."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from kref.storage import segment as segment_module
from kref.storage.config import LogConfig
from kref.storage.index import OffsetIndex
from kref.storage.log import Log

from .batches import decode_values, make_batch


def open_files(suffix: str) -> list[str]:
    names = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith(suffix):
            names.append(target)
    return names


def open_log(path, **props) -> Log:
    return Log.open(str(path), LogConfig.from_properties(props), 0)


def test_a_segment_holds_one_descriptor_and_indexes_none(tmp_path):
    log = open_log(tmp_path / "t-0", **{"segment.bytes": "1024", "index.interval.bytes": "1"})
    for i in range(40):
        log.append_as_leader(make_batch([b"x" * 100]), 0, i)
    assert len(log.segments) > 5
    assert open_files(".index") == [] and open_files(".timeindex") == []
    held = [p for p in open_files(".log") if p.startswith(str(tmp_path))]
    assert 1 <= len(held) <= len(log.segments)
    assert decode_values(log.read(0, 1 << 20, max_offset=40).records)[0] == (0, b"x" * 100)
    log.close()
    assert [p for p in open_files(".log") if p.startswith(str(tmp_path))] == []


def test_descriptors_stay_bounded_across_many_logs(tmp_path):
    files = segment_module.open_segment_files
    saved = files.capacity
    files.resize(4)
    try:
        logs = [open_log(tmp_path / f"t-{p}") for p in range(20)]
        for round_ in range(3):
            for p, log in enumerate(logs):
                log.append_as_leader(make_batch([f"{p}/{round_}".encode()]), 0, round_)
                assert len(files) <= 4
        assert len([p for p in open_files(".log") if p.startswith(str(tmp_path))]) <= 4
        for p, log in enumerate(logs):
            values = [v for _, v in decode_values(log.read(0, 1 << 20).records)]
            assert values == [f"{p}/{r}".encode() for r in range(3)]
            log.close()
        # Evicted descriptors lose nothing: everything reads back after a reopen.
        reopened = open_log(tmp_path / "t-7")
        assert [v for _, v in decode_values(reopened.read(0, 1 << 20).records)] == [b"7/0", b"7/1", b"7/2"]
        reopened.close()
    finally:
        files.resize(saved)


def test_flush_writes_pending_index_entries(tmp_path):
    log = open_log(tmp_path / "t-0", **{"index.interval.bytes": "1"})
    for i in range(5):
        log.append_as_leader(make_batch([b"v" * 10]), 0, i)
    seg = log.active_segment
    log.flush()
    on_disk = OffsetIndex(seg.offset_index.path, seg.base_offset, 1 << 20)
    on_disk.open(preallocate=False)
    assert on_disk.entries() == seg.offset_index.entries() and len(on_disk) == 4
    log.close()


def test_unclean_stop_loses_only_unwritten_index_entries(tmp_path):
    log = open_log(tmp_path / "t-0", **{"index.interval.bytes": "1"})
    for i in range(5):
        log.append_as_leader(make_batch([f"{i}".encode()]), 0, i)
    log.close_uncleanly()  # entries appended since the last flush never reach the file
    log = Log.open(str(tmp_path / "t-0"), LogConfig.from_properties({"index.interval.bytes": "1"}), 0, had_clean_shutdown=False)
    assert len(log.active_segment.offset_index) == 4  # rebuilt by recovery
    assert [v for _, v in decode_values(log.read(0, 1 << 20).records)] == [b"0", b"1", b"2", b"3", b"4"]
    log.close()


def test_out_of_descriptors_evicts_old_segments_instead_of_failing(tmp_path):
    # In a child process: the test lowers its own descriptor limit.
    script = textwrap.dedent(
        f"""
        import os, resource, sys
        sys.path[:0] = {sys.path!r}
        from kref.storage import segment
        from kref.storage.config import LogConfig
        from kref.storage.log import Log
        from tests.storage.batches import make_batch
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        segment.open_segment_files.resize(1000)  # the bound alone would not save us
        logs = [Log.open(os.path.join({str(tmp_path)!r}, f"t-{{p}}"), LogConfig.from_properties({{}}), 0) for p in range(60)]
        for log in logs:
            log.append_as_leader(make_batch([b"one"]), 0, 0)
        hog = []
        try:
            while True:
                hog.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass
        # Every descriptor is taken: a roll needs new ones, and the logs give
        # back their own (old segments reopen lazily when read again).
        for log in logs:
            log.roll(0)
            log.append_as_leader(make_batch([b"two"]), 0, 0)
        for log in logs:
            assert log.read(0, 1 << 20).records and log.read(1, 1 << 20).records
        print("evictions", segment.open_segment_files.evictions)
        print("evictions", segment.open_segment_files.evictions)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=os.getcwd())
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) > 0

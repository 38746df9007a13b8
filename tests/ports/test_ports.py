"""The ports: the lossy in-memory disk keeps exactly what was made durable,
the virtual clock moves only when told, and the local metadata source,
written against the file-system port, survives a power cut at any point."""

from __future__ import annotations

import uuid

import pytest

from kref.metadata import records as r
from kref.metadata.local_source import LocalMetadataSource
from kref.ports import ManualClock, MemoryFileSystem, RealFileSystem

TID = uuid.UUID(int=3)


def test_unsynced_bytes_and_names_are_lost_in_a_crash():
    fs = MemoryFileSystem()
    fs.makedirs("/d")
    fs.write_bytes("/d/a", b"one")
    fs.fsync("/d/a")
    fs.crash()
    assert not fs.exists("/d/a")  # the name was never made durable
    fs.write_bytes("/d/a", b"one")
    fs.fsync("/d/a")
    fs.fsync_dir("/d")
    fs.append("/d/a", b"-two")
    assert fs.read_bytes("/d/a") == b"one-two"
    fs.crash()
    assert fs.read_bytes("/d/a") == b"one"
    fs.append("/d/a", b"-three")
    fs.crash(keep_torn_bytes=2)
    assert fs.read_bytes("/d/a") == b"one-t"  # a torn write


def test_a_rename_is_durable_only_with_its_directory():
    fs = MemoryFileSystem()
    fs.makedirs("/d")
    fs.write_bytes("/d/x", b"old")
    fs.fsync("/d/x")
    fs.fsync_dir("/d")
    fs.write_bytes("/d/x.tmp", b"new")
    fs.fsync("/d/x.tmp")
    fs.replace("/d/x.tmp", "/d/x")
    assert fs.read_bytes("/d/x") == b"new"
    fs.crash()
    assert fs.read_bytes("/d/x") == b"old" and fs.listdir("/d") == ["x"]


def test_the_disk_is_bounded():
    fs = MemoryFileSystem(max_bytes=10)
    fs.makedirs("/d")
    with pytest.raises(OSError):
        fs.write_bytes("/d/big", b"x" * 11)


def test_real_and_memory_file_systems_agree(tmp_path):
    for fs, root in ((RealFileSystem(), str(tmp_path)), (MemoryFileSystem(), "/root")):
        fs.makedirs(root + "/sub")
        fs.write_bytes(root + "/sub/f", b"ab")
        fs.append(root + "/sub/f", b"c")
        fs.fsync(root + "/sub/f")
        fs.fsync_dir(root + "/sub")
        assert fs.read_bytes(root + "/sub/f") == b"abc" and fs.listdir(root + "/sub") == ["f"]
        fs.unlink(root + "/sub/f")
        assert not fs.exists(root + "/sub/f")


def test_manual_clock():
    clock = ManualClock(5)
    assert clock.advance(10) == 15 == clock.now_ms() == clock.monotonic_ms()
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_the_metadata_source_survives_power_cuts():
    fs = MemoryFileSystem()
    fs.makedirs("/data")
    source = LocalMetadataSource("/data", 1, fs=fs)
    source.open()
    source.commit([r.TopicRecord("t", TID), r.PartitionRecord(0, TID, (1,), (1,), 1)])
    for torn in (0, 5):
        fs.crash(keep_torn_bytes=torn)  # committed means fsynced: it survives
        again = LocalMetadataSource("/data", 1, fs=fs)
        again.open()
        assert again.image == source.image
    # a commit whose append reached the disk only in part: cut off at open
    again.commit([r.PartitionChangeRecord(0, TID, leader=1)])
    fs.append("/data/kref-metadata.log", b"\x00\x00\x00\x30garbage")
    fs.crash(keep_torn_bytes=7)
    last = LocalMetadataSource("/data", 1, fs=fs)
    last.open()
    assert last.image.partition("t", 0).leader_epoch == 1


def test_controller_files_are_old_or_new_after_a_power_cut_at_any_write():
    from kref.storage import meta_properties
    from kref.storage.metadata_log import QuorumState, read_quorum_state, write_quorum_state
    from kref.ports.fs import PowerCut

    old_meta = meta_properties.MetaProperties("Xy3Q2mJrQh2pQk5h7YfVwA", 1, None, 1)
    new_meta = meta_properties.MetaProperties("Xy3Q2mJrQh2pQk5h7YfVwA", 1, "AAAAAAAAAAAAAAAAAAAAAQ", 1)
    old_state, new_state = QuorumState(3, 2, 2), QuorumState(4, 1, -1)
    for cut in range(1, 6):
        fs = MemoryFileSystem()
        meta_properties.write("/data", old_meta, fs)
        write_quorum_state("/data", old_state, [1, 2, 3], fs)
        fs.cut_power_after(cut)
        try:
            meta_properties.write("/data", new_meta, fs)
            write_quorum_state("/data", new_state, [1, 2, 3], fs)
        except PowerCut:
            pass
        fs.crash(keep_torn_bytes=3)
        assert meta_properties.read("/data", fs) in (old_meta, new_meta), cut
        assert read_quorum_state("/data", fs) in (old_state, new_state), cut


def test_a_log_dir_lock_is_exclusive_until_closed_or_crashed(tmp_path):
    from kref.storage.log_manager import LogDirInUseError, lock_log_dir

    for fs, root in ((RealFileSystem(), str(tmp_path)), (MemoryFileSystem(), "/logs")):
        fs.makedirs(root)
        held = lock_log_dir(root, fs)
        with pytest.raises(LogDirInUseError):  # flock is per open file: even this process is refused
            lock_log_dir(root, fs)
        held.close()
        again = lock_log_dir(root, fs)
        if isinstance(fs, MemoryFileSystem):
            fs.crash()  # the holder died: its lock went with it
            lock_log_dir(root, fs).close()
        again.close()

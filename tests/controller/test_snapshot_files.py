"""Snapshot files (kref/controller/snapshot.py): Kafka's layout, validation, durability, policy.

The layout is checked by decoding the bytes with kref's record batch reader
(not with the module's own decoder): a SnapshotHeader control batch at offset
0, data batches stamped with the snapshot's epoch, a SnapshotFooter control
batch last. Durability runs on the FileSystem port's MemoryFileSystem, whose
crash() keeps only what was fsynced (and renamed with the directory synced).
"""

from __future__ import annotations

import pytest

from kref.controller import snapshot as snap
from kref.ports.fs import MemoryFileSystem
from kref.records.batch import decode_batch
from kref.records.control import ControlRecordType, parse_control_record_type
from kref.records.header import iter_headers

DIR = "/data/__cluster_metadata-0"
ID = snap.SnapshotId(1234, 7)


def _records(n: int) -> list[bytes]:
    return [f"record-{i}".encode() for i in range(n)]


def test_file_name_is_kafkas():
    assert ID.file_name == "00000000000000001234-0000000007.checkpoint"
    assert snap.parse_file_name(ID.file_name) == ID
    assert snap.parse_file_name("00000000000000001234-0000000007.checkpoint.part") is None
    assert snap.parse_file_name("00000000000000001234.log") is None


def test_layout_header_records_footer():
    data = snap.encode_snapshot(ID, _records(2500), 1_700_000_000_000, 42)
    headers = list(iter_headers(data, verify=True))
    assert [h.base_offset for h in headers] == [0, 1, 1001, 2001, 2501]
    assert all(h.partition_leader_epoch == 7 for h in headers)
    first, last = decode_batch(data, headers[0].position), decode_batch(data, headers[-1].position)
    assert first.header.is_control_batch and last.header.is_control_batch
    assert parse_control_record_type(first.records[0].key) is ControlRecordType.SNAPSHOT_HEADER
    assert parse_control_record_type(last.records[0].key) is ControlRecordType.SNAPSHOT_FOOTER
    assert first.records[0].value[:10] == (0).to_bytes(2, "big") + (1_700_000_000_000).to_bytes(8, "big")
    values = [r.value for h in headers[1:-1] for r in decode_batch(data, h.position).records]
    assert values == _records(2500)
    decoded = snap.decode_snapshot(ID, data)
    assert decoded.records == tuple(_records(2500)) and decoded.last_contained_log_timestamp == 1_700_000_000_000


def test_an_empty_image_is_a_header_and_a_footer():
    decoded = snap.decode_snapshot(ID, snap.encode_snapshot(ID, [], 0, 0))
    assert decoded.records == ()


@pytest.mark.parametrize("damage, reason", [
    (lambda d: d[: len(d) - 10], "bad batch"),  # torn inside the footer batch
    (lambda d: d[: list(iter_headers(d))[-1].position], "no SnapshotFooter"),  # cut before the footer
    (lambda d: d[:40] + bytes([d[40] ^ 0xFF]) + d[41:], "CRC"),  # a flipped byte
    (lambda d: b"", "no SnapshotHeader"),
])
def test_a_damaged_snapshot_is_refused_with_its_reason(damage, reason):
    data = snap.encode_snapshot(ID, _records(30), 5, 5)
    with pytest.raises(snap.SnapshotError, match=reason):
        snap.decode_snapshot(ID, damage(data))


def test_records_without_a_header_are_refused():
    data = snap.encode_snapshot(ID, _records(3), 5, 5)
    first = list(iter_headers(data))[1]
    with pytest.raises(snap.SnapshotError):
        snap.decode_snapshot(ID, data[first.position :])


def test_a_written_snapshot_survives_a_crash_and_a_partial_one_does_not():
    fs = MemoryFileSystem()
    store = snap.SnapshotStore(fs, DIR)
    fs.fsync_dir("/data")
    store.write(ID, snap.encode_snapshot(ID, _records(5), 1, 1))
    fetching = snap.SnapshotId(2000, 8)
    store.start_partial(fetching)
    store.append_partial(fetching, b"half a snapshot")
    fs.crash(keep_torn_bytes=3)
    store = snap.SnapshotStore(fs, DIR)
    assert store.ids() == [ID]
    assert store.read(ID).records == tuple(_records(5))
    store.remove_partial()
    assert not [n for n in fs.listdir(DIR) if n.endswith(".part")]


def test_latest_valid_skips_a_torn_newer_snapshot(caplog):
    fs = MemoryFileSystem()
    store = snap.SnapshotStore(fs, DIR)
    store.write(ID, snap.encode_snapshot(ID, _records(5), 1, 1))
    newer = snap.SnapshotId(5000, 9)
    data = snap.encode_snapshot(newer, _records(5), 1, 1)
    store.write(newer, data[: len(data) // 2])
    with caplog.at_level("ERROR", logger="kref.raft.snapshot"):
        latest = store.latest_valid()
    assert latest.snapshot_id == ID
    assert f"{newer.file_name} ignored" in caplog.text


def test_snapshot_due_by_bytes_and_by_time():
    policy = snap.SnapshotPolicy(max_bytes_between_snapshots=100, max_interval_ms=1000)
    due = lambda **kw: snap.snapshot_due(policy, **{"applied_offset": 10, "latest_end_offset": 5, **kw})  # noqa: E731
    assert due(new_bytes=100, ms_since_latest=0)
    assert not due(new_bytes=99, ms_since_latest=999)
    assert due(new_bytes=1, ms_since_latest=1000)
    assert not due(new_bytes=0, ms_since_latest=10_000)
    assert not due(new_bytes=500, ms_since_latest=0, latest_end_offset=10)  # nothing new applied


def test_retention_never_passes_the_latest_snapshot():
    policy = snap.SnapshotPolicy(retention_bytes=1000, retention_ms=60_000)
    start = lambda **kw: snap.retention_log_start(policy, **{  # noqa: E731
        "log_size_bytes": 500, "snapshot_bytes": 100, "oldest_timestamp": 0, "latest_snapshot_end": 40,
        "log_start_offset": 0, "now_ms": 1000, **kw})
    assert start() == 0  # under both bounds
    assert start(log_size_bytes=950) == 40  # over the bytes bound: up to the snapshot, never further
    assert start(now_ms=60_001) == 40  # the oldest is too old
    assert start(log_size_bytes=950, log_start_offset=40) == 40
    unbounded = snap.SnapshotPolicy(retention_bytes=-1, retention_ms=-1)
    assert snap.retention_log_start(unbounded, log_size_bytes=1 << 40, snapshot_bytes=0, oldest_timestamp=0,
                                    latest_snapshot_end=40, log_start_offset=0, now_ms=1 << 40) == 0

"""Idempotent-producer state (KIP-98): sequence/epoch checks, duplicate detection, .snapshot files.

Checks Kafka's rules per partition: in-order sequences accepted, a retry of
any of the last 5 batches answered with its original offsets, a gap rejected
(OUT_OF_ORDER_SEQUENCE_NUMBER), an older epoch fenced (INVALID_PRODUCER_EPOCH),
a new epoch restarting at sequence 0; and that the state survives a restart
through Kafka's snapshot layout plus replay of the batches after it.
"""

from __future__ import annotations

import struct

import crc32c
import pytest

from kref.records.header import BatchHeader
from kref.storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from kref.storage.log import Log
from kref.storage.producer_state import (
    ProducerStateManager,
    list_snapshots,
    snapshot_path,
)


def header(base_offset, pid=1000, epoch=0, seq=0, count=1, ts=1, attributes=0):
    return BatchHeader(0, base_offset, 100, 0, 2, 0, attributes, count - 1, ts, ts, pid, epoch, seq, count)


class FakeLogAppender:
    """Plays the log's side of the hook: offsets assigned in order."""

    def __init__(self, state):
        self.state = state
        self.log_end_offset = 0
        self.batches = []

    def append(self, pid=1000, epoch=0, seq=0, count=1):
        dup = self.state.check_batch(header(self.log_end_offset, pid, epoch, seq, count))
        if dup is not None:
            return ("duplicate", dup)
        h = header(self.log_end_offset, pid, epoch, seq, count)
        self.state.on_batch_appended(h)
        self.batches.append(h)
        self.log_end_offset = h.next_offset
        return (h.base_offset, h.last_offset)


def test_in_order_then_duplicate_then_gap(tmp_path):
    log = FakeLogAppender(ProducerStateManager(tmp_path))
    assert log.append(seq=0, count=3) == (0, 2)
    assert log.append(seq=3, count=2) == (3, 4)
    assert log.append(seq=0, count=3) == ("duplicate", (0, 2))
    assert log.append(seq=3, count=2) == ("duplicate", (3, 4))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(seq=6)  # 5 was skipped
    assert log.log_end_offset == 5


def test_only_last_five_batches_are_remembered(tmp_path):
    log = FakeLogAppender(ProducerStateManager(tmp_path))
    for seq in range(6):
        log.append(seq=seq)
    assert log.append(seq=1) == ("duplicate", (1, 1))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(seq=0)  # too old to recognise: neither a known duplicate nor next in line


def test_epochs(tmp_path):
    log = FakeLogAppender(ProducerStateManager(tmp_path))
    log.append(epoch=1, seq=0)
    log.append(epoch=1, seq=1)
    with pytest.raises(InvalidProducerEpochError):
        log.append(epoch=0, seq=2)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(epoch=2, seq=5)
    assert log.append(epoch=2, seq=0) == (2, 2)
    # the same sequence under the old epoch is not a duplicate of the new one
    with pytest.raises(InvalidProducerEpochError):
        log.append(epoch=1, seq=0)


def test_unknown_producer_and_non_idempotent_batches_pass(tmp_path):
    log = FakeLogAppender(ProducerStateManager(tmp_path))
    assert log.append(pid=7, seq=42) == (0, 0)  # Kafka accepts any first sequence of an unknown producer
    assert log.append(pid=-1, epoch=-1, seq=-1) == (1, 1)
    assert log.append(pid=-1, epoch=-1, seq=-1) == (2, 2)


def test_sequence_wraps_at_int32_max(tmp_path):
    log = FakeLogAppender(ProducerStateManager(tmp_path))
    log.append(seq=2**31 - 2, count=2)
    assert log.append(seq=0) == (2, 2)


def test_snapshot_layout_is_kafkas(tmp_path):
    state = ProducerStateManager(tmp_path)
    log = FakeLogAppender(state)
    log.append(pid=5, epoch=3, seq=0, count=2)
    log.append(pid=5, epoch=3, seq=2, count=4)
    path = state.take_snapshot(log.log_end_offset)
    assert path == tmp_path / "00000000000000000006.snapshot"
    data = path.read_bytes()
    body = struct.pack(">i", 1) + struct.pack(">qhiqiqiq", 5, 3, 5, 5, 3, 1, -1, -1)
    assert data == struct.pack(">hI", 1, crc32c.crc32c(body)) + body


def test_restart_loads_snapshot_and_replays_the_rest(tmp_path):
    state = ProducerStateManager(tmp_path)
    log = FakeLogAppender(state)
    log.append(seq=0)
    log.append(seq=1)
    state.take_snapshot(log.log_end_offset)
    log.append(seq=2)  # after the snapshot: must come back through replay

    reloaded = ProducerStateManager(tmp_path)
    reloaded.truncate_to(log.log_end_offset)
    assert reloaded.replay_start_offset == 2
    for h in log.batches:  # the log may replay from anywhere before; covered batches are skipped
        reloaded.on_batch_appended(h)
    log2 = FakeLogAppender(reloaded)
    log2.log_end_offset = log.log_end_offset
    assert log2.append(seq=2) == ("duplicate", (2, 2))
    assert log2.append(seq=1) == ("duplicate", (1, 1))
    with pytest.raises(OutOfOrderSequenceError):
        log2.append(seq=4)
    assert log2.append(seq=3) == (3, 3)


def test_corrupt_and_future_snapshots_are_discarded(tmp_path):
    state = ProducerStateManager(tmp_path)
    log = FakeLogAppender(state)
    log.append(seq=0)
    state.take_snapshot(1)
    log.append(seq=1)
    state.take_snapshot(2)
    snapshot_path(tmp_path, 2).write_bytes(b"\x00\x01garbage")
    snapshot_path(tmp_path, 9).write_bytes(b"")  # unreadable: skipped and deleted
    reloaded = ProducerStateManager(tmp_path)
    reloaded.truncate_to(2)
    assert reloaded.replay_start_offset == 1
    assert [o for o, _ in list_snapshots(tmp_path)] == [1]
    assert reloaded.last_entry(1000).last_sequence == 0


def test_truncate_goes_back_to_the_newest_snapshot_at_or_below_the_point(tmp_path):
    """Kafka's truncateAndReload: snapshots past the point are deleted and the state is
    the newest remaining snapshot's; the log replays its batches from there
    (replay_start_offset). Cutting the retained batches instead forgot a producer whose
    retained batches all lay past the point."""
    state = ProducerStateManager(tmp_path)
    log = FakeLogAppender(state)
    log.append(seq=0)
    state.take_snapshot(1)
    for seq in range(1, 3):
        log.append(seq=seq)
    state.take_snapshot(3)
    state.truncate_to(2)
    assert [o for o, _ in list_snapshots(tmp_path)] == [1]
    assert state.replay_start_offset == 1
    assert state.last_entry(1000).last_sequence == 0
    log.log_end_offset = 1
    assert log.append(seq=1) == (1, 1)  # what the log replays from offset 1
    state.truncate_to(2)  # the state does not reach past 2: nothing to do
    assert state.last_entry(1000).last_sequence == 1
    state.truncate_to(0)
    assert state.last_entry(1000) is None and state.replay_start_offset == 0
    assert list_snapshots(tmp_path) == []


def test_expiration(tmp_path):
    state = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)
    state.on_batch_appended(header(0, pid=1, ts=500))
    state.on_batch_appended(header(1, pid=2, ts=5000))
    assert state.remove_expired_producers(now_ms=5200) == [1]
    assert state.last_entry(2) is not None


def _batch(seq, values=(b"v",), pid=1000, epoch=0):
    from kref.records.batch import Record, build_batch

    return build_batch([Record(value=v) for v in values], producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_with_a_real_log_across_clean_and_unclean_restarts(tmp_path):
    d = tmp_path / "t-0"
    log = Log.open(str(d), None, 0, producer_state=ProducerStateManager(d))
    assert log.append_as_leader(_batch(0, [b"a", b"b"]), 0, 0).first_offset == 0
    assert log.append_as_leader(_batch(2), 0, 0).first_offset == 2
    retry = log.append_as_leader(_batch(2), 0, 0)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (2, 2)
    assert log.log_end_offset == 3
    log.close()
    assert [o for o, _ in list_snapshots(d)] == [3]

    log = Log.open(str(d), None, 0, producer_state=ProducerStateManager(d))
    assert log.append_as_leader(_batch(2), 0, 0).duplicate
    # like Kafka's, the snapshot keeps only each producer's last batch
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(_batch(0, [b"a", b"b"]), 0, 0)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(_batch(5), 0, 0)
    log.append_as_leader(_batch(3), 0, 0)
    log.flush()
    # an unclean stop: no snapshot at 4, so the batch at 3 is rebuilt by replay
    log2 = Log.open(str(d), None, 0, producer_state=ProducerStateManager(d))
    assert log2.append_as_leader(_batch(3), 0, 0).duplicate
    assert log2.append_as_leader(_batch(4), 0, 0).first_offset == 4

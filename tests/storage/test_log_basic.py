"""Log basics (LeaderAppend / FollowerFetch storage side): offsets assigned from
log_end_offset, leader epoch stamped, whole-batch reads with byte limits and
max_offset, rolls on segment.bytes, truncation, close/reopen, Kafka's file
names and index layouts, and the producer-state hook (dedup of a retried batch)."""

from __future__ import annotations

import os
import struct

import pytest

from kref.records.header import iter_headers
from kref.storage.config import LogConfig
from kref.storage.errors import (
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from kref.records.errors import InvalidCrcError
from kref.storage.log import Log

from .batches import SimpleProducerState, decode_values, make_batch


def open_log(tmp_path, **props) -> Log:
    return Log.open(str(tmp_path / "topic-0"), LogConfig.from_properties(props), 0)


def test_leader_append_assigns_offsets_and_epoch(tmp_path):
    log = open_log(tmp_path)
    info = log.append_as_leader(make_batch([b"a", b"b"]), leader_epoch=3, now_ms=10)
    assert (info.first_offset, info.last_offset, info.records_count) == (0, 1, 2)
    info = log.append_as_leader(make_batch([b"c"], base_offset=77), leader_epoch=3, now_ms=11)
    assert (info.first_offset, info.last_offset) == (2, 2)
    assert log.log_end_offset == 3
    data = log.read(0, 1 << 20).records
    assert decode_values(data) == [(0, b"a"), (1, b"b"), (2, b"c")]
    headers = list(iter_headers(data, verify=True))
    assert [h.partition_leader_epoch for h in headers] == [3, 3]
    assert log.leader_epoch_cache.entries() == [(3, 0)]
    log.close()


def test_log_append_time_stamps_batch_and_keeps_crc(tmp_path):
    log = open_log(tmp_path, **{"message.timestamp.type": "LogAppendTime"})
    info = log.append_as_leader(make_batch([b"x"], timestamp=5), leader_epoch=0, now_ms=123_456)
    assert info.log_append_time == 123_456
    (h,) = iter_headers(log.read(0, 1000).records, verify=True)
    assert h.is_log_append_time and h.max_timestamp == 123_456
    log.close()


def test_read_limits_whole_batches_and_max_offset(tmp_path):
    log = open_log(tmp_path)
    sizes = []
    for i in range(5):
        batch = make_batch([b"v%d" % i * 10])
        sizes.append(len(batch))
        log.append_as_leader(batch, 0, i)
    # a byte limit inside the second batch returns only the first
    fetched = log.read(0, sizes[0] + 5)
    assert len(fetched.records) == sizes[0] and fetched.next_offset == 1
    # min_one_message returns a batch larger than the limit
    assert len(log.read(2, 1).records) == sizes[2]
    assert log.read(2, 1, min_one_message=False).records == b""
    # max_offset is exclusive (the high watermark)
    assert [o for o, _ in decode_values(log.read(0, 1 << 20, max_offset=3).records)] == [0, 1, 2]
    assert log.read(3, 1 << 20, max_offset=3).records == b""
    assert log.read(5, 100).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(6, 100)
    log.close()


def test_read_from_middle_of_batch_returns_whole_batch(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(make_batch([b"a", b"b", b"c"]), 0, 0)
    fetched = log.read(1, 1000)
    assert fetched.first_offset == 0
    assert [o for o, _ in decode_values(fetched.records)] == [0, 1, 2]
    log.close()


def test_roll_on_segment_bytes_and_kafka_file_layout(tmp_path):
    log = open_log(tmp_path, **{"segment.bytes": 300, "index.interval.bytes": 1})
    for i in range(20):
        log.append_as_leader(make_batch([b"%03d" % i * 10]), 0, i)
    assert len(log.segments) > 3
    names = sorted(os.listdir(log.dir))
    assert f"{0:020d}.log" in names and f"{0:020d}.index" in names and f"{0:020d}.timeindex" in names
    # every segment starts at the previous one's end
    for a, b in zip(log.segments, log.segments[1:]):
        assert a.next_offset == b.base_offset
        assert os.path.getsize(a.offset_index.path) == 8 * len(a.offset_index)  # trimmed on roll
        assert os.path.getsize(a.time_index.path) == 12 * len(a.time_index)
    # the active index is preallocated
    assert os.path.getsize(log.active_segment.offset_index.path) == 10 * 1024 * 1024
    # index entries: relative offset, position of the batch ending there
    seg = log.segments[1]
    raw = open(seg.offset_index.path, "rb").read()
    for rel, pos in struct.iter_unpack(">ii", raw):
        header = seg.peek_header(pos)
        assert header.last_offset == seg.base_offset + rel
    assert [o for o, _ in decode_values(log.read(0, 1 << 20).records)] == list(range(20))
    log.close()
    for seg in log.segments:
        assert os.path.getsize(seg.offset_index.path) % 8 == 0


def test_reopen_after_close(tmp_path):
    log = open_log(tmp_path, **{"segment.bytes": 200})
    for i in range(10):
        log.append_as_leader(make_batch([b"x" * i]), i // 3, i)
    expected = log.read(0, 1 << 20).records
    log.close()
    log2 = open_log(tmp_path, **{"segment.bytes": 200})
    assert log2.log_end_offset == 10
    assert log2.read(0, 1 << 20).records == expected
    assert log2.leader_epoch_cache.entries() == [(0, 0), (1, 3), (2, 6), (3, 9)]
    info = log2.append_as_leader(make_batch([b"more"]), 4, 99)
    assert info.first_offset == 10
    log2.close()


def test_truncate_to_and_epoch_cache(tmp_path):
    log = open_log(tmp_path, **{"segment.bytes": 200})
    for i in range(10):
        log.append_as_leader(make_batch([b"y" * 5]), i // 2, i)
    assert log.truncate_to(5)
    assert log.log_end_offset == 5
    assert [o for o, _ in decode_values(log.read(0, 1 << 20).records)] == [0, 1, 2, 3, 4]
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 2), (2, 4)]
    assert log.end_offset_for_epoch(1) == (1, 4)
    assert log.end_offset_for_epoch(2) == (2, 5)
    assert not log.truncate_to(7)
    log.append_as_leader(make_batch([b"z"]), 9, 0)
    assert log.log_end_offset == 6
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert log.read(100, 10).records == b""
    log.close()


def test_follower_append_keeps_offsets(tmp_path):
    log = open_log(tmp_path)
    info = log.append_as_follower(make_batch([b"a", b"b"], base_offset=0, partition_leader_epoch=7))
    assert (info.first_offset, info.last_offset) == (0, 1)
    info = log.append_as_follower(make_batch([b"c"], base_offset=5, partition_leader_epoch=8))
    assert log.log_end_offset == 6
    assert log.leader_epoch_cache.entries() == [(7, 0), (8, 5)]
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(make_batch([b"d"], base_offset=3))
    log.close()


def test_rejects_bad_crc_and_too_large(tmp_path):
    log = open_log(tmp_path, **{"max.message.bytes": 200})
    bad = bytearray(make_batch([b"hello"]))
    bad[-1] ^= 0xFF
    with pytest.raises(InvalidCrcError):
        log.append_as_leader(bytes(bad), 0, 0)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(make_batch([b"x" * 300]), 0, 0)
    assert log.log_end_offset == 0
    log.close()


def test_producer_state_hook_deduplicates_retry(tmp_path):
    ps = SimpleProducerState()
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), 0, producer_state=ps)
    log.append_as_leader(make_batch([b"x"]), 0, 0)
    first = log.append_as_leader(make_batch([b"a", b"b"], producer_id=9, producer_epoch=0, base_sequence=0), 0, 1)
    retry = log.append_as_leader(make_batch([b"a", b"b"], producer_id=9, producer_epoch=0, base_sequence=0), 0, 2)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert log.log_end_offset == 3
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(make_batch([b"c"], producer_id=9, producer_epoch=0, base_sequence=5), 0, 3)
    log.append_as_leader(make_batch([b"c"], producer_id=9, producer_epoch=0, base_sequence=2), 0, 3)
    log.truncate_to(3)
    assert [b.base_offset for b in ps.batches] == [1]
    log.close()
    assert ps.snapshots == [3]
    # reopening replays the log into a fresh manager
    ps2 = SimpleProducerState()
    log2 = Log.open(str(tmp_path / "t-0"), LogConfig(), 0, producer_state=ps2)
    assert [(b.base_offset, b.base_sequence) for b in ps2.batches] == [(1, 0)]
    log2.close()


def test_fetch_offset_by_timestamp(tmp_path):
    log = open_log(tmp_path, **{"segment.bytes": 250, "index.interval.bytes": 1})
    for i in range(10):
        log.append_as_leader(make_batch([b"a", b"b"], timestamps=[1000 + 10 * i, 1005 + 10 * i]), i // 4, 0)
    assert log.fetch_offset_by_timestamp(-2) == (-1, 0, 0)
    assert log.fetch_offset_by_timestamp(-1) == (-1, 20, 2)
    assert log.fetch_offset_by_timestamp(1000) == (1000, 0, 0)
    assert log.fetch_offset_by_timestamp(1003) == (1005, 1, 0)
    assert log.fetch_offset_by_timestamp(1041) == (1045, 9, 1)
    assert log.fetch_offset_by_timestamp(1095) == (1095, 19, 2)
    assert log.fetch_offset_by_timestamp(1096) is None
    assert log.fetch_offset_by_timestamp(-3) == (1095, 19, 2)
    log.close()


def test_roll_triggers_segment_ms_full_index_and_offset_overflow(tmp_path):
    # segment.ms: measured from the first batch's timestamp to the new batch's
    log = open_log(tmp_path, **{"segment.ms": "100"})
    log.append_as_leader(make_batch([b"a"], timestamp=1000), 0, 1000)
    log.append_as_leader(make_batch([b"b"], timestamp=1100), 0, 1100)
    assert len(log.segments) == 1
    log.append_as_leader(make_batch([b"c"], timestamp=1101), 0, 1101)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()
    # full indexes (segment.index.bytes = 24: 3 offset entries, 2 time entries)
    log = Log.open(str(tmp_path / "idx-0"), LogConfig.from_properties({"segment.index.bytes": "24", "index.interval.bytes": "0"}), 0)
    for i in range(7):
        log.append_as_leader(make_batch([b"x"]), 0, i)
    assert [len(s.offset_index) for s in log.segments] == [3, 2]  # the first rolled when full
    log.close()
    # the 4-byte relative offset would overflow: a follower batch far ahead rolls
    log = Log.open(str(tmp_path / "far-0"), LogConfig(), 0)
    log.append_as_follower(make_batch([b"x"], base_offset=0))
    far = (1 << 31) + 5
    log.append_as_follower(make_batch([b"y"], base_offset=far))
    assert [s.base_offset for s in log.segments] == [0, far]
    assert [o for o, _ in decode_values(log.read(far, 100).records)] == [far]
    assert log.fetch_offset_by_timestamp(1000)[1] == 0
    log.close()


def test_timestamp_limits_and_compressed_lookup(tmp_path):
    from kref.storage.errors import InvalidTimestampError

    log = open_log(tmp_path, **{"message.timestamp.before.max.ms": "1000", "message.timestamp.after.max.ms": "10"})
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(make_batch([b"old"], timestamp=1000), 0, 5000)
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(make_batch([b"future"], timestamp=5011), 0, 5000)
    log.append_as_leader(make_batch([b"a", b"b", b"c"], timestamps=[4500, 4600, 4700], compression_type=1), 0, 5000)
    assert log.fetch_offset_by_timestamp(4550) == (4600, 1, 0)
    assert log.fetch_offset_by_timestamp(-3) == (4700, 2, 0)
    log.close()


def test_topic_id_is_checked(tmp_path):
    import uuid

    from kref.storage.log import InconsistentTopicIdError

    tid = uuid.uuid4()
    Log.open(str(tmp_path / "t-0"), LogConfig(), 0, topic_id=tid).close()
    assert Log.open(str(tmp_path / "t-0"), LogConfig(), 0).topic_id == tid
    with pytest.raises(InconsistentTopicIdError):
        Log.open(str(tmp_path / "t-0"), LogConfig(), 0, topic_id=uuid.uuid4())


def test_retention_by_size_keeps_active_segment_and_respects_high_watermark(tmp_path):
    log = open_log(tmp_path, **{"segment.bytes": "200", "retention.bytes": "0", "file.delete.delay.ms": "0"})
    for i in range(8):
        log.append_as_leader(make_batch([b"q" * 50]), 0, i)
    log.delete_old_segments(10, 3)  # the owning core's high watermark
    assert log.log_start_offset <= 3
    assert log.segments[0].base_offset <= 3 < log.segments[0].next_offset or log.segments[0].base_offset == 3
    log.delete_old_segments(10, 8)
    assert log.log_start_offset == log.log_end_offset == 8
    assert len(log.segments) == 1 and log.active_segment.size == 0
    assert not any(n.endswith(".deleted") for n in os.listdir(log.dir))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(7, 100)
    log.close()


def test_disk_errors_become_kafka_storage_error(tmp_path):
    from kref.storage.errors import KafkaStorageError

    log = open_log(tmp_path)
    log.append_as_leader(make_batch([b"a"]), 0, 0)
    # The disk goes away under the log: its descriptor now names a directory,
    # which refuses both pwrite and pread.
    gone = os.open(str(tmp_path), os.O_RDONLY)
    os.dup2(gone, log.active_segment._fd.fd)
    os.close(gone)
    with pytest.raises(KafkaStorageError) as e:
        log.append_as_leader(make_batch([b"b"]), 0, 1)
    assert e.value.error_code == 56
    with pytest.raises(KafkaStorageError):
        log.read(0, 100)
    log.close_uncleanly()

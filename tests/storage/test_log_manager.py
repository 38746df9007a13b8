"""LogManager: placement over several log.dirs (fewest partitions first),
partition.metadata (KIP-516 topic id) in Kafka's format, the per-dir
OffsetCheckpoint files, the clean-shutdown marker deciding whether a log is
re-validated on start, delete_log and retention via cleanup()."""

from __future__ import annotations

import os
import uuid

import pytest

from kref.storage.checkpoint import read_offset_checkpoint, topic_id_to_string
from kref.storage.config import LogConfig
from kref.storage.log_manager import LogManager

from .batches import decode_values, make_batch


def test_placement_checkpoints_and_clean_shutdown(tmp_path):
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    lm = LogManager(dirs, LogConfig(), 0)
    lm.load_logs(0)
    tid = uuid.uuid4()
    logs = [lm.get_or_create_log("t", p, topic_id=tid) for p in range(4)]
    parents = [os.path.dirname(log.dir) for log in logs]
    assert parents == [dirs[0], dirs[1], dirs[0], dirs[1]]
    meta = open(os.path.join(logs[0].dir, "partition.metadata")).read()
    assert meta.splitlines() == ["version: 0", f"topic_id: {topic_id_to_string(tid)}"]
    for i, log in enumerate(logs):
        for _ in range(i + 1):
            log.append_as_leader(make_batch([b"x"]), 0, 0)
    logs[3].maybe_increment_log_start_offset(2)
    lm.shutdown()
    assert os.path.exists(os.path.join(dirs[0], ".kafka_cleanshutdown"))
    rp = read_offset_checkpoint(os.path.join(dirs[1], "recovery-point-offset-checkpoint"))
    assert rp == {("t", 1): 2, ("t", 3): 4}
    assert open(os.path.join(dirs[1], "log-start-offset-checkpoint")).read() == "0\n2\nt 1 0\nt 3 2\n"

    lm2 = LogManager(dirs, LogConfig(), 0)
    lm2.load_logs(0)
    assert lm2.had_clean_shutdown == {dirs[0]: True, dirs[1]: True}
    assert not os.path.exists(os.path.join(dirs[0], ".kafka_cleanshutdown"))
    log3 = lm2.get_log("t", 3)
    assert log3.topic_id == tid and log3.log_start_offset == 2 and log3.log_end_offset == 4
    assert [o for o, _ in decode_values(log3.read(2, 1 << 20).records)] == [2, 3]
    assert lm2.delete_log("t", 3)
    assert lm2.get_log("t", 3) is None
    assert not any(n.startswith("t-3") for n in os.listdir(dirs[1]))
    lm2.shutdown()

    # an unclean stop (no marker) re-validates from the recovery point
    lm3 = LogManager(dirs, LogConfig(), 0)
    lm3.load_logs(0)
    lm3.get_log("t", 0).append_as_leader(make_batch([b"y"]), 0, 0)
    lm4 = LogManager(dirs, LogConfig(), 0)
    lm4.load_logs(0)
    assert lm4.had_clean_shutdown[dirs[0]] is False
    assert lm4.get_log("t", 0).log_end_offset == 2


def test_cleanup_retention_by_time_and_flush_ms(tmp_path):
    config = LogConfig.from_properties({"segment.bytes": "200", "retention.ms": "1000", "flush.ms": "50", "file.delete.delay.ms": "10"})
    lm = LogManager([str(tmp_path)], config, 0)
    lm.load_logs(0)
    log = lm.get_or_create_log("r", 0)
    for i in range(10):
        log.append_as_leader(make_batch([b"z" * 40], timestamp=1000 + i), 0, 1000 + i)
    segments = len(log.segments)
    assert segments > 2
    assert lm.cleanup(1500) == 0
    assert log.recovery_point == log.log_end_offset  # flush.ms elapsed
    deleted = lm.cleanup(2006)
    assert deleted >= 1 and log.log_start_offset > 0
    assert any(n.endswith(".deleted") for n in os.listdir(log.dir))
    log.delete_pending_segments(2016)
    assert not any(n.endswith(".deleted") for n in os.listdir(log.dir))
    # everything expired: the log rolls and keeps an empty active segment
    lm.cleanup(5000)
    assert log.log_start_offset == log.log_end_offset == 10
    assert len(log.segments) == 1
    lm.shutdown()


def test_retention_is_bounded_by_the_owning_cores_high_watermark(tmp_path):
    """The replica core owns the high watermark: retention asks it
    (high_watermark_of), not the Log's checkpoint copy, and never deletes a
    segment holding an offset at or above it."""
    config = LogConfig.from_properties({"segment.bytes": "200", "retention.ms": "1000", "file.delete.delay.ms": "0"})
    lm = LogManager([str(tmp_path)], config, 0)
    lm.load_logs(0)
    log = lm.get_or_create_log("h", 0)
    for i in range(10):
        log.append_as_leader(make_batch([b"z" * 40], timestamp=1000 + i), 0, 1000 + i)
    log.recovered_high_watermark = 10  # the checkpoint it was loaded with says everything is committed
    core_hw = {("h", 0): 2}
    lm.cleanup(5000, core_hw.get)
    assert log.log_start_offset <= 2 < log.log_end_offset
    core_hw[("h", 0)] = 10
    lm.cleanup(5000, core_hw.get)
    assert log.log_start_offset == log.log_end_offset == 10
    lm.shutdown()


def test_delete_records_bound_is_the_cores_the_log_refuses_only_past_its_data(tmp_path):
    from kref.storage.errors import OffsetOutOfRangeError

    lm = LogManager([str(tmp_path)], LogConfig(), 0)
    lm.load_logs(0)
    log = lm.get_or_create_log("d", 0)
    for _ in range(5):
        log.append_as_leader(make_batch([b"x"]), 0, 0)
    log.recovered_high_watermark = 1
    assert log.maybe_increment_log_start_offset(3)  # the core decided 3 (its high watermark)
    assert log.log_start_offset == 3
    with pytest.raises(OffsetOutOfRangeError, match="beyond the log end 5"):
        log.maybe_increment_log_start_offset(6)
    lm.shutdown()


def test_the_high_watermark_checkpoint_is_written_from_the_cores(tmp_path):
    """replication-offset-checkpoint holds the owning core's high watermark (the
    one live copy); a log with no core keeps the value it was loaded with, and a
    reload hands that value back (Log.recovered_high_watermark) for the core."""
    from kref.storage.checkpoint import read_offset_checkpoint_or_empty

    core_hw = {("c", 0): 4}
    lm = LogManager([str(tmp_path)], LogConfig(), 0, high_watermark_of=core_hw.get)
    lm.load_logs(0)
    owned, loose = lm.get_or_create_log("c", 0), lm.get_or_create_log("n", 0)
    for _ in range(6):
        owned.append_as_leader(make_batch([b"x"]), 0, 0)
        loose.append_as_leader(make_batch([b"x"]), 0, 0)
    loose.recovered_high_watermark = 2
    lm.shutdown()
    path = tmp_path / "replication-offset-checkpoint"
    assert read_offset_checkpoint_or_empty(str(path)) == {("c", 0): 4, ("n", 0): 2}
    again = LogManager([str(tmp_path)], LogConfig(), 0)
    again.load_logs(0)
    assert again.get_or_create_log("c", 0).recovered_high_watermark == 4
    again.shutdown()

"""The cleaner's pure decisions (LogCleanerManager's choice, the offset map's size,
batch plans, the throttler) and the log.cleaner.* broker properties."""

from __future__ import annotations

import pytest

from kref.broker.config import BrokerConfig, ConfigError
from kref.records.batch import Record, build_batch
from kref.records.header import read_header
from kref.storage.cleaner import Throttler
from kref.storage.cleaner_driver import cleaner_config_of
from kref.storage.cleaner_planner import (
    Backoff,
    BatchAction,
    CleanerManagerCore,
    CleaningDone,
    CleaningFailed,
    LogDeleted,
    LogSummary,
    PlanCleaning,
    SegmentSummary,
    StartCleaning,
    WriteCleanerCheckpoint,
    choose_log,
    cleanable_offsets,
    group_segments_by_size,
    offset_map_capacity,
    plan_batch,
)
from kref.storage.config import LogConfig

NOW = 1_000_000


def seg(base, nxt, size, ts=1000, first=1000):
    return SegmentSummary(base, nxt, size, ts, first, 8, 12)


def log(name, segments, **kw):
    return LogSummary((name, 0), segments[0].base_offset, segments[-1].next_offset, tuple(segments), True, **kw)


def test_offset_map_is_sized_as_kafka_sizes_it():
    # 128 MiB / 24 bytes a slot, filled to 0.9: Kafka's default cleaner holds 5,033,164 keys.
    assert offset_map_capacity(128 * 1024 * 1024, 1, 0.9) == 5_033_164
    assert offset_map_capacity(128 * 1024 * 1024, 2, 0.9) == 2_516_581
    assert offset_map_capacity(23, 1, 0.9) == 0


def test_the_dirtiest_log_above_the_ratio_is_chosen_and_the_active_segment_never():
    a = log("a", [seg(0, 10, 100), seg(10, 20, 100), seg(20, 25, 50)])
    b = log("b", [seg(0, 10, 100), seg(10, 20, 900), seg(20, 25, 50)])
    choice = choose_log([a, b], {("a", 0): 10, ("b", 0): 10}, NOW)
    assert choice.key == ("b", 0)
    assert (choice.first_dirty_offset, choice.first_uncleanable_offset) == (10, 20)  # the active segment starts at 20
    assert choice.cleanable_ratio == 0.9
    # Below min.cleanable.dirty.ratio nothing is chosen.
    assert choose_log([log("c", [seg(0, 10, 900), seg(10, 20, 100), seg(20, 21, 5)])], {("c", 0): 10}, NOW) is None


def test_min_compaction_lag_stops_cleaning_at_the_first_young_segment():
    young = NOW - 10
    summary = log("a", [seg(0, 10, 100), seg(10, 20, 100, ts=young), seg(20, 30, 100)], min_compaction_lag_ms=1000)
    assert cleanable_offsets(summary, None, NOW).first_uncleanable_offset == 10


def test_a_log_overdue_by_max_compaction_lag_is_cleaned_below_the_ratio():
    old = NOW - 10_000
    summary = log("a", [seg(0, 10, 900, first=old), seg(10, 20, 100, first=old), seg(20, 21, 5)], max_compaction_lag_ms=5_000, min_cleanable_dirty_ratio=0.99)
    ltc = choose_log([summary], {("a", 0): 10}, NOW)
    assert ltc is not None and ltc.compaction_delay_ms == 5_000


def test_expired_tombstones_make_a_clean_log_eligible():
    summary = log("a", [seg(0, 10, 100), seg(10, 11, 5)])
    assert choose_log([summary], {("a", 0): 10}, NOW) is None
    assert choose_log([summary], {("a", 0): 10}, NOW, delete_horizons={("a", 0): NOW - 1}) is not None


def test_groups_fit_one_segment():
    segments = [seg(0, 10, 400), seg(10, 20, 400), seg(20, 30, 400), seg(30, 40, 0)]
    groups = group_segments_by_size(segments, 1000, 1 << 20)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 10], [20, 30]]


def header_of(**kw):
    return read_header(build_batch([Record(timestamp=5, key=b"k", value=b"v"), Record(timestamp=6, key=b"k", value=None)], **kw))


def test_batch_plans():
    h = header_of()
    assert plan_batch(h, 2, 0, False, NOW, 100).action is BatchAction.COPY
    assert plan_batch(h, 1, 0, False, NOW, 100).action is BatchAction.REWRITE
    assert plan_batch(h, 0, 0, False, NOW, 100).action is BatchAction.DROP
    assert plan_batch(h, 0, 0, True, NOW, 100).action is BatchAction.EMPTY  # a producer's last batch
    stamped = plan_batch(h, 2, 1, False, NOW, 100)
    assert (stamped.action, stamped.delete_horizon_ms) == (BatchAction.REWRITE, NOW + 100)  # KIP-534
    control = header_of(is_control_batch=True)
    assert plan_batch(control, 0, 0, False, NOW, 100).action is BatchAction.COPY


def test_manager_core_tracks_progress_in_progress_and_failures():
    core = CleanerManagerCore()
    a = log("a", [seg(0, 10, 900), seg(10, 11, 5)])
    [start] = core.step(PlanCleaning((a,)), NOW)
    assert isinstance(start, StartCleaning)
    assert core.step(PlanCleaning((a,)), NOW) == [Backoff()]  # in progress: not chosen twice
    [cp] = core.step(CleaningDone(("a", 0), 10, -1), NOW)
    assert cp == WriteCleanerCheckpoint(((("a", 0), 10),))
    assert core.step(PlanCleaning((a,)), NOW) == [Backoff()]  # nothing dirty any more
    core.step(CleaningFailed(("a", 0), "boom"), NOW)
    assert ("a", 0) in core.uncleanable
    assert core.step(LogDeleted(("a", 0)), NOW) == [WriteCleanerCheckpoint(())]


def test_throttler_holds_the_rate():
    t = Throttler(1000.0, period_s=0.1)
    now, slept = 0.0, 0.0
    for _ in range(100):
        pause = t.observe(100, now)
        slept += pause
        now += 0.01 + pause
    assert 9.0 <= now <= 11.0  # 10,000 bytes at 1000 B/s take ~10 s
    assert Throttler(float("inf")).observe(1 << 30, 0.0) == 0.0  # the default: unthrottled


def test_log_cleaner_properties_are_accepted_and_reach_topic_defaults():
    config = BrokerConfig.from_properties(
        {
            "log.cleaner.threads": "2",
            "log.cleaner.dedupe.buffer.size": "1048576",
            "log.cleaner.io.buffer.load.factor": "0.5",
            "log.cleaner.io.max.bytes.per.second": "1000000",
            "log.cleaner.backoff.ms": "100",
            "log.cleaner.min.cleanable.ratio": "0.2",
            "log.cleaner.min.compaction.lag.ms": "5",
            "log.cleaner.max.compaction.lag.ms": "50000",
            "log.cleaner.delete.retention.ms": "7",
            "log.cleaner.io.buffer.size": "65536",
            "log.cleanup.policy": "compact,delete",
        }
    )
    cc = cleaner_config_of(config)
    assert (cc.threads, cc.dedupe_buffer_size, cc.io_buffer_load_factor, cc.io_max_bytes_per_second, cc.backoff_ms) == (
        2, 1048576, 0.5, 1e6, 100
    )  # fmt: skip
    topic = LogConfig.from_properties(config.topic_config_defaults())
    assert (topic.min_cleanable_dirty_ratio, topic.min_compaction_lag_ms, topic.max_compaction_lag_ms, topic.delete_retention_ms) == (
        0.2, 5, 50000, 7
    )  # fmt: skip
    assert topic.compact_enabled and topic.delete_enabled
    with pytest.raises(ConfigError):
        BrokerConfig.from_properties({"log.cleaner.min.cleanable.ratio": "1.5"})


def test_a_compacted_log_refuses_records_without_a_key(tmp_path):
    from kref.storage.errors import InvalidRecordError
    from kref.storage.log import Log

    config = LogConfig.from_properties({"cleanup.policy": "compact,delete"})
    log = Log.open(str(tmp_path / "t-0"), config, 0)
    try:
        log.append_as_leader(build_batch([Record(timestamp=1, key=b"k", value=b"v")]), 0, 1)
        with pytest.raises(InvalidRecordError, match="without key"):
            log.append_as_leader(build_batch([Record(timestamp=1, key=b"k", value=b"v"), Record(timestamp=1, value=b"x")]), 0, 1)
        assert log.log_end_offset == 1  # nothing of the refused batch was appended
    finally:
        log.close()


def test_the_cleaner_honours_io_max_bytes_per_second(tmp_path):
    """log.cleaner.io.max.bytes.per.second: with a virtual clock the cleaner's
    reads and writes take at least bytes / rate seconds."""
    from kref.storage.cleaner import Cleaner, clean_log_now, summarize
    from kref.storage.cleaner_planner import OffsetMap
    from kref.storage.log import Log

    config = LogConfig.from_properties({"cleanup.policy": "compact", "segment.bytes": "2000"})
    log = Log.open(str(tmp_path / "t-0"), config, 0)
    for i in range(200):
        log.append_as_leader(build_batch([Record(timestamp=i, key=b"k%d" % (i % 5), value=b"v" * 50)]), 0, i)
    clock = [0.0]

    def sleep(seconds):
        clock[0] += seconds

    rate = 10_000.0
    def now():
        clock[0] += 0.0001  # the work itself takes a little time
        return clock[0]

    cleaner = Cleaner(OffsetMap(100), Throttler(rate, period_s=0.001), io_buffer_size=512, sleep=sleep, clock=now)
    try:
        clean_log_now(log, cleaner, cleanable_offsets(summarize(log), None, 10_000), 10_000)
        moved = cleaner.stats.bytes_read + cleaner.stats.bytes_written
        # The bytes of the last, unfinished check period go unthrottled (as in Kafka).
        assert moved / rate * 0.85 <= clock[0] <= moved / rate * 1.1 + 0.1
    finally:
        log.close()


def test_truncation_below_the_cleaner_checkpoint_lowers_it(tmp_path):
    """A follower's TruncateToEpochEndOffset below the cleaned part makes the
    records it then fetches dirty again: the checkpoint (in memory and in
    cleaner-offset-checkpoint) drops to the new log end offset, as Kafka's
    LogCleanerManager.maybeTruncateCheckpoint does; a truncation above it
    changes nothing."""
    from kref.storage.cleaner import CLEANER_CHECKPOINT_FILE, read_cleaner_checkpoints
    from kref.storage.cleaner_driver import LogCleaner
    from kref.storage.log_manager import LogManager

    manager = LogManager([str(tmp_path)], LogConfig.from_properties({"cleanup.policy": "compact"}))
    log = manager.get_or_create_log("t", 0)
    for i in range(40):
        log.append_as_leader(build_batch([Record(timestamp=i, key=b"k%d" % (i % 4), value=b"v")]), 0, i)
    cleaner = LogCleaner(manager, cleaner_config_of(BrokerConfig.from_properties({})), lambda: NOW)
    cleaner.core.step(CleaningDone(("t", 0), 30, -1), NOW)  # as if a cleaning reached offset 30
    log.truncate_to(35)
    assert cleaner.core.checkpoints[("t", 0)] == 30
    log.truncate_to(12)
    assert cleaner.core.checkpoints[("t", 0)] == 12
    assert read_cleaner_checkpoints([str(tmp_path)])[("t", 0)] == 12
    assert (tmp_path / CLEANER_CHECKPOINT_FILE).exists()
    log.truncate_fully_and_start_at(5)
    assert cleaner.core.checkpoints[("t", 0)] == 5
    manager.shutdown()

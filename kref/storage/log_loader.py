"""Opening a partition log: checkpoints, crash recovery, epoch and producer state.

Theory of operation: a Log on disk is a directory of segments plus some
checkpoints that are only hints (recovery point, log start offset, high
watermark, the leader-epoch-checkpoint, producer snapshots). Loading trusts
segments wholly below the recovery point after a clean stop and re-validates
everything from the segment holding the recovery point after an unclean one
(header, CRC-32C, growing offsets), truncating at the first invalid byte and
dropping later segments, because bytes after a torn batch cannot be trusted.
Indexes and the epoch cache are caches of the log and are rebuilt when they
fail a sanity check. Loading is the one place that reads the checkpoints of
the log dir; everything after it is the local log's business (log.py). All
file access goes through the log's file-system port (`log.fs`).
"""

from __future__ import annotations

import bisect
import logging
import os

from kref.records.errors import CorruptRecordError
from kref.records.header import BatchHeader
from kref.storage.checkpoint import (
    CheckpointError,
    fsync_dir,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint_or_empty,
    read_partition_metadata,
    write_partition_metadata,
)
from kref.storage.cleaner import recover_swap_files
from kref.storage.errors import CorruptIndexError
from kref.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochFileCache
from kref.storage.log import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    InconsistentTopicIdError,
    Log,
)
from kref.storage.segment import DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment

logger = logging.getLogger("kref.storage.log")

__all__ = ["load"]


def load(
    log: Log,
    now_ms: int,
    *,
    recovery_point: int | None,
    log_start_offset: int | None,
    high_watermark: int | None,
    had_clean_shutdown: bool | None,
) -> None:
    """Fill a fresh Log from its directory; what is not given comes from the log dir.

    Recovery point, log start offset, high watermark and whether the last stop
    was clean default to the log dir's checkpoint files and the clean-shutdown
    marker that LogManager writes. Without them the whole log is re-validated.
    """
    fs = log.fs
    parent = os.path.dirname(os.path.normpath(log.dir))
    key = (log.topic, log.partition)
    if recovery_point is None:
        recovery_point = read_offset_checkpoint_or_empty(os.path.join(parent, RECOVERY_POINT_CHECKPOINT_FILE), fs).get(key, 0)
    if log_start_offset is None:
        log_start_offset = read_offset_checkpoint_or_empty(os.path.join(parent, LOG_START_OFFSET_CHECKPOINT_FILE), fs).get(key, 0)
    if high_watermark is None:
        high_watermark = read_offset_checkpoint_or_empty(os.path.join(parent, REPLICATION_OFFSET_CHECKPOINT_FILE), fs).get(key)
    if had_clean_shutdown is None:
        had_clean_shutdown = fs.exists(os.path.join(parent, CLEAN_SHUTDOWN_FILE))
    _check_topic_id(log)
    _load_segments(log, now_ms, recovery_point, log_start_offset, had_clean_shutdown)
    if high_watermark is not None:
        log.recovered_high_watermark = min(max(high_watermark, log.log_start_offset), log.log_end_offset)


def _check_topic_id(log: Log) -> None:
    try:
        stored = read_partition_metadata(log.dir, log.fs)
    except CheckpointError:
        stored = None  # rewritten below when we know the id
    if stored is not None and log.topic_id is not None and stored != log.topic_id:
        raise InconsistentTopicIdError(f"{log.dir}: partition.metadata has topic id {stored}, expected {log.topic_id}")
    if log.topic_id is None:
        log.topic_id = stored
    elif stored is None:
        write_partition_metadata(log.dir, log.topic_id, log.fs)


def _load_segments(log: Log, now_ms: int, recovery_point: int, log_start_offset: int, had_clean_shutdown: bool) -> None:
    cfg = log.config
    fs = log.fs
    # A crash mid-swap of cleaned segments: complete it (or roll it back)
    # before the segments are listed (Kafka's .cleaned/.swap protocol).
    recover_swap_files(log.dir, fs)
    base_offsets = []
    for name in fs.listdir(log.dir):
        path = os.path.join(log.dir, name)
        if name.endswith(DELETED_SUFFIX) or name.endswith(".tmp") or name.endswith(".cleaned") or name.endswith(".swap"):
            # Leftovers of a deletion or a half-written file: the rename
            # already decided their fate.
            if fs.is_file(path):
                fs.unlink(path)
            continue
        stem, ext = os.path.splitext(name)
        if ext == LOG_SUFFIX and len(stem) == 20 and stem.isdigit():
            base_offsets.append(int(stem))
    base_offsets.sort()
    for name in fs.listdir(log.dir):
        stem, ext = os.path.splitext(name)
        if ext in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and stem.isdigit() and int(stem) not in base_offsets:
            fs.unlink(os.path.join(log.dir, name))  # an index without its log

    cache_path = os.path.join(log.dir, LEADER_EPOCH_CHECKPOINT_FILE)
    try:
        entries = read_leader_epoch_checkpoint(cache_path, fs)
        cache_was_readable = fs.exists(cache_path)
    except (CheckpointError, OSError):
        entries, cache_was_readable = [], False  # rebuilt from the batches below
    try:
        log.leader_epoch_cache = LeaderEpochFileCache(None, entries)
    except ValueError:
        log.leader_epoch_cache, cache_was_readable = LeaderEpochFileCache(None), False

    log.log_start_offset = log_start_offset  # for _on_recovered_batch; settled below
    # Segments wholly below the recovery point were flushed; from the
    # segment holding it onward, an unclean stop means "validate".
    recover_from_index = len(base_offsets)
    if not had_clean_shutdown:
        recover_from_index = max(0, bisect.bisect_right(base_offsets, recovery_point) - 1)
    recovered: list[LogSegment] = []
    for i, base in enumerate(base_offsets):
        args = (log.dir, base, cfg.max_index_size, cfg.index_interval_bytes, now_ms, fs)
        seg = None
        if i < recover_from_index:
            try:
                seg = LogSegment.load(*args)
            except (CorruptIndexError, CorruptRecordError, OSError):
                seg = None
        if seg is None:
            seg = LogSegment.open_for_recovery(*args)
            truncated = seg.recover(_max_recovery_batch_size(log), lambda header: _on_recovered_batch(log, header))
            recovered.append(seg)
            if truncated:
                # Dropping bytes is what recovery is for, but an operator
                # must be able to see where and how much (Kafka warns too).
                dropped = base_offsets[i + 1 :]
                logger.warning(
                    "%s: recovery truncated segment %020d at byte %d (offset %d): %d invalid byte(s) dropped%s",
                    log.dir, base, seg.size, seg.next_offset, truncated,
                    f", and {len(dropped)} later segment(s) deleted" if dropped else "",
                )
            if truncated and i + 1 < len(base_offsets):
                # Bytes after a torn batch cannot be trusted, nor can
                # anything in later segments: drop them.
                log._append_segment(seg)
                for later in base_offsets[i + 1 :]:
                    log._delete_segment_files_now(later)
                break
        if log.segments and log.segments[-1].next_offset > seg.base_offset:
            # Overlap with the previous segment: keep the earlier data.
            log.segments[-1].truncate_to(seg.base_offset)
        log._append_segment(seg)

    if not log.segments:
        log._append_segment(log._create_segment(max(log_start_offset, 0), now_ms))
    # Only the active segment keeps a preallocated index.
    for seg in log.segments[:-1]:
        seg.offset_index.trim_to_valid_size()
        seg.time_index.trim_to_valid_size()
    log.active_segment.resize_indexes_to_max()

    leo = log.log_end_offset
    log.log_start_offset = max(log_start_offset, log.segments[0].base_offset)
    if log.log_start_offset > leo:
        log._truncate_fully(log.log_start_offset, now_ms)
        leo = log.log_end_offset
    if not cache_was_readable and leo > log.segments[0].base_offset:
        _rebuild_leader_epoch_cache(log)
    log.leader_epoch_cache.truncate_from_end(leo, flush=False)
    log.leader_epoch_cache.truncate_from_start(log.log_start_offset, flush=False)
    log.leader_epoch_cache.path = cache_path
    log.leader_epoch_cache.fs = fs
    if not cache_was_readable or log.leader_epoch_cache.entries() != entries:
        # An empty cache needs no fsync (Kafka creates the empty file without
        # one): losing it in a crash leaves an unreadable or missing file, which
        # the next load rebuilds from the batches, and there are none to forget.
        log.leader_epoch_cache.flush(sync=bool(log.leader_epoch_cache.entries()))

    if recovered:
        log._flush_segments([s for s in log.segments if s in recovered])
        fsync_dir(log.dir, fs)
        log.recovery_point = leo
    else:
        log.recovery_point = min(max(recovery_point, log.log_start_offset), leo)
    _rebuild_producer_state(log)


def _max_recovery_batch_size(log: Log) -> int:
    # A follower may have appended batches up to the leader's limit, which
    # can exceed ours; only the segment size truly bounds a batch.
    return max(log.config.segment_bytes, log.config.max_message_bytes) + 1024


def _on_recovered_batch(log: Log, header: BatchHeader) -> None:
    if header.next_offset <= log.log_start_offset:
        return  # already deleted by DeleteRecords/retention; its epoch is history
    epoch = header.partition_leader_epoch
    if epoch >= 0 and epoch > log.leader_epoch_cache.latest_epoch:
        log.leader_epoch_cache.assign(epoch, header.base_offset, flush=False)


def _rebuild_leader_epoch_cache(log: Log) -> None:
    log.leader_epoch_cache.clear(flush=False)
    for header in log._iter_all_headers(log.segments[0].base_offset):
        _on_recovered_batch(log, header)


def _rebuild_producer_state(log: Log) -> None:
    """Bring the producer-state hook in line with the log after load.

    The manager may have restored a snapshot; it reports how far that
    reaches as `map_end_offset`. Anything beyond the log end is dropped
    (truncate_to), and batches from there to the log end are replayed.
    """
    ps = log.producer_state
    if ps is None:
        return
    leo = log.log_end_offset
    ps.truncate_to(leo)
    start = getattr(ps, "map_end_offset", None)
    start = log.log_start_offset if start is None else min(max(start, log.log_start_offset), leo)
    for header in log._iter_all_headers(start):
        if header.last_offset >= start:
            ps.on_batch_appended(header)

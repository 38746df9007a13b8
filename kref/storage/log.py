"""The local partition log: segments, offsets, epochs, appends, reads, flushing.

Opening and crash recovery live in log_loader.py, the retention decision in
retention.py (a pure planner this log carries out).

A Log is one partition's directory `<topic>-<partition>` holding segments in
Kafka's layout (see segment.py), the `leader-epoch-checkpoint` and
`partition.metadata`. It is the storage half of the replication spec's
actions: LeaderAppend is `append_as_leader` (assign offsets, stamp the
leader epoch, LogAppendTime if configured, remember where the epoch began),
FollowerFetch's append is `append_as_follower` (offsets and epochs kept),
TruncateToEpochEndOffset is `truncate_to` fed by `leader_epoch_cache.
end_offset_for` (KIP-101/279), and DeleteRecords/retention move
log_start_offset. It does no replication itself: log_end_offset is simply
where the next batch goes. The high watermark is not the log's: the
replica core owns it (kref/replication/replica.py), retention is bounded
by the core's value, and replication-offset-checkpoint is written from the
cores (LogManager.checkpoint). The log keeps only the value recovered from
that checkpoint at load (`recovered_high_watermark`), which the partition
driver hands to its core once, at its first BecomeLeader/BecomeFollower.

Durability follows Kafka: nothing is fsynced per append unless
flush.messages / flush.ms ask for it; `recovery_point` is the offset below
which everything is known to be on disk. Opening a log after an unclean
stop (no clean-shutdown marker in the log dir) re-validates every batch from
the segment holding the recovery point onward — header, CRC-32C, growing
offsets — truncates at the first invalid byte and drops later segments, and
rebuilds indexes on the way; any index that fails its sanity check is
rebuilt too, since an index is only a cache of the log. A fully written and
flushed batch therefore always survives a crash, a torn tail never does.

The log is synchronous, single-threaded and reaches files only through the
file-system port it is opened with (kref/ports/fs.py: RealFileSystem in the
broker, MemoryFileSystem with its crash() in tests and the simulator): the
broker calls it directly and serialises access per partition. Everything it keeps in
memory is bounded by the number of segments and index entries.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import logging
import os
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from kref.protocol.errors import ErrorCode
from kref.records.batch import decode_batch
from kref.records.errors import CorruptRecordError
from kref.records.header import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    iter_headers,
    set_log_append_time,
)
from kref.ports.fs import FileSystem
from kref.storage.checkpoint import fsync_dir
from kref.storage.cleaner import has_keyless_record
from kref.storage.config import LogConfig
from kref.storage.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    StorageError,
    UnexpectedAppendOffsetError,
)
from kref.storage.index import NO_TIMESTAMP
from kref.storage.leader_epoch import LeaderEpochFileCache
from kref.storage.retention import SegmentSummary, segments_to_delete
from kref.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, REAL_FILE_SYSTEM, TIME_INDEX_SUFFIX, LogSegment

logger = logging.getLogger(__name__)

__all__ = ["Log", "LogConfig", "AppendInfo", "FetchDataInfo", "parse_partition_dir_name"]

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4

RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
MAX_APPEND_BYTES = 1 << 31  # a produce payload can never exceed an int32 length anyway
MAX_LOOKUP_UNCOMPRESSED_BYTES = 64 * 1024 * 1024  # bound on decompressing one batch for ListOffsets


class InconsistentTopicIdError(StorageError):
    """partition.metadata names a different topic id than the caller expects."""

    error_code = ErrorCode.INCONSISTENT_TOPIC_ID


@dataclass
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int = NO_TIMESTAMP
    offset_of_max_timestamp: int = -1
    log_append_time: int = NO_TIMESTAMP
    records_count: int = 0
    duplicate: bool = False
    log_start_offset: int = 0
    batches: list[BatchHeader] = field(default_factory=list, repr=False)

    @property
    def valid_bytes(self) -> int:
        return sum(h.size_in_bytes for h in self.batches)


@dataclass
class FetchDataInfo:
    """Whole batches starting with the one that holds `fetch_offset`.

    `first_offset` is the base offset of the first returned batch (it may be
    below `fetch_offset`: clients skip the records before their position);
    `next_offset` is the offset after the last returned batch.
    """

    records: bytes
    fetch_offset: int
    first_offset: int
    next_offset: int
    log_start_offset: int
    log_end_offset: int

    @property
    def size_in_bytes(self) -> int:
        return len(self.records)


_FRAME = struct.Struct(">qi")  # baseOffset, batchLength
_STAMP = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch: a leader append's stamp
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD


def _frames(view: memoryview, position: int) -> Iterator[tuple[int, int, int, int]]:
    """(position, base_offset, last_offset, next_position) of each complete v2 batch in `view`.

    The read path's walk over bytes already in the log: they were validated
    (header and CRC) on append or by recovery, so only the framing fields are
    read — a full header decode per batch would dominate fetches of many small
    batches. Stops at the first incomplete or implausible frame.
    """
    n = len(view)
    while position + HEADER_SIZE <= n:
        base_offset, batch_length = _FRAME.unpack_from(view, position)
        end = position + LOG_OVERHEAD + batch_length
        if batch_length < _MIN_BATCH_LENGTH or end > n or view[position + MAGIC_OFFSET] != 2:
            return
        yield position, base_offset, base_offset + _LAST_OFFSET_DELTA.unpack_from(view, position + _LAST_OFFSET_DELTA_AT)[0], end
        position = end


def _disk_errors_as_storage_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """An OSError under a log operation becomes KafkaStorageError (KAFKA_STORAGE_ERROR),
    so the broker answers the request with that code instead of dying."""

    @functools.wraps(method)
    def guarded(self: "Log", *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except OSError as e:
            raise KafkaStorageError(f"I/O error on {self.dir}: {e}") from e

    return guarded


# delete_old_segments' default: the high watermark recovered from the checkpoint
# (a Log with no core: tools, storage tests)
RECOVERED = object()


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{name!r} is not a partition directory name (<topic>-<partition>)")
    return topic, int(partition)


class Log:
    def __init__(
        self,
        directory: str,
        config: LogConfig,
        now_ms: int,
        topic_id: uuid.UUID | None,
        producer_state: Any,
        fs: FileSystem | None = None,
    ):
        self.fs: FileSystem = fs if fs is not None else REAL_FILE_SYSTEM
        self.dir = directory
        self.topic, self.partition = parse_partition_dir_name(os.path.basename(os.path.normpath(directory)))
        self.config = config
        self.topic_id = topic_id
        self.producer_state = producer_state
        self.segments: list[LogSegment] = []
        self._base_offsets: list[int] = []
        self.log_start_offset = 0
        self.recovery_point = 0
        # replication-offset-checkpoint's value for this partition as recovered
        # at load (None: none); never updated after: the core owns the live one.
        self.recovered_high_watermark: int | None = None
        self.last_flush_ms = now_ms
        self._now_ms = now_ms
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        # (offset, segment, position) just after the last fast read; a hint only,
        # checked against the segment object and its size before use.
        self._read_hint: tuple[int, LogSegment, int] | None = None
        # (first offset, segment, position) of the last append: every follower
        # fetches next from there, and with two followers the read hint above
        # names where the first one's read ended, not where the second's starts.
        # A hint only, checked like the read hint.
        self._append_hint: tuple[int, LogSegment, int] | None = None
        # What a leader append reads from the config, derived once per config
        # object (a config change replaces the object): (config, timestamp
        # limits before and after now, LogAppendTime?, compacted?).
        self._append_limits: tuple[LogConfig, int, int, bool, bool] | None = None
        self.leader_epoch_cache = LeaderEpochFileCache(None)
        self.closed = False
        # Called as listener(topic, partition, new log_end_offset) after a
        # truncation (LogManager shares one list with the log cleaner, whose
        # progress checkpoint must not stay above the truncation point).
        self.truncation_listeners: list = []

    # =====================================================================
    # opening and recovery
    # =====================================================================

    @classmethod
    def open(
        cls,
        directory: str,
        config: LogConfig | None,
        now_ms: int,
        *,
        topic_id: uuid.UUID | None = None,
        producer_state: Any = None,
        recovery_point: int | None = None,
        log_start_offset: int | None = None,
        high_watermark: int | None = None,
        had_clean_shutdown: bool | None = None,
        fs: FileSystem | None = None,
    ) -> "Log":
        """Open (creating if needed) the partition log in `directory`.

        Unless given, recovery point, log start offset and whether the last
        stop was clean come from the log dir (the parent directory): its
        checkpoint files and the clean-shutdown marker that LogManager
        writes. Without them the whole log is re-validated. `fs` is the
        file-system port (the real disk when omitted).
        """
        from kref.storage import log_loader  # the loader builds on Log's segment helpers

        log = cls(directory, config or LogConfig(), now_ms, topic_id, producer_state, fs)
        log.fs.makedirs(directory)
        log_loader.load(
            log,
            now_ms,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            high_watermark=high_watermark,
            had_clean_shutdown=had_clean_shutdown,
        )
        return log

    def _iter_all_headers(self, start_offset: int) -> Iterator[BatchHeader]:
        """Headers of every batch from the one holding `start_offset` to the log end."""
        i = self._segment_for(start_offset)
        for seg in self.segments[i:]:
            position = 0
            if seg is self.segments[i]:
                header = seg.translate_offset(start_offset)
                if header is None:
                    continue
                position = header.position
            yield from seg.iter_batches(position)

    # =====================================================================
    # properties
    # =====================================================================

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active_segment.next_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self.recovery_point

    @property
    def latest_epoch(self) -> int:
        return self.leader_epoch_cache.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)

    def _append_segment(self, seg: LogSegment) -> None:
        self.segments.append(seg)
        self._base_offsets.append(seg.base_offset)

    def _create_segment(self, base_offset: int, now_ms: int) -> LogSegment:
        cfg = self.config
        seg = LogSegment.create(self.dir, base_offset, cfg.max_index_size, cfg.index_interval_bytes, now_ms, self.fs)
        if cfg.segment_jitter_ms > 0:
            # Kafka draws the jitter at random; a function of the base offset
            # spreads rolls just as well and keeps runs reproducible.
            seg.roll_jitter_ms = (base_offset * 2654435761) % cfg.segment_jitter_ms
        return seg

    def _segment_for(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._base_offsets, offset) - 1)

    # =====================================================================
    # append
    # =====================================================================

    def _validate(self, buf: bytearray, *, crc_verified: bool = False, whole_append: bool = True) -> list[BatchHeader]:
        """Header, CRC and size checks on every batch of a produce or replica payload.

        `crc_verified`: the caller has already checked every batch's CRC-32C
        over these very bytes (the produce handler's framing validation);
        checking it again cost a second pass over the payload per produce.
        `whole_append`: the append as a whole must fit segment.bytes (a produce);
        a follower's append is split at rolls instead (_append_rolling_per_batch).
        """
        cfg = self.config
        if whole_append:
            self._check_append_size(len(buf))
        headers = []
        for h in iter_headers(buf, verify=not crc_verified, max_batch_size=MAX_APPEND_BYTES):
            if h.size_in_bytes > cfg.max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {h.size_in_bytes} bytes exceeds max.message.bytes={cfg.max_message_bytes}"
                )
            if h.last_offset_delta < 0:
                raise InvalidRecordError(f"negative lastOffsetDelta {h.last_offset_delta}")
            headers.append(h)
        return headers

    @_disk_errors_as_storage_errors
    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        now_ms: int,
        *,
        crc_verified: bool = False,
        validated: list[BatchHeader] | None = None,
    ) -> AppendInfo:
        """LeaderAppend: assign offsets from log_end_offset, stamp the epoch, append.

        `crc_verified=True` only when the caller checked the CRC of exactly
        these bytes. `validated`: the caller (the produce handler) already
        parsed these very bytes into headers, verified their CRCs and checked
        max.message.bytes, so the headers are not parsed or size-checked
        again; the remaining checks (offsets, timestamps, idempotence) run here.
        """
        self._ensure_open()
        self._now_ms = now_ms
        buf = bytearray(records)
        if validated is None:
            headers = self._validate(buf, crc_verified=crc_verified)
        else:
            self._check_append_size(len(buf))
            headers = validated
            for h in headers:
                if h.last_offset_delta < 0:
                    raise InvalidRecordError("negative lastOffsetDelta")
        if not headers:
            return AppendInfo(-1, -1, log_start_offset=self.log_start_offset)
        cfg = self.config
        limits = self._append_limits
        if limits is None or limits[0] is not cfg:
            limits = self._append_limits = (
                cfg,
                min(cfg.message_timestamp_before_max_ms, cfg.message_timestamp_difference_max_ms),
                min(cfg.message_timestamp_after_max_ms, cfg.message_timestamp_difference_max_ms),
                cfg.is_log_append_time,
                cfg.compact_enabled,
            )
        _, before, after, log_append_time, compacted = limits
        for h in headers:
            if h.records_count != h.last_offset_delta + 1:
                raise InvalidRecordError(
                    f"batch with {h.records_count} records spans {h.last_offset_delta + 1} offsets"
                )
            if not log_append_time:
                # The batch's first and largest timestamps bound its records' on the
                # side that matters for each limit (producers write in time order).
                for ts in (h.base_timestamp, h.max_timestamp):
                    if now_ms - ts > before or ts - now_ms > after:
                        raise InvalidTimestampError(
                            f"timestamp {ts} is out of range for now={now_ms} "
                            f"(message.timestamp.before.max.ms={before}, message.timestamp.after.max.ms={after})"
                        )
        if compacted:
            for h in headers:
                if has_keyless_record(buf, h):
                    raise InvalidRecordError(
                        f"Compacted topic cannot accept message without key in topic partition {self.topic}-{self.partition}"
                    )
        ps = self.producer_state
        if ps is not None:
            for h in headers:
                if h.producer_id != -1:
                    dup = ps.check_batch(h)
                    if dup is not None:
                        first, last = dup
                        return AppendInfo(first, last, duplicate=True, log_start_offset=self.log_start_offset)
        next_offset = self.log_end_offset
        stamped = []
        for h in headers:
            # baseOffset and partitionLeaderEpoch (outside the CRC) in one
            # write, batchLength between them rewritten with its own value.
            _STAMP.pack_into(buf, h.position, next_offset, h.batch_length, leader_epoch)
            # Field by field: dataclasses.replace walks the fields reflectively,
            # and that was a visible share of a single-record produce.
            h = BatchHeader(h.position, next_offset, h.batch_length, leader_epoch, h.magic, h.crc, h.attributes,
                            h.last_offset_delta, h.base_timestamp, h.max_timestamp, h.producer_id,
                            h.producer_epoch, h.base_sequence, h.records_count)
            if log_append_time:
                crc = set_log_append_time(buf, h, now_ms)
                h = dataclasses.replace(
                    h, attributes=h.attributes | TIMESTAMP_TYPE_MASK, max_timestamp=now_ms, crc=crc
                )
            stamped.append(h)  # the header as stamped, without parsing the bytes a third time
            next_offset += h.last_offset_delta + 1
        info = self._append(buf, stamped, now_ms)
        if log_append_time:
            info.log_append_time = now_ms
            info.max_timestamp = now_ms
            info.offset_of_max_timestamp = info.first_offset
        return info

    def _check_append_size(self, size: int) -> None:
        if size > self.config.segment_bytes:
            raise RecordBatchTooLargeError(f"append of {size} bytes exceeds segment.bytes={self.config.segment_bytes}")

    @_disk_errors_as_storage_errors
    def append_as_follower(self, records: bytes | bytearray | memoryview, now_ms: int | None = None) -> AppendInfo:
        """The follower half of FollowerFetch: append the leader's batches unchanged.

        Nothing is patched (Kafka's follower append keeps the leader's offsets,
        epochs and compression; it checks each batch's CRC), so immutable
        bytes are written as they came: no copy of what may be a
        replica.fetch.max.bytes answer on the acks=all path.
        """
        self._ensure_open()
        if now_ms is not None:
            self._now_ms = now_ms
        buf = records if isinstance(records, (bytes, bytearray)) else bytes(records)
        headers = self._validate(buf, whole_append=False)
        if not headers:
            return AppendInfo(-1, -1, log_start_offset=self.log_start_offset)
        expected = self.log_end_offset
        if headers[0].base_offset < expected:
            raise UnexpectedAppendOffsetError(
                f"first offset {headers[0].base_offset} is below the log end offset {expected}"
            )
        for h in headers:
            if h.base_offset < expected:
                raise InvalidRecordError(f"batch offsets go backwards at {h.base_offset}")
            expected = h.next_offset
        return self._append_rolling_per_batch(buf, headers, self._now_ms)

    def _append_rolling_per_batch(self, buf: bytes | bytearray, headers: list[BatchHeader], now_ms: int) -> AppendInfo:
        """A follower's append: segment.bytes holds per batch, as on the leader.

        A fetch answer carries up to replica.fetch.max.bytes of the leader's
        batches, which the leader wrote into segments of at most segment.bytes;
        appended as one block it would overfill the follower's active segment.
        So the batches go in runs that fit the active segment, and the next run
        rolls (Kafka checks the roll per batch). A single batch larger than
        segment.bytes still goes in whole, alone in its segment (KAFKA-17375).
        The common case, an answer that fits, is one run with no copy.
        """
        segment_bytes = self.config.segment_bytes
        runs: list[tuple[int, int]] = []
        i, n = 0, len(headers)
        room = segment_bytes - self.active_segment.size
        while i < n:
            total = headers[i].size_in_bytes
            if total > room:
                room = segment_bytes  # this run starts a new segment
            j = i + 1
            while j < n and total + headers[j].size_in_bytes <= room:
                total += headers[j].size_in_bytes
                j += 1
            runs.append((i, j))
            room = max(0, room - total)
            i = j
        if len(runs) == 1:
            return self._append(buf, headers, now_ms)
        infos = []
        for i, j in runs:
            start, end = headers[i].position, headers[j - 1].next_position
            part = [dataclasses.replace(h, position=h.position - start) for h in headers[i:j]]
            infos.append(self._append(buf[start:end], part, now_ms))
        best = max(infos, key=lambda info: info.max_timestamp)
        return AppendInfo(
            first_offset=infos[0].first_offset,
            last_offset=infos[-1].last_offset,
            max_timestamp=best.max_timestamp,
            offset_of_max_timestamp=best.offset_of_max_timestamp,
            records_count=sum(info.records_count for info in infos),
            log_start_offset=self.log_start_offset,
            batches=[h for info in infos for h in info.batches],
        )

    def _append(self, buf: bytes | bytearray, headers: list[BatchHeader], now_ms: int) -> AppendInfo:
        first, last = headers[0].base_offset, headers[-1].last_offset
        max_ts, offset_of_max = NO_TIMESTAMP, first
        for h in headers:
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max = h.max_timestamp, h.last_offset
        seg = self._maybe_roll(len(buf), max_ts, first, last, now_ms)
        self._append_hint = (first, seg, seg.size)
        cache = self.leader_epoch_cache
        for h in headers:
            epoch = h.partition_leader_epoch
            if epoch >= 0 and (epoch != cache.latest_epoch):
                cache.assign(epoch, h.base_offset)
        seg.append(buf, headers)
        if self.producer_state is not None:
            for h in headers:
                self.producer_state.on_batch_appended(h)
        info = AppendInfo(
            first_offset=first,
            last_offset=last,
            max_timestamp=max_ts,
            offset_of_max_timestamp=offset_of_max,
            records_count=headers[0].records_count if len(headers) == 1 else sum(h.records_count for h in headers),
            log_start_offset=self.log_start_offset,
            batches=headers,
        )
        if self.unflushed_messages >= self.config.flush_messages:
            self.flush(now_ms)
        return info

    def _maybe_roll(self, messages_size: int, max_timestamp: int, first_offset: int, last_offset: int, now_ms: int) -> LogSegment:
        seg = self.active_segment
        cfg = self.config
        if seg.should_roll(
            segment_bytes=cfg.segment_bytes,
            segment_ms=cfg.segment_ms,
            now_ms=now_ms,
            max_timestamp_in_messages=max_timestamp,
            max_offset_in_messages=last_offset,
            messages_size=messages_size,
        ):
            return self.roll(now_ms, expected_next_offset=first_offset)
        return seg

    @_disk_errors_as_storage_errors
    def roll(self, now_ms: int | None = None, *, expected_next_offset: int | None = None) -> LogSegment:
        """Close the active segment for appends and start a new one at the log end.

        As in Kafka, the rolled segment is flushed (its data becomes part of
        the recovery point) and its indexes are trimmed to their entries.
        """
        self._ensure_open()
        now_ms = self._now_ms if now_ms is None else now_ms
        new_base = max(expected_next_offset or 0, self.log_end_offset)
        active = self.active_segment
        if active.base_offset == new_base:
            if active.size == 0:
                return active  # already an empty segment at the right place
            raise StorageError(f"cannot roll to offset {new_base}: segment already exists")
        active.on_become_inactive()
        seg = self._create_segment(new_base, now_ms)
        self._append_segment(seg)
        self._flush_up_to(new_base, now_ms)
        return seg

    # =====================================================================
    # read
    # =====================================================================

    @_disk_errors_as_storage_errors
    def read(self, start_offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_message: bool = True,
             copy: bool = True) -> FetchDataInfo:
        """Whole batches from the one holding `start_offset`, at most `max_bytes`
        (but at least one batch when `min_one_message`), none reaching `max_offset`.

        `copy=False`: the records may come back as a read-only memoryview of the
        segment read instead of bytes copied out of it (a consumer's fetch: the
        read holds about one lookup chunk more than the answer, and copying the
        answer out of it cost one user-space copy of every record byte)."""
        self._ensure_open()
        leo = self.log_end_offset
        if start_offset < self.log_start_offset or start_offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is outside [{self.log_start_offset}, {leo}] of {self.topic}-{self.partition}"
            )
        empty = FetchDataInfo(b"", start_offset, start_offset, start_offset, self.log_start_offset, leo)
        limit = leo if max_offset is None else min(max_offset, leo)
        if start_offset >= limit or (max_bytes <= 0 and not min_one_message):
            return empty
        parts: list[bytes] = []
        total = 0
        first_offset = next_offset = None
        i = self._segment_for(start_offset)
        target = start_offset
        while i < len(self.segments):
            seg = self.segments[i]
            i += 1
            budget = max_bytes - total
            known = None
            for hint in (self._read_hint, self._append_hint):
                if hint is not None and hint[0] == target and hint[1] is seg:
                    known = hint[2]
                    break
            fast = self._read_in_one_go(seg, target, budget, limit, known, copy)
            if fast is not None:
                chunk, chunk_first, chunk_next, whole = fast
            else:
                header = seg.translate_offset(target)
                if header is None:
                    continue
                if header.base_offset >= limit:
                    break
                if budget < header.size_in_bytes:
                    if total == 0 and min_one_message:
                        budget = header.size_in_bytes
                    else:
                        break
                chunk, chunk_next, whole = self._read_whole_batches(seg, header, budget, limit)
                chunk_first = header.base_offset
            if not chunk:
                break
            parts.append(chunk)
            total += len(chunk)
            if first_offset is None:
                first_offset = chunk_first
            next_offset = chunk_next
            target = chunk_next
            if not whole or total >= max_bytes:
                break
        if not parts:
            return empty
        records = parts[0] if len(parts) == 1 else b"".join(parts)
        return FetchDataInfo(records, start_offset, first_offset, next_offset, self.log_start_offset, leo)

    def _read_in_one_go(
        self, seg: LogSegment, target: int, budget: int, limit: int, known_position: int | None = None,
        copy: bool = True,
    ) -> tuple[bytes | memoryview, int, int, bool] | None:
        """The common case of a read as a single pread from the index position:
        skip the batches before `target`, keep whole batches within `budget`.

        Returns None (the caller takes the careful path) unless at least one
        batch came out whole; one disk round trip per fetch instead of two
        matters on a cold cache.

        Headers are walked only near the three places that need them, as
        Kafka's LogSegment.read slices at indexed positions: from the index
        entry to `target`, from the index entry at or below `limit` to the
        batch holding it, and from the index entry at or below the byte
        bound to the last batch that ends within it. Each walk is about one
        index.interval.bytes long, whatever the fetch size (a 1 MiB fetch of
        small batches walked thousands of headers before).
        """
        if known_position is not None and known_position <= seg.size:
            position = known_position  # a consumer reading on from where its last fetch ended
        else:
            _, position = seg.offset_index.lookup(target)
        if budget <= 0 or position >= seg.size:
            return None
        data = seg.read_at(position, min(budget + seg.lookup_chunk_size, seg.size - position))
        view = memoryview(data)
        start = -1
        first = target
        for position_in_view, base_offset, last_offset, _ in _frames(view, 0):
            if position_in_view == 0 and known_position is not None and base_offset != target:
                return None  # a stale hint: take the careful path
            if last_offset >= target:
                start, first = position_in_view, base_offset
                break
        if start < 0:
            return None
        # Where the bytes may stop: the budget, the bytes read, and the start of
        # the batch holding `limit` (the high watermark or the log end).
        stop = min(start + budget, len(view))
        if limit < seg.next_offset:
            _, limit_position = seg.offset_index.lookup(limit)
            for position_in_view, _, last_offset, _ in _frames(view, max(limit_position - position, start)):
                if position_in_view >= stop:
                    break
                if last_offset >= limit:
                    stop = position_in_view
                    break
        # The last whole batch ending within `stop`: jump to an indexed batch
        # start at or below it and walk on; if that batch itself crosses
        # `stop`, step back to the indexed start before it.
        bound = position + stop
        while True:
            jump = max(seg.offset_index.batch_start_at_or_below(bound) - position, start)
            p = jump
            next_offset = None
            for _, _, last_offset, end in _frames(view, jump):
                if end > stop:
                    break
                p = end
                next_offset = last_offset + 1
            if next_offset is not None or jump == start:
                break
            bound = position + jump - 1
        if next_offset is None:
            return None  # not even the first batch fits: the careful path decides
        whole = position + p >= seg.size
        # Remember where the next batch starts: sequential consumers ask for it next.
        self._read_hint = (next_offset, seg, position + p)
        if start == 0 and p == len(data):
            return data, first, next_offset, whole  # the read is the answer: no copy of a megabyte
        return (bytes(view[start:p]) if copy else view[start:p]), first, next_offset, whole

    @staticmethod
    def _read_whole_batches(seg: LogSegment, first: BatchHeader, budget: int, limit: int) -> tuple[bytes, int, bool]:
        """Read batches from `first` up to `budget` bytes; returns (bytes, next offset,
        reached the end of the segment)."""
        want = min(budget, seg.size - first.position)
        data = seg.read_at(first.position, want)
        view = memoryview(data)
        p = 0
        next_offset = first.base_offset
        for _, _, last_offset, end in _frames(view, 0):
            if last_offset >= limit:
                return bytes(view[:p]), next_offset, False
            p = end
            next_offset = last_offset + 1
        reached_end = first.position + p >= seg.size
        return (data if p == len(data) else bytes(view[:p])), next_offset, reached_end

    @_disk_errors_as_storage_errors
    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int, int] | None:
        """ListOffsets: (timestamp, offset, leader_epoch) or None when nothing matches."""
        self._ensure_open()
        cache = self.leader_epoch_cache
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return NO_TIMESTAMP, self.log_start_offset, cache.epoch_for_offset(self.log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            return NO_TIMESTAMP, self.log_end_offset, cache.latest_epoch
        if timestamp == MAX_TIMESTAMP:
            best: LogSegment | None = None
            for seg in self.segments:
                if seg.size and seg.max_timestamp_so_far >= 0 and (best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far):
                    best = seg
            if best is None:
                return None
            header = best.find_offset_by_timestamp(best.max_timestamp_so_far, self.log_start_offset)
            if header is None:
                return None
            return self._record_at_timestamp(best, header, best.max_timestamp_so_far, exact=True)
        if timestamp < 0:
            return None
        for seg in self.segments:
            if seg.size == 0 or seg.max_timestamp_so_far < timestamp or seg.next_offset <= self.log_start_offset:
                continue
            header = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if header is not None:
                return self._record_at_timestamp(seg, header, timestamp, exact=False)
        return None

    def _record_at_timestamp(self, seg: LogSegment, header: BatchHeader, target: int, *, exact: bool) -> tuple[int, int, int]:
        """Narrow a batch down to its first record with timestamp >= target (== when exact),
        as Kafka answers ListOffsets with a record offset, not a batch offset."""
        epoch = header.partition_leader_epoch
        fallback = (header.max_timestamp, max(header.base_offset, self.log_start_offset), epoch)
        if header.is_log_append_time:
            return fallback  # every record carries the batch's timestamp
        try:
            batch = decode_batch(
                seg.read_at(header.position, header.size_in_bytes),
                max_uncompressed_bytes=MAX_LOOKUP_UNCOMPRESSED_BYTES,
                max_batch_size=MAX_APPEND_BYTES,
            )
        except CorruptRecordError:
            return fallback  # unreadable records: the batch still answers the lookup
        for record in batch.records:
            if record.offset >= self.log_start_offset and (record.timestamp == target if exact else record.timestamp >= target):
                return record.timestamp, record.offset, epoch
        return fallback

    # =====================================================================
    # truncation, log start offset, retention
    # =====================================================================

    @_disk_errors_as_storage_errors
    def truncate_to(self, offset: int) -> bool:
        """Remove every batch with offsets >= `offset` (TruncateToEpochEndOffset).

        A batch straddling `offset` is removed whole. Returns False when
        there was nothing to remove.
        """
        self._ensure_open()
        if offset < 0:
            raise OffsetOutOfRangeError(f"cannot truncate to negative offset {offset}")
        if offset >= self.log_end_offset:
            # No record to remove, but an epoch this replica assigned at its log
            # end while it led (and wrote nothing in) may conflict with the new
            # leader's: drop it, as Kafka's truncateTo does, or the follower keeps
            # sending it as last_fetched_epoch and diverges forever.
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            return False
        self._read_hint = self._append_hint = None
        if offset < self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        keep = self._segment_for(offset)
        doomed = self.segments[keep + 1 :]
        del self.segments[keep + 1 :]
        del self._base_offsets[keep + 1 :]
        self._schedule_delete(doomed)
        active = self.active_segment
        active.truncate_to(offset)
        active.resize_indexes_to_max()
        leo = self.log_end_offset
        self.recovery_point = min(self.recovery_point, leo)
        if self.log_start_offset > leo:
            self.log_start_offset = leo
        self.leader_epoch_cache.truncate_from_end(leo)
        if self.producer_state is not None:
            self._reload_producer_state()
        self._notify_truncated()
        return True

    def _reload_producer_state(self) -> None:
        """After a truncation: the hook goes back to a snapshot at or below the log end,
        and the batches from there are replayed (Kafka's truncateAndReload). A hook
        that does not say how far its state reaches (no map_end_offset) only truncates."""
        if hasattr(self.producer_state, "map_end_offset"):
            from kref.storage import log_loader

            log_loader._rebuild_producer_state(self)
        else:
            self.producer_state.truncate_to(self.log_end_offset)

    def _notify_truncated(self) -> None:
        for listener in self.truncation_listeners:
            listener(self.topic, self.partition, self.log_end_offset)

    @_disk_errors_as_storage_errors
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop the whole log and continue at `offset` (a follower far behind the leader's start)."""
        self._ensure_open()
        if offset < 0:
            raise OffsetOutOfRangeError(f"cannot start the log at negative offset {offset}")
        self._truncate_fully(offset, self._now_ms)
        if self.producer_state is not None:
            reset = getattr(self.producer_state, "truncate_fully_and_start_at", None)
            if reset is not None:
                reset(offset)
            else:
                self.producer_state.truncate_to(offset)
        self._notify_truncated()

    def _truncate_fully(self, offset: int, now_ms: int) -> None:
        self._read_hint = self._append_hint = None
        doomed = self.segments[:]
        self.segments.clear()
        self._base_offsets.clear()
        self._schedule_delete(doomed)
        self._append_segment(self._create_segment(offset, now_ms))
        self.log_start_offset = offset
        self.recovery_point = offset
        self.leader_epoch_cache.clear()

    def maybe_increment_log_start_offset(self, new_log_start_offset: int) -> bool:
        """DeleteRecords: records below the new start become invisible now and
        their segments deletable by the next retention pass.

        Whether the start may move there (not past the high watermark) is the
        owning core's decision (ReplicaCore.delete_records, the raft driver's
        snapshot); the Log only refuses a start past its own data."""
        self._ensure_open()
        if new_log_start_offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"cannot increment log start offset to {new_log_start_offset}: beyond the log end {self.log_end_offset}"
            )
        if new_log_start_offset <= self.log_start_offset:
            return False
        self.log_start_offset = new_log_start_offset
        self.leader_epoch_cache.truncate_from_start(new_log_start_offset)
        hook = getattr(self.producer_state, "on_log_start_offset_incremented", None)
        if hook is not None:
            hook(new_log_start_offset)
        return True

    @_disk_errors_as_storage_errors
    def delete_old_segments(self, now_ms: int, high_watermark: int | None | object = RECOVERED) -> int:
        """Retention: delete the segments the retention planner picks (past
        retention.ms, beyond retention.bytes, or wholly below log_start_offset);
        returns how many were deleted. `high_watermark` (nothing at or above it
        is deleted) is the owning core's; a Log with no core (tests, tools)
        passes nothing and the value recovered from the checkpoint is used. A
        partition with a replica core goes through `plan_retention`, the
        core's admission, then `apply_retention` instead."""
        if high_watermark is RECOVERED:
            high_watermark = self.recovered_high_watermark
        proposed = self.plan_retention(now_ms, high_watermark)
        count = self.apply_retention(now_ms, proposed) if proposed is not None else 0
        self.delete_pending_segments(now_ms)
        return count

    def plan_retention(self, now_ms: int, high_watermark: int | None) -> int | None:
        """The log start offset retention proposes now (the retention planner's
        choice of segments, given the owning core's high watermark), or None
        when it deletes nothing. The Log does not move until told (`apply_retention`)."""
        self._ensure_open()
        summaries = [
            SegmentSummary(seg.base_offset, seg.size, seg.largest_timestamp) for seg in self.segments
        ]
        count = segments_to_delete(
            summaries,
            self.config,
            now_ms=now_ms,
            log_start_offset=self.log_start_offset,
            log_end_offset=self.log_end_offset,
            high_watermark=high_watermark,
        )
        if count == 0:
            return None
        return self.segments[count].base_offset if count < len(self.segments) else self.log_end_offset

    @_disk_errors_as_storage_errors
    def apply_retention(self, now_ms: int, log_start_offset: int) -> int:
        """Carry out an admitted retention plan: delete the segments wholly below
        `log_start_offset` (a segment boundary, or the log end when every
        segment goes) and start the log there; returns how many were deleted."""
        self._ensure_open()
        self._now_ms = now_ms
        count = 0
        for i, seg in enumerate(self.segments):
            last = i + 1 == len(self.segments)
            upper = self.log_end_offset if last else self.segments[i + 1].base_offset
            if upper > log_start_offset or (last and seg.size == 0):
                break
            count += 1
        if count:
            self._delete_prefix(count)
        return count

    def _delete_prefix(self, count: int) -> None:
        doomed = self.segments[:count]
        if count == len(self.segments):
            self.roll(self._now_ms)  # the active segment goes too: start a fresh one first
        del self.segments[:count]
        del self._base_offsets[:count]
        self._schedule_delete(doomed)
        new_start = self.segments[0].base_offset
        if new_start > self.log_start_offset:
            self.log_start_offset = new_start
            self.leader_epoch_cache.truncate_from_start(new_start)
            hook = getattr(self.producer_state, "on_log_start_offset_incremented", None)
            if hook is not None:
                hook(new_start)

    def _schedule_delete(self, segments: list[LogSegment]) -> None:
        """Rename to .deleted now, remove after file.delete.delay.ms (readers keep their descriptors)."""
        due = self._now_ms + self.config.file_delete_delay_ms
        for seg in segments:
            seg.rename_to_deleted()
            self._pending_deletes.append((due, seg))

    def delete_pending_segments(self, now_ms: int, *, force: bool = False) -> None:
        keep = []
        for due, seg in self._pending_deletes:
            if force or due <= now_ms:
                seg.delete_files()
            else:
                keep.append((due, seg))
        self._pending_deletes = keep

    def _delete_segment_files_now(self, base_offset: int) -> None:
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            try:
                self.fs.unlink(os.path.join(self.dir, f"{base_offset:020d}{suffix}"))
            except FileNotFoundError:
                pass

    # =====================================================================
    # flush, close, delete
    # =====================================================================

    @_disk_errors_as_storage_errors
    def flush(self, now_ms: int | None = None) -> None:
        """fsync everything up to the log end; the recovery point follows."""
        self._ensure_open()
        self._flush_up_to(self.log_end_offset, now_ms)

    def _flush_up_to(self, offset: int, now_ms: int | None) -> None:
        if now_ms is not None:
            self.last_flush_ms = now_ms
        if offset <= self.recovery_point:
            return
        i = self._segment_for(self.recovery_point)
        self._flush_segments([s for s in self.segments[i:] if s.base_offset < offset])
        fsync_dir(self.dir, self.fs)
        self.recovery_point = offset

    @staticmethod
    def _flush_segments(segments: list[LogSegment]) -> None:
        for seg in segments:
            seg.flush()

    def close(self) -> None:
        """Flush, snapshot the producer state, trim indexes and release files."""
        if self.closed:
            return
        self.flush()
        if self.producer_state is not None:
            self.producer_state.take_snapshot(self.log_end_offset)
        for seg in self.segments:
            seg.close()
        self.delete_pending_segments(self._now_ms, force=True)
        self.closed = True

    def close_uncleanly(self) -> None:
        """Release file descriptors without flushing or trimming (a simulated crash, for tests)."""
        for seg in self.segments:
            seg.close(trim=False)
        for _, seg in self._pending_deletes:
            seg.close(trim=False)
        self.closed = True

    def delete(self) -> None:
        """Remove the partition directory and everything in it."""
        if not self.closed:
            for seg in self.segments:
                seg.close(trim=False)
            self.delete_pending_segments(self._now_ms, force=True)
            self.closed = True
        self.fs.rmtree(self.dir)

    def _ensure_open(self) -> None:
        if self.closed:
            raise StorageError(f"log {self.dir} is closed")

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, log_start_offset={self.log_start_offset}, "
            f"log_end_offset={self.log_end_offset}, segments={len(self.segments)})"
        )


"""The log cleaner's I/O: map the dirty part, write cleaned segments, swap them in.

Theory of operation. cleaner_planner.py decides; this module reads and
writes. A cleaning of one log (`Cleaner.clean`) runs in three parts:

1. `capture(log)` (on the broker's thread, instant): a frozen picture of
   the segments to clean — paths, sizes, offsets — and the offsets of every
   idempotent producer's last batch. The log keeps serving meanwhile.
2. `build_offset_map` and `build_cleaned_group` (on a worker thread, the
   bulk of the work): read the picture's files through descriptors of their
   own (never the log's shared descriptor cache, which is single-threaded),
   map keys to last offsets, and write `<base>.log.cleaned` with its
   `.index.cleaned` and `.timeindex.cleaned` for each group of segments,
   fsynced. Batches keep their base offset, last offset delta, producer
   fields, leader epoch and attributes; only dropped records leave.
3. `swap_in` (back on the broker's thread, instant): if the log still has
   exactly the segments the picture showed, Kafka's swap protocol:
   rename the cleaned files to `.swap` (the log file first: the commit
   point), rename the replaced segments to `.deleted`, rename the `.swap`
   files to their final names, open the new segment. Otherwise nothing is
   swapped and the cleaned files are removed (the log changed under us:
   truncation, retention, deletion).

Crash safety (`recover_swap_files`, called by the loader before it lists
segments): `.cleaned` files are deleted (the swap never committed: the old
segments are intact); a `.log.swap` file committed its swap, so every
segment whose base offset lies in [swap base, swap next offset) is deleted
and the swap files are renamed into place. An old segment past the swap's
last offset held only records the cleaner dropped; should it survive such a
crash it is simply uncompacted data, in order, and the next run drops it
again. Everything the cleaner reads and writes is bounded: one batch, one
I/O buffer (log.cleaner.io.buffer.size) or one segment's index at a time.

log.cleaner.io.max.bytes.per.second throttles reads and writes together
(`Throttler`, pure arithmetic; the worker sleeps what it says).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from array import array
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator

import crc32c

from kref.ports.fs import FileSystem
from kref.records import header as h
from kref.records.batch import build_batch, decode_records, records_section
from kref.records.compression import CompressionType, compress
from kref.records.errors import CorruptRecordError
from kref.records.header import BatchHeader, read_header
from kref.records.varint import read_varint
from kref.records.walker import PAD, index_spans
from kref.storage.cleaner_offset_map import key_hashes
from kref.storage.checkpoint import fsync_dir, read_offset_checkpoint_or_empty, write_offset_checkpoint
from kref.storage.cleaner_planner import (
    BatchAction,
    LogSummary,
    LogToClean,
    OffsetMap,
    SegmentSummary,
    group_segments_by_size,
    plan_batch,
    plan_unread_batch,
    retain_deletes,
    retain_mask,
)
from kref.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, REAL_FILE_SYSTEM, TIME_INDEX_SUFFIX, LogSegment, segment_file_name

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
DOUBLE_MAX = 1.7976931348623157e308
MAX_CLEANER_BATCH_BYTES = 1 << 31  # a segment bounds a batch; this only guards the header read
MAX_UNCOMPRESSED_BATCH_BYTES = 256 * 1024 * 1024  # bound on decompressing one batch while cleaning

_HEADER = struct.Struct(">qiibIhiqqqhii")
_LENGTH = struct.Struct(">i")
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_ZERO_HEADER = bytes(h.HEADER_SIZE)


class CleaningAbortedError(Exception):
    """The log changed under the cleaner, or the broker is stopping: nothing was swapped."""


# ---------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CleanerConfig:
    """Kafka's log.cleaner.* broker settings (defaults as Kafka's)."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_size: int = 512 * 1024
    io_buffer_load_factor: float = 0.9
    io_max_bytes_per_second: float = DOUBLE_MAX
    backoff_ms: int = 15_000


# ---------------------------------------------------------------------------
# throttling
# ---------------------------------------------------------------------------


@dataclass
class Throttler:
    """Keeps the cleaner's I/O under `max_bytes_per_second` (Kafka's Throttler).

    Pure: `observe(bytes, now_s)` returns how long to sleep now so that the
    bytes done since the period began never run ahead of the rate.
    """

    max_bytes_per_second: float
    period_s: float = 0.3
    _start: float | None = None
    _bytes: int = 0

    def observe(self, n: int, now_s: float) -> float:
        if self.max_bytes_per_second >= DOUBLE_MAX:
            return 0.0
        if self._start is None:
            self._start = now_s
        self._bytes += n
        elapsed = now_s - self._start
        if elapsed < self.period_s:
            return 0.0
        wanted = self._bytes / self.max_bytes_per_second
        sleep = max(0.0, wanted - elapsed)
        self._start, self._bytes = now_s + sleep, 0
        return sleep


# ---------------------------------------------------------------------------
# the picture of a log the worker cleans
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentFile:
    base_offset: int
    path: str
    size: int
    next_offset: int
    summary: SegmentSummary
    segment: LogSegment  # identity only: swap_in checks the log still holds it


@dataclass(frozen=True)
class LogPicture:
    dir: str
    key: tuple[str, int]
    segments: tuple[SegmentFile, ...]  # every segment but the active one
    active_base_offset: int
    segment_bytes: int
    max_index_size: int
    index_interval_bytes: int
    delete_retention_ms: int
    producer_last_offsets: frozenset[int] | None  # None: unknown, scan for them
    fs: FileSystem = REAL_FILE_SYSTEM  # the log's file-system port: the worker reads and writes through it


def summarize(log) -> LogSummary:
    """The planner's view of a Log (instant: metadata already in memory)."""
    segs = []
    for s in log.segments:
        segs.append(
            SegmentSummary(
                base_offset=s.base_offset,
                next_offset=s.next_offset,
                size=s.size,
                largest_timestamp=s.max_timestamp_so_far if s.max_timestamp_so_far >= 0 else -1,
                first_batch_timestamp=s.rolling_based_timestamp if s.rolling_based_timestamp is not None else -1,
                offset_index_bytes=len(s.offset_index) * _OFFSET_ENTRY.size,
                time_index_bytes=len(s.time_index) * _TIME_ENTRY.size,
            )
        )
    cfg = log.config
    return LogSummary(
        key=(log.topic, log.partition),
        log_start_offset=log.log_start_offset,
        log_end_offset=log.log_end_offset,
        segments=tuple(segs),
        compact=cfg.compact_enabled,
        min_cleanable_dirty_ratio=cfg.min_cleanable_dirty_ratio,
        min_compaction_lag_ms=cfg.min_compaction_lag_ms,
        max_compaction_lag_ms=cfg.max_compaction_lag_ms,
    )


def capture(log) -> LogPicture:
    cfg = log.config
    files = []
    for s, summary in zip(log.segments[:-1], summarize(log).segments):
        files.append(SegmentFile(s.base_offset, s.log_path, s.size, s.next_offset, summary, s))
    last_offsets = None
    producers = getattr(log.producer_state, "producers", None)
    if isinstance(producers, dict):
        last_offsets = frozenset(e.batches[-1].last_offset for e in producers.values() if e.batches)
    return LogPicture(
        dir=log.dir,
        key=(log.topic, log.partition),
        segments=tuple(files),
        active_base_offset=log.active_segment.base_offset,
        segment_bytes=cfg.segment_bytes,
        max_index_size=cfg.max_index_size,
        index_interval_bytes=cfg.index_interval_bytes,
        delete_retention_ms=cfg.delete_retention_ms,
        producer_last_offsets=last_offsets,
        fs=log.fs,
    )


# ---------------------------------------------------------------------------
# reading segments on the worker
# ---------------------------------------------------------------------------


class _Reader:
    """Sequential reader over one segment file with its own handle, one read buffer at a time."""

    def __init__(self, path: str, size: int, buffer_size: int, account: Callable[[int], None], fs: FileSystem = REAL_FILE_SYSTEM) -> None:
        try:
            self.fh = fs.open(path)
        except FileNotFoundError:
            raise CleaningAbortedError(f"{path} was removed while cleaning") from None
        self.size = size
        self.buffer_size = max(buffer_size, h.HEADER_SIZE)
        self.account = account

    def close(self) -> None:
        self.fh.close()

    def chunks(self) -> Iterator[tuple[memoryview, "np.ndarray", list[BatchHeader], int]]:
        """(buffer, the same as a padded uint8 array, headers of the whole batches in
        it, the buffer's file position); header positions are relative to the
        buffer. One buffer is read into again and again (no allocation, no page
        faults per read): the caller is done with a buffer when it asks for the
        next. A batch larger than the buffer comes alone, read exactly."""
        import numpy as np

        position = 0
        unpack_length = _LENGTH.unpack_from
        store = bytearray(self.buffer_size + PAD)
        padded = np.frombuffer(store, dtype=np.uint8)
        view = memoryview(store)
        ahead = ReadAhead(self.fh, self.buffer_size)
        while position < self.size:
            want = min(self.buffer_size, self.size - position)
            n = self.fh.readinto(view[:want], position)
            self.account(n)
            ahead.done_to(position + n)
            data = view[:n]
            headers, p = _whole_batches(data, n)
            if p == 0:
                if self.size - position < h.HEADER_SIZE:
                    raise CorruptRecordError(f"torn batch header at position {position}", position)
                length = unpack_length(self.fh.pread(12, position), 8)[0]
                total = h.LOG_OVERHEAD + length
                if total > self.size - position or length < h.HEADER_SIZE - h.LOG_OVERHEAD:
                    raise CorruptRecordError(f"batch at position {position} runs past the segment", position)
                big = bytearray(total + PAD)
                got = self.fh.readinto(memoryview(big)[:total], position)
                self.account(got)
                if got != total:
                    raise CleaningAbortedError(f"{self.size - position} bytes announced at {position}, {got} read")
                data = memoryview(big)[:total]
                yield data, np.frombuffer(big, dtype=np.uint8), [read_header(data, 0, max_batch_size=MAX_CLEANER_BATCH_BYTES)], position
                p = total
            else:
                yield data, padded, headers, position
            position += p

    def spans(self, spans: list[tuple[int, int]]) -> Iterator[tuple[memoryview, "np.ndarray", list[BatchHeader], int]]:
        """As `chunks`, for the given (start, end) file ranges only, each whole
        batches (a `_Layout` says where they lie): the rewrite pass skips what
        it knows it drops. A range larger than the buffer (one big batch) is
        read alone, exactly."""
        import numpy as np

        store = bytearray(self.buffer_size + PAD)
        padded, view = np.frombuffer(store, dtype=np.uint8), memoryview(store)
        for start, end in spans:
            n = end - start
            if n > self.buffer_size:
                big = bytearray(n + PAD)
                arr, target = np.frombuffer(big, dtype=np.uint8), memoryview(big)
            else:
                arr, target = padded, view
            got = self.fh.readinto(target[:n], start)
            self.account(got)
            data = target[:n]
            headers, p = _whole_batches(data, got)
            if got != n or p != n:
                raise CleaningAbortedError(f"{self.fh} changed: {n} bytes of whole batches expected at {start}, {p} found")
            yield data, arr, headers, start


def _whole_batches(data: memoryview, n: int) -> tuple[list[BatchHeader], int]:
    """The headers of the whole batches at the start of data[:n], and where they end."""
    unpack_length = _LENGTH.unpack_from
    headers = []
    p = 0
    while p + h.HEADER_SIZE <= n:
        total = h.LOG_OVERHEAD + unpack_length(data, p + 8)[0]
        if p + total > n:
            break
        headers.append(read_header(data, p, max_batch_size=MAX_CLEANER_BATCH_BYTES))
        p += total
    return headers, p


class _Layout:
    """Where each batch of a segment lies and what its header tells the rewrite
    pass, noted by the map pass as it reads the segment whole (8 bytes per
    field per batch, in all at most LAYOUT_MAX_BATCHES batches per cleaning).
    With it the rewrite pass reads only the buffers holding a batch it may
    keep: a batch that is not a control batch, holds no key's last offset and
    is no producer's last batch is dropped on its header alone (as
    plan_unread_batch says), so its bytes need not be read again."""

    __slots__ = ("positions", "ends", "base_offsets", "last_offsets", "records", "producer_ids", "control")

    def __init__(self) -> None:
        self.positions, self.ends = array("q"), array("q")
        self.base_offsets, self.last_offsets = array("q"), array("q")
        self.records, self.producer_ids, self.control = array("q"), array("q"), array("b")

    def __len__(self) -> int:
        return len(self.positions)

    def add(self, headers: list[BatchHeader], where: int) -> None:
        self.positions.extend([where + hd.position for hd in headers])
        self.ends.extend([where + hd.next_position for hd in headers])
        self.base_offsets.extend([hd.base_offset for hd in headers])
        self.last_offsets.extend([hd.last_offset for hd in headers])
        self.records.extend([hd.records_count for hd in headers])
        self.producer_ids.extend([hd.producer_id for hd in headers])
        self.control.extend([hd.is_control_batch for hd in headers])

    def spans(self, om: OffsetMap, producer_last: frozenset[int], buffer_size: int) -> tuple[list[tuple[int, int]], int, int]:
        """The file ranges the rewrite pass reads (each at most one buffer, or one
        batch), and the count of batches and records it skips."""
        import numpy as np

        base = np.frombuffer(self.base_offsets, dtype=np.int64)
        last = np.frombuffer(self.last_offsets, dtype=np.int64)
        last_of_producer = np.frombuffer(self.producer_ids, dtype=np.int64) >= 0
        if producer_last and last_of_producer.any():
            last_of_producer &= np.isin(last, np.fromiter(producer_last, dtype=np.int64, count=len(producer_last)))
        else:
            last_of_producer[:] = False
        control = np.frombuffer(self.control, dtype=np.int8) != 0
        dropped = ~control & (om.survivors_in(base, last) == 0) & ~last_of_producer
        positions, ends = self.positions, self.ends
        spans: list[tuple[int, int]] = []
        firsts: list[int] = []  # first batch of each span
        lasts: list[int] = []
        for i in np.flatnonzero(~dropped).tolist():
            if spans and ends[i] - spans[-1][0] <= buffer_size:
                spans[-1] = (spans[-1][0], ends[i])  # the dropped batches between are read: one buffer, one pass
                lasts[-1] = i
            else:
                spans.append((positions[i], ends[i]))
                firsts.append(i)
                lasts.append(i)
        so_far = np.zeros(len(self) + 1, dtype=np.int64)
        np.cumsum(np.frombuffer(self.records, dtype=np.int64), out=so_far[1:])
        first_at, last_at = np.array(firsts, dtype=np.int64), np.array(lasts, dtype=np.int64)
        read_batches = int((last_at - first_at + 1).sum())
        read_records = int((so_far[last_at + 1] - so_far[first_at]).sum())
        return spans, len(self) - read_batches, int(so_far[-1]) - read_records


LAYOUT_MAX_BATCHES = 1 << 18


class ReadAhead:
    """Asks the kernel for the next few read buffers of a file sequentially read
    (POSIX_FADV_WILLNEED) so that the disk works while the reader parses.

    A few buffers ahead, since the disk's pace varies; asked a window of
    `AHEAD` buffers at a time, once the reader is within `LOW` buffers of
    the window's end: each byte is advised once (the kernel walks the pages
    it is asked about, even those it holds)."""

    AHEAD = 4
    LOW = 2

    def __init__(self, fh, buffer_size: int) -> None:
        fd = getattr(fh, "fd", None)  # a real descriptor (RealFileSystem); the in-memory disk needs no hint
        self.fd = fd if isinstance(fd, int) else None
        self.buffer_size = buffer_size
        self.advised_to = 0

    def done_to(self, position: int) -> None:
        """The reader has everything before `position`."""
        if self.fd is None or position + self.LOW * self.buffer_size <= self.advised_to:
            return
        start = max(self.advised_to, position)
        self.advised_to = start + self.AHEAD * self.buffer_size
        try:
            os.posix_fadvise(self.fd, start, self.advised_to - start, os.POSIX_FADV_WILLNEED)
        except (AttributeError, OSError):  # not on every platform; only a hint
            self.fd = None


class _Records:
    """The records of some batches of one read buffer, indexed together in one
    numpy pass (kref/records/walker.py): no Python object per record unless
    asked for (`keys_at`). Batch i's records are bounds[i] .. bounds[i + 1] - 1;
    `starts`/`ends` are positions in `buf` (the read buffer itself, or the
    batches' decompressed sections joined when any batch is compressed)."""

    def __init__(self, data: memoryview, padded: "np.ndarray", headers: list[BatchHeader], where: int) -> None:
        import numpy as np

        if all(hd.compression_type == CompressionType.NONE for hd in headers):
            buf = data
            spans = [(hd.position + h.HEADER_SIZE, hd.next_position) for hd in headers]
        else:
            padded = None
            sections = [records_section(data, hd, max_uncompressed_bytes=MAX_UNCOMPRESSED_BATCH_BYTES) for hd in headers]
            buf = b"".join(sections)
            spans, at = [], 0
            for section in sections:
                spans.append((at, at + len(section)))
                at += len(section)
        index, bounds = index_spans(buf, spans, where, padded)
        self.buf = index.section
        self.index = index
        self.bounds = bounds
        counts = np.diff(np.array(bounds, dtype=np.int64))
        self.offsets = np.repeat(np.array([hd.base_offset for hd in headers], dtype=np.int64), counts) + index.offset_deltas

    def hashes_at(self, which: "np.ndarray") -> "np.ndarray":
        """The offset map's keys (`key_hashes`) of the records at indexes `which` (all keyed)."""
        idx = self.index
        return key_hashes(idx.padded, idx.key_starts[which], idx.key_lengths[which])


class _Kept:
    """What stays of each batch of a `_Records`, worked out for all of them at once:
    per batch the count of kept records and tombstones, the largest kept
    timestamp delta, and the kept bytes as runs (consecutive kept records are
    one slice, never across batches), so that rewriting a batch is one join."""

    def __init__(self, records: _Records, keep: "np.ndarray", tombstone: "np.ndarray") -> None:
        import numpy as np

        idx = records.index
        bounds = np.array(records.bounds, dtype=np.int64)
        at = np.flatnonzero(keep)
        so_far = np.zeros(len(keep) + 1, dtype=np.int64)
        np.cumsum(keep, out=so_far[1:])
        tombstones_so_far = np.zeros(len(keep) + 1, dtype=np.int64)
        np.cumsum(keep & tombstone, out=tombstones_so_far[1:])
        kept_bounds = so_far[bounds]  # batch i's kept records: at[kept_bounds[i] : kept_bounds[i + 1]]
        self.records = records
        self.at = at
        self.kept_bounds = kept_bounds.tolist()
        self.tombstone_counts = np.diff(tombstones_so_far[bounds]).tolist()
        starts, ends = idx.starts[at], idx.ends[at]
        batch_of = np.repeat(np.arange(len(bounds) - 1), np.diff(kept_bounds))
        new_run = np.ones(len(at), dtype=bool)  # (no kept record: no run)
        new_run[1:] = (starts[1:] != ends[:-1]) | (batch_of[1:] != batch_of[:-1])
        first = np.flatnonzero(new_run)
        last = np.append(first[1:], len(at)).astype(np.int64) - 1
        self.run_starts = starts[first].tolist()
        self.run_ends = ends[last].tolist() if len(at) else []
        self.run_bounds = np.searchsorted(first, kept_bounds).tolist()
        nonempty = np.flatnonzero(np.diff(kept_bounds) > 0)
        self.max_deltas = [0] * (len(bounds) - 1)
        if len(nonempty):
            maxes = np.maximum.reduceat(idx.timestamp_deltas[at], kept_bounds[nonempty]).tolist()
            for b, m in zip(nonempty.tolist(), maxes):
                self.max_deltas[b] = m

    def count(self, i: int) -> int:
        return self.kept_bounds[i + 1] - self.kept_bounds[i]

    def tombstones(self, i: int) -> int:
        return self.tombstone_counts[i]

    def max_timestamp_delta(self, i: int) -> int:
        return self.max_deltas[i]

    def offsets(self, i: int) -> set[int]:
        return set(self.records.offsets[self.at[self.kept_bounds[i] : self.kept_bounds[i + 1]]].tolist())

    def runs(self, i: int) -> tuple[list[int], list[int]]:
        """Starts and ends in `records.buf` of batch i's kept byte runs."""
        lo, hi = self.run_bounds[i], self.run_bounds[i + 1]
        return self.run_starts[lo:hi], self.run_ends[lo:hi]

    def body(self, i: int) -> bytes:
        buf = self.records.buf
        return b"".join([buf[a:b] for a, b in zip(*self.runs(i))])


def _scan_records(section: bytes, base_offset: int) -> list[tuple[int, bytes | None, bool, int, int, int]]:
    """(offset, key, has_value, start, end, timestamp_delta) of each record in a records section.

    Only what compaction needs is parsed; headers and values are skipped.
    Bounds are checked (a bad length raises CorruptRecordError): these
    bytes passed CRC checks on append, so a failure here is a real fault.
    """
    out = []
    append = out.append
    pos, end = 0, len(section)
    try:
        while pos < end:
            start = pos
            b = section[pos]
            if b < 0x80:
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif section[pos + 1] < 0x80:  # records of 64 B to 8 KiB
                v = (b & 0x7F) | (section[pos + 1] << 7)
                length, pos = (v >> 1) ^ -(v & 1), pos + 2
            else:
                length, pos = read_varint(section, pos, end)
            record_end = pos + length
            if length <= 0 or record_end > end:
                raise CorruptRecordError(f"record length {length} runs past the records section")
            b = section[pos + 1]
            if b < 0x80:
                ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 2
            else:
                ts_delta, pos = read_varint(section, pos + 1, record_end, 10)
            b = section[pos]
            if b < 0x80:
                offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                offset_delta, pos = read_varint(section, pos, record_end)
            b = section[pos]
            if b < 0x80:
                key_length, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                key_length, pos = read_varint(section, pos, record_end)
            if key_length >= 0:
                if pos + key_length > record_end:
                    raise CorruptRecordError("record key runs past its record")
                key = section[pos : pos + key_length]
                pos += key_length
            else:
                key = None
            b = section[pos]
            has_value = b != 1  # zigzag(-1): a null value, a tombstone
            append((base_offset + offset_delta, key, has_value, start, record_end, ts_delta))
            pos = record_end
    except IndexError:
        raise CorruptRecordError("record runs past the records section") from None
    return out


def _records_of(batch: memoryview, header: BatchHeader) -> bytes:
    local = header if header.position == 0 else _at_zero(header)
    section = records_section(batch, local, max_uncompressed_bytes=MAX_UNCOMPRESSED_BATCH_BYTES)
    return section if isinstance(section, bytes) else bytes(section)


def has_keyless_record(buf: bytes | bytearray | memoryview, header: BatchHeader) -> bool:
    """Does this data batch hold a record without a key? A compacted topic refuses
    such batches at append (Kafka's LogValidator), since the cleaner could only drop them."""
    if header.is_control_batch:
        return False
    batch = memoryview(buf)[header.position : header.next_position]
    return any(r[1] is None for r in _scan_records(_records_of(batch, header), header.base_offset))


def _at_zero(header: BatchHeader) -> BatchHeader:
    from dataclasses import replace

    return replace(header, position=0)


# ---------------------------------------------------------------------------
# writing batches and cleaned segments
# ---------------------------------------------------------------------------


def _pack_batch(
    header: BatchHeader, section: bytes, records_count: int, base_timestamp: int, max_timestamp: int, attributes: int
) -> bytes:
    out = bytearray(h.HEADER_SIZE)
    out += section
    _seal_batch(out, 0, header, records_count, base_timestamp, max_timestamp, attributes)
    return bytes(out)


def _seal_batch(
    out: bytearray, at: int, header: BatchHeader, records_count: int, base_timestamp: int, max_timestamp: int, attributes: int
) -> None:
    """Fill in the header of the batch laid out from out[at] to the end of `out`
    (header bytes, then its records section), CRC last."""
    _HEADER.pack_into(
        out, at,
        header.base_offset, len(out) - at - h.LOG_OVERHEAD, header.partition_leader_epoch, 2, 0, attributes,
        header.last_offset_delta, base_timestamp, max_timestamp, header.producer_id, header.producer_epoch,
        header.base_sequence, records_count,
    )  # fmt: skip
    with memoryview(out) as view:  # released at once: `out` may grow after
        crc = crc32c.crc32c(view[at + h.ATTRIBUTES_OFFSET :])
    struct.pack_into(">I", out, at + h.CRC_OFFSET, crc)


@dataclass
class CleaningStats:
    bytes_read: int = 0
    bytes_written: int = 0
    batches_read: int = 0
    records_read: int = 0
    records_kept: int = 0
    batches_emptied: int = 0
    map_entries: int = 0
    groups: int = 0
    seconds: float = 0.0
    map_seconds: float = 0.0  # of which the map pass (build_offset_map)


class _CleanedWriter:
    """Appends batches to `<base>.log.cleaned` and keeps its index entries in memory,
    added by the same rule as LogSegment.append (one per index.interval.bytes)."""

    buffer_limit = 1 << 20  # bytes gathered before one write

    def __init__(
        self,
        directory: str,
        base_offset: int,
        index_interval_bytes: int,
        max_index_size: int,
        account: Callable[[int], None],
        fs: FileSystem = REAL_FILE_SYSTEM,
    ) -> None:
        self.fs = fs
        self.base_offset = base_offset
        self.path = os.path.join(directory, segment_file_name(base_offset, LOG_SUFFIX) + CLEANED_SUFFIX)
        self.index_path = os.path.join(directory, segment_file_name(base_offset, INDEX_SUFFIX) + CLEANED_SUFFIX)
        self.time_index_path = os.path.join(directory, segment_file_name(base_offset, TIME_INDEX_SUFFIX) + CLEANED_SUFFIX)
        self.fh = fs.open(self.path, create=True, truncate=True)
        self.index_interval_bytes = index_interval_bytes
        self.max_entries_offset = max(1, max_index_size // _OFFSET_ENTRY.size)
        self.max_entries_time = max(1, max_index_size // _TIME_ENTRY.size)
        self.account = account
        self.size = 0
        self.pending = bytearray()
        self.bytes_since_index = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.offset_entries: list[tuple[int, int]] = []
        self.time_entries: list[tuple[int, int]] = []

    def append(self, batch: bytes | memoryview, last_offset: int, max_timestamp: int) -> None:
        self._note(len(batch), last_offset, max_timestamp)
        self.pending += batch
        if len(self.pending) >= self.buffer_limit:
            self._write()

    def append_runs(
        self, header: BatchHeader, buf: memoryview, starts: list[int], ends: list[int], records_count: int, max_timestamp: int
    ) -> None:
        """A rewritten batch (same base timestamp, attributes and fields as `header`)
        of the record byte runs buf[starts[k]:ends[k]], laid out straight in the
        write buffer: the kept bytes are copied once, the CRC computed there."""
        length = h.HEADER_SIZE + sum(ends) - sum(starts)
        self._note(length, header.last_offset, max_timestamp)
        pending = self.pending
        at = len(pending)
        pending += _ZERO_HEADER
        for a, b in zip(starts, ends):
            pending += buf[a:b]
        _seal_batch(pending, at, header, records_count, header.base_timestamp, max_timestamp, header.attributes)
        if len(pending) >= self.buffer_limit:
            self._write()

    def _note(self, length: int, last_offset: int, max_timestamp: int) -> None:
        """A batch of `length` bytes comes next: the indexes' bookkeeping, as LogSegment.append's."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, last_offset
        if self.bytes_since_index > self.index_interval_bytes:
            self._index(last_offset, self.size + len(self.pending))
            self.bytes_since_index = 0
        self.bytes_since_index += length

    def _index(self, last_offset: int, position: int) -> None:
        relative = last_offset - self.base_offset
        if len(self.offset_entries) < self.max_entries_offset and (not self.offset_entries or relative > self.offset_entries[-1][0]):
            self.offset_entries.append((relative, position))
        self._time_entry()

    def _time_entry(self) -> None:
        ts, relative = self.max_timestamp, self.offset_of_max_timestamp - self.base_offset
        if ts < 0 or len(self.time_entries) >= self.max_entries_time:
            return
        if self.time_entries and (ts <= self.time_entries[-1][0] or relative < self.time_entries[-1][1]):
            return
        self.time_entries.append((ts, relative))

    def _write(self) -> None:
        view = memoryview(self.pending)
        written = 0
        while written < len(view):
            written += self.fh.pwrite(view[written:], self.size + written)
        self.account(len(view))
        self.size += len(view)
        self.pending = bytearray()

    def finish(self) -> None:
        """Write the rest and both indexes, fsync all three (before any rename)."""
        self._write()
        self._time_entry()  # the segment's final max timestamp, as on roll
        self.fh.fsync()
        self.fh.close()
        for path, entries, entry in (
            (self.index_path, self.offset_entries, _OFFSET_ENTRY),
            (self.time_index_path, self.time_entries, _TIME_ENTRY),
        ):
            self.fs.write_bytes(path, b"".join(entry.pack(a, b) for a, b in entries))
            self.fs.fsync(path)

    def abandon(self) -> None:
        try:
            self.fh.close()
        except OSError:
            pass
        for path in (self.path, self.index_path, self.time_index_path):
            try:
                self.fs.unlink(path)
            except FileNotFoundError:
                pass


@dataclass(frozen=True)
class CleanedGroup:
    base_offset: int
    replaced: tuple[SegmentFile, ...]
    size: int


# ---------------------------------------------------------------------------
# the cleaner
# ---------------------------------------------------------------------------


@dataclass
class Cleaner:
    """One cleaner thread's worker state: its offset map and throttler."""

    offset_map: OffsetMap
    throttler: Throttler
    io_buffer_size: int = 512 * 1024
    stop: threading.Event = field(default_factory=threading.Event)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    stats: CleaningStats = field(default_factory=CleaningStats)
    _layouts: dict[tuple[str, int], _Layout] = field(default_factory=dict, repr=False)  # the last map pass's

    def _account(self, n: int) -> None:
        if self.stop.is_set():
            raise CleaningAbortedError("the cleaner is stopping")
        pause = self.throttler.observe(n, self.clock())
        if pause > 0:
            self.sleep(pause)

    def _account_read(self, n: int) -> None:
        self.stats.bytes_read += n
        self._account(n)

    def _account_write(self, n: int) -> None:
        self.stats.bytes_written += n
        self._account(n)

    # -- step 1: the map -----------------------------------------------------

    def build_offset_map(self, picture: LogPicture, first_dirty_offset: int, first_uncleanable_offset: int) -> int:
        """Map keys of [first_dirty, first_uncleanable) to their last offsets; returns the
        end offset actually mapped (less when the map filled up)."""
        start = time.monotonic()
        try:
            return self._build_offset_map(picture, first_dirty_offset, first_uncleanable_offset)
        finally:
            self.stats.map_seconds += time.monotonic() - start

    def _build_offset_map(self, picture: LogPicture, first_dirty_offset: int, first_uncleanable_offset: int) -> int:
        import numpy as np

        om = self.offset_map
        om.clear(first_dirty_offset)
        self._layouts = {}
        noted = 0
        end_offset = first_dirty_offset
        for seg in picture.segments:
            if seg.next_offset <= first_dirty_offset or seg.size == 0:
                continue
            if seg.base_offset >= first_uncleanable_offset:
                break
            reader = _Reader(seg.path, seg.size, self.io_buffer_size, self._account_read, picture.fs)
            layout: _Layout | None = _Layout()
            try:
                for data, padded, headers, where in reader.chunks():
                    if layout is not None:
                        layout.add(headers, where)
                        if noted + len(layout) > LAYOUT_MAX_BATCHES:
                            layout = None
                    mapped = [hd for hd in headers if hd.last_offset >= first_dirty_offset and hd.base_offset < first_uncleanable_offset]
                    data_batches = [hd for hd in mapped if not hd.is_control_batch]
                    if data_batches:
                        # Every record of the buffer's data batches parsed, hashed and
                        # mapped at once: no Python object per record.
                        records = _Records(data, padded, data_batches, where)
                        keyed = np.flatnonzero(records.index.key_lengths >= 0)
                        counts = np.diff(records.bounds).tolist()
                        fitted = om.put_batches(
                            records.hashes_at(keyed), records.offsets[keyed], np.searchsorted(keyed, records.bounds).tolist(), counts
                        )
                    i = 0
                    for hd in mapped:
                        if not hd.is_control_batch:
                            count = counts[i]
                            i += 1
                            if i > fitted:
                                if end_offset == first_dirty_offset:
                                    raise CleaningAbortedError(
                                        f"log.cleaner.dedupe.buffer.size holds {om.capacity} keys, "
                                        f"too few for one batch of {count} at offset {hd.base_offset}"
                                    )
                                self.stats.map_entries = len(om)
                                return end_offset
                        om.advance(hd.last_offset)
                        end_offset = hd.next_offset
                    if headers and headers[-1].base_offset >= first_uncleanable_offset:
                        break
                else:  # read whole: the rewrite pass may skip by the layout
                    if layout is not None:
                        self._layouts[(seg.path, seg.size)] = layout
                        noted += len(layout)
            finally:
                reader.close()
        # Everything below first_uncleanable was mapped: the whole dirty part is clean after this run.
        om.advance(first_uncleanable_offset - 1)
        self.stats.map_entries = len(om)
        return max(end_offset, first_uncleanable_offset)

    # -- producers' last batches ---------------------------------------------------

    def producer_last_offsets(self, picture: LogPicture, active_path: str | None = None, active_size: int = 0) -> frozenset[int]:
        if picture.producer_last_offsets is not None:
            return picture.producer_last_offsets
        last: dict[int, int] = {}
        files = [(s.path, s.size) for s in picture.segments]
        if active_path is not None:
            files.append((active_path, active_size))
        for path, size in files:
            reader = _Reader(path, size, self.io_buffer_size, self._account_read, picture.fs)
            try:
                for _, _, headers, _ in reader.chunks():
                    for header in headers:
                        if header.producer_id >= 0:
                            last[header.producer_id] = header.last_offset
            finally:
                reader.close()
        return frozenset(last.values())

    # -- step 2: rewrite one group ------------------------------------------------

    def groups(self, picture: LogPicture, end_offset: int) -> list[list[SegmentFile]]:
        """Every non-active segment below end_offset, grouped to fit one segment."""
        todo = [s for s in picture.segments if s.base_offset < end_offset]
        by_base = {s.base_offset: s for s in todo}
        grouped = group_segments_by_size([s.summary for s in todo], picture.segment_bytes, picture.max_index_size)
        return [[by_base[s.base_offset] for s in g] for g in grouped]

    def build_cleaned_group(self, picture: LogPicture, group: list[SegmentFile], now_ms: int, producer_last: frozenset[int]) -> tuple[CleanedGroup, int]:
        """Write the group's surviving batches to `<base>.log.cleaned` (+ indexes).

        Returns the group and the earliest delete horizon it carries (-1: none).
        """
        writer = _CleanedWriter(
            picture.dir, group[0].base_offset, picture.index_interval_bytes, picture.max_index_size, self._account_write, picture.fs
        )
        earliest_horizon = -1
        try:
            for seg in group:
                reader = _Reader(seg.path, seg.size, self.io_buffer_size, self._account_read, picture.fs)
                layout = self._layouts.pop((seg.path, seg.size), None)
                if layout is None:
                    buffers = reader.chunks()
                else:
                    spans, skipped_batches, skipped_records = layout.spans(self.offset_map, producer_last, reader.buffer_size)
                    self.stats.batches_read += skipped_batches
                    self.stats.records_read += skipped_records
                    buffers = reader.spans(spans)
                try:
                    for data, padded, headers, where in buffers:
                        horizon = self._clean_buffer(writer, data, padded, headers, where, now_ms, picture.delete_retention_ms, producer_last)
                        if horizon >= 0 and (earliest_horizon < 0 or horizon < earliest_horizon):
                            earliest_horizon = horizon
                finally:
                    reader.close()
            writer.finish()
        except BaseException:
            writer.abandon()
            raise
        self.stats.groups += 1
        return CleanedGroup(group[0].base_offset, tuple(group), writer.size), earliest_horizon

    def _clean_buffer(
        self, writer: "_CleanedWriter", data: memoryview, padded: "np.ndarray", headers: list[BatchHeader], where: int, now_ms: int,
        delete_retention_ms: int, producer_last: frozenset[int],
    ) -> int:  # fmt: skip
        """Write what survives of one read buffer's batches; returns the earliest delete
        horizon written (-1: none).

        First every batch the header decides alone (control batches, batches
        holding no key's last offset); then the records of all the others at
        once (`_Records`, `retain_mask`, `_Kept`); then each batch in order:
        copied, rewritten with its kept records' bytes, emptied or dropped."""
        import numpy as np

        om = self.offset_map
        stats = self.stats
        survivors = om.survivors_in(
            np.array([hd.base_offset for hd in headers], dtype=np.int64), np.array([hd.last_offset for hd in headers], dtype=np.int64)
        ).tolist()
        lasts_of_producer = [hd.producer_id >= 0 and hd.last_offset in producer_last for hd in headers]
        early = [plan_unread_batch(hd, None if n < 0 else n, last) for hd, n, last in zip(headers, survivors, lasts_of_producer)]
        to_read = [hd for hd, plan in zip(headers, early) if plan is None]
        if to_read:
            records = _Records(data, padded, to_read, where)
            idx = records.index
            counts = np.diff(np.array(records.bounds, dtype=np.int64))
            deletes_retained = np.repeat(np.array([retain_deletes(hd, now_ms) for hd in to_read], dtype=bool), counts)
            tombstone = idx.value_lengths < 0
            keep = retain_mask(records.offsets, idx.key_lengths >= 0, tombstone, deletes_retained, om, records.hashes_at)
            kept = _Kept(records, keep, tombstone)
        earliest_horizon = -1
        i = 0
        for hd, plan, last_of_producer in zip(headers, early, lasts_of_producer):
            stats.batches_read += 1
            if plan is None:
                n_kept, tombstones = kept.count(i), kept.tombstones(i)
                stats.records_read += records.bounds[i + 1] - records.bounds[i]
                stats.records_kept += n_kept
                plan = plan_batch(hd, n_kept, tombstones, last_of_producer, now_ms, delete_retention_ms)
                if plan.delete_horizon_ms is not None and tombstones:
                    if earliest_horizon < 0 or plan.delete_horizon_ms < earliest_horizon:
                        earliest_horizon = plan.delete_horizon_ms
                if plan.action is BatchAction.REWRITE:
                    self._rewrite(writer, hd, data, kept, i, plan.delete_horizon_ms)
                i += 1
                if plan.action is BatchAction.REWRITE:
                    continue
            else:
                stats.records_read += hd.records_count
            if plan.action is BatchAction.COPY:
                writer.append(data[hd.position : hd.next_position], hd.last_offset, hd.max_timestamp)
            elif plan.action is BatchAction.EMPTY:
                self._write_empty(writer, hd)
        return earliest_horizon

    def _write_empty(self, writer: "_CleanedWriter", header: BatchHeader) -> None:
        """A producer's last batch with no record left: its header alone (Kafka's writeEmptyHeader)."""
        self.stats.batches_emptied += 1
        attributes = header.attributes & ~h.COMPRESSION_CODEC_MASK & ~h.DELETE_HORIZON_FLAG_MASK
        out = _pack_batch(header, b"", 0, header.max_timestamp, header.max_timestamp, attributes)
        writer.append(out, header.last_offset, header.max_timestamp)

    @staticmethod
    def _rewrite(writer: "_CleanedWriter", header: BatchHeader, data: memoryview, kept: "_Kept", i: int, horizon: int | None) -> None:
        """Write batch i of `kept` with only its kept records, header fields preserved."""
        log_append_time = header.is_log_append_time
        if horizon is not None and not header.has_delete_horizon_ms:
            # A new delete horizon moves baseTimestamp, so every timestamp delta changes.
            wanted = kept.offsets(i)
            decoded = [r for r in decode_records(data, header, max_uncompressed_bytes=MAX_UNCOMPRESSED_BATCH_BYTES) if r.offset in wanted]
            out = build_batch(
                decoded,
                base_offset=header.base_offset,
                compression=header.compression_type,
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence,
                is_transactional=header.is_transactional,
                partition_leader_epoch=header.partition_leader_epoch,
                timestamp_type=1 if log_append_time else 0,
                max_timestamp=header.max_timestamp if log_append_time else None,
                delete_horizon_ms=horizon,
                last_offset_delta=header.last_offset_delta,
            )
            max_ts = header.max_timestamp if log_append_time else max(r.timestamp for r in decoded)
            writer.append(out, header.last_offset, max_ts)
            return
        # Same baseTimestamp: the kept records' bytes are valid as they are.
        max_ts = header.max_timestamp if log_append_time else header.base_timestamp + kept.max_timestamp_delta(i)
        if header.compression_type == CompressionType.NONE:
            starts, ends = kept.runs(i)
            writer.append_runs(header, kept.records.buf, starts, ends, kept.count(i), max_ts)
            return
        body = compress(header.compression_type, kept.body(i))
        writer.append(_pack_batch(header, body, kept.count(i), header.base_timestamp, max_ts, header.attributes), header.last_offset, max_ts)


# ---------------------------------------------------------------------------
# swapping in, and recovering a swap after a crash
# ---------------------------------------------------------------------------


def _rename_suffix(base_path_no_suffix: str, old: str, new: str, fs: FileSystem | None = None) -> bool:
    try:
        (fs or REAL_FILE_SYSTEM).replace(base_path_no_suffix + old, base_path_no_suffix + new)
        return True
    except FileNotFoundError:
        return False


def discard_cleaned(directory: str, base_offset: int, fs: FileSystem | None = None) -> None:
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        try:
            (fs or REAL_FILE_SYSTEM).unlink(os.path.join(directory, segment_file_name(base_offset, suffix) + CLEANED_SUFFIX))
        except FileNotFoundError:
            pass


def still_holds(log, group: CleanedGroup) -> bool:
    """Does the log still have exactly the segments this group replaces, unchanged?"""
    if log.closed:
        return False
    segments = log.segments
    by_id = {id(s): s for s in segments[:-1]}
    for f in group.replaced:
        seg = by_id.get(id(f.segment))
        if seg is not f.segment or seg.size != f.size or seg.next_offset != f.next_offset:
            return False
    return True


def swap_in(log, group: CleanedGroup, *, step: Callable[[str], None] | None = None) -> bool:
    """Kafka's replaceSegments for one cleaned group; False (and cleaned files removed)
    when the log no longer holds the group's segments.

    `step(name)` is called between the protocol's steps (tests crash there).
    """
    directory = log.dir
    fs = log.fs
    base = group.base_offset
    if not still_holds(log, group):
        discard_cleaned(directory, base, fs)
        return False
    note = step or (lambda name: None)
    stem = {suffix: os.path.join(directory, segment_file_name(base, suffix)) for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)}
    fsync_dir(directory, fs)
    note("cleaned-written")
    # The log file's rename is the commit point: recovery completes the swap from here on.
    _rename_suffix(stem[LOG_SUFFIX], CLEANED_SUFFIX, SWAP_SUFFIX, fs)
    note("log-swap-renamed")
    _rename_suffix(stem[INDEX_SUFFIX], CLEANED_SUFFIX, SWAP_SUFFIX, fs)
    _rename_suffix(stem[TIME_INDEX_SUFFIX], CLEANED_SUFFIX, SWAP_SUFFIX, fs)
    fsync_dir(directory, fs)
    note("swap-renamed")
    old = [f.segment for f in group.replaced]
    replace_segments(log, old, lambda: _open_swapped(log, base, stem, note))
    note("done")
    return True


def replace_segments(log, old: list[LogSegment], make_new: Callable[[], LogSegment]) -> None:
    """Swap `old` (consecutive, inactive) for the segment `make_new` opens, in memory and on disk.

    The old segments are renamed to `.deleted` first (readers holding them
    keep reading the same bytes until file.delete.delay.ms passes), then
    `make_new` renames the swap files into place and opens the result.
    """
    index = log.segments.index(old[0])
    assert log.segments[index : index + len(old)] == old, "cleaned segments must be consecutive"
    log._read_hint = None
    del log.segments[index : index + len(old)]
    del log._base_offsets[index : index + len(old)]
    log._schedule_delete(old)
    new = make_new()
    log.segments.insert(index, new)
    log._base_offsets.insert(index, new.base_offset)


def _open_swapped(log, base: int, stem: dict[str, str], note: Callable[[str], None]) -> LogSegment:
    """After the old segments became `.deleted`: drop the `.swap` suffixes and open the segment."""
    note("old-deleted")
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):
        _rename_suffix(stem[suffix], SWAP_SUFFIX, "", log.fs)
        if suffix == INDEX_SUFFIX:
            note("index-renamed")
    fsync_dir(log.dir, log.fs)
    return open_segment(log.dir, base, log.config, log._now_ms, log.fs)


def open_segment(directory: str, base: int, config, now_ms: int, fs: FileSystem | None = None) -> LogSegment:
    args = (directory, base, config.max_index_size, config.index_interval_bytes, now_ms, fs)
    try:
        return LogSegment.load(*args)
    except Exception:  # an index that fails its sanity check is rebuilt, as on load
        seg = LogSegment.open_for_recovery(*args)
        seg.recover(max(config.segment_bytes, config.max_message_bytes) + 1024)
        seg.on_become_inactive()
        return seg


def recover_swap_files(directory: str, fs: FileSystem | None = None) -> list[int]:
    """The loader's first step in a partition directory: finish or roll back a swap.

    Deletes every `.cleaned` file; for each `<base>.log.swap`, deletes the
    segments (and their indexes) whose base offset lies in [base, the swap's
    next offset) and renames the swap files into place. Index `.swap` files
    without their log are renamed only if their log was already renamed
    (a crash between the final renames), else deleted. Returns the bases of
    swaps completed.
    """
    fs = fs or REAL_FILE_SYSTEM
    names = fs.listdir(directory)
    for name in names:
        if name.endswith(CLEANED_SUFFIX):
            fs.unlink(os.path.join(directory, name))
    log_swaps = sorted(int(n[:20]) for n in names if n.endswith(LOG_SUFFIX + SWAP_SUFFIX) and n[:20].isdigit())
    completed = []
    for base in log_swaps:
        swap_path = os.path.join(directory, segment_file_name(base, LOG_SUFFIX) + SWAP_SUFFIX)
        next_offset = _next_offset_of(swap_path, base, fs)
        for name in fs.listdir(directory):
            stem, ext = os.path.splitext(name)
            if ext in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX) and len(stem) == 20 and stem.isdigit():
                offset = int(stem)
                if offset == base or base <= offset < next_offset:
                    fs.unlink(os.path.join(directory, name))
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            _rename_suffix(os.path.join(directory, segment_file_name(base, suffix)), SWAP_SUFFIX, "", fs)
        completed.append(base)
        logger.info("%s: completed the swap of cleaned segment %020d (offsets %d..%d) after a crash", directory, base, base, next_offset)
    for name in fs.listdir(directory):
        if name.endswith(SWAP_SUFFIX):
            stem = name[:20]
            final = os.path.join(directory, name[: -len(SWAP_SUFFIX)])
            if stem.isdigit() and fs.exists(os.path.join(directory, stem + LOG_SUFFIX)) and int(stem) in completed:
                fs.replace(os.path.join(directory, name), final)
            else:
                # An index whose log's rename was the last thing done: the log is
                # in place and an index is only a cache — rebuilding beats guessing.
                fs.unlink(os.path.join(directory, name))
    if log_swaps:
        fsync_dir(directory, fs)
    return completed


def _next_offset_of(path: str, base: int, fs: FileSystem | None = None) -> int:
    """The offset after the last whole batch of a segment file (headers only)."""
    next_offset = base
    fh = (fs or REAL_FILE_SYSTEM).open(path)
    try:
        size = fh.size()
        position = 0
        while position + h.HEADER_SIZE <= size:
            data = fh.pread(h.HEADER_SIZE, position)
            base_offset, length = struct.unpack_from(">qi", data, 0)
            total = h.LOG_OVERHEAD + length
            if length < h.HEADER_SIZE - h.LOG_OVERHEAD or position + total > size:
                break
            last_delta = struct.unpack_from(">i", data, 23)[0]
            next_offset = max(next_offset, base_offset + last_delta + 1)
            position += total
    finally:
        fh.close()
    return next_offset


# ---------------------------------------------------------------------------
# the cleaner-offset-checkpoint
# ---------------------------------------------------------------------------


def read_cleaner_checkpoints(log_dirs: list[str], fs: FileSystem | None = None) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for d in log_dirs:
        out.update(read_offset_checkpoint_or_empty(os.path.join(d, CLEANER_CHECKPOINT_FILE), fs))
    return out


def write_cleaner_checkpoints(
    log_dirs_of: dict[tuple[str, int], str], offsets: dict[tuple[str, int], int], log_dirs: list[str], fs: FileSystem | None = None
) -> None:
    """One cleaner-offset-checkpoint per log dir, holding that dir's partitions."""
    fs = fs or REAL_FILE_SYSTEM
    for d in log_dirs:
        mine = {k: v for k, v in offsets.items() if log_dirs_of.get(k) == d}
        path = os.path.join(d, CLEANER_CHECKPOINT_FILE)
        if mine or fs.exists(path):
            write_offset_checkpoint(path, mine, fs=fs)


# ---------------------------------------------------------------------------
# one whole cleaning, synchronously (tests, bench, and the driver's pieces)
# ---------------------------------------------------------------------------


def clean_log_now(log, cleaner: Cleaner, to_clean: LogToClean, now_ms: int) -> tuple[int, int]:
    """Clean `log` in the calling thread; returns (end offset, earliest delete horizon or -1)."""
    picture = capture(log)
    start = time.monotonic()
    end_offset = cleaner.build_offset_map(picture, to_clean.first_dirty_offset, to_clean.first_uncleanable_offset)
    producer_last = cleaner.producer_last_offsets(picture, log.active_segment.log_path, log.active_segment.size)
    horizon = -1
    for group in cleaner.groups(picture, end_offset):
        cleaned, group_horizon = cleaner.build_cleaned_group(picture, group, now_ms, producer_last)
        if not swap_in(log, cleaned):
            raise CleaningAbortedError(f"{log.dir} changed while cleaning")
        if group_horizon >= 0 and (horizon < 0 or group_horizon < horizon):
            horizon = group_horizon
    cleaner.stats.seconds += time.monotonic() - start
    return end_offset, horizon

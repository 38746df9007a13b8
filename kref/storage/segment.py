"""One log segment: `<base>.log` plus its `.index` and `.timeindex`.

A partition's log is a sequence of segments; each holds the batches whose
offsets start at its base offset (the 20-digit file name) and is appended to
only while it is the active (last) segment. The segment owns the byte
positions: it writes batches at the end of its file, adds a sparse index
entry after every index.interval.bytes (offset index: last offset of the
batch -> its position; time index: largest timestamp so far -> the offset
carrying it, as Kafka's LogSegment.append does per batch), and answers
"where is offset X" (index lookup, then a scan of batch headers) and "where
is timestamp T" (time index, then offset index, then a scan).

Recovery (`recover`) is the segment's half of the log's crash story: it
re-reads every batch from position 0, checks header and CRC-32C and that
offsets only grow, rebuilds both indexes on the way, and truncates the file
at the first batch that fails — a torn tail after a crash loses only the
bytes that were never completely written.

Files. The segment reaches its files only through the file-system port
(kref/ports/fs.py) it is given: RealFileSystem in the broker,
MemoryFileSystem (a disk that loses unsynced bytes on crash()) in tests and
the simulator. All I/O is positional (pread/pwrite) on the `.log` file's
handle; the indexes hold none (see index.py), so a segment costs at most
one. Those descriptors live in one process-wide bounded LRU
(`open_segment_files`): a segment opens its file on first use and may be
closed again when the least recently used descriptors are evicted, so old
segments are opened lazily and the number of partitions is not bounded by
the descriptor limit (Kafka holds one per segment; with 10,000 partitions
that alone exceeds the common 1024). The bound defaults to a quarter of the
process's RLIMIT_NOFILE, leaving the rest to connections. When open() meets
EMFILE/ENFILE the cache gives back half of its descriptors and tries once
more before the OSError reaches the log (which turns it into
KAFKA_STORAGE_ERROR for that one request). Reopening is safe because the
segment's path is always current: a segment scheduled for deletion is
renamed to `*.deleted` and its path follows, so a reader still holding it
reads the same bytes until the files are finally removed. fsync is per
file, not per descriptor, so data written through an evicted descriptor is
made durable by the next flush through a new one.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import resource
from collections import OrderedDict
from dataclasses import replace
from typing import Callable, Iterator

from kref.records.errors import CorruptRecordError, TruncatedBatchError
from kref.records.header import HEADER_SIZE, BatchHeader, read_header, verify_crc
from kref.storage.errors import CorruptIndexError
from kref.ports.fs import FileHandle, FileSystem, RealFileSystem
from kref.storage.index import NO_TIMESTAMP, OffsetIndex, TimeIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
INT_MAX = (1 << 31) - 1
SCAN_CHUNK = 8 * 1024 * 1024  # bound on one read while scanning a segment


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class _Peek(bytes):
    """A batch header's 61 bytes that claim the length of the rest of the file.

    read_header checks that the announced batch fits in its buffer; when we
    only need the header of a batch inside a file, "fits" means "fits before
    the end of the file", which this claimed length expresses.
    """

    claimed: int

    def __len__(self) -> int:
        return self.claimed


REAL_FILE_SYSTEM = RealFileSystem()  # the default port of a segment (and a Log) given none


class SegmentFiles:
    """A bounded LRU of open segment `.log` handles (one per open segment).

    Single-threaded by design (the broker is one trio thread): a handle
    handed out by `handle()` is only used until the caller's next await-free
    stretch ends, and nothing evicts in between. The spares below are real
    descriptors whatever the port: they exist for the process's limit.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._open: OrderedDict[LogSegment, FileHandle] = OrderedDict()
        self.opens = 0  # descriptors opened, for tests and benches
        self._spares: list[int] = []
        self._spare_count = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._open)

    def handle(self, segment: "LogSegment", *, create: bool = False, truncate: bool = False) -> FileHandle:
        fh = segment._fd
        if fh is not None:
            self._open.move_to_end(segment)
            return fh
        if segment.closed:
            raise OSError(errno.EBADF, f"segment {segment.log_path} is closed")
        while len(self._open) >= self.capacity:
            self._evict_one()
        fh = self.open(segment.fs, segment.log_path, create=create, truncate=truncate)
        self.opens += 1
        segment._fd = fh
        self._open[segment] = fh
        return fh

    def open(self, fs: FileSystem, path: str, *, create: bool = False, truncate: bool = False) -> FileHandle:
        """fs.open that, out of descriptors, first gives back half of ours.

        Also used by the indexes for their short-lived handles: old
        segments need theirs less than a roll or a connection does.
        """
        try:
            return fs.open(path, create=create, truncate=truncate)
        except OSError as e:
            if e.errno not in (errno.EMFILE, errno.ENFILE) or not self._open:
                raise
        self.shed()
        return fs.open(path, create=create, truncate=truncate)

    def shed(self) -> int:
        """Close the least recently used half of our descriptors; how many were closed.

        Called when the process is out of descriptors (here, and by the
        server when accept() fails): the segments reopen on their next use.
        """
        n = (len(self._open) + 1) // 2
        for _ in range(n):
            self._evict_one()
        return n

    def hold_spares(self, count: int = 4) -> None:
        """Keep `count` descriptors (on /dev/null) in reserve for cleaning up after a shortage.

        Undoing a half-created partition removes its directory, and listing
        a directory takes descriptors: out of them, the undo would fail and
        leave the very inconsistency it exists to prevent. `spares()` gives
        the reserve back for the duration of such cleanup (the trick servers
        use to accept-and-close at EMFILE).
        """
        self._spare_count = count
        while len(self._spares) < count:
            try:
                self._spares.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                return  # refilled after the next cleanup

    def release_spares(self) -> None:
        while self._spares:
            os.close(self._spares.pop())

    @contextlib.contextmanager
    def spares(self) -> Iterator[None]:
        self.release_spares()
        try:
            yield
        finally:
            if self._spare_count:
                self.hold_spares(self._spare_count)

    def _evict_one(self) -> None:
        segment, fh = self._open.popitem(last=False)
        segment._fd = None
        self.evictions += 1
        fh.close()

    def release(self, segment: "LogSegment") -> None:
        fh = self._open.pop(segment, None)
        segment._fd = None
        if fh is not None:
            fh.close()

    def resize(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        while len(self._open) > self.capacity:
            self._evict_one()


def default_open_segment_files() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 16
    return max(16, soft // 4)


open_segment_files = SegmentFiles(default_open_segment_files())


class LogSegment:
    def __init__(
        self,
        directory: str,
        base_offset: int,
        max_index_size: int,
        index_interval_bytes: int,
        created_ms: int,
        fs: FileSystem | None = None,
    ):
        self.fs: FileSystem = fs if fs is not None else REAL_FILE_SYSTEM
        self.dir = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.log_path = os.path.join(directory, segment_file_name(base_offset, LOG_SUFFIX))
        opener = functools.partial(open_segment_files.open, self.fs)
        self.offset_index = OffsetIndex(os.path.join(directory, segment_file_name(base_offset, INDEX_SUFFIX)), base_offset, max_index_size, opener, fs=self.fs)
        self.time_index = TimeIndex(os.path.join(directory, segment_file_name(base_offset, TIME_INDEX_SUFFIX)), base_offset, max_index_size, opener, fs=self.fs)
        self._fd: FileHandle | None = None  # owned by open_segment_files
        self.closed = False
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp_so_far = NO_TIMESTAMP
        self.offset_of_max_timestamp_so_far = base_offset
        self.bytes_since_last_index_entry = 0
        self.rolling_based_timestamp: int | None = None
        self.roll_jitter_ms = 0

    # -- opening ----------------------------------------------------------

    @classmethod
    def create(cls, directory: str, base_offset: int, max_index_size: int, index_interval_bytes: int, now_ms: int, fs: FileSystem | None = None) -> "LogSegment":
        seg = cls(directory, base_offset, max_index_size, index_interval_bytes, now_ms, fs)
        for path in (seg.offset_index.path, seg.time_index.path):
            if seg.fs.exists(path):
                seg.fs.unlink(path)  # a stale index of an earlier incarnation must not be trusted
        open_segment_files.handle(seg, create=True, truncate=True)
        seg.offset_index.open(preallocate=True)
        seg.time_index.open(preallocate=True)
        return seg

    @classmethod
    def load(cls, directory: str, base_offset: int, max_index_size: int, index_interval_bytes: int, now_ms: int, fs: FileSystem | None = None) -> "LogSegment":
        """Open an existing segment trusting its indexes after a sanity check.

        Raises CorruptIndexError (or CorruptRecordError from the tail scan)
        when the indexes cannot be trusted; the caller then runs `recover`.
        """
        seg = cls(directory, base_offset, max_index_size, index_interval_bytes, now_ms, fs)
        seg.size = seg._file().size()
        try:
            seg.offset_index.open(preallocate=False)
            seg.time_index.open(preallocate=False)
            seg._load_tail()
        except (CorruptIndexError, CorruptRecordError):
            seg.close(trim=False)
            raise
        return seg

    @classmethod
    def open_for_recovery(cls, directory: str, base_offset: int, max_index_size: int, index_interval_bytes: int, now_ms: int, fs: FileSystem | None = None) -> "LogSegment":
        seg = cls(directory, base_offset, max_index_size, index_interval_bytes, now_ms, fs)
        seg.size = seg._file().size()
        # recover() rebuilds both indexes: their old entries are not even read.
        seg.offset_index.open(preallocate=False, load=False)
        seg.time_index.open(preallocate=False, load=False)
        return seg

    def _load_tail(self) -> None:
        """Sanity-check the indexes against the log and find next_offset and the max timestamp.

        Besides bounds, the scan after the last offset-index entry replays the
        index-interval rule: if a batch there should have had an entry, the
        index lost entries (deleted, cut short) and must be rebuilt.
        """
        if self.size and not (self.offset_index.existed and self.time_index.existed):
            raise CorruptIndexError(f"{self.log_path}: index file missing")
        self.offset_index.check_bounds(self.size)
        if len(self.offset_index) and not len(self.time_index) and self.peek_header(0).max_timestamp >= 0:
            # The first offset-index entry always comes with a time-index entry.
            raise CorruptIndexError(f"{self.time_index.path}: entries missing")
        last_offset, position = self.offset_index.last_entry()
        if position:
            header = self.peek_header(position)
            if header.last_offset != last_offset:
                raise CorruptIndexError(f"{self.offset_index.path}: last entry does not point at batch {last_offset}")
        ts, ts_offset = self.time_index.last_entry()
        self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = ts, ts_offset
        next_offset = self.base_offset
        last_position = position
        bytes_since = 0
        for header in self.iter_batches(position):
            if bytes_since > self.index_interval_bytes and not self.offset_index.is_full:
                raise CorruptIndexError(f"{self.offset_index.path}: entries missing after offset {last_offset}")
            bytes_since += header.size_in_bytes
            next_offset = header.next_offset
            last_position = header.position
            if header.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = header.max_timestamp
                self.offset_of_max_timestamp_so_far = header.last_offset
        if position and next_offset == self.base_offset:
            raise CorruptIndexError(f"{self.offset_index.path}: no batch at the last entry's position")
        if self.rolling_based_timestamp is None and self.size:
            self.rolling_based_timestamp = self.peek_header(0).max_timestamp
        self.next_offset = next_offset
        self.time_index.check_bounds(self.next_offset)
        self.bytes_since_last_index_entry = bytes_since

    def _file(self) -> FileHandle:
        return open_segment_files.handle(self)

    # -- header access ----------------------------------------------------

    def peek_header(self, position: int) -> BatchHeader:
        """The header of the batch at `position`, checking it fits in the file."""
        data = self._file().pread(HEADER_SIZE, position)
        peek = _Peek(data)
        peek.claimed = max(len(data), self.size - position)
        header = read_header(peek, 0)
        return replace(header, position=position)

    def iter_batches(
        self,
        position: int = 0,
        *,
        verify: bool = False,
        max_batch_size: int = 1 << 31,
        chunk_size: int = SCAN_CHUNK,
    ) -> Iterator[BatchHeader]:
        """Yield batch headers from `position` to the end of the file, reading in bounded chunks.

        With `verify` every batch is read whole and its CRC checked; without,
        a batch larger than a chunk is only peeked at (its header), so a
        lookup over big batches reads a few bytes per batch, not the batch.
        Raises the typed CorruptRecordError of the first bad batch, with its
        absolute file position in `error.position`.
        """
        end = self.size
        # One buffer per scan, refilled in place: no allocation (and page
        # faults) per chunk.
        buffer = bytearray(min(chunk_size, max(end - position, 0)))
        while position < end:
            want = min(chunk_size, end - position)
            got = self._file().readinto(memoryview(buffer)[:want], position)
            view = memoryview(buffer)[:got]
            p = 0
            while p < len(view):
                try:
                    header = read_header(view, p, max_batch_size=max_batch_size)
                except TruncatedBatchError as e:
                    if position + len(view) >= end:
                        e.position = position + p
                        raise
                    if p == 0:
                        big = self.peek_header(position)
                        if not verify:
                            yield big
                            p = big.size_in_bytes
                            break
                        # A batch larger than one chunk: read exactly that batch.
                        view = memoryview(self._file().pread(big.size_in_bytes, position))
                        continue
                    break
                except CorruptRecordError as e:
                    e.position = position + p
                    raise
                if verify:
                    try:
                        verify_crc(view, header)
                    except CorruptRecordError as e:
                        e.position = position + p
                        raise
                yield replace(header, position=position + p) if position else header
                p = header.next_position
            position += p

    def read_at(self, position: int, length: int) -> bytes:
        return self._file().pread(length, position)

    # -- append -----------------------------------------------------------

    def append(self, buf: bytes | bytearray | memoryview, headers: list[BatchHeader]) -> None:
        """Write the batches in `buf` (headers give their positions in `buf`) at the end."""
        pwrite = self._file().pwrite
        start = self.size
        written = pwrite(buf, start)
        while written < len(buf):
            written += pwrite(memoryview(buf)[written:], start + written)
        if self.rolling_based_timestamp is None and headers:
            self.rolling_based_timestamp = headers[0].max_timestamp
        for h in headers:
            if h.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = h.max_timestamp
                self.offset_of_max_timestamp_so_far = h.last_offset
            if self.bytes_since_last_index_entry > self.index_interval_bytes:
                self.offset_index.append(h.last_offset, start + h.position)
                self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far)
                self.bytes_since_last_index_entry = 0
            self.bytes_since_last_index_entry += h.size_in_bytes
        self.size = start + len(buf)
        if headers:
            self.next_offset = headers[-1].next_offset

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT_MAX

    def should_roll(self, *, segment_bytes: int, segment_ms: int, now_ms: int, max_timestamp_in_messages: int, max_offset_in_messages: int, messages_size: int) -> bool:
        reached_roll_ms = self.time_waited_for_roll(now_ms, max_timestamp_in_messages) > segment_ms - self.roll_jitter_ms
        return (
            (self.size > 0 and self.size > segment_bytes - messages_size)
            or (self.size > 0 and reached_roll_ms)
            or self.offset_index.is_full
            or self.time_index.is_full
            or not self.can_convert_to_relative_offset(max_offset_in_messages)
        )

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        if self.rolling_based_timestamp is None and self.size > 0:
            self.rolling_based_timestamp = self.peek_header(0).max_timestamp
        t = self.rolling_based_timestamp
        if t is not None and t >= 0:
            return message_timestamp - t
        return now_ms - self.created_ms

    # -- lookups ----------------------------------------------------------

    def translate_offset(self, offset: int, starting_position: int = 0) -> BatchHeader | None:
        """The first batch at or after `starting_position` whose last offset >= `offset`."""
        _, position = self.offset_index.lookup(offset)
        position = max(position, starting_position)
        chunk = self.lookup_chunk_size
        try:
            for header in self.iter_batches(position, chunk_size=chunk):
                if header.last_offset >= offset:
                    return header
            return None
        except CorruptRecordError:
            if position == starting_position:
                raise
        # A stale or damaged index entry: fall back to scanning the whole segment.
        for header in self.iter_batches(starting_position, chunk_size=chunk):
            if header.last_offset >= offset:
                return header
        return None

    @property
    def lookup_chunk_size(self) -> int:
        # An index lookup lands within about one index interval of its target.
        return max(2 * self.index_interval_bytes, 8192)

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> BatchHeader | None:
        """The first batch holding offsets >= start_offset whose max timestamp >= `timestamp`."""
        _, indexed_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(indexed_offset, start_offset))
        for header in self.iter_batches(position, chunk_size=self.lookup_chunk_size):
            if header.max_timestamp >= timestamp and header.last_offset >= start_offset:
                return header
        return None

    @property
    def largest_timestamp(self) -> int:
        """Kafka's LogSegment.largestTimestamp: max record timestamp, else the file's mtime."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        return self.fs.mtime_ms(self.log_path)

    # -- recovery and truncation ------------------------------------------

    def recover(self, max_batch_size: int, on_batch: Callable[[BatchHeader], None] | None = None) -> int:
        """Rebuild both indexes from the log, truncating at the first invalid batch.

        Returns the number of bytes truncated. Besides header and CRC, each
        batch must start at or after the previous one's next offset and fit
        the segment's relative offsets.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.offset_index.resize_to_max()
        self.time_index.resize_to_max()
        self.next_offset = self.base_offset
        self.max_timestamp_so_far = NO_TIMESTAMP
        self.offset_of_max_timestamp_so_far = self.base_offset
        self.bytes_since_last_index_entry = 0
        self.rolling_based_timestamp = None
        valid = 0
        try:
            for header in self.iter_batches(0, verify=True, max_batch_size=max_batch_size):
                if header.base_offset < self.next_offset or not self.can_convert_to_relative_offset(header.last_offset):
                    break
                if header.last_offset_delta < 0:
                    break
                self._index_recovered(header)
                valid = header.next_position
                if on_batch is not None:
                    on_batch(header)
        except CorruptRecordError:
            pass
        truncated = self.size - valid
        if truncated:
            self._file().truncate(valid)
            self.size = valid
        return truncated

    def _index_recovered(self, h: BatchHeader) -> None:
        if self.rolling_based_timestamp is None:
            self.rolling_based_timestamp = h.max_timestamp
        if h.max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = h.max_timestamp
            self.offset_of_max_timestamp_so_far = h.last_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(h.last_offset, h.position)
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += h.size_in_bytes
        self.next_offset = h.next_offset

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset >= `offset`; returns bytes removed."""
        header = self.translate_offset(offset)
        if header is None:
            return 0
        position = header.position
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        removed = self.size - position
        self._file().truncate(position)
        self.size = position
        # Recompute the tail state from what is left.
        self.next_offset = self.base_offset
        self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = self.time_index.last_entry()
        _, entry_position = self.offset_index.last_entry()
        for h in self.iter_batches(entry_position):
            self.next_offset = h.next_offset
            if h.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = h.max_timestamp
                self.offset_of_max_timestamp_so_far = h.last_offset
        self.bytes_since_last_index_entry = self.size - entry_position
        if self.size == 0:
            self.rolling_based_timestamp = None
        return removed

    # -- life cycle -------------------------------------------------------

    def on_become_inactive(self) -> None:
        """The segment rolled: record its final max timestamp and trim the indexes."""
        self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def resize_indexes_to_max(self) -> None:
        self.offset_index.resize_to_max()
        self.time_index.resize_to_max()

    def flush(self) -> None:
        self._file().fsync()
        self.offset_index.flush()
        self.time_index.flush()

    def close(self, *, trim: bool = True) -> None:
        if trim:
            self.offset_index.trim_to_valid_size()
            self.time_index.trim_to_valid_size()
        self.offset_index.close()
        self.time_index.close()
        open_segment_files.release(self)
        self.closed = True

    def rename_to_deleted(self) -> None:
        """Step one of asynchronous deletion; the descriptor stays valid for readers."""
        self.fs.replace(self.log_path, self.log_path + DELETED_SUFFIX)
        self.log_path += DELETED_SUFFIX
        for index in (self.offset_index, self.time_index):
            if self.fs.exists(index.path):
                index.rename(index.path + DELETED_SUFFIX)

    def delete_files(self) -> None:
        self.close(trim=False)
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            try:
                self.fs.unlink(path)
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, next_offset={self.next_offset})"

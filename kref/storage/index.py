"""Offset and time indexes of a segment, in Kafka's on-disk layout.

`<base>.index` maps offsets to file positions, 8-byte big-endian entries
(relative offset int32, position int32); `<base>.timeindex` maps timestamps
to offsets, 12-byte entries (timestamp int64, relative offset int32).
Offsets are stored relative to the segment's base offset, which is why a
segment must roll before an offset no longer fits in 4 bytes.

Both indexes are sparse: the segment adds an entry after every
index.interval.bytes of log, so a lookup lands within one interval of its
target and the segment scans batch headers from there. Like Kafka, a new or
active index file is preallocated to segment.index.bytes (rounded down to a
whole entry) and trimmed to its valid entries when the segment rolls or the
log closes; a full index makes the segment roll.

An index is only ever a cache of facts the log itself holds, so it is never
trusted blindly: on load the entries must be strictly increasing, lie inside
the log, and whatever follows the last entry must be preallocation zeros.
Anything else raises CorruptIndexError and the segment rebuilds the index by
scanning its batches — deleting an index file is always safe.

The entries are kept in memory as two Python lists (bisect lookups); the
file is read once at load and holds no descriptor afterwards. Kafka
memory-maps its indexes so that a segment costs one descriptor (its log);
here appended entries stay pending in memory and are written, with a
descriptor opened only for that, when the segment flushes, rolls (trim),
truncates or closes. An entry that never reached the file is harmless for
the same reason deleting an index is: the log holds the facts. Files are
reached only through the file-system port (kref/ports/fs.py) handed in. A clean stop
writes every entry; after an unclean stop the segments past the recovery
point are rebuilt anyway, and the flushed ones had their entries written by
the flush that moved the recovery point past them.
"""

from __future__ import annotations

import bisect
import struct
from typing import Callable

from kref.ports.fs import FileHandle, FileSystem, RealFileSystem
from kref.storage.errors import CorruptIndexError

NO_TIMESTAMP = -1
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class _Index:
    entry: struct.Struct

    def __init__(
        self,
        path: str,
        base_offset: int,
        max_index_size: int,
        opener: Callable[..., FileHandle] | None = None,
        *,
        fs: FileSystem | None = None,
    ) -> None:
        self.fs: FileSystem = fs if fs is not None else RealFileSystem()
        # `opener(path, create=...)` is fs.open or the segment files' open,
        # which can free descriptors of old segments when the process runs out.
        self._open_file = opener or self.fs.open
        self.path = path
        self.base_offset = base_offset
        self.entry_size = self.entry.size
        self.max_entries = max(1, max_index_size // self.entry_size)
        self._keys: list[int] = []  # relative offsets (offset index) / timestamps (time index)
        self._values: list[int] = []  # positions (offset index) / relative offsets (time index)
        self._persisted = 0  # entries [0, _persisted) are in the file
        self._dirty = False  # the file changed since the last fsync
        self.existed = False

    # -- file life cycle ----------------------------------------------------

    def open(self, *, preallocate: bool, strict: bool = True, load: bool = True) -> None:
        """Create if missing and load entries; CorruptIndexError if they fail sanity checks."""
        self.existed = self.fs.exists(self.path)
        fh = self._open_file(self.path, create=True)
        try:
            size = fh.size()
            data = fh.pread(size, 0) if size and load else b""
            if data:
                try:
                    self._load(data)
                except CorruptIndexError:
                    if strict:
                        raise
                    self._keys.clear()
                    self._values.clear()
            if size > len(self._keys) * self.entry_size and (not load or data.count(0, len(self._keys) * self.entry_size) != size - len(self._keys) * self.entry_size):
                # Entries we do not hold (not loaded, or refused): zero them,
                # so the file is always our entries followed by zeros.
                fh.truncate(len(self._keys) * self.entry_size)
                fh.truncate(size)
                self._dirty = True
            if preallocate:
                fh.truncate(self.max_entries * self.entry_size)
                self._dirty = True
        finally:
            fh.close()
        self._persisted = len(self._keys)

    def _load(self, data: bytes) -> None:
        if len(data) % self.entry_size:
            raise CorruptIndexError(f"{self.path}: size {len(data)} is not a multiple of {self.entry_size}")
        keys, values = self._keys, self._values
        keys.clear()
        values.clear()
        n = 0
        for key, value in self.entry.iter_unpack(data):
            if not self._entry_follows(key, value):
                break
            keys.append(key)
            values.append(value)
            n += 1
            if n > self.max_entries:
                raise CorruptIndexError(f"{self.path}: more than {self.max_entries} entries")
        valid = n * self.entry_size
        if data.count(0, valid) != len(data) - valid:
            raise CorruptIndexError(f"{self.path}: entry {n} is out of order")

    def _entry_follows(self, key: int, value: int) -> bool:
        raise NotImplementedError

    def _write_pending(self, fh: FileHandle) -> None:
        """Write the entries appended since the last write (one pwrite)."""
        n = len(self._keys)
        if n > self._persisted:
            pack = self.entry.pack
            data = b"".join(pack(k, v) for k, v in zip(self._keys[self._persisted :], self._values[self._persisted :]))
            fh.pwrite(data, self._persisted * self.entry_size)
            self._persisted = n
            self._dirty = True

    def _resize(self, size: int) -> None:
        fh = self._open_file(self.path)
        try:
            self._write_pending(fh)
            fh.truncate(size)
            self._dirty = True
        finally:
            fh.close()

    def resize_to_max(self) -> None:
        self._resize(self.max_entries * self.entry_size)

    def trim_to_valid_size(self) -> None:
        self._resize(len(self._keys) * self.entry_size)

    def flush(self) -> None:
        """Write pending entries and fsync, opening the file only if it changed."""
        if not self._dirty and len(self._keys) == self._persisted:
            return
        fh = self._open_file(self.path)
        try:
            self._write_pending(fh)
            fh.fsync()
            self._dirty = False
        finally:
            fh.close()

    def close(self) -> None:
        """Nothing is held open; entries not yet written are dropped (a crash loses them too)."""
        del self._keys[self._persisted :]
        del self._values[self._persisted :]

    def rename(self, path: str) -> None:
        self.fs.replace(self.path, path)
        self.path = path

    # -- entries ------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def is_full(self) -> bool:
        return len(self._keys) >= self.max_entries

    def _write(self, key: int, value: int) -> None:
        self._keys.append(key)
        self._values.append(value)

    def _truncate_entries(self, count: int) -> None:
        del self._keys[count:]
        del self._values[count:]
        if count < self._persisted:
            # Zero the dropped entries; the preallocated tail must stay zeros.
            fh = self._open_file(self.path)
            try:
                size = fh.size()
                fh.truncate(count * self.entry_size)
                fh.truncate(max(size, count * self.entry_size))
            finally:
                fh.close()
            self._persisted = count
            self._dirty = True

    def reset(self) -> None:
        self._truncate_entries(0)


class OffsetIndex(_Index):
    """`.index`: relative offset -> byte position of the batch ending at that offset."""

    entry = _OFFSET_ENTRY

    def _entry_follows(self, key: int, value: int) -> bool:
        if key < 0 or value <= 0:
            return False
        return not self._keys or (key > self._keys[-1] and value > self._values[-1])

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if self._keys and (relative <= self._keys[-1] or position <= self._values[-1]):
            return  # never out of order: a duplicate entry is simply skipped
        if self.is_full:
            return  # sparse index: a skipped entry only lengthens the scan
        self._write(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry <= `offset`, else (base_offset, 0)."""
        i = bisect.bisect_right(self._keys, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[i], self._values[i]

    def last_entry(self) -> tuple[int, int]:
        if not self._keys:
            return self.base_offset, 0
        return self.base_offset + self._keys[-1], self._values[-1]

    def batch_start_at_or_below(self, position: int) -> int:
        """The position of the last indexed batch starting at or below `position`
        (0 if none): positions grow with offsets, so the read path can jump to
        near a byte bound instead of walking every batch header up to it."""
        i = bisect.bisect_right(self._values, position) - 1
        return self._values[i] if i >= 0 else 0

    def entries(self) -> list[tuple[int, int]]:
        return [(self.base_offset + k, v) for k, v in zip(self._keys, self._values)]

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= `offset`."""
        self._truncate_entries(bisect.bisect_left(self._keys, offset - self.base_offset))

    def check_bounds(self, log_size: int) -> None:
        if self._values and self._values[-1] >= log_size:
            raise CorruptIndexError(f"{self.path}: position {self._values[-1]} beyond log size {log_size}")


class TimeIndex(_Index):
    """`.timeindex`: largest timestamp so far -> relative offset of the batch carrying it."""

    entry = _TIME_ENTRY

    def _entry_follows(self, key: int, value: int) -> bool:
        if value < 0 or key < 0 or (key == 0 and value == 0):
            return False  # (0, 0) is indistinguishable from preallocation zeros
        return not self._keys or (key > self._keys[-1] and value >= self._values[-1])

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if timestamp <= (self._keys[-1] if self._keys else NO_TIMESTAMP):
            return
        relative = offset - self.base_offset
        if self._values and relative < self._values[-1]:
            return
        if self.is_full:
            return  # the segment rolls on a full index; it keeps its max timestamp itself
        self._write(timestamp, relative)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with timestamp <= target, else (-1, base_offset)."""
        i = bisect.bisect_right(self._keys, timestamp) - 1
        if i < 0:
            return NO_TIMESTAMP, self.base_offset
        return self._keys[i], self.base_offset + self._values[i]

    def last_entry(self) -> tuple[int, int]:
        if not self._keys:
            return NO_TIMESTAMP, self.base_offset
        return self._keys[-1], self.base_offset + self._values[-1]

    def entries(self) -> list[tuple[int, int]]:
        return [(k, self.base_offset + v) for k, v in zip(self._keys, self._values)]

    def truncate_to(self, offset: int) -> None:
        """Drop entries pointing at offsets >= `offset`."""
        relative = offset - self.base_offset
        count = len(self._values)
        while count and self._values[count - 1] >= relative:
            count -= 1
        self._truncate_entries(count)

    def check_bounds(self, next_offset: int) -> None:
        if self._values and self.base_offset + self._values[-1] >= max(next_offset, self.base_offset + 1):
            raise CorruptIndexError(f"{self.path}: entry offset beyond the segment's last offset")

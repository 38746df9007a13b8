"""Per-partition idempotent-producer state: sequence checks, duplicates, snapshots.

What: Kafka's ProducerStateManager for one partition log (KIP-98 idempotence).
For every producer id seen in the log it keeps the current producer epoch and
the metadata of its last 5 batches (first/last sequence, last offset,
timestamp) — the same number a producer may have in flight
(max.in.flight.requests.per.connection <= 5), so any retry of an in-flight
batch is still recognised.

The log calls the hook (see CONTRACTS.md, storage section):
- `check_batch(header)` before a leader append: returns the (first_offset,
  last_offset) of an identical batch already in the log (a retry: acknowledge
  it, append nothing), raises InvalidProducerEpochError for an epoch older
  than the current one (a fenced, zombie producer) and
  OutOfOrderSequenceError when the batch's base sequence does not follow the
  producer's last sequence (a gap: something was lost).
- `on_batch_appended(header)` after an append, and for each batch replayed on
  recovery from `replay_start_offset` on.
- `truncate_to(offset)` when the log is truncated.
- `take_snapshot(offset)` on close (and roll): the state as of `offset`.

Snapshots are Kafka's `<offset, 20 digits>.snapshot` files in the partition
directory, version 1:

    version int16 (1) | crc uint32 (CRC-32C of everything after it) |
    producer_entries int32 count, each:
      producer_id int64, epoch int16, last_sequence int32, last_offset int64,
      offset_delta int32, timestamp int64, coordinator_epoch int32,
      current_txn_first_offset int64

A snapshot holds only each producer's last batch, as Kafka's does. On open the
newest readable snapshot at or below the log end offset is loaded (corrupt
ones are deleted), the log truncates it to its end offset and replays the
batches after it (Log._rebuild_producer_state), rebuilding the rest.
Truncation does the same, as Kafka's truncateAndReload: back to the newest
snapshot at or below the truncation point, then the log replays up to it, so
a producer whose retained batches all lie past the point keeps what the log
still holds of it.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from kref.ports.fs import FileSystem, RealFileSystem
from kref.records.header import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader
from kref.storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError

_REAL = RealFileSystem()

# A producer may have up to 5 requests in flight; remembering 5 batches lets
# every retry of them be answered as a duplicate (Kafka's NUM_BATCHES_TO_RETAIN).
NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = ".snapshot"
# snapshots kept on disk; older ones are deleted once a newer one is written
SNAPSHOTS_TO_RETAIN = 2
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms

_HEADER = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_MAX_SEQUENCE = 2**31 - 1


class CorruptSnapshotError(ValueError):
    """A .snapshot file whose version, CRC or length is wrong."""


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_sequence(self) -> int:
        return (self.last_sequence - self.offset_delta) % (_MAX_SEQUENCE + 1)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_sequence == header.base_sequence and batch.last_sequence == header.last_sequence:
                return batch
        return None


def _in_sequence(last_sequence: int, next_sequence: int) -> bool:
    # sequences wrap from Integer.MAX_VALUE to 0
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == _MAX_SEQUENCE)


def snapshot_path(log_dir: Path, offset: int) -> Path:
    return Path(log_dir) / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(log_dir: Path, fs: FileSystem | None = None) -> list[tuple[int, Path]]:
    """(offset, path) of every snapshot file in the directory, oldest first."""
    fs = fs or _REAL
    out = []
    try:
        names = fs.listdir(str(log_dir))
    except FileNotFoundError:
        return []
    for name in names:
        if not name.endswith(SNAPSHOT_SUFFIX):
            continue
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if len(stem) == 20 and stem.isdigit():
            out.append((int(stem), Path(log_dir) / name))
    return sorted(out)


def _unlink_if_exists(fs: FileSystem, path: Path) -> None:
    try:
        fs.unlink(str(path))
    except FileNotFoundError:
        pass


def encode_snapshot(entries: list[ProducerStateEntry]) -> bytes:
    body = bytearray(_COUNT.pack(0))
    count = 0
    for e in entries:
        if not e.batches:
            continue
        last = e.batches[-1]
        body += _ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            last.last_sequence,
            last.last_offset,
            last.offset_delta,
            last.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        count += 1
    _COUNT.pack_into(body, 0, count)
    return _HEADER.pack(SNAPSHOT_VERSION, crc32c.crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    if len(data) < _HEADER.size + _COUNT.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is shorter than its header")
    version, crc = _HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot version {version}, expected {SNAPSHOT_VERSION}")
    body = memoryview(data)[_HEADER.size :]
    if crc32c.crc32c(body) != crc:
        raise CorruptSnapshotError("snapshot CRC-32C mismatch")
    (count,) = _COUNT.unpack_from(body, 0)
    if count < 0 or _COUNT.size + count * _ENTRY.size != len(body):
        raise CorruptSnapshotError(f"snapshot announces {count} entries but holds {len(body)} bytes")
    entries = []
    for i in range(count):
        pid, epoch, last_seq, last_offset, offset_delta, timestamp, coord_epoch, txn_first = _ENTRY.unpack_from(
            body, _COUNT.size + i * _ENTRY.size
        )
        entry = ProducerStateEntry(pid, epoch, last_timestamp=timestamp, coordinator_epoch=coord_epoch,
                                   current_txn_first_offset=txn_first)
        entry.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        entries.append(entry)
    return entries


class ProducerStateManager:
    """Idempotent-producer state of one partition, persisted as .snapshot files."""

    def __init__(
        self,
        log_dir: str | os.PathLike,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        load_snapshot: bool = True,
        fs: FileSystem | None = None,
    ) -> None:
        self.fs: FileSystem = fs or _REAL  # the file-system port (kref/ports/fs.py)
        self.log_dir = Path(log_dir)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        # every batch below this offset is reflected in `producers`
        self.map_end_offset = 0
        if load_snapshot:
            # Log.open then calls truncate_to(log_end_offset) and replays the
            # batches from map_end_offset, as Kafka's loadProducerState does
            self._load_latest_snapshot()

    # --- loading ----------------------------------------------------------------

    def _load_latest_snapshot(self) -> None:
        """Adopt the newest readable snapshot; corrupt ones are deleted on the way."""
        for offset, path in reversed(list_snapshots(self.log_dir, self.fs)):
            try:
                entries = decode_snapshot(self.fs.read_bytes(str(path)))
            except (CorruptSnapshotError, OSError):
                _unlink_if_exists(self.fs, path)
                continue
            self.producers = {e.producer_id: e for e in entries}
            self.map_end_offset = offset
            return

    @property
    def replay_start_offset(self) -> int:
        return self.map_end_offset

    # --- the log's hook -----------------------------------------------------------

    def check_batch(self, header: BatchHeader) -> tuple[int, int] | None:
        """Validate a leader append; (first_offset, last_offset) if it duplicates a logged batch."""
        if not header.has_producer_id or header.is_control_batch:
            return None
        entry = self.producers.get(header.producer_id)
        if entry is None:
            # unknown producer (new, or its state expired / was truncated away): accept any sequence
            return None
        duplicate = entry.find_duplicate(header)
        if duplicate is not None:
            return duplicate.first_offset, duplicate.last_offset
        if header.producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than the current epoch "
                f"{entry.producer_epoch}"
            )
        if header.base_sequence == NO_SEQUENCE:
            return None
        if header.producer_epoch != entry.producer_epoch:
            if header.base_sequence != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id} starts epoch {header.producer_epoch} at sequence "
                    f"{header.base_sequence}, expected 0"
                )
        elif entry.batches and not _in_sequence(entry.last_sequence, header.base_sequence):
            raise OutOfOrderSequenceError(
                f"producer {header.producer_id} epoch {header.producer_epoch}: sequence {header.base_sequence} "
                f"does not follow {entry.last_sequence}"
            )
        return None

    def on_batch_appended(self, header: BatchHeader) -> None:
        if header.last_offset < self.map_end_offset:
            return  # already in the loaded snapshot: replay starts before it
        self.map_end_offset = header.next_offset
        if not header.has_producer_id or header.is_control_batch:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None:
            entry = self.producers[header.producer_id] = ProducerStateEntry(header.producer_id)
        if header.producer_epoch != entry.producer_epoch:
            # a new epoch starts a new sequence space (sequence 0)
            entry.producer_epoch = header.producer_epoch
            entry.batches.clear()
        if header.base_sequence != NO_SEQUENCE:
            entry.batches.append(
                BatchMetadata(header.last_sequence, header.last_offset, header.last_offset_delta, header.max_timestamp)
            )
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)

    def truncate_to(self, offset: int) -> None:
        """Go back to the state as of `offset` (Kafka's truncateAndReload).

        Snapshots past `offset` are deleted. If the state covers batches at or
        above `offset`, it is reloaded from the newest snapshot at or below it
        (empty, from offset 0, if none), and the log replays its batches from
        `map_end_offset` up to `offset` (log_loader._rebuild_producer_state).
        Cutting the retained batches instead would forget a producer whose last
        five batches all lie past the point, though the log still holds its
        earlier ones: a retry of one of those would be appended twice, and a
        gap in its sequence accepted.
        """
        for snapshot_offset, path in list_snapshots(self.log_dir, self.fs):
            if snapshot_offset > offset:
                _unlink_if_exists(self.fs, path)
        if self.map_end_offset > offset:
            self.producers = {}
            self.map_end_offset = 0
            self._load_latest_snapshot()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        for _, path in list_snapshots(self.log_dir, self.fs):
            _unlink_if_exists(self.fs, path)
        self.producers.clear()
        self.map_end_offset = offset

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """Retention or DeleteRecords moved the log start: older snapshots describe nothing left."""
        for snapshot_offset, path in list_snapshots(self.log_dir, self.fs):
            if snapshot_offset < log_start_offset:
                _unlink_if_exists(self.fs, path)
        if self.map_end_offset < log_start_offset:
            self.producers.clear()
            self.map_end_offset = log_start_offset

    def take_snapshot(self, offset: int | None = None) -> Path | None:
        """Write the state as of `offset` (default: map_end_offset), atomically."""
        offset = self.map_end_offset if offset is None else offset
        if offset <= 0 and not self.producers:
            # Nothing to remember before the first offset (Kafka snapshots only past
            # its last snapshot offset, which starts at 0): closing 10,000 new logs
            # must not cost 10,000 fsyncs.
            return None
        path = snapshot_path(self.log_dir, offset)
        fs = self.fs
        if fs.exists(str(path)):
            return path
        fs.makedirs(str(self.log_dir))
        tmp = str(path) + ".tmp"
        fs.write_bytes(tmp, encode_snapshot(list(self.producers.values())))
        fs.fsync(tmp)
        fs.replace(tmp, str(path))
        for _, old in list_snapshots(self.log_dir, fs)[:-SNAPSHOTS_TO_RETAIN]:
            _unlink_if_exists(fs, old)
        return path

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        """Drop producers idle for producer.id.expiration.ms (bounds memory)."""
        expired = [
            pid for pid, e in self.producers.items() if e.last_timestamp + self.producer_id_expiration_ms < now_ms
        ]
        for pid in expired:
            del self.producers[pid]
        return expired

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

"""KRaft metadata snapshots: Kafka's `.checkpoint` files of the metadata partition.

Theory of operation
-------------------
The metadata log would grow forever if every node kept every record since
the cluster was formatted. A snapshot is the applied metadata image at a
committed offset, written as the records that rebuild it from empty (KIP-630).
Once a node holds one, the log before it can be deleted, and a node that
falls behind the leader's log start offset fetches the snapshot instead of
the log (FetchSnapshot).

Layout, as Kafka's raft module writes it (RecordsSnapshotWriter, Snapshots):

- the file `<end offset, 20 digits>-<epoch, 10 digits>.checkpoint` in the
  partition directory `__cluster_metadata-0`; the snapshot id is
  (end_offset, epoch): it holds every record below end_offset, and epoch is
  the leader epoch of the record at end_offset - 1;
- record batches v2 from offset 0, each stamped with the snapshot's epoch:
  first a control batch holding one SnapshotHeader control record (type 3,
  value: version int16 = 0, last_contained_log_timestamp int64, no tagged
  fields), then the metadata records in data batches, then a control batch
  holding one SnapshotFooter control record (type 4, value: version int16 = 0);
- it is written under `<name>.checkpoint.part`, fsynced, renamed to its
  final name and the directory fsynced: a `.checkpoint` file is durable and
  whole before anything relies on it. A `.part` file is a snapshot that was
  never finished (a crash while writing or fetching) and is removed at start.

Reading validates every batch (CRC, framing) and requires the header first
and the footer last; a snapshot that fails (torn, bad CRC, no footer) is
not used: the loader logs one line naming the file and why, and falls back
to the next older valid snapshot (or to the log alone).

Two decisions about snapshots that are not the quorum's live here as pure
functions: when a node writes one (`snapshot_due`: Kafka's
metadata.log.max.record.bytes.between.snapshots and
metadata.log.max.snapshot.interval.ms) and how far the log start offset may
move (`retention_log_start`: metadata.max.retention.bytes / .ms, never past
the latest snapshot). The quorum core (quorum.py) decides when a Fetch is
answered with a snapshot id and when a fetched snapshot is complete. All file
access goes through the FileSystem port (kref/ports/fs.py).
"""

from __future__ import annotations

import logging
import posixpath
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from kref.ports.fs import FileSystem
from kref.records.batch import Record, build_batch, decode_batch
from kref.records.control import ControlRecordType, control_record_key, parse_control_record_type
from kref.records.header import iter_headers

log = logging.getLogger("kref.raft.snapshot")

SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
DELETED_SUFFIX = ".checkpoint.deleted"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
# Bounds: records per data batch, and the largest snapshot file a node reads.
MAX_RECORDS_PER_BATCH = 1000
MAX_SNAPSHOT_BYTES = 1 << 30

HEADER_VALUE = struct.Struct(">hq")  # version, last_contained_log_timestamp
FOOTER_VALUE = struct.Struct(">h")  # version


class SnapshotError(ValueError):
    """A snapshot file that cannot be used (torn, bad CRC, no header or footer)."""


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    end_offset: int
    epoch: int

    @property
    def file_name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{SUFFIX}"


@dataclass(frozen=True, slots=True)
class Snapshot:
    snapshot_id: SnapshotId
    records: tuple[bytes, ...]  # the metadata records' values, in order
    last_contained_log_timestamp: int
    size_in_bytes: int


def parse_file_name(name: str) -> SnapshotId | None:
    m = _NAME.match(name)
    return SnapshotId(int(m.group(1)), int(m.group(2))) if m else None


# ---------------------------------------------------------------- encoding


def _control_batch(control_type: int, value: bytes, base_offset: int, epoch: int, timestamp: int) -> bytes:
    record = Record(timestamp=timestamp, key=control_record_key(control_type), value=value)
    return build_batch([record], base_offset=base_offset, is_control_batch=True, partition_leader_epoch=epoch)


def encode_snapshot(snapshot_id: SnapshotId, records: Iterable[bytes], last_contained_log_timestamp: int, now_ms: int) -> bytes:
    """The bytes of a snapshot file: header batch, data batches, footer batch."""
    epoch = snapshot_id.epoch
    # SnapshotHeaderRecord and SnapshotFooterRecord are flexible: a tagged-field count of 0 ends each.
    out = bytearray(_control_batch(
        ControlRecordType.SNAPSHOT_HEADER, HEADER_VALUE.pack(0, last_contained_log_timestamp) + b"\x00", 0, epoch, now_ms,
    ))
    offset = 1
    values = list(records)
    for i in range(0, len(values), MAX_RECORDS_PER_BATCH):
        chunk = values[i : i + MAX_RECORDS_PER_BATCH]
        out += build_batch(
            [Record(timestamp=now_ms, value=v) for v in chunk], base_offset=offset, partition_leader_epoch=epoch,
        )
        offset += len(chunk)
    out += _control_batch(ControlRecordType.SNAPSHOT_FOOTER, FOOTER_VALUE.pack(0) + b"\x00", offset, epoch, now_ms)
    return bytes(out)


def decode_snapshot(snapshot_id: SnapshotId, data: bytes) -> Snapshot:
    """Validate a whole snapshot file; SnapshotError says what is wrong."""
    values: list[bytes] = []
    header_timestamp: int | None = None
    footer = False
    expected_offset = 0
    try:
        for header in iter_headers(data, verify=True):
            if footer:
                raise SnapshotError(f"a batch after the SnapshotFooter at offset {header.base_offset}")
            if header.base_offset != expected_offset:
                raise SnapshotError(f"batch at offset {header.base_offset}, expected {expected_offset}")
            expected_offset = header.next_offset
            batch = decode_batch(data, header.position)
            if header.is_control_batch:
                kind = parse_control_record_type(batch.records[0].key) if batch.records else None
                value = batch.records[0].value or b"" if batch.records else b""
                if kind is ControlRecordType.SNAPSHOT_HEADER and header_timestamp is None and header.base_offset == 0:
                    header_timestamp = HEADER_VALUE.unpack_from(value)[1]
                elif kind is ControlRecordType.SNAPSHOT_FOOTER and header_timestamp is not None:
                    footer = True
                else:
                    raise SnapshotError(f"unexpected control record {kind} at offset {header.base_offset}")
                continue
            if header_timestamp is None:
                raise SnapshotError("no SnapshotHeader before the first records")
            values.extend(r.value for r in batch.records if r.value is not None)
    except SnapshotError:
        raise
    except Exception as exc:  # noqa: BLE001 - any framing/CRC failure means "not a usable snapshot"
        raise SnapshotError(f"bad batch: {exc}") from None
    if header_timestamp is None:
        raise SnapshotError("empty or no SnapshotHeader")
    if not footer:
        raise SnapshotError("no SnapshotFooter (partial snapshot)")
    return Snapshot(snapshot_id, tuple(values), header_timestamp, len(data))


# ---------------------------------------------------------------- files


class SnapshotStore:
    """The `.checkpoint` files of one metadata partition directory."""

    def __init__(self, fs: FileSystem, directory: str) -> None:
        self.fs = fs
        self.dir = directory
        fs.makedirs(directory)

    def path(self, snapshot_id: SnapshotId) -> str:
        return posixpath.join(self.dir, snapshot_id.file_name)

    def partial_path(self, snapshot_id: SnapshotId) -> str:
        return self.path(snapshot_id)[: -len(SUFFIX)] + PARTIAL_SUFFIX

    def ids(self) -> list[SnapshotId]:
        """Every finished snapshot file's id, oldest first (validity is not checked)."""
        return sorted(i for i in map(parse_file_name, self.fs.listdir(self.dir)) if i is not None)

    def remove_partial(self) -> None:
        """A `.part` or `.deleted` file left by a crash is never a snapshot: remove it."""
        doomed = [n for n in self.fs.listdir(self.dir) if n.endswith(PARTIAL_SUFFIX) or n.endswith(DELETED_SUFFIX)]
        for name in doomed:
            log.info("removing unfinished snapshot file %s", posixpath.join(self.dir, name))
            self.fs.unlink(posixpath.join(self.dir, name))
        if doomed:
            self.fs.fsync_dir(self.dir)

    def write(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Durable before it is used: tmp name, fsync, rename, fsync dir."""
        partial = self.partial_path(snapshot_id)
        self.fs.write_bytes(partial, data)
        self.freeze(snapshot_id)

    def freeze(self, snapshot_id: SnapshotId) -> None:
        partial = self.partial_path(snapshot_id)
        self.fs.fsync(partial)
        self.fs.replace(partial, self.path(snapshot_id))
        self.fs.fsync_dir(self.dir)

    def start_partial(self, snapshot_id: SnapshotId) -> None:
        self.fs.write_bytes(self.partial_path(snapshot_id), b"")

    def append_partial(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self.fs.append(self.partial_path(snapshot_id), data)

    def read(self, snapshot_id: SnapshotId) -> Snapshot:
        data = self.fs.read_bytes(self.path(snapshot_id))
        if len(data) > MAX_SNAPSHOT_BYTES:
            raise SnapshotError(f"larger than {MAX_SNAPSHOT_BYTES} bytes")
        return decode_snapshot(snapshot_id, data)

    def read_chunk(self, snapshot_id: SnapshotId, position: int, length: int) -> bytes:
        # The port reads whole files; snapshots are bounded (MAX_SNAPSHOT_BYTES).
        return self.fs.read_bytes(self.path(snapshot_id))[position : position + length]

    def size(self, snapshot_id: SnapshotId) -> int:
        return len(self.fs.read_bytes(self.path(snapshot_id)))

    def latest_valid(self) -> Snapshot | None:
        """The newest snapshot that reads whole; each one skipped is logged with its reason."""
        for snapshot_id in reversed(self.ids()):
            try:
                return self.read(snapshot_id)
            except (SnapshotError, OSError) as exc:
                log.error("snapshot %s ignored: %s", self.path(snapshot_id), exc)
        return None

    def delete(self, snapshot_id: SnapshotId) -> None:
        self.fs.unlink(self.path(snapshot_id))
        self.fs.fsync_dir(self.dir)


# ---------------------------------------------------------------- policy (pure)


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    # metadata.log.max.record.bytes.between.snapshots (Kafka: 20 MiB)
    max_bytes_between_snapshots: int = 20 * 1024 * 1024
    # metadata.log.max.snapshot.interval.ms (Kafka: 1 h; 0 disables the time trigger)
    max_interval_ms: int = 3_600_000
    # metadata.max.retention.bytes (Kafka: 100 MiB; -1 unbounded)
    retention_bytes: int = 100 * 1024 * 1024
    # metadata.max.retention.ms (Kafka: 7 days; -1 unbounded)
    retention_ms: int = 604_800_000


def snapshot_due(policy: SnapshotPolicy, *, new_bytes: int, applied_offset: int, latest_end_offset: int,
                 ms_since_latest: int) -> bool:
    """Whether to snapshot the applied image now (Kafka's SnapshotGenerator triggers)."""
    if applied_offset <= latest_end_offset:
        return False  # nothing new is applied
    if new_bytes >= policy.max_bytes_between_snapshots:
        return True
    return policy.max_interval_ms > 0 and ms_since_latest >= policy.max_interval_ms and new_bytes > 0


def retention_log_start(policy: SnapshotPolicy, *, log_size_bytes: int, snapshot_bytes: int,
                        oldest_timestamp: int, latest_snapshot_end: int, log_start_offset: int, now_ms: int) -> int:
    """The new log start offset (Kafka's KafkaMetadataLog cleaning): while the log and its
    snapshots are over metadata.max.retention.bytes, or the oldest of the log is older than
    metadata.max.retention.ms, the log may start at the latest snapshot, never later.
    Segments wholly below the start are then deleted, and so are older snapshots."""
    if latest_snapshot_end <= log_start_offset:
        return log_start_offset
    over_bytes = policy.retention_bytes >= 0 and log_size_bytes + snapshot_bytes > policy.retention_bytes
    too_old = policy.retention_ms >= 0 and now_ms - oldest_timestamp > policy.retention_ms
    return latest_snapshot_end if over_bytes or too_old else log_start_offset

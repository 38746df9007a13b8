"""The metadata log `__cluster_metadata-0` and the `quorum-state` file on disk.

Theory of operation
-------------------
KRaft keeps the cluster's metadata in one partition, `__cluster_metadata-0`
under metadata.log.dir, in the same segment format as every other Kafka
partition: record batches v2 stamped with the leader epoch of the leader
that wrote them, an offset index, a time index and a leader-epoch
checkpoint. `MetadataLog` is that partition opened with kref.storage's Log,
plus what the quorum core needs from it: the (epoch, start offset) list for
QuorumCore.restore, appends as leader (one batch per proposal, or the
LeaderChange control batch), appends as follower (the leader's batches
unchanged), truncation, reads for Fetch responses, and the committed
records for the metadata image. Every append and truncation is flushed
(fsync) before anything that follows it is seen by another node: the quorum
core counts an offset as replicated as soon as the node fetches past it.

Each append is fsynced in place, inside the quorum's step (session 11
removed the worker-thread variant after an A/B run showed no gain from it:
docs/kraft.md, "The metadata log").

Snapshots (kref/controller/snapshot.py) let the log start later than 0:
the start offset advances to a snapshot's end offset and whole segments
below it are deleted at once (file.delete.delay.ms 0: nothing reads them
after the start moved). A follower that loaded a snapshot from the leader
drops its whole log and continues at the snapshot's end offset.

The log is opened with recovery point 0 (full validation of every batch
at every start; the metadata log is small): its recovery state is not in
the log dir's checkpoint files, which belong to the LogManager of the data
partitions (that LogManager skips this directory).

`quorum-state` is Kafka's small JSON file next to the log: the epoch, the
vote cast in it and the known leader. It is written atomically (tmp file,
fsync, rename, fsync dir) before any effect that follows it; a garbled
file is a one-line start-up error, never silently reset (a reset could let
the node vote twice in one epoch).

The LeaderChange control record's value is Kafka's LeaderChangeMessage
(version 0, flexible): leader id, the voters and the voters that granted.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from kref.broker.config import ConfigError
from kref.records.batch import Record, build_batch, decode_batch
from kref.records.control import ControlRecordType, control_record_key
from kref.ports.fs import FileSystem, RealFileSystem
from kref.records.header import iter_headers
from kref.storage.checkpoint import write_atomically
from kref.storage.config import LogConfig
from kref.storage.log import Log
from kref.storage.log_manager import METADATA_PARTITION_DIR  # the LogManager skips this dir

METADATA_TOPIC = "__cluster_metadata"
QUORUM_STATE_FILE = "quorum-state"
MAX_QUORUM_STATE_BYTES = 64 * 1024
# One Fetch response carries at most this much of the metadata log.
MAX_FETCH_BYTES = 1024 * 1024


class QuorumStateError(ConfigError):
    """quorum-state cannot be read: the node must not guess its vote."""


@dataclass(frozen=True, slots=True)
class QuorumState:
    leader_epoch: int = 0
    voted_for: int = -1
    leader_id: int = -1


def read_quorum_state(directory: str | Path, fs: FileSystem | None = None) -> QuorumState:
    fs = fs or RealFileSystem()
    path = Path(directory) / QUORUM_STATE_FILE
    try:
        if fs.file_size(str(path)) > MAX_QUORUM_STATE_BYTES:
            raise QuorumStateError(f"{path} is garbled: too large")
        data = json.loads(fs.read_bytes(str(path)))
        return QuorumState(int(data["leaderEpoch"]), int(data["votedId"]), int(data["leaderId"]))
    except FileNotFoundError:
        return QuorumState()
    except (ValueError, KeyError, TypeError) as exc:
        raise QuorumStateError(f"{path} is garbled: {exc}") from None


def write_quorum_state(directory: str | Path, state: QuorumState, voters: list[int], fs: FileSystem | None = None) -> None:
    path = Path(directory) / QUORUM_STATE_FILE
    data = {
        "clusterId": "",
        "leaderId": state.leader_id,
        "leaderEpoch": state.leader_epoch,
        "votedId": state.voted_for,
        "appliedOffset": 0,
        "currentVoters": [{"voterId": v} for v in sorted(voters)],
        "data_version": 0,
    }
    write_atomically(str(path), json.dumps(data), fs=fs)


def _write_unsigned_varint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def leader_change_value(leader_id: int, voters: list[int], granting_voters: list[int]) -> bytes:
    """Kafka's LeaderChangeMessage v0 (flexible) as the control record's value."""
    out = bytearray(struct.pack(">hi", 0, leader_id))
    for group in (sorted(voters), sorted(granting_voters)):
        _write_unsigned_varint(out, len(group) + 1)
        for v in group:
            out += struct.pack(">i", v)
            out.append(0)  # no tagged fields
    out.append(0)
    return bytes(out)


def parse_leader_change_value(value: bytes) -> int:
    """The leader id of a LeaderChangeMessage (for tests and tools)."""
    return struct.unpack_from(">hi", value)[1]


class MetadataLog:
    def __init__(self, metadata_log_dir: str, now_ms: int, *, segment_bytes: int = 1 << 30,
                 segment_ms: int = 604_800_000, fs: FileSystem | None = None) -> None:
        self.dir = os.path.join(metadata_log_dir, METADATA_PARTITION_DIR)
        # Retention here is only "below the log start offset": the start moves
        # with snapshots (kref/controller/snapshot.py decides how far). The
        # segment size is metadata.log.segment.bytes, but rolled here after an
        # append rather than refused before it: one controller batch (every
        # partition of a fenced broker moving at once) may be larger than a
        # small test segment, and it must never be split or refused.
        self.segment_bytes = segment_bytes
        config = LogConfig.from_properties({
            "retention.ms": "-1", "retention.bytes": "-1", "file.delete.delay.ms": "0",
            "segment.ms": str(segment_ms),
        })
        self.log = Log.open(
            self.dir, config, now_ms, recovery_point=0, log_start_offset=0, had_clean_shutdown=False, high_watermark=0,
            fs=fs,
        )

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def size_in_bytes(self) -> int:
        return self.log.size_in_bytes

    def oldest_timestamp(self) -> int:
        """The largest timestamp of the oldest segment (retention by time looks at it)."""
        return self.log.segments[0].largest_timestamp

    def advance_log_start(self, offset: int, now_ms: int) -> None:
        """Start the log at `offset` (a snapshot's end) and delete whole segments below it.
        The quorum core (which owns the high watermark) only asks for a committed
        offset, so the new start itself bounds what retention may delete here."""
        if self.log.maybe_increment_log_start_offset(offset):
            self.log.delete_old_segments(now_ms, offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop the whole log: it continues at `offset` (after a snapshot from the leader)."""
        self.log.truncate_fully_and_start_at(offset)
        self.log.flush()
        self.log.delete_pending_segments(0, force=True)

    def epochs(self) -> list[tuple[int, int]]:
        return self.log.leader_epoch_cache.entries()

    def append_as_leader(self, values: list[bytes], leader_epoch: int, now_ms: int, *, control_value: bytes | None = None,
                         timestamp_ms: int | None = None) -> int:
        """`timestamp_ms`: the records' wall-clock time (metadata.max.retention.ms
        compares it with the wall clock); `now_ms` drives the log's own timers."""
        timestamp = now_ms if timestamp_ms is None else timestamp_ms
        if control_value is not None:
            batch = build_batch(
                [Record(timestamp=timestamp, key=control_record_key(ControlRecordType.LEADER_CHANGE), value=control_value)],
                is_control_batch=True,
                partition_leader_epoch=leader_epoch,
            )
        else:
            batch = build_batch([Record(timestamp=timestamp, value=v) for v in values], partition_leader_epoch=leader_epoch)
        info = self.log.append_as_leader(batch, leader_epoch, now_ms)
        self._appended(now_ms)
        return info.first_offset

    def _appended(self, now_ms: int) -> None:
        self.log.flush(now_ms)
        self._maybe_roll(now_ms)

    def _maybe_roll(self, now_ms: int) -> None:
        if self.log.active_segment.size >= self.segment_bytes:
            self.log.roll(now_ms)

    def append_as_follower(self, records: bytes, now_ms: int) -> None:
        self.log.append_as_follower(records, now_ms)
        self._appended(now_ms)

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)
        self.log.flush()

    def read(self, from_offset: int, max_bytes: int = MAX_FETCH_BYTES) -> bytes:
        if from_offset >= self.log.log_end_offset:
            return b""
        return bytes(self.log.read(from_offset, max_bytes).records)

    def committed_records(self, from_offset: int, high_watermark: int) -> list[tuple[int, bytes]]:
        """(offset, value) of the data records in [from_offset, high_watermark); control batches skipped."""
        out: list[tuple[int, bytes]] = []
        position = from_offset
        while position < high_watermark:
            batches = self.committed_batches(position, high_watermark)
            if not batches:
                break
            for next_offset, records in batches:
                out.extend(records)
                position = next_offset
        return out

    def committed_batches(self, from_offset: int, high_watermark: int) -> list[tuple[int, list[tuple[int, bytes]]]]:
        """The batches of one read (up to MAX_FETCH_BYTES, at least one batch) from
        `from_offset`, below `high_watermark`: (the offset after the batch, its data
        records as (offset, value)). A control batch comes with no records: it
        moves the position all the same. A batch is what the controller wrote
        at once (all of a new topic's records; Kafka's controller appends them
        atomically too), so a reader that stops between batches never shows
        half of one."""
        out: list[tuple[int, list[tuple[int, bytes]]]] = []
        if from_offset >= high_watermark:
            return out
        data = self.log.read(from_offset, MAX_FETCH_BYTES, max_offset=high_watermark).records
        for header in iter_headers(data):
            if header.base_offset >= high_watermark:
                break
            records = [] if header.is_control_batch else [
                (record.offset, record.value) for record in decode_batch(data, header.position).records
                if from_offset <= record.offset < high_watermark and record.value is not None
            ]
            out.append((min(header.next_offset, high_watermark), records))
        return out

    def close(self) -> None:
        self.log.close()


def batch_spans(records: bytes) -> list[tuple[int, int, int, int, int]]:
    """(base_offset, last_offset, leader_epoch, start, end) of each batch in wire bytes."""
    return [
        (h.base_offset, h.last_offset, h.partition_leader_epoch, h.position, h.next_position)
        for h in iter_headers(records)
    ]

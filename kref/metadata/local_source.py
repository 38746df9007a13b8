"""The single-node broker's metadata source: metadata records in a local file.

Theory of operation
-------------------
A KRaft broker learns metadata from the committed `__cluster_metadata` log.
A single kref broker has no quorum, so it is its own controller and keeps
the same records (records.py, framed by serde.py) in `kref-metadata.log` in
its first log dir: a file of frames `[u32 length][u32 crc32c][record]`.

`commit(records)` appends the frames and fsyncs the file before the records
are applied to the image: a change is durable before anything acts on it
(a log is created, a leader epoch is used, a response is sent), so a crash
can lose only changes nobody saw. A torn tail (a crash mid-append) fails
its length or CRC check and is cut off at open, as Kafka's log recovery
does; a bad frame before the tail means the file is corrupt, and the broker
refuses to start with one line (StartupError) rather than guess.

At open the source replays the file into a MetadataImage and rewrites it as
a snapshot (the image's records, written to a temporary file, fsynced and
renamed), so the file stays proportional to the metadata, not to its
history. An existing `kref-topics.json` (the format before this source) is
migrated once: its topics, ids and configs become records, the snapshot is
made durable, and only then is the JSON file removed.

Leader epochs: every start of the broker begins a new leadership term for
each partition (`restart_leadership`), written here before the partition
leads, so an epoch is never reused for a different term (KIP-101 relies on
that) across any number of restarts, empty partitions included.
"""

from __future__ import annotations

import json
import os
import struct
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import crc32c

from kref.metadata import records as r
from kref.metadata import serde
from kref.metadata.image import MetadataDelta, MetadataImage
from kref.ports.fs import FileSystem, RealFileSystem

__all__ = ["LocalMetadataSource", "MetadataSourceError", "restart_leadership", "METADATA_LOG_FILE", "LEGACY_TOPICS_FILE"]

METADATA_LOG_FILE = "kref-metadata.log"
LEGACY_TOPICS_FILE = "kref-topics.json"
_FRAME = struct.Struct(">II")
MAX_RECORD_BYTES = 1 << 20  # a metadata record is small; a larger length is corruption


class MetadataSourceError(Exception):
    """The metadata file cannot be read or written (the message names the file)."""


def restart_leadership(
    image: MetadataImage, node_id: int, latest_log_epoch: Callable[[str, int], int]
) -> list[r.MetadataRecord]:
    """The records a single broker writes at start: a new term for every partition it leads.

    Normally a PartitionChangeRecord naming this broker as leader (the image
    then bumps leader_epoch by one). If a log already holds an epoch at or
    above the image's (a migrated topic list, whose epochs lived only in the
    logs), the partition is re-registered one above the log's epoch instead.
    """
    out: list[r.MetadataRecord] = []
    for topic in image.topics.values():
        for p, part in sorted(topic.partitions.items()):
            if node_id not in part.replicas:
                continue
            in_log = latest_log_epoch(topic.name, p)
            if in_log >= part.leader_epoch:
                out.append(r.PartitionRecord(p, topic.topic_id, part.replicas, (node_id,), node_id,
                                             in_log + 1, part.partition_epoch + 1))
            else:
                out.append(r.PartitionChangeRecord(p, topic.topic_id, isr=(node_id,), leader=node_id))
    return out


class LocalMetadataSource:
    """All file access goes through the file-system port (kref/ports/fs.py),
    so the same source runs on a real disk and on a lossy in-memory one."""

    def __init__(self, log_dir: str | Path, node_id: int, fs: FileSystem | None = None) -> None:
        self.fs: FileSystem = fs if fs is not None else RealFileSystem()
        self.dir = str(log_dir)
        self.path = os.path.join(self.dir, METADATA_LOG_FILE)
        self.node_id = node_id
        self.image = MetadataImage()
        self._open = False

    # ------------------------------------------------------------ open

    def open(self) -> MetadataDelta:
        """Replay (or migrate) into the image, write a snapshot; the delta creates everything."""
        legacy = os.path.join(self.dir, LEGACY_TOPICS_FILE)
        if self.fs.exists(self.path):
            records = self._read_frames()
        elif self.fs.exists(legacy):
            records = _records_from_legacy(legacy, self.fs.read_bytes(legacy), self.node_id)
        else:
            records = []
        delta = self.image.apply(records)
        self._write_snapshot()
        if self.fs.exists(legacy):
            self.fs.unlink(legacy)  # the snapshot holding its contents is durable
            self.fs.fsync_dir(self.dir)
        self._open = True
        return delta

    def close(self) -> None:
        self._open = False

    # ------------------------------------------------------------ commit

    def commit(self, records: Iterable[r.MetadataRecord]) -> MetadataDelta:
        """Make `records` durable, then apply them; returns what changed."""
        records = list(records)
        if not records:
            return MetadataDelta()
        # Check them against a copy first: a record the image refuses must
        # never reach the file (it would make every later start fail).
        MetadataImage().apply(self.image.to_records() + records)
        if not self._open:
            raise MetadataSourceError(f"{self.path} is not open")
        data = b"".join(_frame(serde.encode(rec)) for rec in records)
        try:
            self.fs.append(self.path, data)
            self.fs.fsync(self.path)
        except OSError as exc:
            self._truncate_to_known_good()
            raise MetadataSourceError(f"cannot write {self.path}: {exc.strerror or exc}") from None
        return self.image.apply(records)

    # ------------------------------------------------------------ file

    def _read_frames(self) -> list[r.MetadataRecord]:
        data = self.fs.read_bytes(self.path)
        records: list[r.MetadataRecord] = []
        pos = 0
        while pos < len(data):
            if len(data) - pos < _FRAME.size:
                break  # torn header at the tail
            length, crc = _FRAME.unpack_from(data, pos)
            end = pos + _FRAME.size + length
            if length > MAX_RECORD_BYTES:
                raise MetadataSourceError(f"{self.path} is corrupt at byte {pos}: a frame of {length} bytes")
            if end > len(data):
                break  # a torn last frame (a crash mid-append): it was never acted upon
            if crc32c.crc32c(data[pos + _FRAME.size : end]) != crc:
                if end == len(data):
                    break  # the last frame, torn the same way
                raise MetadataSourceError(f"{self.path} is corrupt at byte {pos}: CRC mismatch")
            try:
                records.append(serde.decode(data[pos + _FRAME.size : end]))
            except serde.MetadataRecordError as exc:
                raise MetadataSourceError(f"{self.path} is corrupt at byte {pos}: {exc}") from None
            pos = end
        return records

    def _write_snapshot(self) -> None:
        tmp = self.path + ".tmp"
        data = b"".join(_frame(serde.encode(rec)) for rec in self.image.to_records())
        self.fs.write_bytes(tmp, data)
        self.fs.fsync(tmp)
        self.fs.replace(tmp, self.path)
        self.fs.fsync_dir(self.dir)

    def _truncate_to_known_good(self) -> None:
        """After a failed append the image is unchanged: make the file say the same."""
        try:
            self._write_snapshot()
        except OSError:
            pass  # the next open cuts a torn tail off anyway


def _frame(body: bytes) -> bytes:
    return _FRAME.pack(len(body), crc32c.crc32c(body)) + body


def _records_from_legacy(path: str, text: bytes, node_id: int) -> list[r.MetadataRecord]:
    """kref-topics.json (names, ids, partition counts, configs) as metadata records."""
    try:
        data = json.loads(text.decode("utf-8"))
        topics = [_legacy_topic(t) for t in data["topics"]]
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        # Starting without it would delete every partition as "stray".
        raise MetadataSourceError(
            f"the topic metadata file {path} is corrupt ({type(exc).__name__}: {exc}); "
            "restore it from a backup or remove it together with the partition directories"
        ) from None
    out: list[r.MetadataRecord] = []
    for name, topic_id, num_partitions, configs in topics:
        out.append(r.TopicRecord(name, topic_id))
        for p in range(num_partitions):
            # Epochs of the old format lived only in the logs; restart_leadership
            # moves each partition past its log's latest epoch.
            out.append(r.PartitionRecord(p, topic_id, (node_id,), (node_id,), node_id, 0, 0))
        for key, value in sorted(configs.items()):
            out.append(r.ConfigRecord(r.TOPIC_RESOURCE, name, key, value))
    return out


def _legacy_topic(obj: Mapping) -> tuple[str, uuid.UUID, int, dict[str, str]]:
    return str(obj["name"]), uuid.UUID(obj["topic_id"]), int(obj["num_partitions"]), dict(obj["configs"])

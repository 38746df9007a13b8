"""Kafka's small text files: offset checkpoints, leader-epoch checkpoints and
partition.metadata, written atomically.

Kafka keeps per-directory and per-partition state in tiny text files that an
operator can read with `cat`, and kref writes them byte for byte alike:

- OffsetCheckpoint (recovery-point-offset-checkpoint,
  log-start-offset-checkpoint, replication-offset-checkpoint in each log dir):
  a version line "0", a count line, then "topic partition offset" lines.
- LeaderEpochCheckpoint (leader-epoch-checkpoint in each partition dir):
  "0", a count, then "epoch startOffset" lines (KIP-101).
- partition.metadata (KIP-516): "version: 0" and "topic_id: <uuid>", the
  topic id in Kafka's Uuid text form (URL-safe base64 of its 16 bytes, no
  padding).

Writes go to `<name>.tmp`, are fsynced, then renamed over the old file and
the directory is fsynced, so a crash leaves either the old or the new file,
never a torn one. A file that does not parse raises CheckpointError: callers
treat it as absent (recovery then simply starts from further back), because
a checkpoint is only ever an optimisation over rescanning the log. Every
function takes the file-system port (`fs`, kref/ports/fs.py; the real disk
when omitted), so the same code runs on MemoryFileSystem, whose crash()
shows that a crash mid-write leaves the old or the new file.
"""

from __future__ import annotations

import base64
import os
import uuid
from typing import Iterable

from kref.ports.fs import FileSystem, RealFileSystem

_REAL = RealFileSystem()

VERSION = 0
MAX_CHECKPOINT_BYTES = 64 * 1024 * 1024  # a bound on what we are willing to parse


class CheckpointError(ValueError):
    """A checkpoint file exists but does not parse."""


def fsync_dir(path: str, fs: FileSystem | None = None) -> None:
    """Make the names in `path` durable; a directory already gone is no error
    (it is being deleted, and its names with it)."""
    try:
        (fs or _REAL).fsync_dir(path)
    except OSError:
        pass


def write_atomically(path: str, text: str, *, sync: bool = True, fs: FileSystem | None = None) -> None:
    fs = fs or _REAL
    tmp = path + ".tmp"
    fs.write_bytes(tmp, text.encode("utf-8"))
    if sync:
        fs.fsync(tmp)
    fs.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(path) or ".", fs)


def _read_text(path: str, fs: FileSystem | None = None) -> str | None:
    fs = fs or _REAL
    try:
        if fs.file_size(path) > MAX_CHECKPOINT_BYTES:
            raise CheckpointError(f"{path}: larger than {MAX_CHECKPOINT_BYTES} bytes")
        data = fs.read_bytes(path)
    except FileNotFoundError:
        return None
    if len(data) > MAX_CHECKPOINT_BYTES:
        raise CheckpointError(f"{path}: larger than {MAX_CHECKPOINT_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: not UTF-8 text") from e


def _parse_versioned(path: str, text: str, fields: int) -> list[list[str]]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CheckpointError(f"{path}: missing version or count line")
    if lines[0].strip() != str(VERSION):
        raise CheckpointError(f"{path}: unsupported version {lines[0]!r}")
    try:
        count = int(lines[1].strip())
    except ValueError:
        raise CheckpointError(f"{path}: bad count line {lines[1]!r}") from None
    entries = lines[2:]
    if count != len(entries):
        raise CheckpointError(f"{path}: count {count} but {len(entries)} entries")
    rows = []
    for line in entries:
        parts = line.split()
        if len(parts) != fields:
            raise CheckpointError(f"{path}: malformed entry {line!r}")
        rows.append(parts)
    return rows


def _format_versioned(rows: list[str]) -> str:
    return f"{VERSION}\n{len(rows)}\n" + "".join(r + "\n" for r in rows)


def read_offset_checkpoint(path: str, fs: FileSystem | None = None) -> dict[tuple[str, int], int]:
    """{(topic, partition): offset}; {} if the file does not exist."""
    text = _read_text(path, fs)
    if text is None:
        return {}
    out: dict[tuple[str, int], int] = {}
    for topic, partition, offset in _parse_versioned(path, text, 3):
        try:
            out[(topic, int(partition))] = int(offset)
        except ValueError:
            raise CheckpointError(f"{path}: malformed entry {topic} {partition} {offset}") from None
    return out


def read_offset_checkpoint_or_empty(path: str, fs: FileSystem | None = None) -> dict[tuple[str, int], int]:
    """Like read_offset_checkpoint, but an unreadable file counts as absent."""
    try:
        return read_offset_checkpoint(path, fs)
    except (CheckpointError, OSError):
        return {}


def write_offset_checkpoint(path: str, offsets: dict[tuple[str, int], int], *, sync: bool = True, fs: FileSystem | None = None) -> None:
    rows = [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    write_atomically(path, _format_versioned(rows), sync=sync, fs=fs)


def read_leader_epoch_checkpoint(path: str, fs: FileSystem | None = None) -> list[tuple[int, int]]:
    """[(epoch, start_offset)] in file order; [] if the file does not exist."""
    text = _read_text(path, fs)
    if text is None:
        return []
    out = []
    for epoch, start in _parse_versioned(path, text, 2):
        try:
            out.append((int(epoch), int(start)))
        except ValueError:
            raise CheckpointError(f"{path}: malformed entry {epoch} {start}") from None
    return out


def write_leader_epoch_checkpoint(path: str, entries: Iterable[tuple[int, int]], *, sync: bool = True, fs: FileSystem | None = None) -> None:
    rows = [f"{e} {o}" for e, o in entries]
    if not rows and not sync:
        # An empty cache with no durability asked (a new log): one plain write, as
        # Kafka creates the file; torn, it reads as unreadable and is rebuilt empty.
        (fs or _REAL).write_bytes(path, _format_versioned(rows).encode("utf-8"))
        return
    write_atomically(path, _format_versioned(rows), sync=sync, fs=fs)


def topic_id_to_string(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def topic_id_from_string(text: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"bad topic id {text!r}") from e
    if len(raw) != 16:
        raise CheckpointError(f"bad topic id {text!r}: {len(raw)} bytes")
    return uuid.UUID(bytes=raw)


PARTITION_METADATA_FILE = "partition.metadata"


def write_partition_metadata(
    partition_dir: str, topic_id: uuid.UUID, fs: FileSystem | None = None, *, sync: bool = True
) -> None:
    text = f"version: {VERSION}\ntopic_id: {topic_id_to_string(topic_id)}"
    write_atomically(os.path.join(partition_dir, PARTITION_METADATA_FILE), text, sync=sync, fs=fs)


def read_partition_metadata(partition_dir: str, fs: FileSystem | None = None) -> uuid.UUID | None:
    text = _read_text(os.path.join(partition_dir, PARTITION_METADATA_FILE), fs)
    if text is None:
        return None
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            raise CheckpointError(f"partition.metadata in {partition_dir}: malformed line {line!r}")
        fields[key.strip()] = value.strip()
    if fields.get("version") != str(VERSION) or "topic_id" not in fields:
        raise CheckpointError(f"partition.metadata in {partition_dir}: unexpected content")
    return topic_id_from_string(fields["topic_id"])

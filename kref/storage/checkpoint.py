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
a checkpoint is only ever an optimisation over rescanning the log.
"""

from __future__ import annotations

import base64
import os
import uuid
from typing import Iterable

VERSION = 0
MAX_CHECKPOINT_BYTES = 64 * 1024 * 1024  # a bound on what we are willing to parse


class CheckpointError(ValueError):
    """A checkpoint file exists but does not parse."""


def fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomically(path: str, text: str, *, sync: bool = True) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(path) or ".")


def _read_text(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CHECKPOINT_BYTES + 1)
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


def read_offset_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """{(topic, partition): offset}; {} if the file does not exist."""
    text = _read_text(path)
    if text is None:
        return {}
    out: dict[tuple[str, int], int] = {}
    for topic, partition, offset in _parse_versioned(path, text, 3):
        try:
            out[(topic, int(partition))] = int(offset)
        except ValueError:
            raise CheckpointError(f"{path}: malformed entry {topic} {partition} {offset}") from None
    return out


def read_offset_checkpoint_or_empty(path: str) -> dict[tuple[str, int], int]:
    """Like read_offset_checkpoint, but an unreadable file counts as absent."""
    try:
        return read_offset_checkpoint(path)
    except (CheckpointError, OSError):
        return {}


def write_offset_checkpoint(path: str, offsets: dict[tuple[str, int], int], *, sync: bool = True) -> None:
    rows = [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    write_atomically(path, _format_versioned(rows), sync=sync)


def read_leader_epoch_checkpoint(path: str) -> list[tuple[int, int]]:
    """[(epoch, start_offset)] in file order; [] if the file does not exist."""
    text = _read_text(path)
    if text is None:
        return []
    out = []
    for epoch, start in _parse_versioned(path, text, 2):
        try:
            out.append((int(epoch), int(start)))
        except ValueError:
            raise CheckpointError(f"{path}: malformed entry {epoch} {start}") from None
    return out


def write_leader_epoch_checkpoint(path: str, entries: Iterable[tuple[int, int]], *, sync: bool = True) -> None:
    write_atomically(path, _format_versioned([f"{e} {o}" for e, o in entries]), sync=sync)


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


def write_partition_metadata(partition_dir: str, topic_id: uuid.UUID) -> None:
    text = f"version: {VERSION}\ntopic_id: {topic_id_to_string(topic_id)}"
    write_atomically(os.path.join(partition_dir, PARTITION_METADATA_FILE), text)


def read_partition_metadata(partition_dir: str) -> uuid.UUID | None:
    text = _read_text(os.path.join(partition_dir, PARTITION_METADATA_FILE))
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

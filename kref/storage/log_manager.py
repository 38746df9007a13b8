"""LogManager: every partition log of a broker across its log.dirs.

Kafka spreads partitions over several log directories (log.dirs), placing a
new partition in the directory that holds the fewest, and keeps per-directory
bookkeeping files next to the partition directories:
`recovery-point-offset-checkpoint` and `log-start-offset-checkpoint`
(OffsetCheckpoint format), `replication-offset-checkpoint` for high
watermarks the partition layer reported, and the clean-shutdown marker
`.kafka_cleanshutdown` written last on an orderly shutdown. On start the
marker decides whether logs may trust their indexes (clean) or must
re-validate from their recovery points (unclean); it is removed right after
loading, so that a crash from then on is detected as unclean.

Deleting a partition renames its directory to `<topic>-<partition>.<uuid>-delete`
first (atomic, readers of already-returned bytes are unaffected) and then
removes it; leftovers of that kind are removed on the next start.

A log dir that fails while a log is created in it (disk full, no permission,
gone) goes offline, as in KIP-112 (`mark_offline`): its logs are closed and
forgotten, no new log is placed in it, and the caller (the replica manager)
takes the replicas that lived there offline instead of the process crashing.
The next start finds out afresh whether the directory works.

`lock_log_dir(dir)` takes Kafka's `.lock` file lock (an exclusive flock the
kernel drops when the process dies, so a SIGKILL never leaves it behind):
two processes appending to the same segments would corrupt them, so a second
broker on a log dir in use must refuse to start.

`cleanup(now_ms)` is the periodic housekeeping the broker schedules:
retention, flush.ms, and removal of segments renamed to `.deleted` once
file.delete.delay.ms has passed.

Every file is reached through the file-system port the manager is given
(`fs`, kref/ports/fs.py) and handed down to each Log: the broker passes
RealFileSystem, crash tests pass MemoryFileSystem.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import uuid
from typing import Any, Callable, Mapping

from kref.ports.fs import FileHandle, FileSystem
from kref.ports.ids import SYSTEM_IDS, Ids
from kref.storage.checkpoint import (
    PARTITION_METADATA_FILE,
    fsync_dir,
    write_leader_epoch_checkpoint,
    read_offset_checkpoint_or_empty,
    write_atomically,
    write_offset_checkpoint,
    write_partition_metadata,
)
from kref.storage.config import LogConfig
from kref.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE
from kref.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    REAL_FILE_SYSTEM,
    TIME_INDEX_SUFFIX,
    open_segment_files,
    segment_file_name,
)
from kref.storage.log import (
    RECOVERED,
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    Log,
    parse_partition_dir_name,
)
from kref.storage.errors import KafkaStorageError
from kref.storage.future_log import DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, delete_dir_name, promote_orphan_future_dirs

logger = logging.getLogger("kref.storage.log_manager")

LOCK_FILE = ".lock"
STRAY_DIR_SUFFIX = "-stray"


class LogDirFailure(OSError):
    """An OSError creating a log, with the log dir it happened in (KIP-112: that dir goes offline)."""

    def __init__(self, log_dir: str, cause: OSError) -> None:
        super().__init__(cause.errno, f"log dir {log_dir}: {cause.strerror or cause}")
        self.log_dir = log_dir

class LogDirInUseError(OSError):
    """Another process holds the log dir's `.lock`."""


def lock_log_dir(log_dir: str, fs: FileSystem | None = None) -> FileHandle:
    """Hold `<log_dir>/.lock` exclusively; returns its handle (close it to release)."""
    try:
        return (fs or REAL_FILE_SYSTEM).lock(os.path.join(log_dir, LOCK_FILE))
    except BlockingIOError:
        raise LogDirInUseError(f"{log_dir} is in use by another process (its {LOCK_FILE} is locked)") from None


ConfigSource = Callable[[str], LogConfig | None] | Mapping[str, LogConfig] | None


METADATA_PARTITION_DIR = "__cluster_metadata-0"


class LogManager:
    def __init__(
        self,
        log_dirs: list[str] | str,
        default_config: LogConfig | None = None,
        now_ms: int = 0,
        *,
        producer_state_factory: Callable[[str, int, str], Any] | None = None,
        fs: FileSystem | None = None,
        high_watermark_of: Callable[[tuple[str, int]], int | None] | None = None,
        ids: Ids = SYSTEM_IDS,
    ) -> None:
        self.fs: FileSystem = fs if fs is not None else REAL_FILE_SYSTEM
        self.ids = ids  # the ids port: unique names of the dirs being deleted
        # The owning replica core's high watermark of a partition (None: no core
        # here): replication-offset-checkpoint is written from the cores, the
        # one live copy; a log with no core keeps the value it was loaded with.
        self.high_watermark_of = high_watermark_of
        self.log_dirs = [os.path.abspath(d) for d in ([log_dirs] if isinstance(log_dirs, str) else log_dirs)]
        if not self.log_dirs:
            raise ValueError("at least one log dir is required")
        self.default_config = default_config or LogConfig()
        self.producer_state_factory = producer_state_factory
        self._logs: dict[tuple[str, int], Log] = {}
        self._checkpoint_lock = threading.Lock()
        # While True (the replica manager's drain slices, which never await inside), a new
        # log's leader-epoch-checkpoint fsync goes to the deferred flush with partition.metadata.
        self.deferring_epoch_syncs = False
        # KIP-112: log dirs taken offline by a failure, with the reason (until restart).
        self.offline_dirs: dict[str, str] = {}
        # AlterReplicaLogDirs for a replica not hosted yet (Kafka's preferred log
        # dirs): where it is created when it comes; in memory, as in Kafka.
        self.preferred_log_dirs: dict[tuple[str, int], str] = {}
        # One list shared by every log: listener(topic, partition, log_end_offset)
        # after a truncation (the log cleaner lowers its checkpoint there).
        self.truncation_listeners: list[Callable[[str, int, int], None]] = []
        self._now_ms = now_ms
        self.had_clean_shutdown: dict[str, bool] = {}
        # Partition dirs whose partition.metadata was written but not yet fsynced
        # (Kafka flushes it on its scheduler after creating the log, not inline):
        # flushed in batches by `flush_partition_metadata`, and at shutdown.
        self.unflushed_partition_metadata: list[str] = []
        # (topic, partition) -> the directory plan_new_log chose, laid out (or being
        # laid out) by a worker thread and not opened yet.
        self._planned: dict[tuple[str, int], str] = {}
        for d in self.log_dirs:
            self.fs.makedirs(d)

    # -- loading ------------------------------------------------------------

    def load_logs(self, now_ms: int, topic_configs: ConfigSource = None) -> list[Log]:
        """Open every partition directory found in the log dirs (recovering if unclean)."""
        self._now_ms = now_ms
        loaded = []
        # A move between log dirs cut short inside its swap (future_log.py).
        promote_orphan_future_dirs(self.fs, self.log_dirs)
        for log_dir in self.log_dirs:
            fs = self.fs
            clean = fs.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE))
            self.had_clean_shutdown[log_dir] = clean
            recovery_points = read_offset_checkpoint_or_empty(os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT_FILE), fs)
            log_starts = read_offset_checkpoint_or_empty(os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT_FILE), fs)
            high_watermarks = read_offset_checkpoint_or_empty(os.path.join(log_dir, REPLICATION_OFFSET_CHECKPOINT_FILE), fs)
            for name in fs.listdir(log_dir):
                path = os.path.join(log_dir, name)
                if not fs.is_dir(path):
                    continue
                if name.endswith(DELETE_DIR_SUFFIX):
                    fs.rmtree(path)
                    continue
                if name.endswith(FUTURE_DIR_SUFFIX) or name.endswith(STRAY_DIR_SUFFIX):
                    continue
                if name == METADATA_PARTITION_DIR:
                    continue  # the KRaft metadata log: kref/storage/metadata_log.py owns it
                try:
                    key = parse_partition_dir_name(name)
                except ValueError:
                    continue
                if key in self._logs:
                    raise RuntimeError(f"partition {key[0]}-{key[1]} exists in two log dirs: {self._logs[key].dir} and {path}")
                log = Log.open(
                    path,
                    self._config_for(key[0], topic_configs),
                    now_ms,
                    producer_state=self._producer_state_for(path, key),
                    recovery_point=recovery_points.get(key, 0),
                    log_start_offset=log_starts.get(key, 0),
                    high_watermark=high_watermarks.get(key),
                    had_clean_shutdown=clean,
                    fs=fs,
                )
                log.truncation_listeners = self.truncation_listeners
                self._logs[key] = log
                loaded.append(log)
            if clean:
                fs.unlink(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE))
        self.checkpoint()
        return loaded

    def _config_for(self, topic: str, source: ConfigSource) -> LogConfig:
        config = None
        if callable(source):
            config = source(topic)
        elif source is not None:
            config = source.get(topic)
        return config or self.default_config

    def _producer_state_for(self, path: str, key: tuple[str, int]) -> Any:
        if self.producer_state_factory is None:
            return None
        return self.producer_state_factory(path, key[1], key[0])

    # -- partitions ---------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[Log]:
        return list(self._logs.values())

    def replace_log(self, log: Log) -> None:
        """A moved replica's log takes its partition's place (future_log.swap_future_log)."""
        log.truncation_listeners = self.truncation_listeners
        self._logs[(log.topic, log.partition)] = log
        self.checkpoint()

    def get_or_create_log(
        self, topic: str, partition: int, config: LogConfig | None = None, topic_id: uuid.UUID | None = None
    ) -> Log:
        log = self._logs.get((topic, partition))
        if log is not None:
            if config is not None:
                log.config = config
            if log.topic_id is None and topic_id is not None:
                # Loaded without its partition.metadata (lost in a crash before
                # its deferred flush): the image knows the id; record it again.
                write_partition_metadata(log.dir, topic_id, self.fs)
                log.topic_id = topic_id
            return log
        planned = self._planned.pop((topic, partition), None)
        if planned is None:
            path = self._new_log_path(topic, partition)
            existed = self.fs.exists(path)
        else:
            path, existed = planned, False  # laid out by lay_out_new_logs: still new
        try:
            if not existed and topic_id is not None:
                # A new log costs what Kafka's does: the directory, an empty
                # segment (sparse indexes) and partition.metadata, whose fsync is
                # deferred (a crash before it leaves a log with no topic id, and the
                # image rewrites it, above). No fsync per log here.
                if planned is None or not self.fs.exists(os.path.join(path, PARTITION_METADATA_FILE)):
                    self.fs.makedirs(path)
                    write_partition_metadata(path, topic_id, self.fs, sync=False)
                self.unflushed_partition_metadata.append(path)
            log = Log.open(
                path,
                config or self.default_config,
                self._now_ms,
                topic_id=topic_id,
                producer_state=self._producer_state_for(path, (topic, partition)),
                recovery_point=0,
                log_start_offset=0,
                # A new log has no checkpointed high watermark; reading the log
                # dir's checkpoint for one made creating N logs cost O(N^2).
                high_watermark=None if existed else 0,
                had_clean_shutdown=True,
                fs=self.fs,
            )
        except BaseException as exc:
            # Out of descriptors or space half-way: leave no directory
            # behind that the topic image does not account for.
            if not existed:
                with open_segment_files.spares():  # listing a directory takes descriptors
                    self.fs.rmtree(path)
            if isinstance(exc, OSError) and not isinstance(exc, LogDirFailure):
                raise LogDirFailure(os.path.dirname(os.path.normpath(path)), exc) from exc
            raise
        if not existed:
            # No checkpointed high watermark, as for a log with no checkpoint entry
            # (0 above only kept the loader from parsing the whole checkpoint). The
            # loader records it as the Log's copy, or (issue 8, branch cores) as
            # recovered_high_watermark: clear whichever it set.
            for attribute in ("high_watermark", "recovered_high_watermark"):
                if getattr(log, attribute, None) is not None:
                    setattr(log, attribute, None)
        log.truncation_listeners = self.truncation_listeners
        if not existed:
            log.leader_epoch_cache.defer_sync = self._defer_epoch_sync
        self._logs[(topic, partition)] = log
        return log

    def _defer_epoch_sync(self, checkpoint_path: str) -> bool:
        """A new log's BecomeLeader in a drain slice: the epoch checkpoint is written now and
        fsynced by the deferred flush (a worker thread, right after the slice), as
        partition.metadata is; one fsync on the loop per new leader was most of a slice's wall
        time on a busy disk. A kill -9 loses nothing (the write is in the page cache); a power
        cut before the flush loses what the unflushed segments lose too, and recovery rebuilds
        the epochs of the batches it finds."""
        if not self.deferring_epoch_syncs:
            return False
        self.unflushed_partition_metadata.append(os.path.dirname(checkpoint_path))
        return True

    def _new_log_path(self, topic: str, partition: int) -> str:
        if not topic or "/" in topic or topic in (".", "..") or partition < 0:
            raise ValueError(f"invalid partition {topic!r}-{partition}")
        log_dir = self.preferred_log_dirs.pop((topic, partition), None)
        if log_dir is None or log_dir in self.offline_dirs:
            log_dir = self._next_log_dir()
        return os.path.join(log_dir, f"{topic}-{partition}")

    # -- creating many logs: the disk work in a worker thread ---------------

    def plan_new_log(self, topic: str, partition: int) -> str | None:
        """Choose the directory of a partition not hosted yet (None: hosted, or its
        directory exists already and is opened the usual way). The next
        get_or_create_log of it uses this directory."""
        key = (topic, partition)
        if key in self._logs or key in self._planned:
            return None
        path = self._new_log_path(topic, partition)
        if self.fs.exists(path):
            return None
        self._planned[key] = path
        return path

    def lay_out_new_logs(self, new_logs: list[tuple[str, uuid.UUID]]) -> None:
        """Safe in a worker thread (file calls only, no shared state): for each
        planned (path, topic_id), the files an empty log leaves after a clean stop:
        the directory, partition.metadata (not fsynced: see get_or_create_log), an
        empty first segment with empty indexes and an empty leader-epoch-checkpoint.
        Creating files is what costs on a busy disk (milliseconds each); opening
        them afterwards on the event loop does not. A failure leaves the rest to
        get_or_create_log, which creates what is missing or raises."""
        fs = self.fs
        for path, topic_id in new_logs:
            try:
                fs.makedirs(path)
                write_partition_metadata(path, topic_id, fs, sync=False)
                for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                    fs.write_bytes(os.path.join(path, segment_file_name(0, suffix)), b"")
                write_leader_epoch_checkpoint(os.path.join(path, LEADER_EPOCH_CHECKPOINT_FILE), [], sync=False, fs=fs)
            except OSError as exc:
                logger.warning("cannot lay out new log %s: %s", path, exc)

    def forget_planned(self, topic: str, partition: int) -> None:
        """A planned partition that will not be created after all: remove what was laid out."""
        path = self._planned.pop((topic, partition), None)
        if path is not None:
            with open_segment_files.spares():
                self.fs.rmtree(path)

    def take_unflushed_partition_metadata(self, limit: int | None = None) -> list[str]:
        """Up to `limit` partition dirs whose partition.metadata awaits its fsync (removed from the list)."""
        n = len(self.unflushed_partition_metadata) if limit is None else limit
        batch, self.unflushed_partition_metadata[:n] = self.unflushed_partition_metadata[:n], []
        return batch

    def fsync_partition_metadata(self, dirs: list[str]) -> None:
        """fsync each dir's partition.metadata, its leader-epoch-checkpoint (deferred by
        `_defer_epoch_sync`) and the dir (their renames); safe in a worker thread. A dir
        deleted meanwhile is skipped."""
        for d in dirs:
            try:
                self.fs.fsync(os.path.join(d, PARTITION_METADATA_FILE))
                with contextlib.suppress(FileNotFoundError):
                    self.fs.fsync(os.path.join(d, LEADER_EPOCH_CHECKPOINT_FILE))
            except FileNotFoundError:
                continue
            except OSError as exc:
                # Only durability is lost: a log found without it after a crash
                # gets its topic id back from the image (get_or_create_log).
                logger.warning("cannot fsync %s/%s: %s", d, PARTITION_METADATA_FILE, exc)
                continue
            fsync_dir(d, self.fs)

    def flush_partition_metadata(self) -> None:
        """Every deferred partition.metadata fsync, now (small deltas, shutdown)."""
        self.fsync_partition_metadata(self.take_unflushed_partition_metadata())

    def _next_log_dir(self) -> str:
        if self.offline_dirs:
            online = [d for d in self.log_dirs if d not in self.offline_dirs]
            if not online:
                raise KafkaStorageError(f"every log dir is offline: {sorted(self.offline_dirs)}")
            if len(online) == 1:
                return online[0]
        elif len(self.log_dirs) == 1:
            # The common case, and the counting below walks every log: creating
            # 10,000 partitions one by one was quadratic (minutes of CPU).
            return self.log_dirs[0]
        counts = {d: 0 for d in self.log_dirs}
        for log in self._logs.values():
            parent = os.path.dirname(os.path.normpath(log.dir))
            if parent in counts:
                counts[parent] += 1
        return min((d for d in self.log_dirs if d not in self.offline_dirs),
                   key=lambda d: (counts[d], self.log_dirs.index(d)))

    def mark_offline(self, log_dir: str, reason: str) -> list[tuple[str, int]]:
        """KIP-112: take a failed log dir offline; the partitions whose logs lived there (their
        logs closed, as far as closing works, and forgotten). Idempotent."""
        if log_dir in self.offline_dirs or log_dir not in self.log_dirs:
            return []
        self.offline_dirs[log_dir] = reason
        for key, path in list(self._planned.items()):
            if os.path.dirname(os.path.normpath(path)) == log_dir:
                del self._planned[key]
        keys = [k for k, log in self._logs.items() if os.path.dirname(os.path.normpath(log.dir)) == log_dir]
        for key in keys:
            log = self._logs.pop(key)
            try:
                log.close()
            except Exception as exc:  # noqa: BLE001 - a failed disk may refuse even that
                logger.warning("closing %s on offline log dir %s: %s", log.dir, log_dir, exc)
        return keys

    def delete_log(self, topic: str, partition: int) -> bool:
        doomed = self.retire_log(topic, partition)
        if doomed is None:
            return False
        self.remove_retired([doomed])
        self.checkpoint()
        return True

    def retire_log(self, topic: str, partition: int) -> str | None:
        """The first half of a deletion (Kafka's asyncDelete): close the log and rename its
        directory `<topic>-<partition>.<uuid>-delete`; the path to remove, None if there is
        no such log. Removing the directory (`remove_retired`, file calls only, so a worker
        thread may do it) and the checkpoint without the log are the caller's, once for many
        logs: a -delete directory left by a crash is removed at the next start."""
        log = self._logs.pop((topic, partition), None)
        if log is None:
            return None
        if not log.closed:
            for seg in log.segments:
                seg.close(trim=False)
            log.delete_pending_segments(self._now_ms, force=True)
            log.closed = True
        parent = os.path.dirname(os.path.normpath(log.dir))
        doomed = os.path.join(parent, delete_dir_name(topic, partition, self.ids))
        self.fs.replace(log.dir, doomed)
        return doomed

    def remove_retired(self, paths: list[str]) -> None:
        """Remove retired (-delete) directories; file calls only (a worker thread may run it)."""
        for path in paths:
            self.fs.rmtree(path)

    # -- housekeeping --------------------------------------------------------

    def checkpoint(self) -> None:
        """Write recovery points, log start offsets and high watermarks of each log dir."""
        self.write_checkpoint_files(self.checkpoint_files())

    def checkpoint_files(self) -> list[tuple[str, dict[tuple[str, int], int]]]:
        """What `checkpoint` writes, taken from the logs and cores now (on the loop): (path, offsets)
        per file. `write_checkpoint_files` writes them (file calls only: a worker thread may, so that
        the periodic checkpoint of thousands of logs never holds the loop through its fsyncs)."""
        by_dir: dict[str, list] = {log_dir: [] for log_dir in self.log_dirs}
        for k, log in self._logs.items():
            by_dir.setdefault(os.path.dirname(os.path.normpath(log.dir)), []).append((k, log))
        files = []
        for log_dir in self.log_dirs:
            if log_dir in self.offline_dirs:
                continue  # KIP-112: nothing is written to an offline dir
            logs = by_dir[log_dir]
            files.append((os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT_FILE),
                          {k: log.recovery_point for k, log in logs}))
            files.append((os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT_FILE),
                          {k: log.log_start_offset for k, log in logs}))
            hws = {}
            for k, log in logs:
                owned = self.high_watermark_of(k) if self.high_watermark_of is not None else None
                hw = owned if owned is not None else log.recovered_high_watermark
                if hw is not None:
                    hws[k] = hw
            replication = os.path.join(log_dir, REPLICATION_OFFSET_CHECKPOINT_FILE)
            if hws or self.fs.exists(replication):
                files.append((replication, hws))
        return files

    def write_checkpoint_files(self, files: list[tuple[str, dict[tuple[str, int], int]]]) -> None:
        # One writer at a time: the loop's own checkpoints and a worker thread's share
        # the files' temporary names.
        with self._checkpoint_lock:
            for path, offsets in files:
                write_offset_checkpoint(path, offsets, fs=self.fs)

    def cleanup(
        self,
        now_ms: int,
        high_watermark_of: Callable[[tuple[str, int]], int | None] | None = None,
        *,
        owned_retention: Callable[[tuple[str, int], int], int | None] | None = None,
    ) -> int:
        """Retention, flush.ms and delayed file deletion for every log; returns
        segments deleted. `owned_retention(key, now_ms)` runs retention through
        the partition's owner (its replica core admits the new log start
        offset, kref/broker/partition.py `apply_retention`) and returns the
        segments deleted, or None when the partition has no core here; then
        `high_watermark_of(key)` (the owning core's high watermark, None: the
        value recovered from the checkpoint) bounds the Log's own retention pass."""
        self._now_ms = now_ms
        deleted = 0
        for key, log in list(self._logs.items()):
            if log.closed:
                continue
            done = owned_retention(key, now_ms) if owned_retention is not None else None
            if done is None:
                owned = high_watermark_of(key) if high_watermark_of is not None else None
                done = log.delete_old_segments(now_ms, RECOVERED if owned is None else owned)
            deleted += done
            if now_ms - log.last_flush_ms >= log.config.flush_ms:
                log.flush(now_ms)
        return deleted

    def flush_all(self, now_ms: int | None = None) -> None:
        for log in self._logs.values():
            if not log.closed:
                log.flush(now_ms)

    def shutdown(self) -> None:
        """Orderly stop: close (flush) every log, checkpoint, then mark each dir clean."""
        self.flush_partition_metadata()
        for log in self._logs.values():
            log.close()
        self.checkpoint()
        for log_dir in self.log_dirs:
            if log_dir in self.offline_dirs:
                continue  # KIP-112: never marked clean; the next start recovers (or refuses) it
            write_atomically(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE), json.dumps({"version": 0, "brokerEpoch": -1}), fs=self.fs)

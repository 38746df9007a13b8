"""Moving replicas between log dirs: the broker's driver (Kafka's ReplicaAlterLogDirsManager/Thread).

Theory of operation
-------------------
alter_log_dirs_core.py decides; this driver does, on the trio thread:

LogDirMover is the synchronous half (the core, the future logs, the
storage calls through the LogManager's file-system port), which the storage
crash tests drive on MemoryFileSystem; AlterLogDirsDriver is the trio half
(the loop, the background delete, the partition's Log replaced).

- `alter(key, destination)` steps the core with one partition of an
  AlterReplicaLogDirs request and carries out what comes back (create the
  future log, abandon one, remember a preferred dir), returning the code;
- `run()` is the local fetcher: at start it resumes every future dir found
  in the log dirs, then, while moves are under way, steps the core with a
  CopyTick per moving partition and carries out the one effect: read up to
  `copy_max_bytes` of whole batches from the current log and append them
  unchanged to the future log (offsets, epochs, producer state kept),
  truncate or restart the future log, or swap.

Why this is safe against the partition serving produce and fetch at the
same time: the Log is synchronous and every append, read and swap runs on
the trio thread without an await inside, so the partition's log cannot
change in the middle of a copy step and the swap is atomic for every other
task (Kafka takes the partition's lock for the same reason). Between two
steps the current log may grow, be truncated (the follower's
TruncateToEpochEndOffset) or lose a prefix (retention, DeleteRecords); the
next CopyTick sees it and the core answers with the follower's rules. The
swap replaces the Log in the LogManager and in the Partition driver at once;
the replica core's offsets do not move, because the core swaps only when
both logs have the same start, end and latest epoch, and the new Log is told
the core's high watermark. The old dir, renamed `-delete`, is removed in a
worker thread, as Kafka deletes it asynchronously.

Bounds: one copy step reads at most copy_max_bytes, and the copy runs at
most replica.alter.log.dirs.io.max.bytes.per.second (Kafka's quota of the
same name, a dynamic broker config; unbounded by default); the number of moves is
bounded by the partitions hosted; the driver sleeps while nothing moves.
"""

from __future__ import annotations

import logging
import os
from typing import Callable

import trio

from kref.broker import alter_log_dirs_core as c
from kref.protocol.errors import ErrorCode
from kref.storage.future_log import (
    create_future_log,
    future_dirs,
    open_future_log,
    remove_future_log,
    swap_future_log,
    truncate_future_log,
)
from kref.storage.errors import StorageError
from kref.storage.log import Log

log = logging.getLogger("kref.alter_log_dirs")

IDLE_POLL_S = 0.05  # a waiting move (the cleaner holds its log) is looked at again after this


def _parent(path: str) -> str:
    return os.path.dirname(os.path.normpath(path))


def _facts(log_: Log) -> c.LogFacts:
    return c.LogFacts(log_.log_start_offset, log_.log_end_offset, log_.leader_epoch_cache.latest_entry)


def _usable(path: str) -> bool:
    return os.access(path, os.R_OK | os.W_OK | os.X_OK)


class LogDirMover:
    """The core and the future logs of one LogManager, carried out synchronously."""

    def __init__(
        self,
        manager,
        *,
        now_ms: Callable[[], int],
        copy_max_bytes: int = c.DEFAULT_COPY_MAX_BYTES,
        usable: Callable[[str], bool] = _usable,
        cleaning: Callable[[c.Key], bool] = lambda key: False,
        high_watermark_of: Callable[[c.Key], int | None] = lambda key: None,
        on_swapped: Callable[[c.Key, Log, str], None] | None = None,
        node_id: int = -1,
    ) -> None:
        self.manager = manager
        self.now_ms = now_ms
        self.core = c.AlterLogDirsCore(copy_max_bytes=copy_max_bytes)
        self.futures: dict[c.Key, Log] = {}
        self.usable = usable
        self.cleaning = cleaning
        self.high_watermark_of = high_watermark_of
        # on_swapped(key, moved log, -delete path): the caller removes the path
        # (in the background); without it the path is removed at once.
        self.on_swapped = on_swapped
        self.node_id = node_id
        self.swaps = 0  # completed moves, for tests
        self.copied_bytes = 0  # bytes appended to future logs so far (the driver's throttle reads it)

    # ------------------------------------------------------------ requests

    def alter(self, key: c.Key, destination: str) -> int:
        """One partition of AlterReplicaLogDirs; returns its error code."""
        manager = self.manager
        destination = os.path.abspath(destination)
        current = manager.get_log(*key)
        event = c.AlterReplicaLogDir(
            key, destination, tuple(manager.log_dirs),
            destination_usable=destination in manager.log_dirs and self.usable(destination),
            current_dir=_parent(current.dir) if current is not None and not current.closed else None,
            unique_id=manager.ids.uuid().hex,  # the ids port (the LogManager's)
        )
        code = ErrorCode.UNKNOWN_SERVER_ERROR
        for effect in self.core.step(event, self.now_ms()):
            if isinstance(effect, c.Answer):
                code = effect.error_code
            else:
                failed = self._carry_out(effect)
                if failed is not None:
                    return failed
        return code

    def future_of(self, key: c.Key) -> Log | None:
        return self.futures.get(key)

    @property
    def moving(self) -> list[c.Key]:
        return list(self.core.moves)

    # ------------------------------------------------------------ the local fetcher

    def tick(self, key: c.Key) -> bool:
        """One copy step of one move; False when it only waited."""
        future = self.futures.get(key)
        if future is None:
            self.core.step(c.MoveFailed(key, "no future log"), self.now_ms())
            return True
        current = self.manager.get_log(*key)
        if current is not None and current.closed:
            current = None
        future_epoch = future.leader_epoch_cache.latest_epoch
        event = c.CopyTick(
            key,
            current=_facts(current) if current is not None else None,
            future=_facts(future),
            current_end_for_future_epoch=(
                current.leader_epoch_cache.end_offset_for(future_epoch, current.log_end_offset)
                if current is not None else (c.UNDEFINED_EPOCH, -1)),
            cleaning=self.cleaning(key),
            max_append_bytes=future.config.segment_bytes,
        )
        progressed = True
        for effect in self.core.step(event, self.now_ms()):
            if isinstance(effect, c.Wait):
                progressed = False
            else:
                self._carry_out(effect)
        return progressed

    def abandon(self, key: c.Key, reason: str) -> None:
        for effect in self.core.step(c.MoveFailed(key, reason), self.now_ms()):
            self._carry_out(effect)

    # ------------------------------------------------------------ effects

    def _carry_out(self, effect) -> int | None:
        key = effect.key
        now_ms = self.now_ms()
        try:
            if isinstance(effect, c.RememberPreferredDir):
                self.manager.preferred_log_dirs[key] = effect.destination
            elif isinstance(effect, c.StartFuture):
                current = self.manager.get_log(*key)
                self.futures[key] = create_future_log(self.manager, current, effect.destination, effect.unique_id, now_ms)
                log.info("node %d: moving %s-%d from %s to %s", self.node_id, key[0], key[1],
                         _parent(current.dir), effect.destination)
            elif isinstance(effect, c.AbandonFuture):
                future = self.futures.pop(key, None)
                if future is not None:
                    log.info("node %d: move of %s-%d abandoned: %s", self.node_id, key[0], key[1], effect.reason)
                    remove_future_log(self.manager.fs, future, self.manager.ids)
            elif isinstance(effect, c.CopyRecords):
                current, future = self.manager.get_log(*key), self.futures[key]
                data = current.read(effect.from_offset, effect.max_bytes, min_one_message=True)
                if data.records:
                    future.append_as_follower(data.records, now_ms)
                    self.copied_bytes += len(data.records)
            elif isinstance(effect, c.TruncateFuture):
                truncate_future_log(self.futures[key], effect.offset)
            elif isinstance(effect, c.RestartFutureAt):
                self.futures[key].truncate_fully_and_start_at(effect.offset)
            elif isinstance(effect, c.IncrementFutureLogStart):
                self.futures[key].maybe_increment_log_start_offset(effect.offset)
            elif isinstance(effect, c.AssignFutureEpoch):
                self.futures[key].leader_epoch_cache.assign(effect.epoch, effect.start_offset)
            elif isinstance(effect, c.SwapFutureLog):
                self._swap(key)
            else:
                raise TypeError(f"unknown effect {effect!r}")
        except (OSError, StorageError) as exc:  # a disk error (KafkaStorageError), or a log refusing the step
            log.error("node %d: move of %s-%d failed: %s", self.node_id, key[0], key[1], exc)
            if isinstance(effect, c.StartFuture):
                self.core.moves.pop(key, None)
                return ErrorCode.KAFKA_STORAGE_ERROR
            if isinstance(effect, c.AbandonFuture):
                return None  # the next start removes what is left of it
            self.abandon(key, str(exc))
        return None

    def _swap(self, key: c.Key) -> None:
        current, future = self.manager.get_log(*key), self.futures.pop(key)
        high_watermark = self.high_watermark_of(key)
        if high_watermark is None:  # no replica core here (tests, tools): the Log's checkpointed copy
            high_watermark = getattr(current, "high_watermark", None)
        source = _parent(current.dir)
        moved, doomed = swap_future_log(self.manager, current, future, self.now_ms(), high_watermark)
        self.swaps += 1
        log.info("node %d: %s-%d moved from %s to %s at log_end_offset %d", self.node_id, key[0], key[1],
                 source, _parent(moved.dir), moved.log_end_offset)
        if self.on_swapped is not None:
            self.on_swapped(key, moved, doomed)
        else:
            self.manager.fs.rmtree(doomed)

    # ------------------------------------------------------------ start and stop

    def resume(self) -> None:
        """Moves a previous run left under way: their future dirs, in the log dirs."""
        manager = self.manager
        now_ms = self.now_ms()
        for topic, partition, path in future_dirs(manager.fs, manager.log_dirs):
            key = (topic, partition)
            current = manager.get_log(*key)
            if key in self.futures and self.futures[key].dir == path:
                continue  # started by a request before this resume ran
            try:
                if current is None or key in self.futures:
                    reason = "its partition has no current log" if current is None else "a second future dir"
                    log.warning("node %d: removing future dir %s: %s", self.node_id, path, reason)
                    manager.fs.rmtree(path)
                    continue
                self.futures[key] = open_future_log(manager, path, current, now_ms)
            except (OSError, StorageError) as exc:
                log.error("node %d: cannot resume the move in %s: %s", self.node_id, path, exc)
                continue
            self.core.step(c.FutureFound(key, _parent(path)), now_ms)
            log.info("node %d: resuming the move of %s-%d to %s at offset %d", self.node_id, topic, partition,
                     _parent(path), self.futures[key].log_end_offset)

    def close(self) -> None:
        """Orderly stop: future logs flushed and closed; their moves resume at the next start."""
        for future in self.futures.values():
            if not future.closed:
                future.close()
        self.futures.clear()
        self.core.moves.clear()


class AlterLogDirsDriver:
    """The trio half: the copy loop, the background delete, the Partition's Log replaced at a swap."""

    def __init__(self, broker, copy_max_bytes: int = c.DEFAULT_COPY_MAX_BYTES) -> None:
        self.broker = broker
        self.copy_max_bytes = copy_max_bytes
        self.mover = LogDirMover(
            broker.log_manager,
            now_ms=broker.now_ms,
            copy_max_bytes=copy_max_bytes,
            cleaning=self._cleaning,
            high_watermark_of=self._high_watermark_of,
            on_swapped=self._on_swapped,
            node_id=broker.node_id,
        )
        self._wakeup = trio.Event()
        self._nursery: trio.Nursery | None = None
        broker.on_partition_role.append(self._on_partition_role)
        broker.on_shutdown.append(self.mover.close)

    def alter(self, key: c.Key, destination: str) -> int:
        code = self.mover.alter(key, destination)
        self._wakeup.set()
        return code

    def future_of(self, key: c.Key) -> Log | None:
        return self.mover.future_of(key)

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self.mover.resume()
            task_status.started()
            while True:
                if not self.mover.moving:
                    await self._wakeup.wait()
                    self._wakeup = trio.Event()
                    continue
                progressed = False
                rate = self._max_bytes_per_second()
                # Steps of a tenth of a second's worth at a throttled rate, so the copy is smooth.
                self.mover.core.copy_max_bytes = int(max(1, min(self.copy_max_bytes, rate / 10)))
                for key in self.mover.moving:
                    before = self.mover.copied_bytes
                    progressed |= self.mover.tick(key)
                    # replica.alter.log.dirs.io.max.bytes.per.second: wait as long as the
                    # copied bytes take at that rate; produce and fetch run meanwhile.
                    await trio.sleep((self.mover.copied_bytes - before) / rate)
                if not progressed:
                    with trio.move_on_after(IDLE_POLL_S):
                        await self._wakeup.wait()
                    self._wakeup = trio.Event()

    def _max_bytes_per_second(self) -> float:
        return float(getattr(self.broker.config, "replica_alter_log_dirs_io_max_bytes_per_second", 1 << 63))

    def _cleaning(self, key: c.Key) -> bool:
        cleaner = getattr(self.broker, "log_cleaner", None)
        return cleaner is not None and key in cleaner.core.in_progress

    def _partition(self, key: c.Key):
        replica_manager = getattr(self.broker, "replica_manager", None)
        return replica_manager.partitions.get(key) if replica_manager is not None else None

    def _high_watermark_of(self, key: c.Key) -> int | None:
        partition = self._partition(key)
        return partition.core.high_watermark if partition is not None else None

    def _on_swapped(self, key: c.Key, moved: Log, doomed: str) -> None:
        partition = self._partition(key)
        if partition is not None:
            partition.log = moved
        if self._nursery is not None:
            self._nursery.start_soon(self._delete_dir, doomed)
        else:
            self.mover.manager.fs.rmtree(doomed)

    async def _delete_dir(self, path: str) -> None:
        try:
            await trio.to_thread.run_sync(self.mover.manager.fs.rmtree, path)
        except OSError as exc:  # the next start removes what is left
            log.warning("cannot remove %s: %s", path, exc)

    def _on_partition_role(self, topic: str, partition: int, role: str, leader_epoch: int) -> None:
        """A partition leaving this broker takes its move with it, before its log is deleted
        (a future dir must never outlive its current dir: a start would promote it)."""
        if role == "none" and (topic, partition) in self.mover.futures:
            self.mover.abandon((topic, partition), "the partition left this broker")


def mover_of(broker) -> AlterLogDirsDriver:
    """The broker's mover, made on first use (the handlers and the background task share it)."""
    mover = getattr(broker, "log_dir_mover", None)
    if mover is None:
        mover = broker.log_dir_mover = AlterLogDirsDriver(broker)
    return mover

"""The broker's log cleaner threads: CleanerManagerCore driven by trio.

Theory of operation. Kafka runs log.cleaner.threads CleanerThreads; each
asks the LogCleanerManager for the filthiest log, cleans it, records the
new first dirty offset in cleaner-offset-checkpoint, and sleeps
log.cleaner.backoff.ms when nothing needs cleaning. Here each "thread" is
a trio task owning one Cleaner (its offset map of
log.cleaner.dedupe.buffer.size / threads and its throttler); the decisions
are CleanerManagerCore's (cleaner_planner.py), fed with the logs' shapes.
The heavy part of a cleaning (reading segments, building the map, writing
`.cleaned` files) runs in a worker thread via trio.to_thread, at most
`threads` at a time (a CapacityLimiter); taking the picture of a log and
swapping the cleaned segments in run on the trio thread, between requests,
so the Log itself stays single-threaded. Cancelling a task (broker
shutdown) tells its worker to stop at its next buffer: the cleaned files
are removed and nothing is swapped.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Callable

import trio

from kref.storage.cleaner import (
    Cleaner,
    CleanerConfig,
    CleaningAbortedError,
    CleaningStats,
    Throttler,
    capture,
    discard_cleaned,
    read_cleaner_checkpoints,
    summarize,
    swap_in,
    write_cleaner_checkpoints,
)
from kref.storage.cleaner_planner import (
    Backoff,
    CleanerManagerCore,
    CleaningAborted,
    CleaningDone,
    CleaningFailed,
    LogDeleted,
    LogTruncated,
    LogToClean,
    OffsetMap,
    PlanCleaning,
    ReportUncleanable,
    StartCleaning,
    WriteCleanerCheckpoint,
    offset_map_capacity,
)

logger = logging.getLogger(__name__)

STOP_WAIT_S = 5.0  # at shutdown, how long a worker may take to notice it must stop
RECONFIGURE_CHECK_S = 1.0  # how often the thread count and map size are compared with the config


def _shape(config: CleanerConfig) -> tuple:
    """The settings that need new cleaner tasks when they change."""
    return (config.enable, config.threads, config.dedupe_buffer_size, config.io_buffer_load_factor, config.io_buffer_size)


class LogCleaner:
    def __init__(self, log_manager, config: CleanerConfig | Callable[[], CleanerConfig], now_ms: Callable[[], int]) -> None:
        self.log_manager = log_manager
        # A callable is read again on every pass, so dynamic broker configs apply at once
        # (the rate and backoff) or by restarting the cleaner tasks (threads, map, buffers).
        self.config_source = config if callable(config) else (lambda: config)
        self.now_ms = now_ms
        self.core = CleanerManagerCore(checkpoints=read_cleaner_checkpoints(log_manager.log_dirs, getattr(log_manager, "fs", None)))
        # A follower truncating below the checkpoint (TruncateToEpochEndOffset)
        # makes the records past the new end dirty again (Kafka's
        # LogCleanerManager.maybeTruncateCheckpoint); a cleaning in progress
        # notices the changed segments itself (swap_in refuses).
        log_manager.truncation_listeners.append(
            lambda topic, partition, log_end_offset: self._step(LogTruncated((topic, partition), log_end_offset))
        )
        self.wakeup = trio.Event()
        self.limiter: trio.CapacityLimiter | None = None  # at most log.cleaner.threads workers at once
        self.cleanings = 0  # completed cleanings, for tests and the bench

    @property
    def config(self) -> CleanerConfig:
        return self.config_source()

    def wake(self) -> None:
        """Look for work now instead of after the backoff (tests, config changes)."""
        self.wakeup.set()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            config = self.config
            shape = _shape(config)
            async with trio.open_nursery() as nursery:
                if config.enable and config.threads > 0:
                    self._start_threads(nursery, config)
                while _shape(self.config) == shape:
                    await trio.sleep(RECONFIGURE_CHECK_S)
                nursery.cancel_scope.cancel()  # Kafka restarts its cleaner threads on such a change too
            logger.info("log cleaner restarting with %s", self.config)

    def _start_threads(self, nursery: trio.Nursery, config: CleanerConfig) -> None:
        capacity = offset_map_capacity(config.dedupe_buffer_size, config.threads, config.io_buffer_load_factor)
        if capacity < 1:
            logger.error("log cleaner not started: log.cleaner.dedupe.buffer.size is too small for one offset map entry")
            return
        self.limiter = trio.CapacityLimiter(config.threads)
        for _ in range(config.threads):
            cleaner = Cleaner(
                OffsetMap(capacity),
                Throttler(config.io_max_bytes_per_second),
                io_buffer_size=max(config.io_buffer_size, 4096),
            )
            nursery.start_soon(self._thread, cleaner)

    async def _thread(self, cleaner: Cleaner) -> None:
        while True:
            config = self.config
            cleaner.throttler.max_bytes_per_second = config.io_max_bytes_per_second
            effects = self._step(PlanCleaning(self._summaries()))
            started = [e for e in effects if isinstance(e, StartCleaning)]
            if not started:
                with trio.move_on_after(config.backoff_ms / 1000):
                    await self.wakeup.wait()
                if self.wakeup.is_set():
                    self.wakeup = trio.Event()
                continue
            await self._clean(cleaner, started[0].log)
            await trio.sleep(0)

    def _summaries(self):
        logs = [log for log in self.log_manager.all_logs() if not log.closed]
        present = {(log.topic, log.partition) for log in logs}
        for key in [k for k in self.core.checkpoints if k not in present]:
            self._step(LogDeleted(key))
        # Only compacted logs: the planner skips the others (choose_log), and summarising
        # every one of 10,000 logs each backoff was a 150 ms step of the loop.
        return tuple(summarize(log) for log in logs if log.config.compact_enabled)

    def _step(self, event: object) -> list[object]:
        effects = self.core.step(event, self.now_ms())
        for effect in effects:
            if isinstance(effect, WriteCleanerCheckpoint):
                self._write_checkpoints(dict(effect.offsets))
            elif isinstance(effect, ReportUncleanable):
                logger.error("log %s-%d marked uncleanable: %s", effect.key[0], effect.key[1], effect.reason)
        return [e for e in effects if not isinstance(e, (WriteCleanerCheckpoint, ReportUncleanable, Backoff))]

    def _write_checkpoints(self, offsets: dict[tuple[str, int], int]) -> None:
        dirs = {}
        for log in self.log_manager.all_logs():
            dirs[(log.topic, log.partition)] = os.path.dirname(os.path.normpath(log.dir))
        try:
            write_cleaner_checkpoints(dirs, offsets, self.log_manager.log_dirs, getattr(self.log_manager, "fs", None))
        except OSError as e:
            logger.error("cannot write cleaner-offset-checkpoint: %s", e)

    async def _in_thread(self, cleaner: Cleaner, fn, *args):
        cleaner.stop.clear()
        done = threading.Event()

        def work():
            try:
                return fn(*args)
            finally:
                done.set()

        try:
            return await trio.to_thread.run_sync(work, abandon_on_cancel=True, limiter=self.limiter)
        except trio.Cancelled:
            # Shutdown: the worker stops at its next buffer and removes its
            # `.cleaned` files; wait (bounded) so the broker exits without them.
            cleaner.stop.set()
            done.wait(STOP_WAIT_S)
            raise

    async def _clean(self, cleaner: Cleaner, to_clean: LogToClean) -> None:
        key = to_clean.key
        log = self.log_manager.get_log(*key)
        if log is None or log.closed:
            self._step(CleaningAborted(key))
            return
        cleaner.stats = CleaningStats()
        try:
            picture = capture(log)
            active = log.active_segment
            end_offset = await self._in_thread(
                cleaner, cleaner.build_offset_map, picture, to_clean.first_dirty_offset, to_clean.first_uncleanable_offset
            )
            producer_last = await self._in_thread(cleaner, cleaner.producer_last_offsets, picture, active.log_path, active.size)
            horizon = -1
            now_ms = self.now_ms()
            for group in cleaner.groups(picture, end_offset):
                try:
                    cleaned, group_horizon = await self._in_thread(
                        cleaner, cleaner.build_cleaned_group, picture, group, now_ms, producer_last
                    )
                except BaseException:
                    # Cancelled after the worker finished writing: nobody will swap these in.
                    discard_cleaned(picture.dir, group[0].base_offset)
                    raise
                if not swap_in(log, cleaned):
                    raise CleaningAbortedError(f"{log.dir} changed while cleaning")
                if group_horizon >= 0 and (horizon < 0 or group_horizon < horizon):
                    horizon = group_horizon
        except CleaningAbortedError as e:
            logger.info("cleaning of %s-%d aborted: %s", key[0], key[1], e)
            self._step(CleaningAborted(key))
            return
        except Exception as e:  # a bug or a damaged segment: stop cleaning this log, keep the broker
            logger.exception("cleaning of %s-%d failed", key[0], key[1])
            self._step(CleaningFailed(key, f"{type(e).__name__}: {e}"))
            return
        self.cleanings += 1
        s = cleaner.stats
        logger.info(
            "cleaned %s-%d up to offset %d: %d of %d records kept, %d bytes read, %d written",
            key[0], key[1], end_offset, s.records_kept, s.records_read, s.bytes_read, s.bytes_written,
        )  # fmt: skip
        self._step(CleaningDone(key, end_offset, horizon))


def cleaner_config_of(broker_config) -> CleanerConfig:
    """The log.cleaner.* broker properties as the cleaner's settings."""
    return CleanerConfig(
        enable=broker_config.log_cleaner_enable,
        threads=broker_config.log_cleaner_threads,
        dedupe_buffer_size=broker_config.log_cleaner_dedupe_buffer_size,
        io_buffer_size=broker_config.log_cleaner_io_buffer_size,
        io_buffer_load_factor=broker_config.log_cleaner_io_buffer_load_factor,
        io_max_bytes_per_second=broker_config.log_cleaner_io_max_bytes_per_second,
        backoff_ms=broker_config.log_cleaner_backoff_ms,
    )

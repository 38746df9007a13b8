"""The trio driver of the group coordinator: real clock, real log, real waiting.

The behaviour lives in the pure kref.coordinator.group.GroupCoordinator. This
shell only carries out its effects:

- a request handler calls `await driver.call(Event, **fields)`; the answer may
  come much later (a JoinGroup waits for the whole group to rejoin), when the
  core emits `Respond` for that request id;
- `WriteRecords` becomes one v2 batch appended to the `__consumer_offsets`
  partition through the broker's `append(partition, batch_bytes)` callback
  (acks=all, as Kafka's coordinator writes). The write is *committed* once
  the partition's high watermark covers it: `append` returns None when that
  is already so (one replica), or the offset the high watermark must reach,
  which `wait_committed` awaits (bounded by offsets.commit.timeout.ms). Only
  then is `WriteCommitted` stepped, in log order per partition, so the core
  answers an OffsetCommit only for a commit that survives a leader change;
  a failed or timed-out write is stepped as `WriteFailed` with Kafka's
  mapping of the append error;
- `Emit`: trace events go to the broker's trace sink (`trace`);
- timers: one background task sleeps until the core's earliest deadline and
  steps the expired timers (`run_timers`), woken early when a nearer one is set;
- loading: `load_partition` steps BeginLoad, reads the partition from its log
  start (yielding between chunks, so requests meanwhile see
  COORDINATOR_LOAD_IN_PROGRESS) and steps CompleteLoad with every record.

Everything runs in the broker's one trio thread, so the core is never entered
concurrently.
"""

from __future__ import annotations

import collections
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterator

import trio

from kref.coordinator import group as g
from kref.records.batch import Record, build_batch, decode_batch
from kref.records.header import iter_headers
from kref.storage.errors import RecordBatchTooLargeError, RecordTooLargeError

log = logging.getLogger(__name__)

# bytes read per step while loading a __consumer_offsets partition
LOAD_CHUNK_BYTES = 1 << 20
# an uncompressed __consumer_offsets batch is bounded like any fetch
LOAD_MAX_UNCOMPRESSED_BYTES = 64 << 20


class GroupCoordinatorDriver:
    def __init__(
        self,
        core: g.GroupCoordinator,
        *,
        now_ms: Callable[[], int],
        append: Callable[[int, bytes], int | None],
        wait_committed: Callable[[int, int, int], Awaitable[bool]] | None = None,
        start_soon: Callable[..., None] | None = None,
        trace: Callable[[object], None] | None = None,
        commit_timeout_ms: int = 5000,
    ) -> None:
        self.core = core
        self.now_ms = now_ms
        self.append = append
        self.wait_committed = wait_committed
        self.start_soon = start_soon
        self.trace = trace
        self.commit_timeout_ms = commit_timeout_ms
        self._ids = itertools.count(1)
        self._waiting: dict[int, list] = {}  # request id -> [trio.Event, response]
        self._wakeup = trio.Event()
        # per partition, writes appended but not yet committed, in log order:
        # [required_offset, token, outcome (None while waiting, else True/False)]
        self._uncommitted: dict[int, collections.deque[list]] = {}

    # --- requests -------------------------------------------------------------------

    async def call(self, event_type: type, **fields) -> object:
        request_id = next(self._ids)
        slot = [trio.Event(), None]
        self._waiting[request_id] = slot
        try:
            self.step(event_type(request_id=request_id, **fields))
            await slot[0].wait()
            return slot[1]
        finally:
            # also on cancellation (client gone): a late Respond is then dropped
            self._waiting.pop(request_id, None)

    def step(self, event: object) -> None:
        self._apply(self.core.step(event, self.now_ms()))

    def _apply(self, effects: list) -> None:
        queue = list(effects)
        while queue:
            effect = queue.pop(0)
            if isinstance(effect, g.Respond):
                slot = self._waiting.get(effect.request_id)
                if slot is not None:
                    slot[1] = effect.response
                    slot[0].set()
            elif isinstance(effect, g.WriteRecords):
                queue.extend(self._write(effect))
            elif isinstance(effect, g.SetTimer):
                self._wakeup.set()
            elif isinstance(effect, g.Emit):
                if self.trace is not None:
                    self.trace(effect.event)

    def _write(self, effect: g.WriteRecords) -> list:
        now = self.now_ms()
        batch = build_batch([Record(timestamp=now, key=key, value=value) for key, value in effect.records])
        try:
            required = self.append(effect.partition, batch)
        except (RecordTooLargeError, RecordBatchTooLargeError):
            return self.core.step(g.WriteFailed(effect.token, g.Errors.UNKNOWN_SERVER_ERROR), now)
        except Exception:  # the log failed us: the client retries elsewhere or later
            log.exception("append to __consumer_offsets-%d failed", effect.partition)
            return self.core.step(g.WriteFailed(effect.token, g.Errors.COORDINATOR_NOT_AVAILABLE), now)
        pending = self._uncommitted.setdefault(effect.partition, collections.deque())
        if required is None and not pending:
            # Already below the high watermark (the only replica is the leader).
            return self.core.step(g.WriteCommitted(effect.token), now)
        entry = [required, effect.token, None if required is not None else True]
        pending.append(entry)
        if required is not None:
            if self.wait_committed is None or self.start_soon is None:
                raise RuntimeError("a write that must wait for its commit needs wait_committed and start_soon")
            self.start_soon(self._await_commit, effect.partition, entry)
        return self._drain(effect.partition)

    async def _await_commit(self, partition: int, entry: list) -> None:
        entry[2] = await self.wait_committed(partition, entry[0], self.commit_timeout_ms)
        self._apply(self._drain(partition))

    def _drain(self, partition: int) -> list:
        """Step the outcomes known at the head of the partition's queue, in log order."""
        effects: list = []
        pending = self._uncommitted.get(partition)
        while pending and pending[0][2] is not None:
            _, token, committed = pending.popleft()
            now = self.now_ms()
            if committed:
                effects.extend(self.core.step(g.WriteCommitted(token), now))
            else:
                # Kafka's coordinator maps a timed-out append to COORDINATOR_NOT_AVAILABLE
                effects.extend(self.core.step(g.WriteFailed(token, g.Errors.COORDINATOR_NOT_AVAILABLE), now))
        return effects

    # --- timers ----------------------------------------------------------------------

    async def run_timers(self) -> None:
        while True:
            self._wakeup = trio.Event()
            deadline = self.core.next_deadline()
            if deadline is None:
                await self._wakeup.wait()
                continue
            delay_ms = deadline - self.now_ms()
            if delay_ms > 0:
                with trio.move_on_after(delay_ms / 1000):
                    await self._wakeup.wait()
                continue
            self._apply(self.core.expire_due_timers(self.now_ms()))

    # --- loading ------------------------------------------------------------------------

    async def load_partition(self, partition: int, partition_log, leader_epoch: int = -1) -> None:
        """Read a whole `__consumer_offsets` partition into the coordinator."""
        self.step(g.BeginLoad(partition, leader_epoch))
        records: list[tuple[bytes, bytes | None]] = []
        try:
            for chunk in _read_records(partition_log):
                records.extend(chunk)
                await trio.sleep(0)
        except Exception:
            # a partition we cannot read stays "loading": its groups get a
            # retriable error rather than silently empty state
            log.exception("cannot load __consumer_offsets-%d", partition)
            return
        self.step(g.CompleteLoad(partition, tuple(records), leader_epoch))


def _read_records(partition_log) -> Iterator[list[tuple[bytes, bytes | None]]]:
    offset = partition_log.log_start_offset
    end = partition_log.log_end_offset
    while offset < end:
        info = partition_log.read(offset, LOAD_CHUNK_BYTES, max_offset=end)
        if not info.records:
            break
        chunk = []
        for header in iter_headers(info.records):
            if header.is_control_batch:
                continue
            batch = decode_batch(info.records, header.position, max_uncompressed_bytes=LOAD_MAX_UNCOMPRESSED_BYTES)
            for record in batch.records:
                if record.offset < offset or record.key is None:
                    continue
                chunk.append((record.key, record.value))
            offset = max(offset, header.next_offset)
        if info.next_offset <= offset and not chunk:
            break  # no progress: never spin on a log that returns nothing new
        offset = max(offset, info.next_offset)
        yield chunk

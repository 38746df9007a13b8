"""Delayed-operation purgatory: requests parked until a partition changes or time runs out.

Theory of operation
-------------------
Two requests cannot be answered when they arrive:

- a Produce with acks=all, until the high watermark of every partition it
  wrote passes its batch (DelayedProduce, KIP-less but Kafka's design since
  0.8: the leader waits for the isr);
- a Fetch that found fewer than min_bytes, until enough data arrives or
  max_wait_ms passes (DelayedFetch, the consumer long poll).

A delayed operation watches one or more keys (TopicPartitions). Whoever
changes a partition (the partition driver on HighWatermarkAdvanced or
LogEndOffsetAdvanced) calls `check_and_complete(key)`, which re-tests only
the operations watching that key. An operation completes at most once: by
its condition (`try_complete` returned True), or by expiry.

The bookkeeping (`Purgatory.watch`, `check_and_complete`, `unwatch`) is plain
synchronous code; only `wait_for` touches trio: it parks the calling request
task on a trio.Event with a deadline, so the timeout is the task's own
cancel scope and no reaper thread or timer wheel is needed. If the client
disconnects, the task is cancelled and `wait_for` unwatches the operation.

Bound: a purgatory holds at most `max_operations` watched operations. When
full, `watch` refuses and the caller answers at once with what it has (a
fetch returns what is there; a produce times out its waiting partitions),
so a flood of long polls cannot grow memory without limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Iterable

import trio

REQUEST_TIMED_OUT = 7


class DelayedOperation:
    """Something to finish later: subclasses define `try_complete` and `on_expiration`."""

    __slots__ = ("keys", "completed", "_waker")

    def __init__(self, keys: Iterable[Hashable]) -> None:
        self.keys = tuple(dict.fromkeys(keys))
        self.completed = False
        self._waker: Callable[[], None] | None = None

    def try_complete(self) -> bool:
        """Test the condition; return True (and record the result) when it holds."""
        raise NotImplementedError

    def on_expiration(self) -> None:
        """Record the result for an operation whose time ran out."""

    def _finish(self) -> None:
        self.completed = True
        if self._waker is not None:
            self._waker()


class Purgatory:
    """Operations watched by key; bounded in how many it holds."""

    def __init__(self, name: str, *, max_operations: int = 10_000) -> None:
        self.name = name
        self.max_operations = max_operations
        self._watchers: dict[Hashable, set[DelayedOperation]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def watch(self, op: DelayedOperation) -> bool:
        """Park `op` under its keys; False when the purgatory is full."""
        if self._count >= self.max_operations:
            return False
        for key in op.keys:
            self._watchers.setdefault(key, set()).add(op)
        self._count += 1
        return True

    def unwatch(self, op: DelayedOperation) -> None:
        removed = False
        for key in op.keys:
            ops = self._watchers.get(key)
            if ops is not None and op in ops:
                ops.discard(op)
                removed = True
                if not ops:
                    del self._watchers[key]
        if removed:
            self._count -= 1

    def watched_keys(self) -> list[Hashable]:
        return list(self._watchers)

    def watching(self, key: Hashable) -> int:
        return len(self._watchers.get(key, ()))

    def check_and_complete(self, key: Hashable) -> int:
        """Re-test the operations watching `key`; returns how many completed."""
        ops = self._watchers.get(key)
        if not ops:
            return 0
        done = 0
        for op in list(ops):
            if not op.completed and op.try_complete():
                self.unwatch(op)
                op._finish()
                done += 1
        return done


async def wait_for(purgatory: Purgatory, op: DelayedOperation, timeout_ms: int) -> bool:
    """Complete `op` now, or park it until a key changes or `timeout_ms` passes.

    Returns True if the condition completed it, False if it expired (or the
    purgatory was full, which counts as expiring at once).
    """
    if op.try_complete():
        op.completed = True
        return True
    if timeout_ms <= 0 or not purgatory.watch(op):
        op.on_expiration()
        op.completed = True
        return False
    done = trio.Event()
    op._waker = done.set
    try:
        with trio.move_on_after(timeout_ms / 1000):
            await done.wait()
    finally:
        if not op.completed:
            purgatory.unwatch(op)
    if op.completed:
        return True
    op.on_expiration()
    op.completed = True
    return False


@dataclass(slots=True)
class ProducePartitionStatus:
    """One partition of a delayed produce: wait until HW >= required_offset."""

    required_offset: int
    error_code: int | None = None  # None while still waiting


class DelayedProduce(DelayedOperation):
    """acks=all: done when every partition's completion check gives an error code.

    `check(key, required_offset)` is the replica core's
    check_produce_completion for that partition (None = keep waiting).
    """

    __slots__ = ("partitions", "check")

    def __init__(
        self,
        partitions: dict[Hashable, ProducePartitionStatus],
        check: Callable[[Hashable, int], int | None],
    ) -> None:
        super().__init__(partitions.keys())
        self.partitions = partitions
        self.check = check

    def try_complete(self) -> bool:
        waiting = False
        for key, status in self.partitions.items():
            if status.error_code is None:
                status.error_code = self.check(key, status.required_offset)
                waiting = waiting or status.error_code is None
        return not waiting

    def on_expiration(self) -> None:
        for status in self.partitions.values():
            if status.error_code is None:
                status.error_code = REQUEST_TIMED_OUT


class DelayedFetch(DelayedOperation):
    """A long poll: done once `ready()` says min_bytes are there (or a partition changed state)."""

    __slots__ = ("ready",)

    def __init__(self, keys: Iterable[Hashable], ready: Callable[[], bool]) -> None:
        super().__init__(keys)
        self.ready = ready

    def try_complete(self) -> bool:
        return self.ready()

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

The bookkeeping (`Purgatory.watch`, `check_and_complete`, `expire`,
`unwatch`) is plain synchronous code with no clock of its own: each watched
operation carries a deadline in milliseconds of the Clock port the
purgatory was given, and `expire(now_ms)` times out every operation whose
deadline has passed (Kafka's expiration reaper). Time reaches it only
through that port, so the broker, a test and a simulator on a virtual clock
drive the same decisions. This module is pure; the broker's trio driver
is `kref/broker/purgatory_wait.py` (`wait_for`), the simulator's is a
scheduled `expire` in kref/sim/replication.py.

Bound: a purgatory holds at most `max_operations` watched operations. When
full, `watch` refuses and the caller answers at once with what it has (a
fetch returns what is there; a produce times out its waiting partitions),
so a flood of long polls cannot grow memory without limit. The deadline heap
drops an operation lazily (when it surfaces), so it is compacted whenever
its dead entries outnumber the live ones: it holds at most twice the
watched operations plus a small constant. Without that, every acks=all
produce stayed in the heap until its request timeout (30 s by default)
long after it was answered: at 100 produces/s about 3,000 dead operations
with their closures, ~80,000 objects that the garbage collector walked in
every full collection (a 40 ms pause of a leader's event loop), and at
high rates memory growing with rate x timeout (Kafka's timer removes a
completed operation's task at once).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Callable, Hashable, Iterable

from kref.ports.clock import Clock, TrioClock
from kref.protocol.errors import ErrorCode

REQUEST_TIMED_OUT = int(ErrorCode.REQUEST_TIMED_OUT)
# Dead deadline-heap entries tolerated beyond the live ones before a compaction.
COMPACT_SLACK = 64


class DelayedOperation:
    """Something to finish later: subclasses define `try_complete` and `on_expiration`."""

    __slots__ = ("keys", "completed", "expired", "deadline_ms", "waker")

    def __init__(self, keys: Iterable[Hashable]) -> None:
        self.keys = tuple(dict.fromkeys(keys))
        self.completed = False
        self.expired = False  # completed by its deadline, not its condition
        self.deadline_ms: int | None = None
        # Called once the operation is completed (by condition or expiry):
        # the driver's wake-up (a trio.Event in the broker, a scheduled
        # callback in a simulator).
        self.waker: Callable[[], None] | None = None

    def try_complete(self) -> bool:
        """Test the condition; return True (and record the result) when it holds."""
        raise NotImplementedError

    def on_expiration(self) -> None:
        """Record the result for an operation whose time ran out."""

    def _finish(self) -> None:
        self.completed = True
        if self.waker is not None:
            self.waker()


class Purgatory:
    """Operations watched by key; bounded in how many it holds."""

    def __init__(self, name: str, *, max_operations: int = 10_000, clock: Clock | None = None) -> None:
        self.name = name
        self.max_operations = max_operations
        self.clock: Clock = clock if clock is not None else TrioClock()
        # Insertion-ordered (dicts, not sets): operations complete in the
        # order they were parked, the same in every run (a simulator's
        # byte-identical traces depend on it).
        self._watchers: dict[Hashable, dict[DelayedOperation, None]] = {}
        self._count = 0
        # (deadline_ms, seq, op): a heap with lazy deletion (completed or
        # unwatched operations are skipped when they surface).
        self._deadlines: list[tuple[int, int, DelayedOperation]] = []
        self._seq = itertools.count()
        # Watched operations with an entry in the heap (the heap's live part).
        self._timed = 0

    def __len__(self) -> int:
        return self._count

    def watch(self, op: DelayedOperation, timeout_ms: int | None = None) -> bool:
        """Park `op` under its keys, expiring `timeout_ms` from now on the
        purgatory's clock (never, if None); False when the purgatory is full."""
        if self._count >= self.max_operations:
            return False
        for key in op.keys:
            self._watchers.setdefault(key, {})[op] = None
        self._count += 1
        if timeout_ms is not None:
            op.deadline_ms = self.clock.monotonic_ms() + max(0, timeout_ms)
            heapq.heappush(self._deadlines, (op.deadline_ms, next(self._seq), op))
            self._timed += 1
        return True

    def _compact_deadlines(self) -> None:
        """Drop the heap's entries of operations no longer watched, once they are
        the majority (amortised O(1) per operation; see the bound above)."""
        if len(self._deadlines) > 2 * self._timed + COMPACT_SLACK:
            live = [entry for entry in self._deadlines if not entry[2].completed and self._watched(entry[2])]
            heapq.heapify(live)
            self._deadlines = live

    def _watched(self, op: DelayedOperation) -> bool:
        return any(op in self._watchers.get(key, ()) for key in op.keys)

    def next_deadline_ms(self) -> int | None:
        """The earliest deadline of a watched operation (None: none pending)."""
        while self._deadlines:
            _, _, op = self._deadlines[0]
            if not op.completed and self._watched(op):
                return self._deadlines[0][0]
            heapq.heappop(self._deadlines)
        return None

    def expire(self, now_ms: int) -> int:
        """Time out every watched operation whose deadline is at or before
        `now_ms`; returns how many expired."""
        expired = 0
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            _, _, op = heapq.heappop(self._deadlines)
            if op.completed or not self._watched(op):
                continue
            self.unwatch(op)
            op.expired = True
            op.on_expiration()
            op._finish()
            expired += 1
        return expired

    def unwatch(self, op: DelayedOperation) -> None:
        removed = False
        for key in op.keys:
            ops = self._watchers.get(key)
            if ops is not None and op in ops:
                del ops[op]
                removed = True
                if not ops:
                    del self._watchers[key]
        if removed:
            self._count -= 1
            if op.deadline_ms is not None:
                self._timed -= 1
                self._compact_deadlines()

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

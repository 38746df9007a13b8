"""The broker's trio driver of the purgatory (kref/replication/purgatory.py).

Theory of operation: a request task that must wait (acks=all, a fetch long
poll) parks its operation in the purgatory and sleeps on a trio.Event that
the operation's completion sets. Time reaches the purgatory through one
reaper task per purgatory (Kafka's expiration reaper): it sleeps until the
earliest deadline the purgatory keeps on its Clock port, asks the purgatory
to expire what is due, and sleeps again; a waiter whose deadline is earlier
than the reaper's next wake-up wakes it. Whether an operation completed or
expired is decided by the purgatory, never here.

Why one reaper and not a timer per waiter: a trio timeout is a cancel scope
registered in trio's deadline heap, entered and closed around every wait,
and on the acks=all path every record parks three operations (the produce
and the two follower fetches it wakes), each answered within milliseconds
of a 30 s or 500 ms deadline. The reaper's timer moves only when the
earliest deadline does: about once per request timeout for produces, once
per replica.fetch.wait.max.ms for follower fetches.

The reaper is a trio system task (it needs no nursery of the caller's),
started on the first wait of each trio run; it only expires, and an error
while expiring is logged and does not stop it. If the client disconnects,
the waiting task is cancelled and its operation unwatched, so a dead
request holds no slot.
"""

from __future__ import annotations

import logging
import math
import weakref

import trio

from kref.replication.purgatory import DelayedOperation, Purgatory

log = logging.getLogger("kref.purgatory")


class _Reaper:
    """Expires one purgatory's due operations, on trio's timer."""

    def __init__(self, purgatory: Purgatory) -> None:
        self.purgatory = purgatory
        self.token = trio.lowlevel.current_trio_token()
        # When the reaper will look next (ms on the purgatory's clock; inf: only when woken).
        self.target_ms = math.inf
        self.wake = trio.Event()

    def deadline_added(self, deadline_ms: int) -> None:
        if deadline_ms < self.target_ms:
            self.target_ms = deadline_ms
            self.wake.set()

    async def run(self) -> None:
        purgatory, clock = self.purgatory, self.purgatory.clock
        while True:
            try:
                purgatory.expire(clock.monotonic_ms())
            except Exception:  # noqa: BLE001 - an operation's expiry failed; the others must still expire
                log.exception("%s purgatory: expiring an operation failed", purgatory.name)
            following = purgatory.next_deadline_ms()
            self.target_ms = math.inf if following is None else following
            self.wake = trio.Event()
            if following is None:
                await self.wake.wait()
                continue
            with trio.move_on_after(max(0, following - clock.monotonic_ms()) / 1000):
                await self.wake.wait()


# One reaper per purgatory per trio run (a purgatory outlives a run in tests).
_reapers: weakref.WeakKeyDictionary[Purgatory, _Reaper] = weakref.WeakKeyDictionary()


def _reaper(purgatory: Purgatory) -> _Reaper:
    reaper = _reapers.get(purgatory)
    if reaper is None or reaper.token is not trio.lowlevel.current_trio_token():
        reaper = _reapers[purgatory] = _Reaper(purgatory)
        trio.lowlevel.spawn_system_task(reaper.run, name=f"kref-{purgatory.name}-purgatory-reaper")
    return reaper


async def wait_for(purgatory: Purgatory, op: DelayedOperation, timeout_ms: int) -> bool:
    """Complete `op` now, or park it until a key changes or `timeout_ms` passes.

    Returns True if the condition completed it, False if it expired (or the
    purgatory was full, which counts as expiring at once).
    """
    if op.try_complete():
        op.completed = True
        return True
    if timeout_ms <= 0 or not purgatory.watch(op, timeout_ms):
        op.on_expiration()
        op.completed = op.expired = True
        return False
    done = trio.Event()
    op.waker = done.set
    try:
        _reaper(purgatory).deadline_added(op.deadline_ms)
        await done.wait()
    finally:
        if not op.completed:
            purgatory.unwatch(op)
    return not op.expired

"""The broker's trio driver of the purgatory (kref/replication/purgatory.py).

Theory of operation: a request task that must wait (acks=all, a fetch long
poll) parks here on a trio.Event and sleeps on trio's timer until the
deadline the purgatory keeps on its Clock port, then asks the purgatory to
expire what is due; a wake-up that comes early just sleeps again. Whether
the operation completed or expired is decided by the purgatory, never here.
If the client disconnects, the task is cancelled and the operation is
unwatched, so a dead request holds no slot.
"""

from __future__ import annotations

import trio

from kref.replication.purgatory import DelayedOperation, Purgatory


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
        while not op.completed:
            # Sleep until the deadline the purgatory keeps, then let it decide.
            remaining_ms = max(0, op.deadline_ms - purgatory.clock.monotonic_ms())
            with trio.move_on_after(remaining_ms / 1000):
                await done.wait()
            if not op.completed:
                purgatory.expire(purgatory.clock.monotonic_ms())
                if not op.completed and remaining_ms == 0:
                    # Due but no longer watched (nothing else unwatches a
                    # live operation; never spin on it).
                    purgatory.unwatch(op)
                    op.expired = True
                    op.on_expiration()
                    op._finish()
    finally:
        if not op.completed:
            purgatory.unwatch(op)
    return not op.expired

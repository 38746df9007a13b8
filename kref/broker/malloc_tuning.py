"""Keep freed frame-sized buffers mapped, so that each round trip does not page-fault them in again.

Theory of operation
-------------------
One acks=all round trip allocates several buffers of about a produce
batch's size in every broker: the request's bytes as they arrive and the
frame they form, the records a follower fetch reads from the segment, the
response frame; the follower receives and frames the same megabyte again.
glibc serves an allocation of 128 KiB or more with a fresh mmap(), or from
heap pages it returned to the kernel (trimmed) after the previous round's
free, so each such buffer is page-faulted in on first touch, a fault per
4 KiB. On these virtual machines that costs about 2 ms of system time per
MiB (measured: touching a fresh 1 MiB mapping, 2.0 ms; copying 1 MiB into
reused memory, 0.06 ms), which made page faults the largest system-time
item of a leader serving two followers (about 770 faults per 2,000-record
round, bench/cluster.py).

`apply()` raises glibc's mmap threshold to MMAP_THRESHOLD_BYTES (buffers up
to that size come from the heap and are reused) and its trim threshold to
TRIM_THRESHOLD_BYTES (free memory at the top of the heap stays mapped up
to that much). Bound: at most TRIM_THRESHOLD_BYTES of freed memory stays
mapped beyond what the process uses; frames above MMAP_THRESHOLD_BYTES
(socket.request.max.bytes allows 100 MiB) are still mapped and unmapped
one by one. Not glibc (no mallopt): nothing changes.

This decides nothing about Kafka's semantics: it is the process's memory
policy, applied once at start by the broker's entry point.
"""

from __future__ import annotations

import ctypes
import logging

__all__ = ["apply", "MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES"]

log = logging.getLogger("kref.broker")

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

# glibc caps the mmap threshold at 32 MiB on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX).
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024


def apply() -> bool:
    """Set the thresholds; False where the C library has no mallopt (not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    if not done:
        log.warning("mallopt refused the buffer thresholds; large buffers are page-faulted in per request")
    return done

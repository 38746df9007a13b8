"""One log line per resource shortage, not one per failed attempt.

Theory of operation: running out of descriptors, memory or disk space is a
state that lasts; every request and every accept attempt meets it again.
The broker fails each affected request with a Kafka error code and keeps
serving, but the log must say so once, clearly, and not bury everything
else: `resource_warning` logs a message at most once per interval for the
same message format, and the next line it lets through says how many were
held back. This is driver-side bookkeeping (it reads the monotonic clock),
deciding nothing about the broker's behaviour.
"""

from __future__ import annotations

import errno
import logging
import time

__all__ = ["resource_warning", "is_out_of_resources", "INTERVAL_S"]

INTERVAL_S = 10.0
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS, errno.ENOSPC})

# (logger name, format) -> (monotonic time of the last line, lines held back since)
_last: dict[tuple[str, str], tuple[float, int]] = {}


def is_out_of_resources(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _OUT_OF_RESOURCES


def resource_warning(logger: logging.Logger, fmt: str, *args: object) -> bool:
    """Log `fmt % args` as a warning unless the same format was logged under INTERVAL_S ago."""
    key = (logger.name, fmt)
    now = time.monotonic()
    last, held = _last.get(key, (-INTERVAL_S, 0))
    if now - last < INTERVAL_S:
        _last[key] = (last, held + 1)
        return False
    _last[key] = (now, 0)
    suffix = f" ({held} more like it in the last {now - last:.0f}s)" if held else ""
    logger.warning(fmt + suffix, *args)
    return True


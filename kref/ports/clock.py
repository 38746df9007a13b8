"""The clock port: wall-clock milliseconds for timestamps, monotonic for deadlines.

Synchronous drivers (the `kref cluster` launcher, test harnesses) also wait
through it: `sleep_ms` blocks on the real clock (SystemClock) or moves a
virtual one (ManualClock), so a bounded wait runs its whole course at once
in a test. Trio drivers sleep on trio's own clock instead (TrioClock reads it)."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def monotonic_ms(self) -> int: ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def sleep_ms(self, ms: int) -> None:
        time.sleep(ms / 1000)


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A virtual clock that moves only when told (tests, the simulator)."""

    def __init__(self, now_ms: int = 0) -> None:
        self._now_ms = now_ms

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic_ms(self) -> int:
        return self._now_ms

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError("a clock does not go back")
        self._now_ms += ms
        return self._now_ms

    def sleep_ms(self, ms: int) -> None:
        self.advance(ms)


class TrioClock:
    """The clock of the running trio loop as a Clock port (monotonic part).

    Drivers that wait with trio's timers measure their deadlines on this
    clock, so a deadline kept by a pure component (the purgatory) and the
    trio timer that wakes the driver agree, on trio's real clock in the
    broker and on its MockClock in tests."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        import trio  # only drivers running inside trio use this clock

        return int(trio.current_time() * 1000)

"""kref/node/cluster_waits.py's bounded poll, on a ManualClock: it returns the
predicate's first true value, and a wait that runs out raises WaitTimeout
(an AssertionError for tests, a TimeoutError for benchmarks) after exactly
its timeout of virtual time, having polled at its interval."""

from __future__ import annotations

import pytest

from kref.node.cluster_waits import WaitTimeout, wait_until
from kref.ports.clock import ManualClock


def test_wait_until_returns_the_first_true_value():
    clock = ManualClock()
    answers = iter([None, 0, {"leader": 2}])
    assert wait_until(lambda: next(answers), "a leader", 5, 0.5, clock=clock) == {"leader": 2}
    assert clock.monotonic_ms() == 1000  # two polls came up empty, 500 ms apart


def test_wait_until_gives_up_at_its_deadline():
    clock = ManualClock()
    polls = []
    with pytest.raises(WaitTimeout, match="timed out after 2s waiting for nothing") as raised:
        wait_until(lambda: polls.append(clock.monotonic_ms()), "nothing", 2, 0.5, clock=clock)
    assert polls == [0, 500, 1000, 1500]
    assert isinstance(raised.value, AssertionError) and isinstance(raised.value, TimeoutError)

"""The delayed-operation purgatory (acks=all produce, long-poll fetch).

Checks, on trio's virtual clock (MockClock with autojump, so no real waiting
and no timing in the assertions): an operation completes when a watched key
is checked and its condition holds, only once, and only via its own keys;
it expires with REQUEST_TIMED_OUT for the partitions still waiting; a full
purgatory refuses to park more (bounded memory) and the operation expires at
once; a cancelled waiter (client gone) leaves nothing watched.
"""

from __future__ import annotations

import trio
import trio.testing

from kref.replication.purgatory import (
    DelayedFetch,
    DelayedProduce,
    ProducePartitionStatus,
    Purgatory,
)
from kref.broker.purgatory_wait import wait_for

A, B = ("t", 0), ("t", 1)


def run(fn):
    trio.run(fn, clock=trio.testing.MockClock(autojump_threshold=0))


def test_delayed_produce_completes_when_all_partitions_reach_hw():
    hw = {A: 0, B: 0}
    purgatory = Purgatory("produce")
    op = DelayedProduce(
        {A: ProducePartitionStatus(5), B: ProducePartitionStatus(3)},
        lambda key, required: 0 if hw[key] >= required else None,
    )
    result = {}

    async def main():
        async with trio.open_nursery() as nursery:
            async def waiter():
                result["completed"] = await wait_for(purgatory, op, 30_000)
                result["at"] = trio.current_time()

            nursery.start_soon(waiter)
            await trio.sleep(1)
            assert len(purgatory) == 1
            hw[A] = 5
            assert purgatory.check_and_complete(A) == 0  # B still short
            hw[B] = 3
            assert purgatory.check_and_complete(("other", 0)) == 0  # not a watched key
            assert purgatory.check_and_complete(B) == 1
            assert purgatory.check_and_complete(B) == 0  # never twice

    run(main)
    assert result["completed"] is True
    assert {k: s.error_code for k, s in op.partitions.items()} == {A: 0, B: 0}
    assert len(purgatory) == 0


def test_delayed_produce_expires_with_request_timed_out():
    purgatory = Purgatory("produce")
    op = DelayedProduce(
        {A: ProducePartitionStatus(5), B: ProducePartitionStatus(3)},
        lambda key, required: 0 if key == A else None,
    )

    async def main():
        start = trio.current_time()
        assert await wait_for(purgatory, op, 2_000) is False
        assert trio.current_time() - start == 2.0

    run(main)
    assert op.partitions[A].error_code == 0
    assert op.partitions[B].error_code == 7
    assert len(purgatory) == 0


def test_full_purgatory_refuses_and_operation_expires_at_once():
    purgatory = Purgatory("fetch", max_operations=2)
    outcomes = []

    async def main():
        async with trio.open_nursery() as nursery:
            for _ in range(2):
                async def parked():
                    outcomes.append(await wait_for(purgatory, DelayedFetch([A], lambda: False), 10_000))

                nursery.start_soon(parked)
            await trio.sleep(0.5)
            assert len(purgatory) == 2
            start = trio.current_time()
            assert await wait_for(purgatory, DelayedFetch([A], lambda: False), 10_000) is False
            assert trio.current_time() == start  # did not wait
            nursery.cancel_scope.cancel()

    run(main)
    assert len(purgatory) == 0  # cancelled waiters unwatched themselves


def test_fetch_ready_immediately_is_never_parked():
    purgatory = Purgatory("fetch")

    async def main():
        assert await wait_for(purgatory, DelayedFetch([A], lambda: True), 10_000) is True

    run(main)
    assert len(purgatory) == 0


def test_expiry_is_decided_on_the_clock_port_without_trio():
    """The purgatory keeps deadlines on its Clock port: a simulator on a
    virtual clock expires operations by calling expire(now), no trio involved."""
    from kref.ports.clock import ManualClock

    clock = ManualClock(1_000)
    purgatory = Purgatory("produce", clock=clock)
    hw = {A: 0}
    woken = []
    slow = DelayedProduce({A: ProducePartitionStatus(5)}, lambda key, required: 0 if hw[key] >= required else None)
    fast = DelayedProduce({A: ProducePartitionStatus(2)}, lambda key, required: 0 if hw[key] >= required else None)
    for op, timeout in ((slow, 300), (fast, 100)):
        op.waker = lambda op=op: woken.append(op)
        assert purgatory.watch(op, timeout)
    assert purgatory.next_deadline_ms() == 1_100
    clock.advance(99)
    assert purgatory.expire(clock.monotonic_ms()) == 0
    hw[A] = 2
    assert purgatory.check_and_complete(A) == 1 and woken == [fast] and not fast.expired
    assert purgatory.next_deadline_ms() == 1_300  # the completed one no longer counts
    clock.advance(201)
    assert purgatory.expire(clock.monotonic_ms()) == 1 and woken == [fast, slow]
    assert slow.expired and slow.partitions[A].error_code == 7  # REQUEST_TIMED_OUT
    assert len(purgatory) == 0 and purgatory.next_deadline_ms() is None
    hw[A] = 5
    assert purgatory.check_and_complete(A) == 0  # expired means answered: never completed again


def test_answered_operations_leave_the_deadline_heap_long_before_their_timeout():
    """Bound: acks=all produces answered by the high watermark must not stay in
    the deadline heap until their request timeout (at 100 produces/s and 30 s
    that was ~3,000 dead operations per leader, walked by every full garbage
    collection). The heap holds at most twice the watched operations plus
    COMPACT_SLACK, and expiry still finds the live ones."""
    from kref.ports.clock import ManualClock
    from kref.replication.purgatory import COMPACT_SLACK

    clock = ManualClock(0)
    purgatory = Purgatory("produce", clock=clock)
    hw = {A: 0}
    check = lambda key, required: 0 if hw[key] >= required else None  # noqa: E731
    stuck = DelayedProduce({A: ProducePartitionStatus(1_000_000)}, check)
    assert purgatory.watch(stuck, 30_000)
    for offset in range(1, 5_001):
        op = DelayedProduce({A: ProducePartitionStatus(offset)}, check)
        assert purgatory.watch(op, 30_000)
        hw[A] = offset
        assert purgatory.check_and_complete(A) == 1
        clock.advance(1)
        assert len(purgatory._deadlines) <= 2 * len(purgatory) + COMPACT_SLACK
    assert len(purgatory) == 1 and purgatory.next_deadline_ms() == 30_000
    clock.advance(30_000)
    assert purgatory.expire(clock.monotonic_ms()) == 1 and stuck.expired
    assert len(purgatory) == 0 and purgatory.next_deadline_ms() is None


def test_one_reaper_expires_each_waiter_at_its_own_deadline_even_an_earlier_one_parked_later():
    """The trio driver's single reaper (Kafka's expiration reaper) sleeps until the
    earliest deadline; a waiter parked later with an earlier deadline wakes it."""
    purgatory = Purgatory("fetch")
    expired_at: dict[str, float] = {}

    async def main():
        start = trio.current_time()

        async def waiter(name, timeout_ms):
            assert await wait_for(purgatory, DelayedFetch([A], lambda: False), timeout_ms) is False
            expired_at[name] = trio.current_time() - start

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter, "long", 10_000)
            await trio.sleep(0.5)
            nursery.start_soon(waiter, "short", 1_000)  # due at 1.5 s, before the reaper's 10 s
            await trio.sleep(0.1)
            assert len(purgatory) == 2

    run(main)
    assert abs(expired_at["short"] - 1.5) < 0.01 and abs(expired_at["long"] - 10.0) < 0.01
    assert len(purgatory) == 0


def test_the_reaper_serves_every_trio_run_of_a_purgatory():
    """A purgatory that outlives a trio run (as in tests) gets a new reaper in the next run."""
    purgatory = Purgatory("produce")
    outcomes = []

    async def main():
        outcomes.append(await wait_for(purgatory, DelayedFetch([A], lambda: False), 2_000))

    run(main)
    run(main)
    assert outcomes == [False, False] and len(purgatory) == 0

"""The fetcher half of KIP-227 (FetcherSession) against the broker half (FetchSessionCache).

Both are pure, so the two are driven against each other request by request,
as a replica fetcher and a leader would over the wire.
"""

from __future__ import annotations

import random

from kref.broker.fetch_session import (
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSessionCache,
    FetcherSession,
)
from kref.protocol.errors import ErrorCode

A, B = ("t", 0), ("t", 1)


def data(offset: int, epoch: int = 0) -> tuple:
    return (offset, epoch, epoch, 0, 1 << 20)


def exchange(fetcher: FetcherSession, cache: FetchSessionCache, wanted: dict, now: int = 0):
    """One request and answer; returns (plan, decision, accepted)."""
    plan = fetcher.plan(wanted)
    parts = [(k, CachedPartition(wanted[k][0], wanted[k][4], wanted[k][1], wanted[k][2])) for k in plan.send]
    decision = cache.on_request(plan.session_id, plan.session_epoch, True, parts, list(plan.forgotten), now)
    accepted = fetcher.on_response(decision.error_code, decision.session_id)
    return plan, decision, accepted


def test_full_fetch_opens_a_session_then_only_changes_are_named():
    cache, fetcher = FetchSessionCache(10, random.Random(1)), FetcherSession()
    plan, decision, ok = exchange(fetcher, cache, {A: data(0), B: data(0)})
    assert ok and not plan.incremental and plan.session_epoch == INITIAL_EPOCH and set(plan.send) == {A, B}
    assert decision.session_id != INVALID_SESSION_ID and fetcher.session_id == decision.session_id
    # A moved, B did not: only A is named, and the broker still reads both.
    plan, decision, ok = exchange(fetcher, cache, {A: data(5), B: data(0)})
    assert ok and plan.incremental and plan.session_epoch == 1 and plan.send == (A,)
    assert dict(decision.partitions)[A].fetch_offset == 5 and dict(decision.partitions)[B].fetch_offset == 0
    # Nothing changed: an empty incremental request, epoch 2.
    plan, decision, ok = exchange(fetcher, cache, {A: data(5), B: data(0)})
    assert ok and plan.send == () and plan.session_epoch == 2 and len(decision.partitions) == 2


def test_a_partition_no_longer_wanted_is_forgotten():
    cache, fetcher = FetchSessionCache(10, random.Random(2)), FetcherSession()
    exchange(fetcher, cache, {A: data(0), B: data(0)})
    plan, decision, ok = exchange(fetcher, cache, {A: data(0)})
    assert ok and plan.forgotten == (B,) and [k for k, _ in decision.partitions] == [A]
    # B comes back (e.g. after truncating through OffsetsForLeaderEpoch): named again.
    plan, decision, ok = exchange(fetcher, cache, {A: data(0), B: data(3, 1)})
    assert plan.send == (B,) and dict(decision.partitions)[B].current_leader_epoch == 1


def test_a_lost_session_starts_over_with_a_full_fetch():
    cache, fetcher = FetchSessionCache(10, random.Random(3)), FetcherSession()
    exchange(fetcher, cache, {A: data(0)})
    cache.sessions.clear()  # the leader restarted, or evicted the session
    plan, decision, ok = exchange(fetcher, cache, {A: data(1)})
    assert not ok and decision.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    plan, decision, ok = exchange(fetcher, cache, {A: data(1)})
    assert ok and not plan.incremental and plan.send == (A,) and decision.session_id != INVALID_SESSION_ID


def test_a_wrong_epoch_starts_over():
    cache, fetcher = FetchSessionCache(10, random.Random(4)), FetcherSession()
    exchange(fetcher, cache, {A: data(0)})
    fetcher.epoch = 7  # as if an answer had been lost after the broker took the request
    plan, decision, ok = exchange(fetcher, cache, {A: data(0)})
    assert not ok and decision.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert fetcher.session_id == INVALID_SESSION_ID and fetcher.epoch == INITIAL_EPOCH


def test_no_room_in_the_cache_means_full_fetches():
    cache, fetcher = FetchSessionCache(0, random.Random(5)), FetcherSession()
    for offset in range(3):
        plan, decision, ok = exchange(fetcher, cache, {A: data(offset), B: data(0)})
        assert ok and not plan.incremental and set(plan.send) == {A, B}
        assert decision.session_id == INVALID_SESSION_ID


def test_a_connection_failure_forgets_the_session_and_what_was_told():
    cache, fetcher = FetchSessionCache(10, random.Random(6)), FetcherSession()
    exchange(fetcher, cache, {A: data(0)})
    fetcher.told(A, 10, 0)
    assert fetcher.last_told(A) == (10, 0)
    fetcher.on_failure()
    assert fetcher.last_told(A) is None and not fetcher.plan({A: data(0)}).incremental

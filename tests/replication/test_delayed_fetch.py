"""The delayed-fetch completion rule (Kafka's DelayedFetch.tryComplete) is the
replica core's (`replica.delayed_fetch_complete`); the fetch handler only parks
the fetch and re-asks when a partition's high watermark or log end moves."""

from __future__ import annotations

from kref.replication import replica as r

NOW = 1_700_000_000_000


def leader(leo=8, hw=5, epoch=3) -> r.PartitionReplica:
    core = r.PartitionReplica("t", 0, 1, tracing=False)
    core.step(r.BecomeLeader(epoch, 0, frozenset({1}), (1, 2), 0, leo, hw), NOW)
    return core


def follower(leo=8, hw=5, epoch=3) -> r.PartitionReplica:
    core = r.PartitionReplica("t", 0, 2, tracing=False)
    core.step(r.BecomeFollower(1, epoch, 0, frozenset({1, 2}), (1, 2), 0, leo, hw), NOW)
    return core


def parked(core, fetch_offset, *, replica_fetch=False, named_epoch=r.NO_EPOCH, visible=100) -> r.ParkedFetch:
    return r.ParkedFetch(fetch_offset, replica_fetch, core.is_leader, core.leader_epoch, named_epoch, visible)


def test_a_consumer_waits_for_min_bytes_of_visible_data():
    core = leader()
    seen = parked(core, 5)
    assert not r.delayed_fetch_complete([(seen, core, 100)], 0, 10)
    assert not r.delayed_fetch_complete([(seen, core, 105)], 4, 10)  # 9 bytes so far
    assert r.delayed_fetch_complete([(seen, core, 106)], 4, 10)
    # Bytes from several partitions add up.
    other = leader()
    assert r.delayed_fetch_complete([(seen, core, 105), (parked(other, 5, visible=0), other, 5)], 0, 10)


def test_a_gone_partition_or_moved_leadership_answers_at_once():
    core = leader()
    seen = parked(core, 5)
    assert r.delayed_fetch_complete([(seen, None, 100)], 0, 10)
    core.step(r.BecomeFollower(2, 4, 1, frozenset({1, 2}), (1, 2), 0, 8, 5), NOW)
    assert r.delayed_fetch_complete([(seen, core, 100)], 0, 10)


def test_an_epoch_change_fences_only_a_fetch_that_named_its_epoch():
    core = leader()
    named, unnamed = parked(core, 5, named_epoch=3), parked(core, 5)
    core.step(r.BecomeLeader(4, 1, frozenset({1}), (1, 2), 0, 8, 5), NOW)
    assert r.delayed_fetch_complete([(named, core, 100)], 0, 10)
    assert not r.delayed_fetch_complete([(unnamed, core, 100)], 0, 10)


def test_a_follower_fetch_completes_when_the_log_end_passes_its_offset():
    core = leader(leo=8)
    seen = parked(core, 8, replica_fetch=True)
    assert not r.delayed_fetch_complete([(seen, core, 100)], 0, 1)
    core.step(r.ClientProduce(1, 1, 1), NOW)
    core.step(r.LogAppended(1, 1, 8, 8, 9), NOW)
    assert r.delayed_fetch_complete([(seen, core, 100)], 0, 1)


def test_a_follower_fetch_of_a_leader_throttled_partition_waits_out_its_max_wait():
    """KIP-73: the leader's quota leaves a throttled partition's records out of the answer, so
    its log end must not end the wait (else the follower fetches again at once, in a busy loop);
    a change of leadership still answers at once, and so does the log end once unthrottled."""
    core = leader(leo=8)
    seen = parked(core, 5, replica_fetch=True)  # the follower is 3 records behind
    assert r.delayed_fetch_complete([(seen, core, 100)], 0, 1)
    assert not r.delayed_fetch_complete([(seen, core, 100, True)], 0, 1)
    assert r.delayed_fetch_complete([(seen, None, 100, True)], 0, 1)  # the partition went
    assert r.delayed_fetch_complete([(seen, core, 100, False)], 0, 1)


def test_a_consumer_on_a_follower_waits_for_its_high_watermark():
    core = follower(leo=8, hw=5)
    seen = parked(core, 5)
    assert not r.delayed_fetch_complete([(seen, core, 100)], 0, 1)
    core.step(r.FollowerAppended(8, 8, 9, 6), NOW)
    assert core.high_watermark == 6
    assert r.delayed_fetch_complete([(seen, core, 100)], 0, 1)


def test_a_fetch_with_nothing_to_send_is_parked_unless_an_answer_is_due():
    """Kafka's fetchMessages: park only a fetch that waits, names partitions and found
    less than min_bytes, with no error, diverging epoch or preferred read replica."""
    def at_once(max_wait_ms=500, read=0, min_bytes=1, partitions=1, **flags) -> bool:
        kinds = {"error": False, "diverging": False, "preferred_read_replica": False, **flags}
        return r.fetch_answered_at_once(max_wait_ms, read, min_bytes, partitions=partitions, **kinds)

    assert not at_once()
    assert at_once(read=1)
    assert at_once(max_wait_ms=0)
    assert at_once(partitions=0)
    assert at_once(error=True)
    assert at_once(preferred_read_replica=True)
    # KIP-320: a follower told to truncate is answered at once, not after
    # replica.fetch.wait.max.ms (and its answer is logged once).
    assert at_once(diverging=True)

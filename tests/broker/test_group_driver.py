"""The trio driver of the group coordinator against a real __consumer_offsets Log.

Checks that group writes land in the log as Kafka-format key/value records,
that a fresh coordinator loaded from that log serves the committed offsets and
generation (restart), and that session expiry fires from the driver's timer
task (trio MockClock, virtual time). With a high watermark that lags the
append (what replication will bring), an OffsetCommit is answered only once
the driver reports the write committed, commits are applied in log order,
and a write that never commits fails the commit with COORDINATOR_NOT_AVAILABLE
and leaves the cache as the committed log says.
"""

from __future__ import annotations

import trio
import trio.testing

from kref.broker.group_coordinator import GroupCoordinatorDriver
from kref.coordinator import group as g
from kref.coordinator import offsets_format as fmt
from kref.storage.config import LogConfig
from kref.storage.log import Log


def make_driver(tmp_path, clock_ms):
    log = Log.open(str(tmp_path / "__consumer_offsets-0"), LogConfig(cleanup_policy="compact"), 0)
    core = g.GroupCoordinator(
        g.GroupConfig(group_initial_rebalance_delay_ms=3000, offsets_topic_num_partitions=1), member_id_nonce="t"
    )
    def append(partition, batch):
        log.append_as_leader(batch, 0, clock_ms())
        return None  # the Log is its only replica: committed once appended

    driver = GroupCoordinatorDriver(core, now_ms=clock_ms, append=append)
    return driver, log


def join(driver, member_id="", **kw):
    return driver.call(
        g.JoinGroup, group_id="grp", member_id=member_id, protocol_type="consumer",
        protocols=(("range", b"sub"),), session_timeout_ms=10_000, rebalance_timeout_ms=10_000, **kw,
    )


def test_commit_survives_reload_and_sessions_expire(tmp_path):
    async def main():
        now = lambda: int(trio.current_time() * 1000)  # noqa: E731
        driver, log = make_driver(tmp_path, now)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(driver.run_timers)
            await driver.load_partition(0, log)
            results = {}

            async def member(name):
                results[name] = await join(driver, client_id=name)

            async with trio.open_nursery() as joins:
                joins.start_soon(member, "a")
                joins.start_soon(member, "b")
            a, b = results["a"], results["b"]
            assert a.error is g.Errors.NONE and a.generation_id == 1
            leader = a if a.members else b
            sync = await driver.call(g.SyncGroup, group_id="grp", generation_id=1, member_id=leader.member_id,
                                     assignments=((a.member_id, b"A"), (b.member_id, b"B")))
            assert sync.error is g.Errors.NONE
            commit = await driver.call(g.OffsetCommit, group_id="grp", generation_id=1, member_id=a.member_id,
                                       partitions=(g.OffsetCommitPartition("t", 0, 77),))
            assert commit.partitions == (("t", 0, g.Errors.NONE),)
            # nobody heartbeats: both sessions expire through the timer task
            await trio.sleep(11)
            assert driver.core.groups["grp"].state is g.GroupState.EMPTY
            nursery.cancel_scope.cancel()

        kinds = []
        for _, key, value in _records(log):
            kinds.append(type(fmt.decode_record(key, value)[0]).__name__)
        assert kinds == ["GroupMetadataKey", "OffsetCommitKey", "GroupMetadataKey"]

        driver2 = GroupCoordinatorDriver(
            g.GroupCoordinator(g.GroupConfig(offsets_topic_num_partitions=1)), now_ms=now, append=lambda p, b: None
        )
        await driver2.load_partition(0, log)
        fetched = await driver2.call(g.OffsetFetch, group_id="grp", partitions=None)
        assert fetched.partitions == (g.FetchedOffset("t", 0, 77, -1, ""),)
        group = driver2.core.groups["grp"]
        assert group.state is g.GroupState.EMPTY and group.generation_id == 2

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def _records(log):
    from kref.records.batch import decode_batch
    from kref.records.header import iter_headers

    data = log.read(0, 1 << 20).records
    for header in iter_headers(data):
        for r in decode_batch(data, header.position).records:
            yield r.offset, r.key, r.value


def test_requests_during_load_get_coordinator_load_in_progress(tmp_path):
    async def main():
        now = lambda: int(trio.current_time() * 1000)  # noqa: E731
        driver, log = make_driver(tmp_path, now)
        await driver.load_partition(0, log)
        commit = await driver.call(g.OffsetCommit, group_id="grp", generation_id=-1, member_id="",
                                   partitions=(g.OffsetCommitPartition("t", 0, 5),))
        assert commit.partitions == (("t", 0, g.Errors.NONE),)

        fresh = GroupCoordinatorDriver(
            g.GroupCoordinator(g.GroupConfig(offsets_topic_num_partitions=1)), now_ms=now, append=lambda p, b: None
        )
        # as the broker does at start: mark the partition loading before listeners open
        fresh.step(g.BeginLoad(0))
        answers = [await fresh.call(g.OffsetFetch, group_id="grp", partitions=None)]
        await fresh.load_partition(0, log)
        answers.append(await fresh.call(g.OffsetFetch, group_id="grp", partitions=None))
        assert answers[0].error is g.Errors.COORDINATOR_LOAD_IN_PROGRESS
        assert answers[1].partitions == (g.FetchedOffset("t", 0, 5, -1, ""),)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_offset_commit_is_answered_only_once_committed(tmp_path):
    async def main():
        now = lambda: int(trio.current_time() * 1000)  # noqa: E731
        log = Log.open(str(tmp_path / "__consumer_offsets-0"), LogConfig(cleanup_policy="compact"), 0)
        high_watermark = [0]
        advanced = trio.Condition()

        def append(partition, batch):
            log.append_as_leader(batch, 0, now())
            return log.log_end_offset  # the high watermark must reach this

        async def wait_committed(partition, required_offset, timeout_ms):
            with trio.move_on_after(timeout_ms / 1000):
                async with advanced:
                    while high_watermark[0] < required_offset:
                        await advanced.wait()
                    return True
            return False

        async def advance_to(offset):
            async with advanced:
                high_watermark[0] = offset
                advanced.notify_all()

        async with trio.open_nursery() as nursery:
            core = g.GroupCoordinator(g.GroupConfig(offsets_topic_num_partitions=1), member_id_nonce="t")
            driver = GroupCoordinatorDriver(
                core, now_ms=now, append=append, wait_committed=wait_committed,
                start_soon=nursery.start_soon, commit_timeout_ms=5000,
            )
            await driver.load_partition(0, log)
            answers = []

            async def commit(offset):
                answers.append(await driver.call(g.OffsetCommit, group_id="solo", generation_id=-1, member_id="",
                                                 partitions=(g.OffsetCommitPartition("t", 0, offset),)))

            nursery.start_soon(commit, 5)
            await trio.sleep(0.1)  # trio runs spawned tasks in any order: append 5 first
            nursery.start_soon(commit, 6)
            await trio.sleep(1)
            assert answers == []  # appended, not committed: nobody is told yet
            assert "solo" not in core.groups or not core.groups["solo"].offsets
            first_end = 1  # the first commit's batch holds offset 0
            await advance_to(first_end)
            await trio.sleep(0.1)
            assert len(answers) == 1 and core.groups["solo"].offsets[("t", 0)].offset == 5
            await advance_to(log.log_end_offset)
            await trio.sleep(0.1)
            assert len(answers) == 2 and core.groups["solo"].offsets[("t", 0)].offset == 6

            # A write whose high watermark never comes fails after offsets.commit.timeout.ms.
            nursery.start_soon(commit, 7)
            await trio.sleep(6)
            assert answers[-1].partitions == (("t", 0, g.Errors.COORDINATOR_NOT_AVAILABLE),)
            assert core.groups["solo"].offsets[("t", 0)].offset == 6
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

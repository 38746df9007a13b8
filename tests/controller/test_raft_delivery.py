"""Committed records delivered in slices (kref/node/raft_driver.py, _deliverer).

One real RaftNode (a single voter: its own appends commit; real files, real
trio loop). Its clock port runs 1 ms per reading, a machine where every
record costs a millisecond, so the step budget runs out every few records
whatever the real speed. A commit of 4 batches (1, 3,000, 2 and 1 records)
must reach the on_commit callbacks:

- decoded, in offset order, each record once, equal to what was proposed;
- in whole batches only (no callback ends inside a batch);
- over many loop turns: another task runs while the 3,000-record batch is
  being decoded, and sees nothing of it applied yet;
- with applied_offset and the on_high_watermark offset covering exactly what
  the callbacks have had (what a broker's heartbeat reports as applied).
"""

from __future__ import annotations

import uuid

import trio

from kref.broker.config import BrokerConfig
from kref.metadata import records as r
from kref.metadata import serde
from kref.node.raft_driver import RaftNode
from kref.ports.clock import SystemClock


class SlowMachineClock(SystemClock):
    """Real time, plus 1 ms for every reading."""

    def __init__(self) -> None:
        self.readings = 0

    def monotonic_ms(self) -> int:
        self.readings += 1
        return super().monotonic_ms() + self.readings


def test_a_large_commit_is_delivered_in_whole_batches_over_many_loop_turns(tmp_path):
    config = BrokerConfig.load(None, [
        "process.roles=controller", "node.id=1", "controller.quorum.voters=1@127.0.0.1:9093",
        "listeners=CONTROLLER://127.0.0.1:9093", "controller.listener.names=CONTROLLER",
        f"metadata.log.dir={tmp_path}", f"log.dirs={tmp_path}", "controller.quorum.election.timeout.ms=200",
    ])
    raft = RaftNode(config, "cluster-a", str(tmp_path), clock=SlowMachineClock(), jitter_seed=1)
    topic_id = uuid.UUID(int=7)
    batches = [
        [r.FeatureLevelRecord("metadata.version", 20)],
        [r.TopicRecord("big", topic_id)] + [
            r.PartitionRecord(i, topic_id, (1,), (1,), leader=1) for i in range(2999)
        ],
        [r.ConfigRecord(2, "big", "retention.ms", "1000"), r.ConfigRecord(2, "big", "segment.ms", "2000")],
        [r.FeatureLevelRecord("kraft.version", 1)],
    ]
    calls: list[list] = []
    reported: list[tuple[int, int, int]] = []  # (offset, applied_offset, records delivered by then)
    raft.on_commit.append(lambda decoded: calls.append(list(decoded)))
    raft.on_high_watermark.append(lambda offset: reported.append(
        (offset, raft.applied_offset, sum(len(c) for c in calls))))
    seen_mid_batch = 0

    async def main():
        nonlocal seen_mid_batch
        async with trio.open_nursery() as nursery:
            await nursery.start(raft.run)
            with trio.fail_after(30):
                while not (raft.core.is_leader() and raft.applied_offset > 0):
                    await trio.sleep(0.01)  # elected alone; its LeaderChange record is delivered
            reported.clear()
            bases = [raft.propose([serde.encode(x) for x in batch]) for batch in batches]
            end = bases[-1] + len(batches[-1])
            big_base, big_end = bases[1], bases[1] + len(batches[1])
            assert raft.core.high_watermark == end  # committed at once, delivered later
            with trio.fail_after(60):
                while raft.applied_offset < end:
                    if raft.applied_offset <= big_base and sum(len(c) for c in calls) <= 1:
                        seen_mid_batch += raft.applied_offset == big_base
                    await trio.lowlevel.checkpoint()
            nursery.cancel_scope.cancel()
            return bases, big_end, end

    bases, big_end, end = trio.run(main)
    raft.close()
    assert [x for call in calls for x in call] == [x for batch in batches for x in batch]
    boundaries = {sum(len(b) for b in batches[:i]) for i in range(len(batches) + 1)}
    delivered = 0
    for call in calls:
        delivered += len(call)
        assert delivered in boundaries, f"a callback ended inside a batch, after {delivered} records"
    assert seen_mid_batch >= 2, "the loop was not given back while the 3,000-record batch was decoded"
    # Each reported offset covers exactly the records handed on before it.
    ends = [b + len(batch) for b, batch in zip(bases, batches)]
    for offset, applied, count in reported:
        assert offset == applied and offset in ends
        assert count == sum(len(batch) for b, batch in zip(ends, batches) if b <= offset)
    assert reported[-1][0] == end and raft.high_watermark == end
    assert big_end in ends

"""Topic deletion in bounded slices (kref/broker/replica_manager.py, Kafka's asyncDelete).

A deleted topic's partitions leave the broker's partition map at once; their
logs are retired (closed, renamed `-delete`) by the drain task a slice at a
time and the renamed directories removed in a worker thread. Checked on a
real Broker and real files, driven by its own trio nursery (as
kref/broker/server.py runs it): the delete returns before the logs are gone,
the loop is given back between slices, every directory is gone in the end,
and a topic re-created under the same name before the old logs are retired
starts empty (the old files are never reopened).
"""

from __future__ import annotations

import os

import trio

from kref.broker.broker import Broker
from kref.broker.config import BrokerConfig
from kref.broker import replica_manager
from kref.records.batch import Record, build_batch
from kref.storage.checkpoint import read_leader_epoch_checkpoint
from kref.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE

SLICE = 4  # the slice made small (the module's bound), so a few dozen logs take the sliced path
PARTITIONS = 6 * SLICE


def _dirs(data: str, topic: str) -> list[str]:
    return sorted(n for n in os.listdir(data) if n.startswith(topic + "-"))


async def _until(predicate, what: str) -> None:
    with trio.fail_after(60):  # a bound, not a timing assertion
        while not predicate():
            await trio.sleep(0.01)


def test_deleting_a_topic_of_many_partitions_retires_its_logs_in_slices(tmp_path, monkeypatch):
    monkeypatch.setattr(replica_manager, "APPLY_SLICE_PARTITIONS", SLICE)
    data = str(tmp_path / "data")
    broker = Broker(BrokerConfig.load(None, [f"log.dirs={data}"]))
    broker.open()
    manager = broker.replica_manager
    other_steps: list[int] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            broker.nursery = nursery
            broker.create_topic("doomed", PARTITIONS)
            await _until(lambda: len(broker.partitions) == PARTITIONS and manager.drained.is_set(), "creation")
            part = broker.partitions[("doomed", 0)]
            # The slices deferred the new leaders' epoch-checkpoint fsyncs to the flusher
            # (LogManager._defer_epoch_sync): written at once, fsynced by the worker thread.
            await _until(lambda: not broker.log_manager.unflushed_partition_metadata and not manager._flushing,
                         "the deferred fsyncs")
            on_disk = read_leader_epoch_checkpoint(os.path.join(part.log.dir, LEADER_EPOCH_CHECKPOINT_FILE))
            assert on_disk == part.log.leader_epoch_cache.entries() and on_disk
            part.log.append_as_leader(build_batch([Record(timestamp=1, key=None, value=b"old")]), part.leader_epoch, 1)
            assert len(_dirs(data, "doomed")) == PARTITIONS

            async def counter() -> None:
                while True:
                    other_steps.append(1)
                    await trio.sleep(0)

            nursery.start_soon(counter)
            await trio.sleep(0)
            broker.delete_topic("doomed")
            # At once: no partition of the deleted topic is served any more ...
            assert not any(key[0] == "doomed" for key in broker.partitions)
            # ... but its logs are retired later, by the drain task, in slices.
            assert len(manager.pending_deletions) == PARTITIONS
            steps_at_delete = len(other_steps)
            # Re-created under the same name before the old logs are all retired.
            broker.create_topic("doomed", 2)
            await _until(lambda: manager.drained.is_set() and not manager.retired and not manager._removing,
                         "retirement and removal")
            assert len(other_steps) - steps_at_delete >= PARTITIONS // SLICE  # loop given back
            assert _dirs(data, "doomed") == ["doomed-0", "doomed-1"]  # no -delete dir left, no old partition
            fresh = broker.partitions[("doomed", 0)]
            assert fresh.log.log_end_offset == 0  # the old log's record is gone with it
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        broker.shutdown()

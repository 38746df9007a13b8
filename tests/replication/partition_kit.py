"""Partition drivers over real Logs playing leader and followers in one process.

Shared by the driver tests of replication (test_follower_driver.py,
test_producer_state_truncation.py): a follower's `follower_fetch_due` is
answered by the leader's `read_as_follower` (what the fetch handler does),
and the answer goes to the follower's `on_fetch_response` (what the replica
fetcher does); no sockets, one clock value.
"""

from __future__ import annotations

import os

from kref.broker.partition import Partition
from kref.records.header import read_header
from kref.replication.follower import SendFetch
from kref.replication.purgatory import Purgatory
from kref.storage.config import LogConfig
from kref.storage.log import Log
from kref.storage.producer_state import ProducerStateManager

NOW = 1_700_000_000_000
REPLICAS = (1, 2, 3)


def new_partition(tmp_path, replica_id: int, *, producer_state: bool = False) -> Partition:
    """Replica `replica_id`'s driver over its own Log (with a ProducerStateManager, as
    every broker partition has, when `producer_state`)."""
    directory = os.path.join(tmp_path, f"n{replica_id}", "t-0")
    log = Log.open(directory, LogConfig(), NOW,
                   **({"producer_state": ProducerStateManager(directory)} if producer_state else {}))
    return Partition(log, replica_id=replica_id, produce_purgatory=Purgatory("p"), fetch_purgatory=Purgatory("f"))


def elect(parts: dict[int, Partition], leader: int, epoch: int, isr=REPLICAS, replicas=REPLICAS) -> None:
    """What the replica manager does on a partition change: `leader` leads `epoch`
    (partition epoch alike), every other part of `parts` follows it."""
    for rid, part in parts.items():
        if rid == leader:
            part.become_leader(NOW, leader_epoch=epoch, partition_epoch=epoch, isr=isr, replicas=replicas)
        else:
            part.become_follower(NOW, leader_id=leader, leader_epoch=epoch, partition_epoch=epoch, isr=isr,
                                 replicas=replicas)


def fetch(parts: dict[int, Partition], follower: int, now: int = NOW) -> None:
    """One Fetch of `follower` from its leader, answered and applied."""
    part = parts[follower]
    due = part.follower_fetch_due(now)
    assert isinstance(due, SendFetch)
    answer = parts[due.leader].read_as_follower(follower, due.fetch_offset, due.last_fetched_epoch,
                                                due.current_leader_epoch, 1 << 20, now)
    diverging = answer.diverging or (-1, -1)
    part.on_fetch_response(due, error_code=answer.error_code, high_watermark=answer.high_watermark,
                           log_start_offset=answer.log_start_offset, diverging_epoch=diverging[0],
                           diverging_end_offset=diverging[1], records=answer.records, now_ms=now, backoff_ms=100)


def batches(part: Partition) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, partition leader epoch, producer id) of every batch in the log."""
    data = part.log.read(part.log.log_start_offset, 1 << 24, min_one_message=True).records
    out, pos = [], 0
    while pos < len(data):
        h = read_header(data, pos)
        out.append((h.base_offset, h.last_offset, h.partition_leader_epoch, h.producer_id))
        pos = h.next_position
    return out

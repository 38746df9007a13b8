"""The follower side of the partition driver on real Logs, without sockets.

Three `Partition` drivers over real kref.storage Logs play leader and
followers in one process (tests/replication/partition_kit.py): a follower's
`follower_fetch_due` is answered by the leader's `read_as_follower` (what the
fetch handler does), and the answer goes to the follower's
`on_fetch_response` (what the replica fetcher does).
Checked on the bytes: followers hold the leader's batches unchanged
(offsets, leader epochs, producer ids), the follower's high watermark is the
leader's bounded by its own log end, a deposed leader with records nobody
else has truncates them on the new leader's diverging-epoch answer (KIP-320)
and then holds exactly the new leader's log, and a follower far behind the
leader's log start restarts its log there.
"""

from __future__ import annotations

from kref.broker.partition import Partition
from kref.protocol.errors import ErrorCode
from kref.records.batch import Record, build_batch
from tests.replication.partition_kit import NOW, REPLICAS, batches, elect, fetch, new_partition


def _produce(part: Partition, n: int, acks: int = 1, producer_id: int = -1) -> None:
    records = build_batch([Record(timestamp=NOW + i, value=b"v%d" % i) for i in range(n)], producer_id=producer_id,
                          producer_epoch=0 if producer_id >= 0 else -1, base_sequence=0 if producer_id >= 0 else -1)
    result = part.append_records_as_leader(records, acks, n, NOW)
    assert result.error_code == ErrorCode.NONE


def test_followers_copy_batches_and_learn_the_high_watermark(tmp_path):
    parts = {rid: new_partition(tmp_path, rid) for rid in REPLICAS}
    elect(parts, 1, 0)
    _produce(parts[1], 3)
    _produce(parts[1], 2, producer_id=7)
    for rid in (2, 3):
        fetch(parts, rid)
    assert parts[1].high_watermark == 0  # the leader has not seen the followers at 5 yet
    for rid in (2, 3):
        fetch(parts, rid)
    assert parts[1].high_watermark == 5
    assert parts[2].high_watermark == 0  # learnt on 2's second fetch, before 3 reached 5
    fetch(parts, 2)
    assert parts[2].high_watermark == 5 and parts[2].high_watermark_to_checkpoint == 5
    assert batches(parts[2]) == batches(parts[3]) == batches(parts[1]) == [(0, 2, 0, -1), (3, 4, 0, 7)]
    assert parts[2].log.leader_epoch_cache.entries() == [(0, 0)]


def test_deposed_leader_truncates_what_nobody_else_has(tmp_path):
    parts = {rid: new_partition(tmp_path, rid) for rid in REPLICAS}
    elect(parts, 1, 0)
    _produce(parts[1], 3)
    for _ in range(2):
        for rid in (2, 3):
            fetch(parts, rid)
    _produce(parts[1], 4)  # only on the old leader: it is cut off now
    elect(parts, 2, 1, isr=(2, 3))
    _produce(parts[2], 2)
    fetch(parts, 3)
    assert parts[1].log_end_offset == 7
    fetch(parts, 1)  # diverging epoch: epoch 0 ends at 3 on the new leader
    assert parts[1].log_end_offset == 3
    assert parts[1].log.leader_epoch_cache.entries() == [(0, 0)]
    fetch(parts, 1)
    assert batches(parts[1]) == batches(parts[2]) == [(0, 2, 0, -1), (3, 4, 1, -1)]
    assert parts[1].log.leader_epoch_cache.entries() == [(0, 0), (1, 3)]


def test_follower_behind_the_leaders_log_start_restarts_there(tmp_path):
    parts = {rid: new_partition(tmp_path, rid) for rid in (1, 2)}
    elect(parts, 1, 0, isr=(1,), replicas=(1, 2))
    for _ in range(3):
        _produce(parts[1], 2)
    parts[1].log.roll(NOW)
    assert parts[1].delete_records_before(6, NOW) == (ErrorCode.NONE, 6)
    _produce(parts[1], 1)
    fetch(parts, 2)  # OFFSET_OUT_OF_RANGE at 0: start at the leader's log start
    assert (parts[2].log.log_start_offset, parts[2].log_end_offset) == (6, 6)
    fetch(parts, 2)
    assert batches(parts[2]) == [(6, 6, 0, -1)]


def test_deposed_leader_that_wrote_nothing_drops_its_empty_epoch(tmp_path):
    """A replica led an epoch without appending (its epoch cache names it at the log
    end), then follows a leader that never knew that epoch: truncating to its own
    log end removes the empty epoch, so the next fetch agrees (found by the simulator)."""
    parts = {rid: new_partition(tmp_path, rid) for rid in REPLICAS}
    elect(parts, 1, 0)
    _produce(parts[1], 2)
    for _ in range(2):
        for rid in (2, 3):
            fetch(parts, rid)
    elect(parts, 3, 1, isr=(3,))  # 3 leads epoch 1, writes nothing
    assert parts[3].log.leader_epoch_cache.entries() == [(0, 0), (1, 2)]
    elect(parts, 2, 2, isr=(1, 2))  # 2 never saw epoch 1
    _produce(parts[2], 1)
    fetch(parts, 3)  # diverging: truncate to 2 (its log end)
    assert parts[3].log.leader_epoch_cache.entries() == [(0, 0)]
    fetch(parts, 3)
    assert parts[3].log_end_offset == 3 and batches(parts[3]) == batches(parts[2])

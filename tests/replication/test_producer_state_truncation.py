"""Idempotence across a follower truncation and a failover (KIP-98 state, KIP-101/320 truncation).

Three `Partition` drivers over real Logs, each with a real ProducerStateManager
(as every broker partition has), driven as in test_follower_driver.py (tests/replication/partition_kit.py):

1. leader 1 (epoch 0) takes producer 7's batches of sequence 0 and 1; 2 and 3
   replicate them;
2. leader 1 takes sequences 2..6 (five batches: all the state retains), which
   only follower 2 fetches;
3. leader 1 is lost; 3 leads epoch 1; 2 follows, is told its epoch 0 diverges
   and truncates to offset 2 (past which lie all five retained batches);
4. 3 is lost; 2 leads epoch 2, and producer 7 resends: sequence 1 again (its
   answer was lost) is a duplicate, answered with its offset, nothing
   appended; sequence 3 leaves a gap (OUT_OF_ORDER_SEQUENCE); sequence 2 is the
   next one and is appended at offset 2.

Before Kafka's truncate-and-reload, step 3 forgot producer 7 on node 2 and
step 4 appended sequence 1 a second time.
"""

from __future__ import annotations

from kref.broker.partition import Partition
from kref.protocol.errors import ErrorCode
from kref.records.batch import Record, build_batch
from tests.replication.partition_kit import NOW, REPLICAS, batches, elect, fetch, new_partition

PRODUCER = 7


def _send(part: Partition, sequence: int):
    records = build_batch([Record(timestamp=NOW, value=b"s%d" % sequence)], producer_id=PRODUCER,
                          producer_epoch=0, base_sequence=sequence)
    return part.append_records_as_leader(records, 1, 1, NOW)


def test_a_producer_whose_retained_batches_were_truncated_away_is_still_known(tmp_path):
    parts = {rid: new_partition(tmp_path, rid, producer_state=True) for rid in REPLICAS}
    elect(parts, 1, 0, REPLICAS)
    for sequence in (0, 1):
        assert _send(parts[1], sequence).error_code == ErrorCode.NONE
    for rid in (2, 3):
        fetch(parts, rid)
    for sequence in range(2, 7):
        assert _send(parts[1], sequence).error_code == ErrorCode.NONE
    fetch(parts, 2)
    assert parts[2].log_end_offset == 7 and parts[3].log_end_offset == 2

    # 1 is gone: 3 leads epoch 1, and 2 truncates to where epoch 0 ends on 3.
    survivors = {rid: parts[rid] for rid in (2, 3)}
    elect(survivors, 3, 1, (2, 3))
    for _ in range(3):
        if parts[2].log_end_offset == 2:
            break
        fetch(survivors, 2)
    assert parts[2].log_end_offset == 2

    # 3 is gone: 2 leads epoch 2; producer 7 resends.
    elect({2: parts[2]}, 2, 2, (2,))
    retry = _send(parts[2], 1)
    assert retry.error_code == ErrorCode.NONE and retry.base_offset == 1, retry
    assert parts[2].log_end_offset == 2, "sequence 1 was appended twice"
    assert _send(parts[2], 3).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    after = _send(parts[2], 2)
    assert after.error_code == ErrorCode.NONE and after.base_offset == 2
    assert [b[0] for b in batches(parts[2])] == [0, 1, 2]

"""The replica core's read-side decisions: consumer visibility, ListOffsets,
DeleteRecords, min.insync.replicas from the event, and the log start offset
reported by retention (the driver only carries them out)."""

from __future__ import annotations

import os

from kref.broker.partition import Partition
from kref.protocol.errors import ErrorCode
from kref.records.batch import Record, build_batch
from kref.replication import replica as r
from kref.replication.purgatory import Purgatory
from kref.storage.config import LogConfig
from kref.storage.log import Log

NOW = 1_700_000_000_000


def leader(hw=5, leo=8, lso=2) -> r.PartitionReplica:
    core = r.PartitionReplica("t", 0, 1, tracing=False)
    core.step(r.BecomeLeader(3, 0, frozenset({1, 2}), (1, 2), lso, leo, hw), NOW)
    return core


def test_consumers_see_below_the_high_watermark_only():
    core = leader()
    assert core.consumer_read(2, -1) == (ErrorCode.NONE, 5)
    assert core.consumer_read(5, 3) == (ErrorCode.NONE, 5)  # nothing visible yet
    assert core.consumer_read(9, -1)[0] == ErrorCode.OFFSET_OUT_OF_RANGE
    assert core.consumer_read(1, -1)[0] == ErrorCode.OFFSET_OUT_OF_RANGE
    assert core.consumer_read(2, 2)[0] == ErrorCode.FENCED_LEADER_EPOCH
    assert core.consumer_read(2, 4)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert r.PartitionReplica("t", 0, 1).consumer_read(0, -1)[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_list_offsets_and_delete_records():
    core = leader()
    assert core.list_offsets(r.LATEST_TIMESTAMP, -1) == (ErrorCode.NONE, 5)
    assert core.list_offsets(r.EARLIEST_TIMESTAMP, -1) == (ErrorCode.NONE, 2)
    assert core.list_offsets(1234, -1) == (ErrorCode.NONE, None) and core.is_visible(4) and not core.is_visible(5)
    assert core.delete_records(6) == (ErrorCode.OFFSET_OUT_OF_RANGE, 2)  # past the high watermark
    assert core.delete_records(-1) == (ErrorCode.NONE, 5)
    assert core.delete_records(1) == (ErrorCode.NONE, 2)  # never backwards


def test_min_insync_replicas_comes_with_the_produce():
    core = r.PartitionReplica("t", 0, 1, tracing=False)
    core.step(r.BecomeLeader(3, 0, frozenset({1, 2}), (1, 2, 3), 2, 8, 5), NOW)
    [answer] = core.step(r.ClientProduce(1, -1, 1, min_insync_replicas=3), NOW)
    assert answer == r.ProduceResult(1, ErrorCode.NOT_ENOUGH_REPLICAS)
    [answer] = core.step(r.ClientProduce(2, -1, 1, min_insync_replicas=2), NOW)
    assert isinstance(answer, r.AppendToLog)
    [answer] = core.step(r.ClientProduce(3, 1, 1, min_insync_replicas=3), NOW)  # acks=1: Kafka does not check
    assert isinstance(answer, r.AppendToLog)


def test_min_insync_replicas_is_bounded_by_the_replica_count():
    """Kafka 3.7+ (KAFKA-15583): the effective min ISR is min(min.insync.replicas,
    replicas); a topic of 2 replicas asking for 3 is held to both, not unwritable."""
    core = leader()  # replicas (1, 2), isr {1, 2}
    [answer] = core.step(r.ClientProduce(1, -1, 1, min_insync_replicas=3), NOW)
    assert isinstance(answer, r.AppendToLog) and core.effective_min_isr == 2


def test_the_high_watermark_stays_while_the_isr_is_below_min_insync_replicas():
    """KAFKA-15583, the spec's AdvanceHighWatermark: a leader alone in its isr
    (min.insync.replicas=2 of 3) does not expose what only it holds, acks=1
    records included; once a follower is back in the isr the HW moves."""
    core = r.PartitionReplica("t", 0, 1, tracing=False)
    core.step(r.BecomeLeader(1, 0, frozenset({1}), (1, 2, 3), 0, 0, 0), NOW)
    assert isinstance(core.step(r.ClientProduce(1, 1, 1, min_insync_replicas=2), NOW)[0], r.AppendToLog)
    effects = core.step(r.LogAppended(1, 1, 0, 9, 10), NOW)
    assert not any(isinstance(e, r.HighWatermarkAdvanced) for e in effects)
    assert core.high_watermark == 0 and core.consumer_read(0, -1) == (ErrorCode.NONE, 0)
    # Follower 2 catches up: proposed for the isr (maximal isr {1, 2}), but the
    # committed isr is still {1}: the HW waits for the controller.
    effects = core.step(r.FetchFromFollower(2, 10, 1, 1, (1, 10)), NOW)
    assert any(isinstance(e, r.AlterPartition) for e in effects) and core.high_watermark == 0
    effects = core.step(r.AlterPartitionResponse(ErrorCode.NONE, 1, frozenset({1, 2}), 1), NOW)
    assert core.high_watermark == 10 and any(isinstance(e, r.HighWatermarkAdvanced) for e in effects)


def test_retention_reports_the_log_start_offset_to_the_core(tmp_path):
    log = Log.open(os.path.join(tmp_path, "t-0"), LogConfig(segment_bytes=200, retention_bytes=0), NOW)
    part = Partition(log, replica_id=1, produce_purgatory=Purgatory("p"), fetch_purgatory=Purgatory("f"))
    part.become_leader(NOW, leader_epoch=0)
    for i in range(5):
        part.append_records_as_leader(build_batch([Record(timestamp=NOW, value=b"v" * 100)]), 1, 1, NOW)
    assert log.delete_old_segments(NOW) > 0 and log.log_start_offset > 0
    assert part.core.log_start_offset == 0  # stale until told
    part.report_log_start_offset(NOW)
    assert part.core.log_start_offset == log.log_start_offset
    assert part.read(0, 1 << 20, min_one_message=True).error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_an_unknown_follower_is_refused_by_the_core(tmp_path):
    log = Log.open(os.path.join(tmp_path, "t-0"), LogConfig(), NOW)
    part = Partition(log, replica_id=1, produce_purgatory=Purgatory("p"), fetch_purgatory=Purgatory("f"))
    part.become_leader(NOW, leader_epoch=0)
    assert part.read_as_follower(7, 0, -1, 0, 1 << 20, NOW).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    part.become_leader(NOW, leader_epoch=1, isr=(1,), replicas=(1, 7))
    part.append_records_as_leader(build_batch([Record(timestamp=NOW, value=b"x")]), 1, 1, NOW)
    got = part.read_as_follower(7, 0, -1, 1, 1 << 20, NOW)
    assert got.error_code == ErrorCode.NONE and got.records and got.high_watermark == 1


def test_the_single_broker_commits_an_isr_shrink_through_its_metadata(tmp_path):
    """KIP-497 end to end on one broker: the core proposes, the local metadata
    source commits a PartitionChangeRecord, the answer brings the new isr."""
    from kref.broker.broker import Broker
    from kref.broker.config import BrokerConfig
    from kref.metadata import records as mr

    broker = Broker(BrokerConfig.load(None, [f"log.dirs={tmp_path / 'data'}", "replica.lag.time.max.ms=10"]))
    broker.open()
    broker.create_topic("t", 1)
    topic_id = broker.get_topic("t").topic_id
    # Give the partition a second replica (as a controller would), then let it lag.
    broker._commit([mr.PartitionChangeRecord(0, topic_id, isr=(1, 2), replicas=(1, 2))])
    part = broker.partitions[("t", 0)]
    assert part.core.isr == frozenset({1, 2}) and part.core.partition_epoch == 1
    part.append_records_as_leader(build_batch([Record(timestamp=NOW, value=b"x")]), 1, 1, NOW)
    assert part.high_watermark == 0  # replica 2 holds it
    part.tick(broker.now_ms() + 1_000)
    assert part.core.isr == frozenset({1}) and part.core.pending_isr is None
    assert broker.image.partition("t", 0).isr == (1,) and broker.image.partition("t", 0).partition_epoch == 2
    assert part.high_watermark == 1  # the committed shrink lets the HW advance
    broker.shutdown()

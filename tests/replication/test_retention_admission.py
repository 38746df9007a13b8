"""Retention asks the replica core first (issue 8): the Log's retention planner
proposes a new log start offset, the core admits it (forward only, never past
its high watermark), and only then does the Log delete segments and the core
hear of the new start. Same ownership as DeleteRecords (`delete_records`)."""

from __future__ import annotations

import os

from kref.broker.partition import Partition
from kref.records.batch import Record, build_batch
from kref.replication import replica as r
from kref.replication.purgatory import Purgatory
from kref.storage.config import LogConfig
from kref.storage.log import Log
from kref.storage.log_manager import LogManager

NOW = 1_700_000_000_000


def test_the_core_admits_forward_moves_up_to_its_high_watermark():
    core = r.PartitionReplica("t", 0, 1, tracing=False)
    core.step(r.BecomeLeader(1, 0, frozenset({1, 2}), (1, 2), 2, 10, 6), NOW)  # follower 2 holds the HW
    assert r.admit_retention_log_start(core, 5) == 5
    assert r.admit_retention_log_start(core, 6) == 6
    assert r.admit_retention_log_start(core, 7) is None  # past the high watermark
    assert r.admit_retention_log_start(core, 2) is None  # not forward


def partition(tmp_path, **config) -> Partition:
    log = Log.open(os.path.join(tmp_path, "t-0"), LogConfig(**config), NOW)
    part = Partition(log, replica_id=1, produce_purgatory=Purgatory("p"), fetch_purgatory=Purgatory("f"))
    part.become_leader(NOW, leader_epoch=0)
    return part


def test_retention_moves_the_log_and_the_core_together(tmp_path):
    part = partition(tmp_path, segment_bytes=200, retention_bytes=0, file_delete_delay_ms=0)
    for _ in range(5):
        part.append_records_as_leader(build_batch([Record(timestamp=NOW, value=b"v" * 100)]), 1, 1, NOW)
    assert part.apply_retention(NOW) > 0
    assert part.log.log_start_offset > 0
    assert part.core.log_start_offset == part.log.log_start_offset  # never stale


def test_retention_waits_for_the_cores_high_watermark(tmp_path):
    """A follower of a replicated partition: its core's HW lags its log end, and
    retention.bytes=0 would delete everything; only what is below the HW goes."""
    part = partition(tmp_path, segment_bytes=200, retention_bytes=0, file_delete_delay_ms=0)
    part.become_leader(NOW, leader_epoch=1, isr=(1, 2), replicas=(1, 2))
    for _ in range(5):
        part.append_records_as_leader(build_batch([Record(timestamp=NOW, value=b"v" * 100)]), 1, 1, NOW)
    assert part.core.high_watermark == 0
    assert part.apply_retention(NOW) == 0 and part.log.log_start_offset == 0
    part.read_as_follower(2, 3, 1, 1, 1 << 20, NOW)  # follower 2 holds 0..2: HW 3
    assert part.core.high_watermark == 3
    part.apply_retention(NOW)
    assert 0 < part.log.log_start_offset <= 3 and part.core.log_start_offset == part.log.log_start_offset


def test_the_log_manager_runs_owned_partitions_through_their_owner(tmp_path):
    config = LogConfig.from_properties({"segment.bytes": "200", "retention.bytes": "0", "file.delete.delay.ms": "0"})
    lm = LogManager([str(tmp_path)], config, 0)
    lm.load_logs(0)
    owned = lm.get_or_create_log("o", 0)
    loose = lm.get_or_create_log("l", 0)
    for i in range(5):
        owned.append_as_leader(build_batch([Record(timestamp=NOW, value=b"v" * 100)]), 0, NOW)
        loose.append_as_leader(build_batch([Record(timestamp=NOW, value=b"v" * 100)]), 0, NOW)
    asked = []

    def owner(key, now_ms):
        asked.append(key)
        return 0 if key == ("o", 0) else None  # the owner refused to move "o"

    lm.cleanup(NOW, owned_retention=owner)
    assert sorted(asked) == [("l", 0), ("o", 0)]
    assert owned.log_start_offset == 0
    assert loose.log_start_offset > 0  # no owner: the Log's own pass (end = its own bound)
    lm.shutdown()

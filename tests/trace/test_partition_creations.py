"""kref/trace/events.py partition_creations: a controller write's PartitionRecords as trace events.

Both drivers of the controller core (the node's and the simulator's) trace a partition's creation
through this one function; the replication check starts the partition there (its first ElectLeader).
"""

from __future__ import annotations

import uuid

from kref.metadata import records as r
from kref.trace.events import partition_creations


def test_each_partition_record_of_a_write_is_one_event_at_its_own_offset():
    topic_id = uuid.UUID(int=7)
    write = (r.TopicRecord(name="t", topic_id=topic_id),
             r.PartitionRecord(partition_id=0, topic_id=topic_id, replicas=(1, 2, 3), isr=(1, 2, 3), leader=1),
             r.PartitionRecord(partition_id=1, topic_id=topic_id, replicas=(2, 3, 1), isr=(2, 3, 1), leader=2))
    events = partition_creations(write, 40, {topic_id: "t"}, replica=9, time_ms=5)
    assert [e.to_dict() for e in events] == [
        {"type": "PartitionRecord", "time_ms": 5, "replica": 9, "topic": "t", "partition": p, "leader": leader,
         "leader_epoch": 0, "partition_epoch": 0, "isr": list(replicas), "replicas": list(replicas),
         "record_offset": 40 + 1 + p}
        for p, leader, replicas in ((0, 1, (1, 2, 3)), (1, 2, (2, 3, 1)))]


def test_a_write_without_partition_records_traces_nothing():
    assert partition_creations((r.TopicRecord(name="t", topic_id=uuid.UUID(int=7)),), 0, {}, replica=1, time_ms=0) == []

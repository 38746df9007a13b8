"""Deleting a topic deletes the consumer groups' committed offsets for it.

Kafka's group coordinator forgets the offsets of deleted partitions
(onPartitionsDeleted) and writes tombstones for them to __consumer_offsets.
Otherwise a topic re-created under the same name inherits the old offsets and
the group's consumers start somewhere in a log that no longer exists. Checked
with confluent-kafka against a real broker, before and after a restart (the
tombstones, not only the in-memory cache, must say so). Likewise a commit for
a partition that does not exist is refused with UNKNOWN_TOPIC_OR_PARTITION
and not stored, as Kafka's KafkaApis does.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

OFFSET_INVALID = -1001  # librdkafka: no committed offset


def _committed(bootstrap, group, topic, partitions):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return [tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)]
    finally:
        c.close()


def test_recreated_topic_does_not_inherit_committed_offsets(kref_broker):
    bootstrap = kref_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name in ("reborn", "other"):
        admin.create_topics([NewTopic(name, 2, 1)])[name].result(10)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        p.produce("reborn", b"%d" % i, partition=i % 2)
    assert p.flush(15) == 0

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-reborn", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("reborn", 0, 7), TopicPartition("reborn", 1, 9)], asynchronous=False)
    # another topic's offsets in the same group must survive
    c.commit(offsets=[TopicPartition("other", 0, 3)], asynchronous=False)
    c.close()
    assert _committed(bootstrap, "g-reborn", "reborn", 2) == [7, 9]

    admin.delete_topics(["reborn"])["reborn"].result(10)
    admin.create_topics([NewTopic("reborn", 2, 1)])["reborn"].result(10)
    assert _committed(bootstrap, "g-reborn", "reborn", 2) == [OFFSET_INVALID, OFFSET_INVALID]
    assert _committed(bootstrap, "g-reborn", "other", 1) == [3]

    kref_broker.restart()
    assert _committed(bootstrap, "g-reborn", "reborn", 2) == [OFFSET_INVALID, OFFSET_INVALID]
    assert _committed(bootstrap, "g-reborn", "other", 1) == [3]


def test_commit_for_missing_partition_is_refused(kref_broker):
    # Kafka answers UNKNOWN_TOPIC_OR_PARTITION per partition and stores nothing
    bootstrap = kref_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("real", 1, 1)])["real"].result(10)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-missing", "enable.auto.commit": False})
    try:
        with pytest.raises(KafkaException) as info:
            c.commit(offsets=[TopicPartition("real", 0, 4), TopicPartition("real", 5, 4),
                              TopicPartition("ghost", 0, 4)], asynchronous=False)
        # librdkafka raises the first partition error; the good partition is stored
        assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    finally:
        c.close()
    assert _committed(bootstrap, "g-missing", "real", 1) == [4]
    assert _committed(bootstrap, "g-missing", "ghost", 1) == [OFFSET_INVALID]

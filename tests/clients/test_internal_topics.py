"""__consumer_offsets is written only through the group coordinator.

With confluent-kafka against a real broker: after a group commits,
DeleteRecords and DeleteTopics on __consumer_offsets are refused
(INVALID_TOPIC_EXCEPTION, as Kafka refuses them for internal topics), a
produce to it is refused, and the committed offsets survive a restart.
Also: an impossible replication factor names the factor asked for.
"""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT = 15


def committed(bootstrap, group, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return [tp.offset for tp in c.committed([TopicPartition(topic, 0)], timeout=TIMEOUT)]
    finally:
        c.close()


def test_consumer_offsets_cannot_be_deleted_or_produced_to(kref_broker):
    admin = AdminClient({"bootstrap.servers": kref_broker.bootstrap, "log_level": 3})
    admin.create_topics([NewTopic("kept", 1, 1)])["kept"].result(TIMEOUT)
    c = Consumer({"bootstrap.servers": kref_broker.bootstrap, "group.id": "g-kept", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("kept", 0, 0)], asynchronous=False)
    c.close()
    assert committed(kref_broker.bootstrap, "g-kept", "kept") == [0]

    offsets_partitions = len(admin.list_topics(timeout=TIMEOUT).topics["__consumer_offsets"].partitions)
    doomed = [TopicPartition("__consumer_offsets", p, -1) for p in range(offsets_partitions)]
    results = admin.delete_records(doomed)
    for future in results.values():
        try:
            partition = future.result(TIMEOUT)
            error = partition.error
        except KafkaException as exc:
            error = exc.args[0]
        assert error is not None and error.code() == KafkaError.TOPIC_EXCEPTION, error

    deleting = admin.delete_topics(["__consumer_offsets"])["__consumer_offsets"]
    try:
        deleting.result(TIMEOUT)
        raise AssertionError("deleting __consumer_offsets was accepted")
    except KafkaException as exc:
        assert exc.args[0].code() == KafkaError.TOPIC_EXCEPTION
    assert "__consumer_offsets" in admin.list_topics(timeout=TIMEOUT).topics

    outcome = []
    p = Producer({"bootstrap.servers": kref_broker.bootstrap, "message.timeout.ms": 5000})
    p.produce("__consumer_offsets", b"forged", partition=0, on_delivery=lambda err, msg: outcome.append(err))
    p.flush(TIMEOUT)
    assert outcome and outcome[0] is not None

    kref_broker.restart()
    assert committed(kref_broker.bootstrap, "g-kept", "kept") == [0]


def test_replication_factor_error_names_the_factor_asked_for(kref_broker):
    admin = AdminClient({"bootstrap.servers": kref_broker.bootstrap, "log_level": 3})
    future = admin.create_topics([NewTopic("rf3", 1, 3)])["rf3"]
    try:
        future.result(TIMEOUT)
        raise AssertionError("replication factor 3 was accepted")
    except KafkaException as exc:
        error = exc.args[0]
    assert error.code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert "replication factor of 3 cannot be reached" in error.str()

"""Group life cycle with real clients: delete right after close, and a
cooperative-sticky group whose subscribed topic is deleted.

- Every member of a group closes (confluent-kafka and kafka-python, the
  members' close sends LeaveGroup); DeleteGroups right after succeeds: the
  group is Empty at once, no member lingers.
- Two cooperative-sticky confluent-kafka members subscribed to two topics;
  one topic is deleted while they are joined. Once the clients' metadata
  says the topic is gone (refreshed every second here), the group settles
  promptly on the remaining topic (Stable, every remaining partition
  assigned once, the deleted one nowhere) and stays usable: a new record is
  consumed.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

DEADLINE_S = 30


def setup(bootstrap, topics, partitions=2, records=10):
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    for t in topics:
        admin.create_topics([NewTopic(t, partitions, 1)])[t].result(15)
    producer = Producer({"bootstrap.servers": bootstrap})
    for t in topics:
        for i in range(records):
            producer.produce(t, b"r%d" % i, partition=i % partitions)
    assert producer.flush(15) == 0
    return admin, producer


def delete_group(admin, group):
    admin.delete_consumer_groups([group], request_timeout=10)[group].result(15)


def test_delete_groups_right_after_every_member_closed(kref_broker):
    admin, _ = setup(kref_broker.bootstrap, ["closing"])
    conf = {"bootstrap.servers": kref_broker.bootstrap, "group.id": "g-closing", "auto.offset.reset": "earliest",
            "session.timeout.ms": 10_000, "heartbeat.interval.ms": 500}
    members = [Consumer(conf) for _ in range(2)]
    for c in members:
        c.subscribe(["closing"])
    got, deadline = 0, time.monotonic() + DEADLINE_S
    while got < 10 and time.monotonic() < deadline:
        for c in members:
            msg = c.poll(0.1)
            got += msg is not None and not msg.error()
    assert got == 10
    for c in members:
        c.close()
    delete_group(admin, "g-closing")

    kp = [KafkaConsumer("closing", bootstrap_servers=kref_broker.bootstrap, group_id="g-kp",
                        auto_offset_reset="earliest", consumer_timeout_ms=15_000) for _ in range(2)]
    next(kp[0])
    for c in kp:
        c.close()
    delete_group(admin, "g-kp")
    assert {g.group_id for g in admin.list_consumer_groups().result(15).valid} & {"g-closing", "g-kp"} == set()


def assigned(c):
    return {(tp.topic, tp.partition) for tp in c.assignment()}


def test_cooperative_group_settles_after_a_subscribed_topic_is_deleted(kref_broker):
    admin, producer = setup(kref_broker.bootstrap, ["kept", "doomed"])
    conf = {"bootstrap.servers": kref_broker.bootstrap, "group.id": "g-coop", "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 500,
            # librdkafka re-checks a group's subscription against metadata only
            # on its periodic refresh (default every 5 minutes), whatever the
            # broker answers meanwhile; see docs/groups.md.
            "topic.metadata.refresh.interval.ms": 1000}
    members = [Consumer(conf) for _ in range(2)]
    for c in members:
        c.subscribe(["kept", "doomed"])
    deadline = time.monotonic() + DEADLINE_S
    while not (all(assigned(c) for c in members) and len(set().union(*map(assigned, members))) == 4):
        assert time.monotonic() < deadline, "the group never formed"
        for c in members:
            c.poll(0.1)

    admin.delete_topics(["doomed"])["doomed"].result(15)
    remaining = {("kept", 0), ("kept", 1)}
    deadline = time.monotonic() + DEADLINE_S
    while True:
        for c in members:
            c.poll(0.1)
        owned = [assigned(c) for c in members]
        if sum(map(len, owned)) == 2 and set().union(*owned) == remaining:
            described = admin.describe_consumer_groups(["g-coop"])["g-coop"].result(15)
            stored = [(tp.topic, tp.partition) for m in described.members for tp in m.assignment.topic_partitions]
            if described.state.name == "STABLE" and sorted(stored) == sorted(remaining):
                break  # the coordinator's generation agrees with the clients
        assert time.monotonic() < deadline, f"not settled: {owned}"

    producer.produce("kept", b"after-delete", partition=0)
    assert producer.flush(15) == 0
    deadline = time.monotonic() + DEADLINE_S
    seen = False
    while not seen:
        assert time.monotonic() < deadline, "the group stopped consuming"
        for c in members:
            msg = c.poll(0.1)
            seen = seen or (msg is not None and not msg.error() and msg.value() == b"after-delete")
    for c in members:
        c.close()

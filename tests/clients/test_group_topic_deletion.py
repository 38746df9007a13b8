"""A subscribed topic is deleted while a group is joined: real clients, default settings.

What Kafka does, and kref with it (docs/groups.md, "A subscribed topic is
deleted"): the broker answers Fetch with UNKNOWN_TOPIC_ID (v13+) or
UNKNOWN_TOPIC_OR_PARTITION (older versions, by name), Metadata with
UNKNOWN_TOPIC_OR_PARTITION and no partitions, and the group coordinator only
drops the deleted partitions' committed offsets: it does not start a
rebalance of a classic group (GroupCoordinator.handleDeletedPartitions;
GroupMetadataManager.onNewMetadataImage refreshes only KIP-848 groups).
Leaving the deleted topic is each client's decision, taken when its own
metadata says the topic is gone:

- kafka-python (like the Java consumer) asks for metadata on the fetch
  error and rejoins because its metadata snapshot changed: the group settles
  on the remaining topic at once.
- librdkafka re-reads its subscription only from a metadata refresh made
  for the group (periodic, topic.metadata.refresh.interval.ms, 5 minutes by
  default); a fetch error only triggers a leader query. With its defaults
  the deleted partitions stay assigned until then, but the group keeps
  consuming the remaining topic. When nothing the member subscribes to
  exists any more, librdkafka stops joining and heartbeating, so the member
  leaves the group by session timeout, as it would with Kafka.

kafka-python and aiokafka run without auto-commit: before rejoining they
commit the consumed offsets, and they retry the deleted partition's
UNKNOWN_TOPIC_OR_PARTITION (retriable in their error tables; kafka-python up
to request.timeout.ms, 30 s, aiokafka without end) while their session runs
out. Kafka answers that commit the same way
(KafkaApis.handleOffsetCommitRequest: a topic not in the metadata cache).

auto.create.topics.enable is off where kafka-python runs: its Metadata
requests ask for auto-creation, and a broker that allows it (Kafka's
default, kref's too) re-creates the deleted topic at once.
"""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

DEADLINE_S = 30
REMAINING = {("kept", 0), ("kept", 1)}
NO_AUTO_CREATE = {"auto.create.topics.enable": "false"}


def setup(bootstrap, topics=("kept", "doomed"), partitions=2, records=10):
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    for t in topics:
        admin.create_topics([NewTopic(t, partitions, 1)])[t].result(15)
    producer = Producer({"bootstrap.servers": bootstrap})
    for t in topics:
        for i in range(records):
            producer.produce(t, b"r%d" % i, partition=i % partitions)
    assert producer.flush(15) == 0
    return admin, producer


def described(admin, group):
    d = admin.describe_consumer_groups([group])[group].result(15)
    stored = sorted((tp.topic, tp.partition) for m in d.members for tp in m.assignment.topic_partitions)
    return d.state.name, stored


def wait_for_stable_on_remaining(admin, group, poll):
    """Poll the members until the coordinator's generation assigns exactly REMAINING."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        owned = poll()
        if sum(map(len, owned)) == len(REMAINING) and set().union(*owned) == REMAINING:
            state, stored = described(admin, group)
            if state == "STABLE" and set(stored) == REMAINING and len(stored) == len(REMAINING):
                return
        assert time.monotonic() < deadline, f"not settled: {owned}"


def test_kafka_python_group_leaves_a_deleted_topic_at_once(kref_broker_factory):
    # One kafka-python member: with two KafkaConsumers in one process
    # (kafka-python 3.0.12) one of them sometimes never finishes handling the
    # SyncGroup answer of the rebalance after the deletion (no "newly assigned
    # partitions", its heartbeat stays disabled and its session expires),
    # although the broker's answer carries the right assignment.
    broker = kref_broker_factory(NO_AUTO_CREATE)
    admin, _ = setup(broker.bootstrap)
    member = KafkaConsumer("kept", "doomed", bootstrap_servers=broker.bootstrap, group_id="g-kp-del",
                           auto_offset_reset="earliest", session_timeout_ms=10_000, heartbeat_interval_ms=500,
                           enable_auto_commit=False)

    def poll():
        member.poll(100)
        return [{(tp.topic, tp.partition) for tp in member.assignment()}]

    deadline = time.monotonic() + DEADLINE_S
    while sum(map(len, poll())) != 4:
        assert time.monotonic() < deadline, "the group never formed"
    admin.delete_topics(["doomed"])["doomed"].result(15)
    wait_for_stable_on_remaining(admin, "g-kp-del", poll)
    member.close()


def test_aiokafka_group_leaves_a_deleted_topic_at_once(kref_broker_factory):
    broker = kref_broker_factory(NO_AUTO_CREATE)
    admin, _ = setup(broker.bootstrap)

    async def main():
        members = [AIOKafkaConsumer("kept", "doomed", bootstrap_servers=broker.bootstrap, group_id="g-aio-del",
                                    auto_offset_reset="earliest", session_timeout_ms=10_000,
                                    heartbeat_interval_ms=500, enable_auto_commit=False)
                   for _ in range(2)]
        for c in members:
            await c.start()
        try:
            async def poll():
                for c in members:
                    await c.getmany(timeout_ms=100)
                return [{(tp.topic, tp.partition) for tp in c.assignment()} for c in members]

            deadline = time.monotonic() + DEADLINE_S
            while sum(map(len, await poll())) != 4:
                assert time.monotonic() < deadline, "the group never formed"
            await asyncio.to_thread(lambda: admin.delete_topics(["doomed"])["doomed"].result(15))
            deadline = time.monotonic() + DEADLINE_S
            while True:
                owned = await poll()
                if sum(map(len, owned)) == len(REMAINING) and set().union(*owned) == REMAINING:
                    state, stored = await asyncio.to_thread(described, admin, "g-aio-del")
                    if state == "STABLE" and sorted(stored) == sorted(REMAINING):
                        break
                assert time.monotonic() < deadline, f"not settled: {owned}"
        finally:
            for c in members:
                await c.stop()

    asyncio.run(main())


def confluent_members(bootstrap, group, topics, **conf):
    base = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 500, **conf}
    members = [Consumer(base) for _ in range(2)]
    for c in members:
        c.subscribe(list(topics))
    want = 2 * len(topics)
    deadline = time.monotonic() + DEADLINE_S
    while sum(len(c.assignment()) for c in members) != want:
        assert time.monotonic() < deadline, "the group never formed"
        for c in members:
            c.poll(0.1)
    return members


def test_librdkafka_defaults_group_keeps_consuming_after_a_subscribed_topic_is_deleted(kref_broker):
    admin, producer = setup(kref_broker.bootstrap)
    members = confluent_members(kref_broker.bootstrap, "g-rk-del", ["kept", "doomed"])
    admin.delete_topics(["doomed"])["doomed"].result(15)
    producer.produce("kept", b"after-delete", partition=0)
    producer.produce("kept", b"after-delete", partition=1)
    assert producer.flush(15) == 0
    seen, deadline = 0, time.monotonic() + DEADLINE_S
    while seen < 2:
        assert time.monotonic() < deadline, "the group stopped consuming the remaining topic"
        for c in members:
            msg = c.poll(0.1)
            seen += msg is not None and not msg.error() and msg.value() == b"after-delete"
    state, _ = described(admin, "g-rk-del")
    assert state == "STABLE"
    # Which member still lists the deleted partitions is librdkafka's business
    # (until its periodic refresh); shown for the record.
    print("assignments after the deletion:", [sorted((tp.topic, tp.partition) for tp in c.assignment())
                                              for c in members])
    for c in members:
        c.close()


def test_librdkafka_members_of_only_a_deleted_topic_leave_by_session_timeout(kref_broker):
    admin, _ = setup(kref_broker.bootstrap, topics=("doomed",))
    # A refresh every second lets librdkafka see the deletion at once; it then
    # stops heartbeating (nothing left to join for) and the coordinator
    # removes the members when their sessions expire.
    members = confluent_members(kref_broker.bootstrap, "g-rk-only", ["doomed"], **{
        "topic.metadata.refresh.interval.ms": 1000, "session.timeout.ms": 6000})
    admin.delete_topics(["doomed"])["doomed"].result(15)
    deadline = time.monotonic() + DEADLINE_S
    while True:
        for c in members:
            c.poll(0.1)
        state, stored = described(admin, "g-rk-only")
        if state == "EMPTY":
            break
        assert time.monotonic() < deadline, f"the group kept its members: {state} {stored}"
    assert all(not c.assignment() for c in members)
    for c in members:
        c.close()
    # The group is usable: deletable at once, and joinable again.
    admin.delete_consumer_groups(["g-rk-only"], request_timeout=10)["g-rk-only"].result(15)


def test_librdkafka_cooperative_group_settles_once_its_metadata_is_refreshed(kref_broker):
    admin, producer = setup(kref_broker.bootstrap)
    # With a refresh every second librdkafka sees the deletion at once (its
    # subscription check), revokes the deleted partitions as lost and rejoins.
    members = confluent_members(kref_broker.bootstrap, "g-coop", ["kept", "doomed"],
                                **{"topic.metadata.refresh.interval.ms": 1000})
    admin.delete_topics(["doomed"])["doomed"].result(15)

    def poll():
        for c in members:
            c.poll(0.1)
        return [{(tp.topic, tp.partition) for tp in c.assignment()} for c in members]

    wait_for_stable_on_remaining(admin, "g-coop", poll)
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

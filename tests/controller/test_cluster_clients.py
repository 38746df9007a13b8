"""Unmodified Kafka clients against `kref cluster`'s three combined nodes.

confluent-kafka and kafka-python, over real sockets, see the three brokers
registered with the KRaft controller in Metadata (and DescribeCluster),
create a topic with replication factor 3 (the broker forwards CreateTopics
to the active controller, which assigns replicas and leaders), see each
partition's leader, replicas and isr as the controller committed them,
produce to the leaders and consume it back in a group, add partitions and
delete the topic (forwarded to the controller as well).

Replication of the data itself (followers fetching, the isr as
replication state) is tested in tests/replication (issue 10). After each
test every node's trace is checked against spec/KRaft.tla and, partition by
partition, spec/Replication.tla (tests/controller/trace_validation.py).
"""

from __future__ import annotations

import time

import pytest

from tests.clusterkit import FAST_CLUSTER_SETTINGS, wait_until, wait_listed
from tests.controller.trace_validation import checked_cluster

SETTINGS = FAST_CLUSTER_SETTINGS
MESSAGES = 30


@pytest.fixture
def bootstrap(tmp_path):
    from kref.node.local_cluster import bootstrap_servers

    with checked_cluster(tmp_path, 3, 3, SETTINGS) as (specs, processes, start):
        servers = bootstrap_servers(specs)
        wait_listed(specs, processes)
        yield servers


@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
def test_confluent_kafka_sees_three_brokers_and_uses_a_replicated_topic(bootstrap):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = wait_until(lambda: _when(admin.list_topics(timeout=10), lambda md: len(md.brokers) == 3),
                          "three brokers in Metadata")
    assert sorted(metadata.brokers) == [1, 2, 3]
    assert metadata.controller_id in (1, 2, 3)
    futures = admin.create_topics([NewTopic("replicated", num_partitions=3, replication_factor=3)])
    futures["replicated"].result(timeout=30)
    too_many = admin.create_topics([NewTopic("too-many", num_partitions=1, replication_factor=4)])
    with pytest.raises(Exception, match="INVALID_REPLICATION_FACTOR|replication factor"):
        too_many["too-many"].result(timeout=30)
    # Every broker learns the topic from the metadata log on its own: a broker other
    # than the one that answered CreateTopics may not have replayed it yet (as in Kafka,
    # broker metadata is eventually consistent), so wait for it rather than race.
    partitions = wait_until(
        lambda: _when(admin.list_topics("replicated", timeout=10).topics["replicated"].partitions,
                      lambda ps: len(ps) == 3),
        "the new topic's 3 partitions in Metadata",
    )
    for p in partitions.values():
        assert sorted(p.replicas) == [1, 2, 3] and sorted(p.isrs) == [1, 2, 3] and p.leader == p.replicas[0]
    assert sorted(p.leader for p in partitions.values()) == [1, 2, 3]  # leaders spread

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(MESSAGES):
        producer.produce("replicated", key=str(i).encode(), value=f"value-{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-confluent", "auto.offset.reset": "earliest"})
    consumer.subscribe(["replicated"])
    got = set()
    deadline = time.monotonic() + 30
    while len(got) < MESSAGES and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            got.add(message.value())
    consumer.close()
    assert got == {f"value-{i}".encode() for i in range(MESSAGES)}

    # CreatePartitions and DeleteTopics go through the controller too.
    admin.create_partitions([NewPartitions("replicated", 5)])["replicated"].result(timeout=30)
    wait_until(lambda: len(admin.list_topics("replicated", timeout=10).topics["replicated"].partitions) == 5,
               "5 partitions in Metadata")
    admin.delete_topics(["replicated"])["replicated"].result(timeout=30)
    wait_until(lambda: "replicated" not in admin.list_topics(timeout=10).topics, "the topic gone from Metadata")


@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
def test_kafka_python_sees_three_brokers_and_uses_a_replicated_topic(bootstrap):
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    cluster = wait_until(lambda: _when(admin.describe_cluster(), lambda d: len(d["brokers"]) == 3),
                         "three brokers in DescribeCluster")
    assert sorted(b["broker_id"] for b in cluster["brokers"]) == [1, 2, 3]
    admin.create_topics([NewTopic("kp-replicated", num_partitions=2, replication_factor=3)])
    described = wait_until(
        lambda: _when(admin.describe_topics(["kp-replicated"])[0], lambda d: len(d["partitions"]) == 2),
        "the new topic's 2 partitions in Metadata",
    )
    for p in described["partitions"]:
        replicas = p.get("replicas", p.get("replica_nodes"))
        assert sorted(replicas) == [1, 2, 3] and p.get("leader", p.get("leader_id")) in (1, 2, 3), p
    admin.close()

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(MESSAGES):
        producer.send("kp-replicated", key=str(i).encode(), value=f"kp-{i}".encode())
    producer.flush(timeout=30)
    producer.close()
    consumer = KafkaConsumer(
        "kp-replicated", bootstrap_servers=bootstrap, group_id="g-kp", auto_offset_reset="earliest",
        consumer_timeout_ms=20000,
    )
    got = set()
    for message in consumer:
        got.add(message.value)
        if len(got) == MESSAGES:
            break
    consumer.close()
    assert got == {f"kp-{i}".encode() for i in range(MESSAGES)}


def _when(value, predicate):
    return value if predicate(value) else None

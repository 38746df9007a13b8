"""One group, one coordinator: the leader of the group's __consumer_offsets partition.

On `kref cluster` a group's coordinator is the broker leading partition
abs(hash(group.id)) % offsets.topic.num.partitions of __consumer_offsets,
which the first FindCoordinator creates through the active controller (with
offsets.topic.replication.factor replicas and the compacted topic's
configs), as Kafka does. So every broker answers FindCoordinator with the
same node, consumers bootstrapped from different brokers form ONE group
(they split the partitions instead of each reading everything), and a
committed offset is seen by a consumer that came in through another broker.
Real processes, confluent-kafka and kafka-python.
"""

from __future__ import annotations

import time

import pytest

from tests.controller.test_cluster_clients import SETTINGS
from tests.clusterkit import wait_until, wait_listed
from tests.controller.trace_validation import checked_cluster

TOPIC = "grouped"
PARTITIONS = 6


def _find_coordinator_answer(server: str, group: str):
    from kio.schema.find_coordinator.v3 import request as req
    from kio.schema.find_coordinator.v3 import response as resp

    from kref.protocol.client import WireClient

    host, port = server.rsplit(":", 1)
    # The first FindCoordinator asks the active controller for __consumer_offsets in the background
    # and is answered at once (kref/broker/group_area.py, as Kafka does); the default 10 s socket
    # timeout is plenty (session 10 held the answer for up to the 15 s CreateTopics timeout).
    with WireClient(host, int(port)) as client:
        return client.request(req.FindCoordinatorRequest(key=group, key_type=0), resp.FindCoordinatorResponse)


def _find_coordinator(server: str, group: str) -> tuple[int, int]:
    answer = _find_coordinator_answer(server, group)
    return int(answer.error_code), answer.node_id


def _coordinator_found(server, group):
    code, node = _find_coordinator(server, group)
    assert code in (0, 15), (code, node)  # COORDINATOR_NOT_AVAILABLE while the topic is created
    return node if code == 0 else None


@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
def test_consumers_through_different_brokers_form_one_group(tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from kref.node.local_cluster import bootstrap_servers

    with checked_cluster(tmp_path, 3, 3, SETTINGS) as (specs, processes, start):
        servers = bootstrap_servers(specs).split(",")
        wait_listed(specs, processes)
        admin = AdminClient({"bootstrap.servers": ",".join(servers)})
        admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])[TOPIC].result(30)
        wait_until(lambda: all(TOPIC in AdminClient({"bootstrap.servers": s}).list_topics(timeout=10).topics
                               for s in servers), "the topic on every broker")

        # The first FindCoordinator of the cluster does not wait for __consumer_offsets: it starts
        # its creation and says COORDINATOR_NOT_AVAILABLE (a retriable error every client retries).
        first = _find_coordinator_answer(servers[0], "g-one")
        assert int(first.error_code) == 15 and "__consumer_offsets" in (first.error_message or ""), first

        # Every broker names the same coordinator for a group.
        coordinators = {s: wait_until(lambda s=s: _coordinator_found(s, "g-one"), f"a coordinator from {s}")
                        for s in servers}
        assert len(set(coordinators.values())) == 1, coordinators
        offsets_topic = admin.list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"]
        assert len(offsets_topic.partitions) == 50 and offsets_topic.error is None

        producer = Producer({"bootstrap.servers": ",".join(servers)})
        for i in range(60):
            producer.produce(TOPIC, value=b"v%d" % i, partition=i % PARTITIONS)
        assert producer.flush(30) == 0

        # Two members, each bootstrapped from a different broker (and so, without a
        # shared coordinator, each in a group of its own with every partition).
        consumers = [Consumer({"bootstrap.servers": servers[i], "group.id": "g-one", "auto.offset.reset": "earliest",
                               "enable.auto.commit": False, "session.timeout.ms": 6000,
                               "topic.metadata.refresh.interval.ms": 1000}) for i in (0, 1)]
        for c in consumers:
            c.subscribe([TOPIC])
        deadline = time.monotonic() + 45
        assignments = [set(), set()]
        while time.monotonic() < deadline:
            for i, c in enumerate(consumers):
                c.poll(0.2)
                assignments[i] = {tp.partition for tp in c.assignment()}
            if assignments[0] and assignments[1] and len(assignments[0]) + len(assignments[1]) == PARTITIONS:
                break
        assert assignments[0] and assignments[1], assignments
        assert not assignments[0] & assignments[1], assignments
        assert assignments[0] | assignments[1] == set(range(PARTITIONS)), assignments

        # A commit made through one broker is what a member coming in through another fetches.
        consumers[0].commit(offsets=[TopicPartition(TOPIC, p, 7) for p in sorted(assignments[0])], asynchronous=False)
        for c in consumers:
            c.close()
        reader = Consumer({"bootstrap.servers": servers[2], "group.id": "g-one", "enable.auto.commit": False})
        committed = reader.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=20)
        reader.close()
        got = {tp.partition: tp.offset for tp in committed}
        for p in assignments[0]:
            assert got[p] == 7, got


@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
def test_kafka_python_commit_through_one_broker_is_listed_through_another(tmp_path):
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    from kref.node.local_cluster import bootstrap_servers

    with checked_cluster(tmp_path, 3, 3, SETTINGS) as (specs, processes, start):
        servers = bootstrap_servers(specs).split(",")
        wait_listed(specs, processes)
        nodes = {wait_until(lambda s=s: _coordinator_found(s, "g-kp"), "a coordinator") for s in servers}
        assert len(nodes) == 1
        admin = KafkaAdminClient(bootstrap_servers=servers[2], request_timeout_ms=30000)
        admin.create_topics([NewTopic("kp-grouped", num_partitions=2, replication_factor=1)])
        producer = KafkaProducer(bootstrap_servers=servers[0])
        for i in range(10):
            producer.send("kp-grouped", value=b"x%d" % i, partition=i % 2)
        producer.flush(timeout=30)
        producer.close()
        consumer = KafkaConsumer("kp-grouped", bootstrap_servers=servers[1], group_id="g-kp",
                                 auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=20000)
        seen = 0
        for _ in consumer:
            seen += 1
            if seen == 10:
                break
        consumer.commit()
        consumer.close()
        listed = admin.list_group_offsets("g-kp")["g-kp"]
        admin.close()
        assert {tp.partition: meta.offset for tp, meta in listed.items() if tp.topic == "kp-grouped"} == {0: 5, 1: 5}
        assert TopicPartition("kp-grouped", 0) in listed

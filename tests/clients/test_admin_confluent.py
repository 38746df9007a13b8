"""confluent-kafka (librdkafka) AdminClient against a real kref broker:
ApiVersions negotiation, Metadata with stable topic IDs, CreateTopics
(validate_only, defaults, TOPIC_ALREADY_EXISTS, INVALID_REPLICATION_FACTOR),
DeleteTopics, CreatePartitions, DescribeConfigs, IncrementalAlterConfigs,
DescribeCluster."""

from __future__ import annotations

import uuid

import pytest

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

TIMEOUT = 15


def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})


def error_of(future) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(TIMEOUT)
    return info.value.args[0]


def test_create_list_delete_topics(kref_broker):
    a = admin(kref_broker)
    futures = a.create_topics([NewTopic("orders", 3), NewTopic("events", -1)])
    for f in futures.values():
        assert f.result(TIMEOUT) is None
    md = a.list_topics(timeout=TIMEOUT)
    assert {t: len(m.partitions) for t, m in md.topics.items()} == {"orders": 3, "events": 1}
    assert list(md.brokers) == [1]
    part = md.topics["orders"].partitions[0]
    assert part.leader == 1 and part.replicas == [1] and part.isrs == [1]
    assert error_of(a.create_topics([NewTopic("orders", 1)])["orders"]).code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert a.delete_topics(["orders"])["orders"].result(TIMEOUT) is None
    assert set(a.list_topics(timeout=TIMEOUT).topics) == {"events"}
    assert error_of(a.delete_topics(["orders"])["orders"]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_topic_validation_errors(kref_broker):
    a = admin(kref_broker)
    errors = {
        t: error_of(f).code()
        for t, f in a.create_topics(
            [
                NewTopic("rf3", 1, replication_factor=3),
                NewTopic("bad/name", 1),
                NewTopic("zero", 0),
                NewTopic("badconf", 1, config={"no.such.config": "1"}),
                NewTopic("badvalue", 1, config={"retention.ms": "soon"}),
            ]
        ).items()
    }
    assert errors["rf3"] == KafkaError.INVALID_REPLICATION_FACTOR
    assert errors["bad/name"] == KafkaError.TOPIC_EXCEPTION
    assert errors["zero"] == KafkaError.INVALID_PARTITIONS
    assert errors["badconf"] == KafkaError.INVALID_CONFIG
    assert errors["badvalue"] == KafkaError.INVALID_CONFIG
    assert a.list_topics(timeout=TIMEOUT).topics == {}


def test_validate_only_creates_nothing(kref_broker):
    a = admin(kref_broker)
    assert a.create_topics([NewTopic("dry", 2)], validate_only=True)["dry"].result(TIMEOUT) is None
    assert "dry" not in a.list_topics(timeout=TIMEOUT).topics


def describe_topic_id(broker, name: str) -> str:
    client = admin(broker)  # the handle must outlive the future
    desc = client.describe_topics(TopicCollection([name]))[name].result(TIMEOUT)
    return str(desc.topic_id)


def test_topic_ids_stable_across_clean_and_unclean_restart(kref_broker):
    a = admin(kref_broker)
    a.create_topics([NewTopic("stable", 2)])["stable"].result(TIMEOUT)
    first = describe_topic_id(kref_broker, "stable")
    assert first != str(uuid.UUID(int=0))
    kref_broker.restart()
    assert describe_topic_id(kref_broker, "stable") == first
    kref_broker.restart(clean=False)
    assert describe_topic_id(kref_broker, "stable") == first
    client = admin(kref_broker)
    assert len(client.list_topics("stable", timeout=TIMEOUT).topics["stable"].partitions) == 2


def test_create_partitions(kref_broker):
    a = admin(kref_broker)
    a.create_topics([NewTopic("grow", 1)])["grow"].result(TIMEOUT)
    assert a.create_partitions([NewPartitions("grow", 4)])["grow"].result(TIMEOUT) is None
    assert len(a.list_topics("grow", timeout=TIMEOUT).topics["grow"].partitions) == 4
    assert error_of(a.create_partitions([NewPartitions("grow", 2)])["grow"]).code() == KafkaError.INVALID_PARTITIONS
    assert error_of(a.create_partitions([NewPartitions("nope", 2)])["nope"]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_and_incrementally_alter_topic_configs(kref_broker):
    a = admin(kref_broker)
    a.create_topics([NewTopic("conf", 1, config={"retention.ms": "60000"})])["conf"].result(TIMEOUT)
    resource = ConfigResource(ResourceType.TOPIC, "conf")
    configs = a.describe_configs([resource])[resource].result(TIMEOUT)
    assert configs["retention.ms"].value == "60000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].value == "1073741824"
    alter = ConfigResource(
        ResourceType.TOPIC,
        "conf",
        incremental_configs=[
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
            ConfigEntry("max.message.bytes", "2000000", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    a.incremental_alter_configs([alter])[alter].result(TIMEOUT)
    configs = a.describe_configs([resource])[resource].result(TIMEOUT)
    assert configs["retention.ms"].value == str(7 * 24 * 3600 * 1000)
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["max.message.bytes"].value == "2000000"
    bad = ConfigResource(
        ResourceType.TOPIC,
        "conf",
        incremental_configs=[ConfigEntry("retention.ms", "x", incremental_operation=AlterConfigOpType.SET)],
    )
    assert error_of(a.incremental_alter_configs([bad])[bad]).code() == KafkaError.INVALID_CONFIG
    assert a.describe_configs([resource])[resource].result(TIMEOUT)["max.message.bytes"].value == "2000000"


def test_broker_configs_are_described_and_read_only(kref_broker):
    a = admin(kref_broker)
    resource = ConfigResource(ResourceType.BROKER, "1")
    configs = a.describe_configs([resource])[resource].result(TIMEOUT)
    assert configs["num.partitions"].value == "1"
    assert configs["num.partitions"].is_read_only
    alter = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)],
    )
    assert error_of(a.incremental_alter_configs([alter])[alter]).code() == KafkaError.INVALID_REQUEST


def test_describe_cluster(kref_broker):
    a = admin(kref_broker)
    cluster = a.describe_cluster().result(TIMEOUT)
    assert cluster.controller.id == 1
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(1, "127.0.0.1", kref_broker.port)]
    assert cluster.cluster_id

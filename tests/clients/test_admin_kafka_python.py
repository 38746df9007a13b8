"""kafka-python's KafkaAdminClient against a real kref broker: version
negotiation through ApiVersions, CreateTopics/DeleteTopics/CreatePartitions,
Metadata (describe_topics, list_topics), DescribeConfigs and
IncrementalAlterConfigs, DescribeCluster, and Kafka error codes surfacing
as kafka-python's typed errors."""

from __future__ import annotations

import pytest
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic
from kafka.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)


@pytest.fixture
def admin(kref_broker):
    client = KafkaAdminClient(bootstrap_servers=kref_broker.bootstrap, request_timeout_ms=15000)
    yield client
    client.close()


def test_topics_lifecycle(admin):
    admin.create_topics([NewTopic("kp-orders", 3, 1), NewTopic("kp-defaults", 1, 1)])
    assert {"kp-orders", "kp-defaults"} <= set(admin.list_topics())
    described = {t["name"]: t for t in admin.describe_topics(["kp-orders"])}
    assert len(described["kp-orders"]["partitions"]) == 3
    assert described["kp-orders"]["error_code"] == 0
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic("kp-orders", 1, 1)])
    with pytest.raises(InvalidReplicationFactorError):
        admin.create_topics([NewTopic("kp-rf2", 1, 2)])
    admin.create_partitions({"kp-orders": NewPartitions(5)})
    assert len({t["name"]: t for t in admin.describe_topics(["kp-orders"])}["kp-orders"]["partitions"]) == 5
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({"kp-orders": NewPartitions(2)})
    admin.delete_topics(["kp-orders"])
    assert "kp-orders" not in admin.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics(["kp-orders"])


def topic_configs(admin, name: str, config_filter: str = "all") -> dict:
    result = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)], config_filter=config_filter)
    return result["topic"][name]


def test_configs(admin):
    admin.create_topics([NewTopic("kp-conf", 1, 1, topic_configs={"retention.ms": "1000"})])
    configs = topic_configs(admin, "kp-conf")
    assert configs["retention.ms"]["value"] == "1000"
    assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-conf", configs={"retention.ms": "5000"})])
    assert topic_configs(admin, "kp-conf", "modified") == {
        "retention.ms": {
            "value": "5000",
            "read_only": False,
            "config_source": "DYNAMIC_TOPIC_CONFIG",
            "is_sensitive": False,
            "synonyms": [],
            "config_type": "LONG",
            "documentation": None,
        }
    }


def test_describe_cluster(admin, kref_broker):
    cluster = admin.describe_cluster()
    assert cluster["controller_id"] == 1
    assert [(b["broker_id"], b["port"]) for b in cluster["brokers"]] == [(1, kref_broker.port)]

"""Broker configs over the wire, with real admin clients.

- DescribeConfigs on the broker resource gives Kafka's real config types
  (kafka-python decodes them by name), read_only only for static settings.
- IncrementalAlterConfigs on the broker resource (confluent-kafka): a
  dynamic setting per broker ("1") and as cluster default ("", sent raw:
  both Python clients refuse an empty broker name) takes effect
  without a restart (message.max.bytes refuses a produce at once; a new
  topic's retention.ms follows the default, with the dynamic source), is
  kept across a restart, and DELETE reverts it; a static setting is refused
  with INVALID_REQUEST, an unknown one and a bad value with INVALID_CONFIG.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.static.primitive import i8
from kafka.admin import ConfigResource as KpResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from kref.protocol.client import WireClient

TIMEOUT = 15


def broker_configs_kafka_python(broker, name="1"):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        return client.describe_configs([KpResource(ConfigResourceType.BROKER, name)], config_filter="all")["broker"][name]
    finally:
        client.close()


def alter(admin, name, *entries):
    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=list(entries))
    return admin.incremental_alter_configs([resource])[resource]


def refusal(future) -> int:
    """The error code a refused admin request carries."""
    try:
        future.result(TIMEOUT)
    except KafkaException as exc:
        return exc.args[0].code()
    raise AssertionError("the request was accepted")


def test_broker_configs_have_kafka_types(kref_broker):
    configs = broker_configs_kafka_python(kref_broker)
    expected = {
        "advertised.listeners": "STRING",
        "listeners": "STRING",
        "log.dirs": "STRING",
        "node.id": "INT",
        "message.max.bytes": "INT",
        "log.retention.ms": "LONG",
        "log.retention.hours": "INT",
        "log.cleanup.policy": "LIST",
        "auto.create.topics.enable": "BOOLEAN",
        "offsets.topic.replication.factor": "SHORT",
        "num.replica.fetchers": "INT",
    }
    assert {n: configs[n]["config_type"] for n in expected if n in configs} == {
        n: t for n, t in expected.items() if n in configs
    }
    assert "listeners" in configs and "message.max.bytes" in configs
    assert not any(c["config_type"] == "UNKNOWN" for c in configs.values())
    assert configs["node.id"]["read_only"] and not configs["message.max.bytes"]["read_only"]


def test_dynamic_broker_configs_apply_without_restart_and_persist(kref_broker):
    admin = AdminClient({"bootstrap.servers": kref_broker.bootstrap, "log_level": 3})
    admin.create_topics([NewTopic("dyn", 1, 1)])["dyn"].result(TIMEOUT)

    alter(
        admin, "1", ConfigEntry("message.max.bytes", "2000", incremental_operation=AlterConfigOpType.SET)
    ).result(TIMEOUT)
    producer = Producer({"bootstrap.servers": kref_broker.bootstrap, "message.max.bytes": 100000})
    outcome = []
    producer.produce("dyn", b"x" * 5000, partition=0, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(TIMEOUT)
    assert outcome and outcome[0] is not None and outcome[0].code() == KafkaError.MSG_SIZE_TOO_LARGE

    # The cluster default (resource name ""): librdkafka and kafka-python
    # both refuse an empty broker resource name client-side (Kafka's own
    # kafka-configs.sh --entity-default sends it), so this one goes raw.
    with WireClient(kref_broker.host, kref_broker.port) as wire:
        response = wire.request(
            IncrementalAlterConfigsRequest(
                resources=(
                    AlterConfigsResource(
                        resource_type=i8(4),
                        resource_name="",
                        configs=(AlterableConfig(name="log.retention.ms", config_operation=i8(0), value="123456"),),
                    ),
                ),
                validate_only=False,
            )
        )
    assert [r.error_code for r in response.responses] == [0]
    admin.create_topics([NewTopic("dyn-after", 1, 1)])["dyn-after"].result(TIMEOUT)
    topic = ConfigResource(ResourceType.TOPIC, "dyn-after")
    retention = admin.describe_configs([topic])[topic].result(TIMEOUT)["retention.ms"]
    assert retention.value == "123456"
    assert retention.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value

    broker = ConfigResource(ResourceType.BROKER, "1")
    described = admin.describe_configs([broker])[broker].result(TIMEOUT)
    assert described["message.max.bytes"].value == "2000"
    assert described["message.max.bytes"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    with WireClient(kref_broker.host, kref_broker.port) as wire:
        described_default = wire.request(
            DescribeConfigsRequest(
                resources=(DescribeConfigsResource(resource_type=i8(4), resource_name="", configuration_keys=None),),
                include_synonyms=False,
                include_documentation=False,
            )
        )
    [result] = described_default.results
    assert [(c.name, c.value, c.config_source) for c in result.configs] == [
        ("log.retention.ms", "123456", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    ]

    # Static, unknown, bad value: refused, and nothing changes.
    assert refusal(alter(admin, "1", ConfigEntry("node.id", "7", incremental_operation=AlterConfigOpType.SET))) == KafkaError.INVALID_REQUEST
    assert refusal(alter(admin, "1", ConfigEntry("no.such.thing", "7", incremental_operation=AlterConfigOpType.SET))) == KafkaError.INVALID_CONFIG
    assert refusal(alter(admin, "1", ConfigEntry("message.max.bytes", "big", incremental_operation=AlterConfigOpType.SET))) == KafkaError.INVALID_CONFIG
    assert admin.describe_configs([broker])[broker].result(TIMEOUT)["message.max.bytes"].value == "2000"

    kref_broker.restart()
    admin = AdminClient({"bootstrap.servers": kref_broker.bootstrap, "log_level": 3})
    described = admin.describe_configs([broker])[broker].result(TIMEOUT)
    assert described["message.max.bytes"].value == "2000"
    assert described["log.retention.ms"].value == "123456"

    alter(admin, "1", ConfigEntry("message.max.bytes", None, incremental_operation=AlterConfigOpType.DELETE)).result(TIMEOUT)
    described = admin.describe_configs([broker])[broker].result(TIMEOUT)
    assert described["message.max.bytes"].value == "1048588"
    assert described["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    producer = Producer({"bootstrap.servers": kref_broker.bootstrap})
    outcome.clear()
    producer.produce("dyn", b"x" * 5000, partition=0, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(TIMEOUT)
    assert outcome == [None]

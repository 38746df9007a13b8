"""aiokafka's AIOKafkaAdminClient against a real kref broker: version
negotiation, CreateTopics, Metadata (list/describe topics), CreatePartitions,
DescribeConfigs, DeleteTopics, DescribeCluster, and a Kafka error code
(TOPIC_ALREADY_EXISTS) reaching the client."""

from __future__ import annotations

import asyncio

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_admin_round_trip(kref_broker):
    async def scenario():
        admin = AIOKafkaAdminClient(bootstrap_servers=kref_broker.bootstrap, request_timeout_ms=15000)
        await admin.start()
        try:
            await admin.create_topics([NewTopic("aio-topic", 2, 1)])
            assert "aio-topic" in await admin.list_topics()
            described = await admin.describe_topics(["aio-topic"])
            assert len(described[0]["partitions"]) == 2
            response = await admin.create_topics([NewTopic("aio-topic", 2, 1)])
            assert [error for _, error, *_ in response.topic_errors] == [36]  # TOPIC_ALREADY_EXISTS
            await admin.create_partitions({"aio-topic": NewPartitions(3)})
            described = await admin.describe_topics(["aio-topic"])
            assert len(described[0]["partitions"]) == 3
            configs = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "aio-topic")])
            names = {entry[0] for response in configs for resource in response.resources for entry in resource[4]}
            assert {"retention.ms", "segment.bytes", "cleanup.policy"} <= names
            cluster = await admin.describe_cluster()
            assert cluster["controller_id"] == 1
            await admin.delete_topics(["aio-topic"])
            assert "aio-topic" not in await admin.list_topics()
        finally:
            await admin.close()

    run(scenario())


def _topic_overrides(describe_responses) -> dict[str, str]:
    # DescribeConfigs entries: (name, value, read_only, config_source, ...); source 1 = topic override
    return {
        entry[0]: entry[1]
        for response in describe_responses
        for resource in response.resources
        for entry in resource[4]
        if entry[3] == 1
    }


def test_alter_configs_replaces_the_whole_override_set(kref_broker):
    """AlterConfigs (key 33, what aiokafka and kafkajs send) has replace
    semantics: overrides not listed go back to the broker default."""

    async def scenario():
        admin = AIOKafkaAdminClient(bootstrap_servers=kref_broker.bootstrap, request_timeout_ms=15000)
        await admin.start()
        try:
            await admin.create_topics([NewTopic("aio-alter", 1, 1, topic_configs={"retention.ms": "60000"})])
            resource = ConfigResource(ConfigResourceType.TOPIC, "aio-alter")
            before = _topic_overrides(await admin.describe_configs([resource]))
            assert before == {"retention.ms": "60000"}

            response = await admin.alter_configs(
                [ConfigResource(ConfigResourceType.TOPIC, "aio-alter", configs={"segment.ms": "120000"})]
            )
            assert [r[0] for resp in response for r in resp.resources] == [0]
            after = _topic_overrides(await admin.describe_configs([resource]))
            assert after == {"segment.ms": "120000"}

            bad = await admin.alter_configs(
                [ConfigResource(ConfigResourceType.TOPIC, "aio-alter", configs={"no.such.config": "1"})]
            )
            assert [r[0] for resp in bad for r in resp.resources] == [40]  # INVALID_CONFIG
            assert _topic_overrides(await admin.describe_configs([resource])) == {"segment.ms": "120000"}
        finally:
            await admin.close()

    run(scenario())

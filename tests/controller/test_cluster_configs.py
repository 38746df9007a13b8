"""Topic config changes in a KRaft cluster go through the active controller.

Three combined nodes. confluent-kafka's AdminClient sends
IncrementalAlterConfigs to one broker; that broker applies the operations
to its view of the topic's overrides, checks them, and forwards the whole
new set to the active controller (AlterConfigs on its CONTROLLER listener),
which writes ConfigRecords. Every broker applies them from the metadata
log: DescribeConfigs sent to each node (raw wire) shows the new override as
a topic config (source 1); a DELETE goes the same way. A bad value is
refused by the receiving broker (INVALID_CONFIG) and nothing is written.
"""

from __future__ import annotations

import sys

import pytest

from kref.protocol.client import WireClient
from kref.protocol.codec import request_class
from tests.controller.test_quorum_processes import running_cluster, wait_until

SETTINGS = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "3000",
}
TOPIC = "configured"


def topic_overrides(port: int) -> dict[str, str]:
    cls = request_class(32, 4)
    m = sys.modules[cls.__module__]
    request = cls(resources=(m.DescribeConfigsResource(resource_type=2, resource_name=TOPIC, configuration_keys=None),),
                  include_synonyms=False, include_documentation=False)
    with WireClient("127.0.0.1", port, timeout=10) as client:
        result = client.request(request).results[0]
    assert result.error_code == 0, result
    return {c.name: c.value for c in result.configs if c.config_source == 1}


def test_incremental_alter_configs_reach_every_broker(tmp_path):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    from kref.controller.local_cluster import bootstrap_servers

    with running_cluster(tmp_path, 3, 3, SETTINGS) as (specs, processes, start):
        wait_until(lambda: all("unfenced" in s.log_file.read_text() for s in specs), "three unfenced brokers")
        admin = AdminClient({"bootstrap.servers": bootstrap_servers(specs)})
        admin.create_topics([NewTopic(TOPIC, 2, 3)])[TOPIC].result(timeout=30)
        wait_until(lambda: all(_has_topic(s.client_port) for s in specs), "the topic on every broker")

        def alter(*entries):
            resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=list(entries))
            return admin.incremental_alter_configs([resource])[resource].result(timeout=30)

        alter(ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET),
              ConfigEntry("unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET))
        wanted = {"retention.ms": "123456", "unclean.leader.election.enable": "true"}
        for s in specs:
            wait_until(lambda s=s: topic_overrides(s.client_port) == wanted, f"the overrides on node {s.node_id}")

        alter(ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE))
        for s in specs:
            wait_until(lambda s=s: topic_overrides(s.client_port) == {"unclean.leader.election.enable": "true"},
                       f"the deletion on node {s.node_id}")

        with pytest.raises(Exception, match="INVALID_CONFIG|nvalid"):
            alter(ConfigEntry("retention.ms", "not-a-number", incremental_operation=AlterConfigOpType.SET))
        assert all(topic_overrides(s.client_port) == {"unclean.leader.election.enable": "true"} for s in specs)


def _has_topic(port: int) -> bool:
    cls = request_class(3, 12)
    m = sys.modules[cls.__module__]
    with WireClient("127.0.0.1", port, timeout=10) as client:
        response = client.request(cls(topics=(m.MetadataRequestTopic(name=TOPIC, topic_id=None),),
                                      allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return response.topics[0].error_code == 0 and len(response.topics[0].partitions) == 2

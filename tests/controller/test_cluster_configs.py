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
from tests.clusterkit import FAST_CLUSTER_SETTINGS, wait_until, wait_listed
from tests.controller.trace_validation import checked_cluster

SETTINGS = FAST_CLUSTER_SETTINGS
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


@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
def test_incremental_alter_configs_reach_every_broker(tmp_path):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    from kref.node.local_cluster import bootstrap_servers

    with checked_cluster(tmp_path, 3, 3, SETTINGS) as (specs, processes, start):
        wait_listed(specs, processes)
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


def _partition(port: int, topic: str, index: int):
    cls = request_class(3, 12)
    m = sys.modules[cls.__module__]
    try:
        with WireClient("127.0.0.1", port, timeout=10) as client:
            response = client.request(cls(topics=(m.MetadataRequestTopic(name=topic, topic_id=None),),
                                          allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    except OSError:
        return None
    parts = {p.partition_index: p for p in response.topics[0].partitions}
    return parts.get(index)


@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
@pytest.mark.parametrize("level", ["topic", "cluster", "controller"])
def test_enabling_unclean_election_elects_an_offline_partition(tmp_path, level):
    """Partition 0 of an RF=2 topic, replicas [L, F]. F stops under control (it leaves
    the isr: [L]), L is killed -9 while F is down, F returns: L is fenced with the
    partition offline (leader -1, isr [L]; unclean election off), and F, a live
    replica outside the isr, does not lead. Turning unclean.leader.election.enable on
    for the topic (confluent-kafka), cluster-wide (the BROKER resource "", the
    dynamic cluster default, KIP-226; raw IncrementalAlterConfigs, since both
    Python clients refuse an empty broker name) or at the active controller's node
    level (confluent-kafka, BROKER resource = its node id: where Kafka's controller
    reads it) elects F at once (isr [F])."""
    import signal

    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    topic = "offline"
    settings = {**SETTINGS, "auto.leader.rebalance.enable": "false"}
    with checked_cluster(tmp_path, 3, 3, settings) as (specs, processes, start):
        by_id = {s.node_id: s for s in specs}
        wait_listed(specs, processes)
        from kref.node.local_cluster import bootstrap_servers

        creator = AdminClient({"bootstrap.servers": bootstrap_servers(specs)})
        creator.create_topics([NewTopic(topic, 1, 2)])[topic].result(timeout=30)
        any_port = specs[0].client_port
        p = wait_until(lambda: (x := _partition(any_port, topic, 0)) is not None and len(x.isr_nodes) == 2 and x,
                       "partition 0 with a full isr")
        leader, follower = p.replica_nodes if p.leader_id == p.replica_nodes[0] else p.replica_nodes[::-1]
        third = next(s.node_id for s in specs if s.node_id not in (leader, follower))
        port = by_id[third].client_port

        processes[follower].send_signal(signal.SIGTERM)  # controlled shutdown: leaves the isr
        assert processes[follower].wait(timeout=30) == 0
        wait_until(lambda: (x := _partition(port, topic, 0)) is not None and list(x.isr_nodes) == [leader],
                   "the isr shrunk to the leader")
        processes[leader].send_signal(signal.SIGKILL)
        processes[leader].wait(timeout=10)
        start(by_id[follower])
        offline = wait_until(lambda: (x := _partition(port, topic, 0)) is not None and x.leader_id == -1 and x,
                             "the partition offline once the leader is fenced")
        assert list(offline.isr_nodes) == [leader]
        wait_until(lambda: by_id[follower].log_file.read_text().count("unfenced") >= 2, "the follower back, unfenced")
        assert _partition(port, topic, 0).leader_id == -1  # unclean election is off: it stays offline

        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        if level == "cluster":
            from tests.controller.test_reassignment_broker_configs import alter_default

            assert alter_default(port, "unclean.leader.election.enable", "true") == (0, None)
        else:
            if level == "topic":
                kind, name = ConfigResource.Type.TOPIC, topic
            else:
                from tests.clusterkit import describe_quorum

                active = wait_until(lambda: next((q.leader_id for s in specs if s.node_id != leader
                                                  and (q := describe_quorum(s.controller_port)) is not None
                                                  and q.leader_id >= 0), None), "the active controller")
                kind, name = ConfigResource.Type.BROKER, str(active)
            resource = ConfigResource(kind, name, incremental_configs=[
                ConfigEntry("unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET)])
            admin.incremental_alter_configs([resource])[resource].result(timeout=30)
        elected = wait_until(lambda: (x := _partition(port, topic, 0)) is not None and x.leader_id == follower and x,
                             "the follower elected uncleanly")
        assert list(elected.isr_nodes) == [follower]

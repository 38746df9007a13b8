"""Dynamic broker configs (KIP-226) in a KRaft cluster are ConfigRecords.

Three combined nodes. IncrementalAlterConfigs for the cluster-wide default
(BROKER resource "", as kafka-configs.sh --entity-default sends it; the
Python clients refuse an empty broker name, so raw wire to any node) and,
from confluent-kafka's AdminClient, for one broker (resource "2", sent to
broker 2). The receiving broker
checks the new set and forwards it to the active controller, which writes
ConfigRecords of resource type BROKER; every node applies them from its
metadata image, so DescribeConfigs (raw wire, each node) shows the default
as DYNAMIC_DEFAULT_BROKER_CONFIG (source 3) everywhere and the per-broker
value as DYNAMIC_BROKER_CONFIG (source 2) on broker 2 only. A node restarted
gets them back from the metadata log; a bad value is refused (INVALID_CONFIG)
and nothing changes.
"""

from __future__ import annotations

import signal
import sys

import pytest

from kref.node.local_cluster import bootstrap_servers, wait_ready
from kref.protocol.client import WireClient
from kref.protocol.codec import request_class
from tests.clusterkit import FAST_CLUSTER_SETTINGS, wait_until
from tests.controller.trace_validation import checked_cluster
from tests.controller.test_reassignment_processes import wait_long

STARTUP_S = 120
SETTINGS = FAST_CLUSTER_SETTINGS


def dynamic_configs(port: int, node_id: int) -> dict[str, tuple[str, int]]:
    """name -> (value, source) of the broker's configs that come from a dynamic source."""
    cls = request_class(32, 4)
    m = sys.modules[cls.__module__]
    request = cls(resources=(m.DescribeConfigsResource(resource_type=4, resource_name=str(node_id),
                                                       configuration_keys=None),),
                  include_synonyms=False, include_documentation=False)
    try:
        with WireClient("127.0.0.1", port, timeout=10) as client:
            result = client.request(request).results[0]
    except OSError:
        return {}
    assert result.error_code == 0, result
    return {c.name: (c.value, c.config_source) for c in result.configs if c.config_source in (2, 3)}


def alter_default(port: int, name: str, value: str | None) -> tuple[int, str | None]:
    """IncrementalAlterConfigs v1 of the cluster default: SET (0) or DELETE (1) one config."""
    cls = request_class(44, 1)
    m = sys.modules[cls.__module__]
    request = cls(resources=(m.AlterConfigsResource(resource_type=4, resource_name="", configs=(
        m.AlterableConfig(name=name, config_operation=0 if value is not None else 1, value=value),)),),
        validate_only=False)
    with WireClient("127.0.0.1", port, timeout=30) as client:
        result = client.request(request).responses[0]
    return result.error_code, result.error_message


@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
def test_dynamic_broker_configs_are_the_same_on_every_node(tmp_path):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    with checked_cluster(tmp_path, 3, 3, SETTINGS) as (specs, processes, start):
        by_id = {s.node_id: s for s in specs}
        # Start-up alone can take most of a minute on a loaded 2-core box.
        assert wait_ready(specs, STARTUP_S, alive=lambda: all(x.poll() is None for x in processes.values())), \
            "every broker listing all three brokers"
        admin = AdminClient({"bootstrap.servers": bootstrap_servers(specs)})

        def alter(name, *entries):
            resource = ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=list(entries))
            return admin.incremental_alter_configs([resource])[resource].result(timeout=30)

        assert alter_default(specs[0].client_port, "log.retention.ms", "7200000") == (0, None)
        alter("2", ConfigEntry("message.max.bytes", "500000", incremental_operation=AlterConfigOpType.SET))

        def expected(node_id):
            out = {"log.retention.ms": ("7200000", 3)}
            if node_id == 2:
                out["message.max.bytes"] = ("500000", 2)
            return out

        for s in specs:
            wait_until(lambda s=s: dynamic_configs(s.client_port, s.node_id) == expected(s.node_id),
                       f"the dynamic configs on node {s.node_id}")

        code, _ = alter_default(specs[1].client_port, "log.retention.ms", "not-a-number")
        assert code == 40  # INVALID_CONFIG
        with pytest.raises(Exception, match="INVALID_CONFIG|nvalid"):
            alter("2", ConfigEntry("message.max.bytes", "-5", incremental_operation=AlterConfigOpType.SET))
        assert all(dynamic_configs(s.client_port, s.node_id) == expected(s.node_id) for s in specs)

        # A restarted node replays them from the metadata log (no per-node file).
        processes[3].send_signal(signal.SIGTERM)
        assert processes[3].wait(timeout=30) == 0
        start(by_id[3])
        wait_long(lambda: dynamic_configs(by_id[3].client_port, 3) == expected(3), "the configs after a restart")

        assert alter_default(specs[2].client_port, "log.retention.ms", None) == (0, None)
        for s in specs:
            wait_until(lambda s=s: "log.retention.ms" not in dynamic_configs(s.client_port, s.node_id),
                       f"the deleted default on node {s.node_id}")

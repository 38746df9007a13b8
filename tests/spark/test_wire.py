"""kref/spark/wire.py against real kref brokers: leaders, auto-creation, refusal, unreachable, a cluster."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kref.node import local_cluster
from kref.spark import client, wire
from tests.clusterkit import FAST_CLUSTER_SETTINGS, running_cluster, wait_unfenced, wait_until


def _leaders_seen_by_librdkafka(bootstrap: str, topic: str) -> list[int]:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    parts = meta.topics[topic].partitions
    return [parts[i].leader for i in range(len(parts))]


def test_leaders_match_a_real_client_and_connections_are_kept(broker):
    topic = broker.create_topic(3)
    handle = wire.Brokers(broker.bootstrap, timeout_s=10)
    try:
        leaders = handle.leaders(topic)
        assert leaders == _leaders_seen_by_librdkafka(broker.bootstrap, topic)
        node = leaders[0]
        assert handle.connection(node) is handle.connection(node)
        # kref serves Produce and Fetch in these ranges (ApiVersions read once per connection).
        assert handle.api_version(node, 0, 3, 11) == 11
        assert handle.api_version(node, 1, 4, 12) == 12
        assert handle.api_version(node, 9999, 0, 1) is None
        # After an I/O error the caller drops the connection; the next use reconnects.
        old = handle.connection(node)
        handle.drop(node)
        assert handle.connection(node) is not old
        assert handle.leaders(topic, refresh=True) == leaders
    finally:
        handle.close()


def test_create_asks_for_auto_creation_and_a_missing_topic_is_a_clear_error(broker):
    handle = wire.Brokers(broker.bootstrap, timeout_s=10)
    try:
        with pytest.raises(client.UnknownTopicError, match="does not exist"):
            handle.leaders("wire-missing-topic")
        leaders = handle.leaders("wire-auto-created", create=True)  # the broker's default allows it
        assert leaders and all(leader >= 0 for leader in leaders)
    finally:
        handle.close()


def test_refusing_broker_and_unreachable_broker(tmp_path, start_kref_broker):
    with start_kref_broker(tmp_path, {"auto.create.topics.enable": "false"}) as bootstrap:
        handle = wire.Brokers(bootstrap, timeout_s=5)
        try:
            with pytest.raises(client.UnknownTopicError, match="auto.create.topics.enable=false"):
                handle.leaders("wire-refused", create=True)
        finally:
            handle.close()
    with pytest.raises(client.BrokerUnreachableError, match="unreachable"):
        wire.Brokers(bootstrap, timeout_s=2).leaders("anything")


def test_pool_keeps_one_idle_handle_per_process(broker):
    first = wire.brokers(broker.bootstrap, 10)
    wire.keep(first)
    assert wire.brokers(broker.bootstrap, 10) is first
    wire.keep(first)
    # Another timeout keeps the connections (a worker's reads and writes differ
    # there) and applies to the open sockets too.
    first.leaders(broker.create_topic(1))
    again = wire.brokers(broker.bootstrap, 11)
    assert again is first and again.timeout_s == 11
    assert all(c.sock.gettimeout() == 11 for c in [again._seed_conn, *again._connections.values()] if c)
    wire.keep(again)
    other = wire.brokers("127.0.0.1:1", 11)  # another bootstrap list: a new handle, the idle one closed
    assert other is not first and first._seed_conn is None
    other.close()


def test_native_config_keeps_unknown_and_secured_settings_on_librdkafka():
    assert wire.native_config({"bootstrap.servers": "h:1", "acks": "all", "linger.ms": "5"})
    assert not wire.native_config({"bootstrap.servers": "h:1", "security.protocol": "SASL_PLAINTEXT"})
    assert not wire.native_config({"bootstrap.servers": "h:1", "ssl.ca.location": "/x"})
    assert wire.parse_bootstrap("a:1, [::1]:2,PLAINTEXT://c:3") == [("a", 1), ("::1", 2), ("c", 3)]
    with pytest.raises(client.KrefConnectorError, match="host:port"):
        wire.parse_bootstrap("nohost")


@pytest.mark.timeout(300)
def test_leaders_on_a_cluster_point_at_each_node(tmp_path):
    with running_cluster(tmp_path, 1, 2, FAST_CLUSTER_SETTINGS) as (specs, processes, _start):
        bootstrap = local_cluster.bootstrap_servers(specs)
        wait_unfenced(specs, processes)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic("spread", 6, 1)]).values():
            future.result(30)
        wait_until(lambda: all(x >= 0 for x in _leaders_seen_by_librdkafka(bootstrap, "spread")),
                   "every partition led")
        handle = wire.Brokers(bootstrap, timeout_s=10)
        try:
            leaders = handle.leaders("spread")
            assert leaders == _leaders_seen_by_librdkafka(bootstrap, "spread")
            assert len(set(leaders)) == 2, f"rf=1 partitions of 6 all on one node: {leaders}"
            for node in set(leaders):
                assert handle.api_version(node, 1, 4, 12) is not None
        finally:
            handle.close()

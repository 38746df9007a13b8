"""Clients that arrive while a KRaft cluster is still starting (issue 9's start-up gap).

Three combined nodes are started and clients connect at once, before any
broker has registered: nothing waits for "unfenced" in the logs.

- Every node's first Metadata answer (raw wire) already lists that node and
  gives as controller_id a broker the same answer lists. Before the fix a
  node answered as soon as its port was open: no broker at all (none
  unfenced yet) and the quorum leader as controller_id, which the client
  cannot reach.
- An unmodified confluent-kafka AdminClient created at the same moment
  creates a topic within a bound. Before the fix librdkafka got "0 brokers"
  and waited for its next metadata refresh: the CreateTopics hung for 40 s
  and more (measured in /work/notes/s5/cluster.md).

The nodes hold client connections until caught up and unfenced
(ClusterView.serving), as Kafka's brokers enable request processing only
then; short quorum and session timeouts, every wait bounded.
"""

from __future__ import annotations

import socket
import time

import pytest

from kref.protocol.client import WireClient
from kref.protocol.codec import request_class
from tests.clusterkit import FAST_CLUSTER_SETTINGS
from tests.controller.trace_validation import checked_cluster

SETTINGS = FAST_CLUSTER_SETTINGS
BOUND_S = 60  # generous for a loaded 2-core box (start-up alone took 16 s at load 16); the old code never answered usefully


def _connect(port: int, deadline: float) -> WireClient:
    while True:
        try:
            return WireClient("127.0.0.1", port, timeout=BOUND_S)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _first_metadata(port: int):
    cls = request_class(3, 12)
    deadline = time.monotonic() + BOUND_S
    with _connect(port, deadline) as client:
        return client.request(cls(topics=None, allow_auto_topic_creation=False,
                                  include_topic_authorized_operations=False))


@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
def test_first_answers_list_the_node_and_a_reachable_controller(tmp_path):
    with checked_cluster(tmp_path, 3, 3, SETTINGS) as (specs, processes, start):
        for s in specs:
            try:
                response = _first_metadata(s.client_port)
            except (OSError, socket.timeout) as exc:
                raise AssertionError(f"node {s.node_id} gave no Metadata within {BOUND_S}s: {exc}") from None
            listed = sorted(b.node_id for b in response.brokers)
            assert s.node_id in listed, (s.node_id, listed)
            assert response.controller_id in listed, (response.controller_id, listed)


@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
def test_create_topics_sent_while_the_cluster_starts(tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    from kref.node.local_cluster import bootstrap_servers

    with checked_cluster(tmp_path, 3, 3, SETTINGS) as (specs, processes, start):
        admin = AdminClient({"bootstrap.servers": bootstrap_servers(specs), "log_level": 0})
        # Replication factor 1: a client this early may find fewer than three brokers
        # unfenced, and then a larger factor is refused (INVALID_REPLICATION_FACTOR, fast).
        admin.create_topics([NewTopic("early", 2, 1)])["early"].result(BOUND_S)
        topics = admin.list_topics("early", timeout=BOUND_S).topics
        assert topics["early"].error is None and len(topics["early"].partitions) == 2


@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
def test_controller_only_quorum_leader_is_never_the_client_controller(tmp_path):
    """Three controllers, one broker (node 1; nodes 2 and 3 are controller-only).
    The quorum leader is a controller-only node about two runs in three; naming it
    as controller_id (the old answer) left librdkafka waiting for a broker it can
    never reach, and CreateTopics hung (4 of 4 measured runs with such a leader).
    The answer names node 1, the broker that forwards."""
    from confluent_kafka.admin import AdminClient, NewTopic

    with checked_cluster(tmp_path, 3, 1, SETTINGS) as (specs, processes, start):
        broker = specs[0]
        response = _first_metadata(broker.client_port)
        assert [b.node_id for b in response.brokers] == [1] and response.controller_id == 1
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.client_port}", "log_level": 0})
        admin.create_topics([NewTopic("on-one", 1, 1)])["on-one"].result(BOUND_S)

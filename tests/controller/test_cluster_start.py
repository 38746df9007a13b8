"""A cluster node has started when it logs its own listeners (kref/node/local_cluster.py, wait_listening).

The ports of a test cluster are chosen before the nodes bind them, so a port
may be taken meanwhile by a node of another cluster (another test beside
this one): a connection to it would succeed and reach the wrong node. Here
a real `kref broker` process finds its client port held by a listening
socket (an open port, as another broker's would be). Its start must fail at
once with the node's own "cannot listen" line, not pass as ready, not wait
for a timeout. And a node that binds its ports is ready on its own lines,
in running_cluster as in a restart through the `start` it yields. That
node's trace (a single voter, a SIGTERM, a restart) is checked against
spec/KRaft.tla (tests/controller/trace_validation.py).
"""

from __future__ import annotations

import signal
import socket

import pytest

from kref.node import local_cluster
from kref.storage import meta_properties
from tests.clusterkit import QUORUM_TIMEOUTS, describe_quorum, stop_processes, wait_until
from tests.controller.trace_validation import checked_cluster


def test_a_node_whose_port_is_held_fails_its_start_with_its_own_line(tmp_path):
    (spec,) = local_cluster.plan(tmp_path, controllers=1, brokers=1, overrides=QUORUM_TIMEOUTS)
    local_cluster.format_nodes([spec], meta_properties.random_uuid())
    with socket.socket() as other:
        other.bind(("127.0.0.1", spec.client_port))
        other.listen()  # the port is open: a connection would be accepted
        processes = {}
        try:
            since = local_cluster.log_size(spec)
            processes[1] = local_cluster.start_node(spec)
            with pytest.raises(local_cluster.NodeStartError, match="cannot listen on PLAINTEXT") as failed:
                local_cluster.wait_listening(spec, processes[1], since, timeout_s=300)
            print(failed.value)
        finally:
            stop_processes(processes)


def test_running_cluster_and_a_restart_wait_for_the_nodes_own_lines(tmp_path):
    with checked_cluster(tmp_path, 1, 1, QUORUM_TIMEOUTS) as (specs, processes, start):
        (spec,) = specs
        lines = local_cluster.listening_lines(spec)
        assert len(lines) == 2  # the CONTROLLER listener and the client listener
        assert all(line in spec.log_file.read_text() for line in lines)
        processes[1].send_signal(signal.SIGTERM)
        processes[1].wait(timeout=60)
        since = local_cluster.log_size(spec)
        start(spec)
        # The restart's own lines, after what the first start logged.
        with open(spec.log_file, "rb") as f:
            f.seek(since)
            restarted = f.read().decode(errors="replace")
        assert all(line in restarted for line in lines)
        wait_until(lambda: describe_quorum(spec.controller_port) is not None, "the restarted node to lead")

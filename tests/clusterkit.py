"""What the process tests of a kref cluster share: settings, bounded waits, a running cluster.

Theory of operation
-------------------
Every test that starts real `kref broker` processes needs the same few
things: short timeouts so that elections, fencing and isr changes happen in
seconds (FAST_CLUSTER_SETTINGS; a test adds or overrides keys with
`{**FAST_CLUSTER_SETTINGS, ...}`), a bounded poll (`wait_until`), a cluster
laid out as `kref cluster` lays it out and stopped by the pids it started
(`running_cluster`), and the quorum as DescribeQuorum shows it.

`running_cluster` (and the `start` it yields, for restarts) returns only
once each node has logged its own listeners bound
(local_cluster.wait_listening): the ports are chosen before the nodes bind
them, so an open port may be another cluster's node; a node that logs
"cannot listen" fails the start at once, with its line.

The waits and the stopping live in kref/node/cluster_waits.py (the cluster
benchmarks use them too) and are re-exported here; see its doc for why
`wait_unfenced` is bounded by progress rather than by a fixed time.
"""

from __future__ import annotations

import contextlib
import os
import random

from kref.node import local_cluster
from kref.node.cluster_waits import (  # noqa: F401 - re-exported for the tests
    WAIT_S,
    WaitTimeout,
    describe_quorum,
    log_text,
    stop_processes,
    wait_for_leader,
    wait_listed,
    wait_unfenced,
    wait_until,
)
from kref.storage import meta_properties

# Election and quorum fetch timeouts of every cluster test (Kafka's defaults: 1 s and 2 s).
QUORUM_TIMEOUTS = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
}
# Brokers heartbeat often and are fenced after 3 s (Kafka: 2 s and 9 s).
FAST_CLUSTER_SETTINGS = {
    **QUORUM_TIMEOUTS,
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "3000",
}


@contextlib.contextmanager
def running_cluster(tmp_path, controllers: int, brokers: int, overrides: dict[str, str]):
    """Formatted nodes started as real processes with a printed jitter seed, each
    listening (its own log line); yields (specs, processes, start) and stops every
    process it started. `start(spec)` starts a node again and waits the same way."""
    seed = int(os.environ.get("KREF_TEST_SEED", random.randrange(1 << 30)))
    print(f"seed={seed} (KREF_TEST_SEED; the election jitter of every node)")
    specs = local_cluster.plan(tmp_path, controllers=controllers, brokers=brokers, overrides=overrides)
    local_cluster.format_nodes(specs, meta_properties.random_uuid())
    processes = {}

    def launch(spec) -> int:
        since = local_cluster.log_size(spec)
        processes[spec.node_id] = local_cluster.start_node(
            spec, "--trace-file", str(spec.dir / "trace.ndjson"), env={"KREF_QUORUM_JITTER_SEED": str(seed)}
        )
        return since

    def start(spec):
        since = launch(spec)
        local_cluster.wait_listening(spec, processes[spec.node_id], since)

    try:
        started = [(s, launch(s)) for s in specs]  # all at once, then each one's own lines
        for s, since in started:
            local_cluster.wait_listening(s, processes[s.node_id], since)
        yield specs, processes, start
    finally:
        stop_processes(processes)

"""A KRaft quorum of three real `kref broker` processes (process.roles=controller).

Started as `kref cluster` lays them out (kref/controller/local_cluster.py),
formatted with one cluster id, with short timeouts (election 300 ms, fetch
600 ms), each writing its quorum trace (spec/KRaft.tla's action names).
Over real sockets with Kafka's RPCs (Vote, BeginQuorumEpoch,
EndQuorumEpoch, Fetch of __cluster_metadata-0, DescribeQuorum via kio):

- a leader is elected and the voters replicate its LeaderChange record;
- kill -9 of the leader: a new leader in a higher epoch; the killed node
  restarts from its quorum-state and log and rejoins as a follower;
- SIGSTOP of the leader past the election timeout: the others elect a new
  leader; after SIGCONT the old leader never advances its high watermark
  in its old epoch (trace), learns the new epoch and follows;
- at the end every node's metadata log agrees on the committed prefix.

Every wait is bounded; the seed of the nodes' election jitter is printed
(KREF_TEST_SEED=N reruns with it; the victims are fixed: the first leader
is killed, the second stopped).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time

import pytest

from kref.controller import local_cluster
from kref.controller import meta_properties
from kref.controller.metadata_log import MetadataLog
from kref.protocol.client import WireClient
from kref.protocol.codec import request_class
from kref.protocol.errors import ErrorCode
from kref.trace import read_ndjson_trace

TIMEOUTS = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
}
WAIT_S = 30


def describe_quorum(port: int):
    import sys

    cls = request_class(55, 0)
    m = sys.modules[cls.__module__]
    request = cls(topics=(m.TopicData(topic_name="__cluster_metadata", partitions=(m.PartitionData(partition_index=0),)),))
    try:
        with WireClient("127.0.0.1", port, timeout=2) as client:
            response = client.request(request)
    except OSError:
        return None
    if response.error_code != ErrorCode.NONE:
        return None
    return response.topics[0].partitions[0]


def wait_for_leader(specs, *, exclude=(), above_epoch=-1):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for s in specs:
            if s.node_id in exclude:
                continue
            p = describe_quorum(s.controller_port)
            if p is not None and p.leader_epoch > above_epoch:
                return s.node_id, p
        time.sleep(0.1)
    raise AssertionError(f"no leader above epoch {above_epoch} within {WAIT_S}s")


def wait_until(predicate, what):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@contextlib.contextmanager
def running_cluster(tmp_path, controllers: int, brokers: int, overrides: dict[str, str]):
    """Formatted nodes started as real processes with a printed jitter seed;
    yields (specs, processes, start) and stops every process it started."""
    seed = int(os.environ.get("KREF_TEST_SEED", random.randrange(1 << 30)))
    print(f"seed={seed} (KREF_TEST_SEED; the election jitter of every node)")
    specs = local_cluster.plan(tmp_path, controllers=controllers, brokers=brokers, overrides=overrides)
    local_cluster.format_nodes(specs, meta_properties.random_uuid())
    processes = {}

    def start(spec):
        processes[spec.node_id] = local_cluster.start_node(
            spec, "--trace-file", str(spec.dir / "trace.ndjson"), env={"KREF_QUORUM_JITTER_SEED": str(seed)}
        )

    try:
        for s in specs:
            start(s)
        yield specs, processes, start
    finally:
        for p in processes.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
        for p in processes.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture
def quorum(tmp_path):
    with running_cluster(tmp_path, 3, 0, TIMEOUTS) as running:
        yield running


def test_election_failover_and_zombie(quorum):
    specs, processes, start = quorum
    by_id = {s.node_id: s for s in specs}

    # 1. A leader, and every voter holding its LeaderChange record.
    leader, p = wait_for_leader(specs)
    wait_until(
        lambda: (q := describe_quorum(by_id[leader].controller_port)) is not None
        and all(v.log_end_offset >= q.high_watermark > 0 for v in q.current_voters),
        "the voters to replicate the LeaderChange record",
    )

    # 2. kill -9 of the leader: a new leader in a higher epoch.
    processes[leader].send_signal(signal.SIGKILL)
    processes[leader].wait(timeout=10)
    second, p2 = wait_for_leader(specs, exclude={leader}, above_epoch=p.leader_epoch)
    assert second != leader
    # The killed node restarts from its quorum-state and log, and follows.
    start(by_id[leader])
    wait_until(
        lambda: (q := describe_quorum(by_id[second].controller_port)) is not None
        and q.leader_epoch == p2.leader_epoch
        and all(v.log_end_offset == q.high_watermark for v in q.current_voters),
        "the restarted node to catch up with the new leader",
    )

    # 3. SIGSTOP the new leader past the election timeout.
    zombie, zombie_epoch = second, p2.leader_epoch
    processes[zombie].send_signal(signal.SIGSTOP)
    third, p3 = wait_for_leader(specs, exclude={zombie}, above_epoch=zombie_epoch)
    assert third != zombie
    resumed_ms = time.monotonic_ns() // 1_000_000
    processes[zombie].send_signal(signal.SIGCONT)
    # The resumed node learns the new epoch and follows the leader (which
    # may have changed again meanwhile: any leader above the zombie's epoch).
    def caught_up():
        leader_id, q = wait_for_leader(specs, above_epoch=zombie_epoch)
        done = leader_id != zombie and all(v.log_end_offset == q.high_watermark for v in q.current_voters)
        return q.high_watermark if done else None

    committed = wait_until(caught_up, "the resumed old leader to follow")
    assert describe_quorum(by_id[zombie].controller_port) is None  # it no longer answers as leader

    for s in specs:
        processes[s.node_id].send_signal(signal.SIGTERM)
        processes[s.node_id].wait(timeout=15)

    trace = read_ndjson_trace(by_id[zombie].dir / "trace.ndjson")
    after = [e for e in trace if e["time_ms"] >= resumed_ms]
    assert after, "the resumed node traced nothing"
    assert not [e for e in after if e["type"] == "AdvanceHighWatermark" and e["leader_epoch"] == zombie_epoch]
    assert any(e["leader_epoch"] > zombie_epoch for e in after)

    # 4. Every node's metadata log agrees on the prefix committed before the
    # shutdown (stopping the nodes one by one makes more elections).
    logs = {}
    for s in specs:
        metadata_log = MetadataLog(str(s.data_dir), 0)
        logs[s.node_id] = metadata_log.epochs(), metadata_log.log_end_offset
        metadata_log.close()
    assert committed >= 3  # one LeaderChange per epoch that committed
    epochs = {node: [(e, o) for e, o in entries if o < committed] for node, (entries, _) in logs.items()}
    assert len({tuple(v) for v in epochs.values()}) == 1, logs
    assert all(end >= committed for _, end in logs.values()), logs
    assert os.path.exists(by_id[zombie].data_dir / "__cluster_metadata-0" / "quorum-state")

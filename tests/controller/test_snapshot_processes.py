"""KRaft metadata snapshots with real processes (kref/controller/snapshot.py).

- FetchSnapshot catch-up: 3 combined nodes and a broker-only node with a
  tiny snapshot threshold, small metadata segments and a 1-byte retention
  (the log starts at the latest snapshot as soon as there is one). A voter
  and the observer are killed; many topics are created; every live node
  snapshots and deletes the segments past the killed nodes' log ends. They
  return, are answered with a snapshot id, fetch the snapshot in 2 KiB chunks
  (FetchSnapshot, API 59), resume Fetch after it, and an unmodified
  confluent-kafka client sees every topic through each of them (and a raw
  Metadata request to that node lists them all).
- Restart: one combined node whose log no longer starts at 0 restarts from
  its snapshot plus the log after it; Metadata answers show every topic
  with its partitions.
- Corrupt snapshot: the latest snapshot gets a flipped byte (bad CRC) and a
  newer torn one (no footer) is added; the restarted node logs each as
  ignored, loads from the log (retention unbounded there) and answers
  Metadata with every topic.

Short quorum and session timeouts; every wait is bounded.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from kref.controller import snapshot as snap
from kref.node.local_cluster import bootstrap_servers
from kref.storage.metadata_log import MetadataLog
from kref.protocol.client import WireClient
from kref.protocol.codec import request_class
from tests.clusterkit import describe_quorum, wait_until, wait_listed
from tests.controller.trace_validation import checked_cluster

SINGLE = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "3000",
    "metadata.log.max.record.bytes.between.snapshots": "2000",
    "metadata.log.segment.bytes": "4096",
}
SETTINGS = {**SINGLE, "metadata.max.retention.bytes": "1", "controller.quorum.fetch.snapshot.max.bytes": "2048"}
BOUND_S = 60
TOPICS = 40


def metadata_dir(spec) -> Path:
    return spec.data_dir / "__cluster_metadata-0"


def segment_bases(spec) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(metadata_dir(spec)) if n.endswith(".log"))


def snapshot_ids(spec) -> list[snap.SnapshotId]:
    return sorted(i for i in map(snap.parse_file_name, os.listdir(metadata_dir(spec))) if i is not None)


def metadata_topics(port: int) -> dict[str, int]:
    """Topic -> partition count, from a raw Metadata v12 request to this node only."""
    cls = request_class(3, 12)
    try:
        with WireClient("127.0.0.1", port, timeout=BOUND_S) as client:
            response = client.request(cls(topics=None, allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False))
    except OSError:
        return {}  # not listening (yet)
    return {t.name: len(t.partitions) for t in response.topics if t.error_code == 0}


def fetch_snapshot(spec, snapshot_id: snap.SnapshotId, position: int) -> tuple[int, int, bytes]:
    """(error code, size, bytes) of a raw FetchSnapshot v1 to the node's controller listener."""
    import sys

    cls = request_class(59, 1)
    m = sys.modules[cls.__module__]
    request = cls(cluster_id=None, replica_id=99, max_bytes=1 << 20, topics=(m.TopicSnapshot(
        name="__cluster_metadata", partitions=(m.PartitionSnapshot(
            partition=0, current_leader_epoch=describe_quorum(spec.controller_port).leader_epoch,
            snapshot_id=m.SnapshotId(end_offset=snapshot_id.end_offset, epoch=snapshot_id.epoch), position=position,
        ),)),))
    with WireClient("127.0.0.1", spec.controller_port, timeout=BOUND_S) as client:
        p = client.request(request).topics[0].partitions[0]
    assert p.current_leader.leader_id == spec.node_id
    return int(p.error_code), p.size, bytes(p.unaligned_records or b"")


def create_topics(bootstrap: str, names: list[str], partitions: int = 2) -> None:
    """Create topics in batches of 10; a batch that meets an election (NOT_CONTROLLER,
    a restarted voter without pre-vote can cause one) is retried within the bound."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    deadline = time.monotonic() + BOUND_S
    pending = list(names)
    while pending:
        batch, pending = pending[:10], pending[10:]
        while batch:
            futures = admin.create_topics([NewTopic(n, partitions, 1) for n in batch], operation_timeout=BOUND_S)
            retry = []
            for name, future in futures.items():
                try:
                    future.result(BOUND_S)
                except KafkaException as exc:
                    error = exc.args[0]
                    if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                        continue
                    if not error.retriable() and error.code() != KafkaError.NOT_CONTROLLER or time.monotonic() > deadline:
                        raise
                    retry.append(name)
            batch = retry
            if batch:
                time.sleep(0.2)


def log_text(spec) -> str:
    try:
        return spec.log_file.read_text()
    except FileNotFoundError:
        return ""


def log_end_offset_of_stopped(spec) -> int:
    stopped_log = MetadataLog(str(spec.data_dir), 0)
    try:
        return stopped_log.log_end_offset
    finally:
        stopped_log.close()


@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
def test_nodes_behind_the_log_start_catch_up_through_fetch_snapshot(tmp_path):
    """A voter (combined node) and an observer (broker-only node 4) are killed, the
    cluster moves on past their logs, and both come back through FetchSnapshot."""
    from confluent_kafka.admin import AdminClient


    with checked_cluster(tmp_path, 3, 4, SETTINGS) as (specs, processes, start):
        wait_listed(specs, processes)
        # The voter victim does not lead the quorum; node 4 is the broker-only observer.
        leader = wait_until(lambda: next((s.node_id for s in specs if s.controller_port
                                          and describe_quorum(s.controller_port)), None), "a quorum leader")
        voter = next(s for s in specs if s.node_id != leader and s.controller_port)
        observer = next(s for s in specs if s.controller_port is None)
        victims = [voter, observer]
        for v in victims:
            processes[v.node_id].send_signal(signal.SIGKILL)
            processes[v.node_id].wait(timeout=BOUND_S)
        ends = {v.node_id: log_end_offset_of_stopped(v) for v in victims}
        live = [s for s in specs if s not in victims]

        names = [f"snap-{i:03d}" for i in range(TOPICS)]
        create_topics(bootstrap_servers(live), names)
        # Every live node wrote a snapshot and its log now starts past where the victims stopped.
        wait_until(lambda: all(snapshot_ids(s) and segment_bases(s)[0] > max(ends.values()) for s in live),
                   "the live nodes to snapshot and delete the segments the victims would need")

        for v in victims:
            start(v)
        for v in victims:
            wait_until(lambda v=v: "from the leader" in log_text(v), f"node {v.node_id} to load the leader's snapshot")
            # In several chunks of at most controller.quorum.fetch.snapshot.max.bytes.
            line = next(x for x in log_text(v).splitlines() if "from the leader" in x)
            size, chunks = (int(w) for w in re.search(r"\((\d+) bytes in (\d+) FetchSnapshot chunks", line).groups())
            assert chunks == -(-size // 2048) and chunks > 1, line
            wait_until(lambda v=v: set(names) <= set(metadata_topics(v.client_port)),
                       f"node {v.node_id}'s Metadata to list every topic")
            listed_here = metadata_topics(v.client_port)
            assert all(listed_here[n] == 2 for n in names), listed_here
            # Its own log now starts at the snapshot it loaded, not at 0.
            assert segment_bases(v)[0] > 0 and snapshot_ids(v)

            # An unmodified client bootstrapped through that node alone sees every topic.
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{v.client_port}", "log_level": 0})
            listed = admin.list_topics(timeout=BOUND_S).topics
            assert set(names) <= set(listed), sorted(set(names) - set(listed))
        # And the cluster keeps working through them: one more topic, seen everywhere.
        create_topics(f"127.0.0.1:{voter.client_port}", ["after-snapshot"])
        wait_until(lambda: all("after-snapshot" in metadata_topics(s.client_port) for s in specs),
                   "the new topic on every node")


def _restart(spec, processes, start) -> None:
    processes[spec.node_id].send_signal(signal.SIGTERM)
    processes[spec.node_id].wait(timeout=BOUND_S)
    start(spec)


@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
def test_restart_loads_the_snapshot_then_the_log_after_it(tmp_path):
    with checked_cluster(tmp_path, 1, 1, SETTINGS) as (specs, processes, start):
        (node,) = specs
        names = [f"r-{i:03d}" for i in range(TOPICS)]
        create_topics(f"127.0.0.1:{node.client_port}", names, partitions=3)
        wait_until(lambda: snapshot_ids(node) and segment_bases(node)[0] > 0,
                   "a snapshot and the log starting after offset 0")
        # FetchSnapshot v1 on the wire (as an observer would send it): the leader serves
        # the file's bytes from a position, and names Kafka's errors.
        latest = snapshot_ids(node)[-1]  # the node is idle now: no newer snapshot comes
        data = (metadata_dir(node) / latest.file_name).read_bytes()
        # At most controller.quorum.fetch.snapshot.max.bytes (2048 here) per answer.
        assert fetch_snapshot(node, latest, 100) == (0, len(data), data[100 : 100 + 2048])
        assert fetch_snapshot(node, snap.SnapshotId(latest.end_offset + 1000, latest.epoch), 0)[0] == 98  # SNAPSHOT_NOT_FOUND
        assert fetch_snapshot(node, latest, 1 << 40)[0] in (99, 98)  # POSITION_OUT_OF_RANGE (or already replaced)
        # Topics after the snapshot live only in the log.
        create_topics(f"127.0.0.1:{node.client_port}", ["tail-1", "tail-2"], partitions=1)
        before = metadata_topics(node.client_port)
        _restart(node, processes, start)
        wait_until(lambda: log_text(node).count("loaded snapshot") >= 1, "the restarted node to load its snapshot")
        after = wait_until(lambda: (t := metadata_topics(node.client_port)) and set(before) <= set(t) and t,
                           "Metadata with every topic after the restart")
        assert {n: after[n] for n in before} == before
        assert all(after[n] == 3 for n in names) and after["tail-1"] == 1


@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
def test_a_corrupt_snapshot_is_ignored_with_a_clear_line(tmp_path):
    settings = {**SINGLE, "metadata.max.retention.bytes": "-1", "metadata.max.retention.ms": "-1"}
    with checked_cluster(tmp_path, 1, 1, settings) as (specs, processes, start):
        (node,) = specs
        names = [f"c-{i:03d}" for i in range(TOPICS)]
        create_topics(f"127.0.0.1:{node.client_port}", names)
        wait_until(lambda: snapshot_ids(node), "a snapshot")
        processes[node.node_id].send_signal(signal.SIGTERM)
        processes[node.node_id].wait(timeout=BOUND_S)
        latest = snapshot_ids(node)[-1]
        path = metadata_dir(node) / latest.file_name
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF  # a flipped byte: bad CRC
        path.write_bytes(bytes(data))
        torn_id = snap.SnapshotId(latest.end_offset + 1, latest.epoch)
        (metadata_dir(node) / torn_id.file_name).write_bytes(bytes(data[: len(data) // 3]))
        start(node)
        wait_until(lambda: all(f"{i.file_name} ignored" in log_text(node) for i in (latest, torn_id)),
                   "both bad snapshots to be logged as ignored")
        wait_until(lambda: set(names) <= set(metadata_topics(node.client_port)), "every topic after the restart")
        text = log_text(node)
        assert "CRC" in text and ("no SnapshotFooter" in text or "bad batch" in text), text[-2000:]

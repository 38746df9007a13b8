"""KIP-455 partition reassignment on a real 4-broker KRaft cluster, real clients.

kafka-python's KafkaAdminClient moves an RF=2 partition to the two brokers
that do not hold it while a confluent-kafka producer writes with acks=all:
the controller grows the replica set (adding/removing, as
ListPartitionReassignments shows while it lasts), the new brokers fetch as
followers and join the isr through AlterPartition, the controller completes
the move (the old leader is removed, so leadership moves and a new
leader_epoch starts) and the removed brokers delete their logs. Afterwards
every acknowledged record is read back from the new leader. The errors Kafka
answers come back per partition: UNKNOWN_TOPIC_OR_PARTITION,
NO_REASSIGNMENT_IN_PROGRESS, INVALID_REPLICA_ASSIGNMENT, and for a raw v1
request that keeps the replication factor (KIP-860)
INVALID_REPLICATION_FACTOR. Then kafkajs (its own protocol code) moves the
partition back to its first brokers (which deleted their logs: they copy it
all again) and lists the reassignment until it is done, and the records are
read from there once more, and again from the other replica once the leader
is shut down (controlled shutdown moves leadership to it).

Its nodes' traces are checked by TLC (tests/controller/trace_validation.py):
each move is spec/Replication.tla's AlterPartitionReassignments, the
leader's ExpandIsr of each new replica, CompleteReassignment (the commit of
the last one) and the removed brokers' StopReplica. The check covers the
trace up to the controlled shutdown (trace_check's STOPS), both moves
included.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from kref.node.local_cluster import bootstrap_servers, wait_ready
from tests.clusterkit import FAST_CLUSTER_SETTINGS, wait_until
from tests.controller.trace_validation import checked_cluster

STARTUP_S = 120
SETTINGS = {
    **FAST_CLUSTER_SETTINGS,
    "replica.lag.time.max.ms": "3000",
}
TOPIC = "moved"
JS = Path(__file__).parents[1] / "clients" / "js" / "kafkajs_reassign.js"
NODE_MODULES = Path(sys.prefix) / "node" / "node_modules"
PER_PHASE = 40


def wait_long(predicate, what, rounds: int = 3):
    """wait_until for `rounds` times its deadline: steps that need several processes
    to act in turn (catch-up, a restart) take long on a loaded 2-core box."""
    for remaining in range(rounds - 1, -1, -1):
        try:
            return wait_until(predicate, what)
        except AssertionError:
            if not remaining:
                raise
    return None


def _partition(admin_md, topic):
    return next(p for t in admin_md.topics.values() if t.topic == topic for p in t.partitions.values())


def _consume_all(servers: str, expected: int, deadline_s: float = 30.0) -> set[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": f"check-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        got: set[bytes] = set()
        deadline = time.monotonic() + deadline_s
        while len(got) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.add(message.value())
        return got
    finally:
        consumer.close()


def _alter_v1_keep_rf(port: int, replicas: list[int]) -> int:
    """Raw AlterPartitionReassignments v1 with allow_replication_factor_change=false; the partition's error."""
    from kref.protocol.client import WireClient
    from kref.protocol.codec import request_class

    cls = request_class(45, 1)
    m = sys.modules[cls.__module__]
    request = cls(allow_replication_factor_change=False, topics=(m.ReassignableTopic(name=TOPIC, partitions=(
        m.ReassignablePartition(partition_index=0, replicas=tuple(replicas)),)),))
    with WireClient("127.0.0.1", port, timeout=20) as client:
        response = client.request(request)
    assert response.error_code == 0, response
    return response.responses[0].partitions[0].error_code


def test_reassignment_moves_a_partition_under_acks_all_writes(tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.admin import NewTopic
    from kafka.errors import (InvalidReplicationAssignmentError, NoReassignmentInProgressError,
                              UnknownTopicOrPartitionError)

    # Its nodes' traces are checked once it ends (checked_cluster), against spec/Replication.tla's
    # reassignment section and spec/KRaft.tla.
    with checked_cluster(tmp_path, 1, 4, SETTINGS) as (specs, processes, start):
        by_id = {s.node_id: s for s in specs}
        servers = bootstrap_servers(specs)
        # Start-up alone can take most of a minute on a loaded 2-core box.
        assert wait_ready(specs, STARTUP_S, alive=lambda: all(x.poll() is None for x in processes.values())), \
            "every broker listing all four brokers"
        admin = KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=10_000)
        inspector = AdminClient({"bootstrap.servers": servers})
        try:
            admin.create_topics([NewTopic(TOPIC, 1, 2)])
            before = wait_until(lambda: (p := _partition(inspector.list_topics(TOPIC, timeout=10), TOPIC))
                                and len(p.isrs) == 2 and p, "the topic's two in-sync replicas")
            old = sorted(before.replicas)
            # The new replicas are the two brokers that have none; node 1 (the
            # controller) is put last so that the preferred new leader can be
            # shut down below without stopping the controller.
            target = sorted((b for b in by_id if b not in old), key=lambda b: (b == 1, b))
            tp = TopicPartition(TOPIC, 0)

            acknowledged: set[bytes] = set()
            failed: list[str] = []  # delivery errors, by value: each is a finding (none expected)

            def delivered(err, message):
                if err is None:
                    acknowledged.add(message.value())
                else:
                    failed.append(f"{message.value()!r}: {err}")

            producer = Producer({"bootstrap.servers": servers, "acks": "all", "linger.ms": 5,
                                 "message.timeout.ms": 30_000})
            sent = 0

            def produce(n):
                nonlocal sent
                for _ in range(n):
                    producer.produce(TOPIC, value=f"v-{sent}".encode(), partition=0, on_delivery=delivered)
                    sent += 1
                    producer.poll(0)

            produce(PER_PHASE)
            producer.flush(30)

            # Errors, per partition, as Kafka answers them.
            errors = admin.alter_partition_reassignments({
                TopicPartition("no-such-topic", 0): target, tp: None})
            assert errors[TopicPartition("no-such-topic", 0)] is UnknownTopicOrPartitionError
            assert errors[tp] is NoReassignmentInProgressError
            errors = admin.alter_partition_reassignments({tp: [target[0], 99]})
            assert errors[tp] is InvalidReplicationAssignmentError

            # v1 (KIP-860): a target of another length refused when the RF may not change.
            assert _alter_v1_keep_rf(by_id[target[0]].client_port, old + [target[0]]) == 38  # INVALID_REPLICATION_FACTOR

            assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
            ongoing = admin.list_partition_reassignments()
            if ongoing:  # it may already be complete on a quiet box
                assert ongoing[tp]["adding_replicas"] == target
                assert ongoing[tp]["removing_replicas"] == list(before.replicas)
                assert ongoing[tp]["replicas"] == target + list(before.replicas)

            # Writes go on while the new replicas catch up and the move completes.
            def moved():
                produce(5)
                producer.poll(0.1)
                p = _partition(inspector.list_topics(TOPIC, timeout=10), TOPIC)
                return (not admin.list_partition_reassignments() and sorted(p.replicas) == sorted(target)
                        and sorted(p.isrs) == sorted(target) and p.leader in target and p)

            after = wait_long(moved, "the reassignment to complete")
            assert after.leader == target[0]  # the first target replica in the isr leads
            produce(PER_PHASE)
            assert producer.flush(30) == 0
            assert len(acknowledged) == sent, f"{sent - len(acknowledged)} not acknowledged: {failed}"

            # The removed brokers delete their copies; the new ones hold the log.
            def copies(node_id):
                return list(by_id[node_id].data_dir.glob(f"{TOPIC}-0"))

            wait_long(lambda: not any(copies(b) for b in old), "the removed brokers to delete their logs")
            assert all(copies(b) for b in target)

            assert _consume_all(servers, len(acknowledged)) >= acknowledged

            # The replicas that hold the partition now: the new ones, or the first ones again
            # once kafkajs has moved it back (node 1, the controller, last, so that the leader
            # can be shut down below without stopping the controller).
            holders = target
            if shutil.which("node") is None or not (NODE_MODULES / "kafkajs").is_dir():
                print("kafkajs part skipped: node or kafkajs is not installed (scripts/setup.sh)")
            else:
                back = sorted(before.replicas, key=lambda b: (b == 1, b))
                out = subprocess.run(["node", str(JS), servers, TOPIC, "0", ",".join(map(str, back))],
                                     capture_output=True, text=True, timeout=120,
                                     env={**os.environ, "NODE_PATH": str(NODE_MODULES)})
                assert out.returncode == 0, out.stderr[-3000:]
                seen = json.loads(out.stdout.strip().splitlines()[-1])
                assert seen["ongoing"] == 0, seen
                for entry in seen["first"]:  # empty if it completed before the list
                    assert entry["adding"] == back and entry["replicas"][:2] == back, seen
                assert seen["empty"] == "INVALID_REPLICA_ASSIGNMENT", seen
                wait_long(lambda: (p := _partition(inspector.list_topics(TOPIC, timeout=10), TOPIC))
                          and sorted(p.replicas) == sorted(back) and sorted(p.isrs) == sorted(back)
                          and p.leader == back[0], "the partition back on its first brokers, led by the first")
                # The brokers it left (the new ones) delete their copies again; the first ones,
                # which deleted theirs on the first move, copied the whole log back.
                wait_long(lambda: not any(copies(b) for b in target), "the new brokers to delete their logs")
                assert _consume_all(servers, len(acknowledged)) >= acknowledged
                holders = back

            # The other replica holds them too: shut the leader down (controlled
            # shutdown moves leadership within the isr) and read again.
            processes[holders[0]].send_signal(signal.SIGTERM)
            processes[holders[0]].wait(timeout=20)
            wait_long(lambda: _partition(inspector.list_topics(TOPIC, timeout=10), TOPIC).leader == holders[1],
                      "leadership to move to the other replica")
            assert _consume_all(servers, len(acknowledged)) >= acknowledged
        finally:
            admin.close()

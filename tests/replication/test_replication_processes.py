"""Replication between three real kref processes, with real clients.

`kref cluster`-style nodes (three combined broker+controller processes), a
topic with replication factor 3 and min.insync.replicas=2, acks=all
idempotent producers (confluent-kafka) and consumers:

1. the followers replicate: every node's trace shows FollowerAppend for the
   partition, the leader's AdvanceHighWatermark follows, and every acks=all
   produce is acknowledged;
2. kill -9 of the partition leader: the controller fences it and elects a
   follower from the isr with a new leader epoch; producing and consuming
   continue against the new leader and no acknowledged record is lost;
3. the killed node restarts, follows the new leader (truncating as the spec
   says if it had more), catches up and returns to the isr;
4. the three nodes' traces of the partition, merged, are a behaviour of
   spec/Replication.tla (trace_check with the real TLC).

Timeouts are short (session 3 s, lag 2 s, fetch wait 200 ms) so the test is
fast; it is bounded by WAIT_S per wait and prints the quorum jitter seed.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.clusterkit import FAST_CLUSTER_SETTINGS, running_cluster, wait_until, wait_unfenced
from tests.controller.trace_validation import checked_cluster

SETTINGS = {
    **FAST_CLUSTER_SETTINGS,
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "100",
}
TOPIC = "replicated"
BATCH = 200
# Fencing, election and catch-up after a kill take a few seconds; on a loaded
# 2-core box (several process tests at once) much longer: wait up to this.
FAULT_WAIT_S = 90


def wait_long(predicate, what):
    return wait_until(predicate, what, FAULT_WAIT_S, 0.2)


def _partition(admin, topic: str = TOPIC):
    from confluent_kafka import KafkaException

    try:
        md = admin.list_topics(topic, timeout=10)
    except KafkaException as exc:
        # Right after a kill the client may still be asking the dead node, or
        # a loaded box answers late: the callers poll, so "not yet" (they
        # fail on their own deadline if it never comes).
        print(f"metadata not answered ({exc}); polling again")
        return None
    t = md.topics.get(topic)
    if t is None or t.error is not None or 0 not in t.partitions:
        return None
    return t.partitions[0]


def _produce(bootstrap: str, start: int, count: int) -> dict[bytes, int]:
    """acks=all idempotent produce; value -> offset of every acknowledged record."""
    from confluent_kafka import Producer

    acked: dict[bytes, int] = {}

    def on_delivery(err, message):
        if err is None:
            acked[message.value()] = message.offset()

    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
        "message.timeout.ms": 30000, "retry.backoff.ms": 100, "linger.ms": 5,
    })
    for i in range(start, start + count):
        producer.produce(TOPIC, value=f"v-{i}".encode(), on_delivery=on_delivery)
        producer.poll(0)
    producer.flush(40)
    return acked


def _consume_all(bootstrap: str, expected: int) -> list[tuple[int, bytes]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    while len(got) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append((message.offset(), message.value()))
    consumer.close()
    return got


def _replicated_topic(specs, processes, **configs):
    """Every broker unfenced, then TOPIC created (one partition, RF 3, `configs`) and led
    with its three replicas in sync: (bootstrap servers, an AdminClient, the partition)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from kref.node.local_cluster import bootstrap_servers

    bootstrap = bootstrap_servers(specs)
    wait_unfenced(specs, processes)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config=configs)])[TOPIC].result(30)
    first = wait_until(lambda: (p := _partition(admin)) is not None and len(p.isrs) == 3 and p.leader >= 0 and p,
                       "the topic with a leader and 3 in-sync replicas")
    return bootstrap, admin, first


def _trace_events(spec) -> list[dict]:
    """This node's trace events of TOPIC, as flushed so far (a torn last line is skipped)."""
    import json

    path = spec.dir / "trace.ndjson"
    events = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("topic") == TOPIC:
                events.append(event)
    return events


def _trace_types(spec) -> set[str]:
    return {e.get("type") for e in _trace_events(spec)}


@pytest.mark.timeout(900)  # the cluster run (~20 s) plus TLC on its trace (~25-300 s on a loaded box)
def test_rf3_acks_all_survives_kill_of_the_leader(tmp_path):
    with running_cluster(tmp_path, 3, 3, SETTINGS) as (specs, processes, start):
        by_id = {s.node_id: s for s in specs}
        bootstrap, admin, first = _replicated_topic(specs, processes, **{"min.insync.replicas": "2"})

        # 1. acks=all with two followers replicating.
        acked = _produce(bootstrap, 0, BATCH)
        assert len(acked) == BATCH, f"only {len(acked)} of {BATCH} acks=all produces acknowledged"
        for node_id, spec in by_id.items():
            if node_id != first.leader:
                wait_until(lambda s=spec: "FollowerAppend" in _trace_types(s), f"node {node_id} to replicate")
        # The trace sink flushes periodically: wait for the leader's lines too.
        wait_until(lambda: {"LeaderAppend", "AdvanceHighWatermark", "LeaderHandleFetch"} <= _trace_types(by_id[first.leader]),
                   "the leader's trace of the replicated appends")

        # The traces of the three processes merge on CLOCK_MONOTONIC consistently with
        # causality: a follower appends records only after the leader appended them.
        # Only up to the last line the leader has flushed (its sink writes periodically).
        cutoff = max(e["mono_ns"] for e in _trace_events(by_id[first.leader]))
        merged = sorted((e for s in specs for e in _trace_events(s) if e["mono_ns"] <= cutoff),
                        key=lambda e: e["mono_ns"])
        leader_end = 0
        for e in merged:
            if e["type"] == "LeaderAppend":
                leader_end = max(leader_end, e["last_offset"] + 1)
            elif e["type"] == "FollowerAppend" and e["last_offset"] >= e["first_offset"]:
                assert e["last_offset"] < leader_end, f"follower appended {e} before the leader wrote it"

        # 2. kill -9 of the leader: a follower takes over with a newer epoch.
        old_leader = first.leader
        processes[old_leader].send_signal(signal.SIGKILL)
        processes[old_leader].wait(timeout=10)
        wait_long(lambda: (p := _partition(admin)) is not None and p.leader not in (-1, old_leader),
                   "a new leader from the isr")
        acked.update(_produce(bootstrap, BATCH, BATCH))
        assert len(acked) == 2 * BATCH, f"only {len(acked)} of {2 * BATCH} acks=all produces acknowledged"

        # 3. The old leader restarts, catches up and rejoins the isr.
        start(by_id[old_leader])
        wait_long(lambda: (p := _partition(admin)) is not None and old_leader in p.isrs,
                   "the restarted node back in the isr")

        got = _consume_all(bootstrap, 2 * BATCH)
        values = [v for _, v in got]
        offsets = [o for o, _ in got]
        lost = set(acked) - set(values)
        print(f"acknowledged={len(acked)} consumed={len(got)} lost={len(lost)}")
        assert not lost, f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:5]}"
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        # Idempotence survives the failover: the producer state came along with the batches.
        assert len(set(values)) == len(values), "a retried batch was written twice"
        for value, offset in acked.items():
            assert (offset, value) in got, f"{value!r} acknowledged at {offset}, not read there"

    # With every process stopped: what the three nodes logged for the partition (the kill -9 inferred
    # as a Crash, the restart as a Restart) is a behaviour of spec/Replication.tla, by the real TLC.
    from trace_check.cli import validate

    code, report = validate([s.dir / "trace.ndjson" for s in specs], topic=TOPIC, partition=0,
                            min_insync_replicas=2, timeout_s=500)
    print(report)
    assert code == 0, report


@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
def test_min_insync_replicas_refuses_acks_all_until_the_follower_returns(tmp_path):
    """min.insync.replicas=3 on RF=3: with one follower killed the controller
    fences it and drops it from the isr, so acks=all gets NOT_ENOUGH_REPLICAS
    (nothing appended) while acks=1 is still taken; once the follower is back
    in the isr acks=all succeeds again. kafka-python without retries shows
    the broker's error as it is."""
    from kafka import KafkaProducer
    from kafka.errors import NotEnoughReplicasError

    with checked_cluster(tmp_path, 3, 3, SETTINGS) as (specs, processes, start):
        by_id = {s.node_id: s for s in specs}
        bootstrap, admin, first = _replicated_topic(specs, processes, **{"min.insync.replicas": "3"})
        all_acks = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0, request_timeout_ms=10000)
        all_acks.send(TOPIC, b"before", partition=0).get(timeout=20)

        follower = next(n for n in first.replicas if n != first.leader)
        processes[follower].send_signal(signal.SIGKILL)
        processes[follower].wait(timeout=10)
        wait_long(lambda: (p := _partition(admin)) is not None and follower not in p.isrs, "the isr without the follower")
        # The leader applies the shrunk isr from the metadata log; a produce may race it once.
        refused = None
        for _ in range(20):
            try:
                all_acks.send(TOPIC, b"refused", partition=0).get(timeout=20)
            except NotEnoughReplicasError as exc:
                refused = exc
                break
            time.sleep(0.2)
        assert refused is not None, "acks=all was accepted with 2 of min.insync.replicas=3 in sync"
        one_ack = KafkaProducer(bootstrap_servers=bootstrap, acks=1, retries=0)
        one_ack.send(TOPIC, b"acks-1", partition=0).get(timeout=20)
        one_ack.close()

        start(by_id[follower])
        wait_long(lambda: (p := _partition(admin)) is not None and follower in p.isrs, "the follower back in the isr")
        retrying = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=5, retry_backoff_ms=200)
        retrying.send(TOPIC, b"after", partition=0).get(timeout=30)
        retrying.close()
        all_acks.close()


@pytest.mark.timeout(900)  # the cluster run plus TLC on its traces (trace_validation.TIMEOUT_S per spec)
def test_committed_offsets_survive_the_loss_of_the_coordinator(tmp_path):
    """__consumer_offsets is replicated (offsets.topic.replication.factor 3 on
    `kref cluster`): kill -9 of the group's coordinator moves its
    __consumer_offsets partition to a follower, which becomes the coordinator
    with the committed offsets it replicated; a new member resumes there."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from tests.controller.test_cluster_groups import _find_coordinator

    group = "survivors"
    settings = {**SETTINGS, "offsets.topic.num.partitions": "3"}
    with checked_cluster(tmp_path, 3, 3, settings) as (specs, processes, start):
        bootstrap, _, _ = _replicated_topic(specs, processes)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(20):
            producer.produce(TOPIC, value=b"c%d" % i, partition=0)
        assert producer.flush(30) == 0

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                             "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        read = 0
        deadline = time.monotonic() + 30
        while read < 12 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                read += 1
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 12)], asynchronous=False)
        consumer.close()
        servers = bootstrap.split(",")
        code, coordinator = _find_coordinator(servers[0], group)
        assert code == 0 and coordinator in processes

        processes[coordinator].send_signal(signal.SIGKILL)
        processes[coordinator].wait(timeout=10)
        alive = [s for s, spec in zip(servers, specs) if spec.node_id != coordinator]

        def moved():
            code, node = _find_coordinator(alive[0], group)
            return code == 0 and node != coordinator and node

        wait_long(moved, "a new coordinator for the group")
        resumed = Consumer({"bootstrap.servers": ",".join(alive), "group.id": group, "enable.auto.commit": False})
        committed = wait_long(
            lambda: (c := resumed.committed([TopicPartition(TOPIC, 0)], timeout=10)) and c[0].offset >= 0 and c,
            "the committed offset from the new coordinator",
        )
        resumed.close()
        assert committed[0].offset == 12

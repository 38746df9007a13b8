"""A live move between log dirs (AlterReplicaLogDirs, KIP-113) with real clients over real sockets.

A kref broker with two log.dirs; kafka-python's admin client (3.x has
alter_replica_log_dirs and describe_log_dirs) asks it to move a partition
while a confluent-kafka producer writes to it with acks=all and
idempotence. replica.alter.log.dirs.io.max.bytes.per.second (Kafka's quota)
slows the copy down so that the move is seen in progress:
DescribeLogDirs lists the future replica (is_future_key) in the destination
with its size and lag. Then the partition lives in the other dir only, and
every acknowledged record is read back (kafka-python consumer) from the new
dir, and again after a SIGKILL and restart.

The second test retargets a move back to where the replica is (the future
log is abandoned, as Kafka's futureReplicaDirChanged), starts it again and
SIGKILLs the broker mid-copy: the restart finds the `-future` dir, resumes
the copy and completes the move, with nothing acknowledged lost.

Bounded: the producer writes at most MAX_RECORDS records, every wait has a
deadline (generous: the box is a loaded 2-core one).
"""

from __future__ import annotations

import os
import threading
import time

from confluent_kafka import Producer
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import NoError
from kafka.structs import TopicPartitionReplica

from kref.storage.config import LogConfig
from kref.storage.log_manager import LogManager
from tests.storage.batches import decode_values
from tests.clusterkit import wait_until

TOPIC = "moving"
VALUE_PADDING = b"x" * 200
MAX_RECORDS = 300_000  # about 120 s at the pace below: a bound, not a target
WAIT_S = 90


def _dirs_of(broker, topic: str) -> dict[str, list[str]]:
    """log dir -> names of this topic's partition-0 dirs in it (plain, -future, -delete)."""
    out: dict[str, list[str]] = {}
    for d in broker.log_dirs:
        names = sorted(n for n in os.listdir(d) if n == f"{topic}-0" or n.startswith(f"{topic}-0."))
        if names:
            out[str(d)] = names
    return out


def _wait(predicate, what: str, timeout: float = WAIT_S):
    return wait_until(predicate, what, timeout)


class AckedProducer:
    """confluent-kafka, acks=all, idempotent; remembers (offset, value) of every acknowledged record."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "batch.size": 65536, "message.timeout.ms": 120000})
        self.acked: dict[int, bytes] = {}
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.sent = 0

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[msg.offset()] = msg.value()

    def _run(self) -> None:
        while not self.stop.is_set() and self.sent < MAX_RECORDS:
            for _ in range(50):
                self.producer.produce(TOPIC, value=b"%08d-" % self.sent + VALUE_PADDING, partition=0,
                                      on_delivery=self._on_delivery)
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.02)  # about 2,500 records/s (~600 kB/s) at most: a steady load, not a flood
        self.producer.flush(60)

    def start(self) -> "AckedProducer":
        self.thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(90)
        assert not self.thread.is_alive(), "the producer did not finish"


def _read_all(bootstrap: str, end_offset: int) -> dict[int, bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, request_timeout_ms=30000,
                             fetch_max_bytes=4 << 20)
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: dict[int, bytes] = {}
        deadline = time.monotonic() + WAIT_S
        while consumer.position(tp) < end_offset and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.update((r.offset, r.value) for r in records)
        return got
    finally:
        consumer.close()


def _check_readable(bootstrap: str, acked: dict[int, bytes], where: str) -> None:
    got = _read_all(bootstrap, max(acked) + 1)
    missing = [o for o, v in acked.items() if got.get(o) != v]
    assert not missing, f"{where}: {len(missing)} acknowledged records unreadable, first {sorted(missing)[:5]}"


def _future_entries(admin, node_id: int) -> list[tuple[str, bool, int, int]]:
    answers = admin.describe_log_dirs({TOPIC: [0]}, brokers=[node_id])
    return [(d["log_dir"], p["is_future_key"], p["partition_size"], p["offset_lag"])
            for answer in answers for d in answer["log_dirs"]
            for t in d["topics"] for p in t["partitions"] if t["name"] == TOPIC]


def _start(kref_broker_factory, tmp_path, rate: int):
    broker = kref_broker_factory(start=False, overrides={
        "replica.alter.log.dirs.io.max.bytes.per.second": str(rate), "log.segment.bytes": "262144"})
    broker.log_dirs = [tmp_path / "dir-a", tmp_path / "dir-b"]
    broker.start()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])
    [source] = _wait(lambda: list(_dirs_of(broker, TOPIC)), "the partition dir")
    destination = next(str(d) for d in broker.log_dirs if str(d) != source)
    node_id = admin.describe_cluster()["controller_id"]  # the single broker
    return broker, admin, node_id, source, destination


def _moved(broker, destination: str) -> bool:
    return _dirs_of(broker, TOPIC) == {destination: [f"{TOPIC}-0"]}


def test_move_while_an_acks_all_producer_writes(kref_broker_factory, tmp_path):
    # The copy must outrun the producer (~600 kB/s) to catch up, as in Kafka.
    broker, admin, node_id, source, destination = _start(kref_broker_factory, tmp_path, rate=1_500_000)
    producer = AckedProducer(broker.bootstrap).start()
    try:
        _wait(lambda: len(producer.acked) >= 15000, "15000 acknowledged records (~3.5 MB) before the move")
        replica = TopicPartitionReplica(TOPIC, 0, node_id)
        assert admin.alter_replica_log_dirs({replica: destination}) == {replica: NoError}
        # In progress: the future replica is listed in the destination with what it holds so far.
        seen = _wait(lambda: [e for e in _future_entries(admin, node_id) if e[1]], "a future replica listed")
        assert seen[0][0] == destination and seen[0][2] >= 0 and seen[0][3] >= 0
        assert any(name.endswith("-future") for name in _dirs_of(broker, TOPIC).get(destination, []))
        _wait(lambda: _moved(broker, destination), f"the move to {destination}")
        moved_at = len(producer.acked)
        _wait(lambda: len(producer.acked) >= moved_at + 2000, "records acknowledged after the move")
    finally:
        producer.finish()
    assert not producer.errors, producer.errors[:5]
    assert len(producer.acked) == producer.sent
    entries = _future_entries(admin, node_id)
    assert [(d, f) for d, f, _, _ in entries] == [(destination, False)], entries
    _check_readable(broker.bootstrap, producer.acked, "after the move")
    admin.close()
    broker.restart(clean=False)  # SIGKILL, then a start that recovers
    assert _moved(broker, destination)
    _check_readable(broker.bootstrap, producer.acked, "after SIGKILL and restart")
    broker.stop()
    # The records are in the destination dir's segments: read them there, without the broker.
    manager = LogManager([destination], LogConfig(), 0)
    manager.load_logs(0)
    log = manager.get_log(TOPIC, 0)
    on_disk: dict[int, bytes] = {}
    offset = 0
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        for batch_offset, value in decode_values(data.records):
            on_disk[batch_offset] = value
        offset = data.next_offset
    assert all(on_disk.get(o) == v for o, v in producer.acked.items()), "acknowledged records missing in the new dir"
    manager.shutdown()


def test_retarget_then_kill_mid_copy_resumes_at_restart(kref_broker_factory, tmp_path):
    broker, admin, node_id, source, destination = _start(kref_broker_factory, tmp_path, rate=300_000)
    producer = AckedProducer(broker.bootstrap).start()
    try:
        _wait(lambda: len(producer.acked) >= 12000, "12000 acknowledged records")
    finally:
        producer.finish()
    assert not producer.errors, producer.errors[:5]
    replica = TopicPartitionReplica(TOPIC, 0, node_id)
    assert admin.alter_replica_log_dirs({replica: destination}) == {replica: NoError}
    _wait(lambda: any(n.endswith("-future") for n in _dirs_of(broker, TOPIC).get(destination, [])), "a future dir")
    # Back to where it is: the copy is abandoned, the replica stays.
    assert admin.alter_replica_log_dirs({replica: source}) == {replica: NoError}
    _wait(lambda: _dirs_of(broker, TOPIC) == {source: [f"{TOPIC}-0"]}, "the future dir removed")
    # Again, and a SIGKILL while it copies (about 3 MB at 300 kB/s: some 10 s).
    assert admin.alter_replica_log_dirs({replica: destination}) == {replica: NoError}
    _wait(lambda: [e for e in _future_entries(admin, node_id) if e[1] and e[2] > 0], "a partly filled future log")
    admin.close()
    broker.kill()
    assert any(n.endswith("-future") for n in _dirs_of(broker, TOPIC)[destination]), _dirs_of(broker, TOPIC)
    assert _dirs_of(broker, TOPIC)[source] == [f"{TOPIC}-0"]
    broker.start()
    _wait(lambda: _moved(broker, destination), f"the resumed move to {destination}", timeout=120)
    assert "resuming the move of moving-0" in broker.log_text()
    _check_readable(broker.bootstrap, producer.acked, "after the resumed move")

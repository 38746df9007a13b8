"""Log compaction seen by real clients over real sockets (Kafka's design, "Log Compaction").

confluent-kafka and kafka-python produce keyed records and tombstones to a
`cleanup.policy=compact` topic with tiny segments; the broker's cleaner
(log.cleaner.backoff.ms short) compacts it. Then a confluent-kafka consumer
reading from offset 0 must see, per key, the last value (deleted keys
absent once their tombstones are past delete.retention.ms), in increasing
offsets; kafka-python's record reader must parse every batch of every
cleaned segment file on disk (CRC included); and `__consumer_offsets`
stays bounded by its distinct keys after many commits, with the committed
offset surviving a restart (the group coordinator loads the compacted log).
"""

from __future__ import annotations

import glob
import os
import struct
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.record.default_records import DefaultRecordBatch

from kref.storage.cleaner import CLEANER_CHECKPOINT_FILE
from kref.storage.checkpoint import read_offset_checkpoint_or_empty
from tests.clusterkit import wait_until

OVERRIDES = {"log.cleaner.backoff.ms": "100", "offsets.topic.segment.bytes": "2048"}
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "1024",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "0",
}


def wait_for(predicate, what: str, timeout_s: float = 60.0):
    return wait_until(predicate, what, timeout_s)


def cleaned_up_to(broker, topic: str, partition: int = 0) -> int:
    path = os.path.join(str(broker.log_dirs[0]), CLEANER_CHECKPOINT_FILE)
    return read_offset_checkpoint_or_empty(path).get((topic, partition), -1)


def consume_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"c-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        out = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not out or out[-1][0] < high - 1):
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append((msg.offset(), msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


def parse_segments_with_kafka_python(partition_dir: str) -> int:
    batches = 0
    for path in sorted(glob.glob(os.path.join(partition_dir, "*.log"))):
        data = open(path, "rb").read()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack_from(">i", data, pos + 8)
            batch = DefaultRecordBatch(data[pos : pos + 12 + length])
            assert batch.validate_crc(), f"{path}: bad CRC at {pos}"
            list(batch)  # every record parses
            batches += 1
            pos += 12 + length
    return batches


def test_keyed_produce_with_tombstones_is_compacted_for_real_clients(kref_broker_factory):
    broker = kref_broker_factory(OVERRIDES)
    topic = f"compact-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=TOPIC_CONFIG)])[topic].result(10)

    expected: dict[bytes, bytes | None] = {}
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "enable.idempotence": True})
    for round_ in range(30):
        for k in range(10):
            key, value = b"k%d" % k, b"confluent-%d-%d" % (round_, k)
            producer.produce(topic, key=key, value=value)
            expected[key] = value
        producer.flush(10)
    for k in (0, 1):
        producer.produce(topic, key=b"k%d" % k, value=None)  # tombstones
        expected[b"k%d" % k] = None
    producer.flush(10)
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for round_ in range(10):
        for k in range(5, 12):
            key, value = b"k%d" % k, b"kafka-python-%d-%d" % (round_, k)
            kp.send(topic, key=key, value=value).get(10)  # one record a batch: segments are 1 KiB
            expected[key] = value
    kp.send(topic, key=b"k11", value=None).get(10)
    expected[b"k11"] = None
    kp.flush(10)
    kp.close()
    # A few more rounds so the tombstones leave the active segment and
    # the cleaner's second pass (their delete horizon is now + 0 ms) drops them.
    for round_ in range(10):
        for k in range(2, 5):
            key, value = b"k%d" % k, b"late-%d-%d" % (round_, k)
            producer.produce(topic, key=key, value=value)
            expected[key] = value
        producer.flush(10)
    produced = 30 * 10 + 2 + 10 * 7 + 1 + 10 * 3

    wait_for(lambda: cleaned_up_to(broker, topic) > 0, "the cleaner's first pass")
    first = cleaned_up_to(broker, topic)
    wait_for(lambda: len(consume_all(broker.bootstrap, topic)) < produced // 3, "compaction to drop old values")

    records = consume_all(broker.bootstrap, topic)
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets)), "offsets stay increasing"
    assert offsets[-1] == produced - 1, "the log end never moves"
    final: dict[bytes, bytes] = {}
    for _, key, value in records:
        if value is None:
            final.pop(key, None)
        else:
            final[key] = value
    assert final == {k: v for k, v in expected.items() if v is not None}
    assert first > 0

    # kafka-python (an independent reader) parses the cleaned segment files.
    partition_dir = os.path.join(str(broker.log_dirs[0]), f"{topic}-0")
    broker.stop()
    assert parse_segments_with_kafka_python(partition_dir) > 0
    assert not glob.glob(os.path.join(partition_dir, "*.cleaned")) and not glob.glob(os.path.join(partition_dir, "*.swap"))

    # After a restart the same values are read, the checkpoint survived.
    broker.start()
    assert cleaned_up_to(broker, topic) >= first
    again = consume_all(broker.bootstrap, topic)
    replay: dict[bytes, bytes] = {}
    for _, key, value in again:
        if value is None:
            replay.pop(key, None)
        else:
            replay[key] = value
    assert replay == final


def test_consumer_offsets_stays_bounded_by_its_keys(kref_broker_factory):
    broker = kref_broker_factory({**OVERRIDES, "offsets.topic.num.partitions": "1"})
    topic = f"offs-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, key=b"k", value=b"v")
    producer.flush(10)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="bounded", enable_auto_commit=False)
    tp = KpTopicPartition(topic, 0)
    consumer.assign([tp])
    from kafka.structs import OffsetAndMetadata

    commits = 600
    for i in range(commits):
        consumer.commit({tp: OffsetAndMetadata(i, "", -1)})
    consumer.close()
    partition_dir = os.path.join(str(broker.log_dirs[0]), "__consumer_offsets-0")

    def size_of(path: str) -> int:
        # The cleaner may delete a segment between the listing and the stat: it then holds nothing.
        try:
            return os.path.getsize(path)
        except FileNotFoundError:
            return 0

    def compacted():
        size = sum(size_of(p) for p in glob.glob(os.path.join(partition_dir, "*.log")))
        return cleaned_up_to(broker, "__consumer_offsets") > 0 and size < 20_000

    wait_for(compacted, "__consumer_offsets to be compacted")
    broker.restart()
    check = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="bounded", enable_auto_commit=False)
    try:
        deadline = time.monotonic() + 30
        committed = None
        while time.monotonic() < deadline:
            committed = check.committed(tp)
            if committed is not None:
                break
            time.sleep(0.2)
        assert committed == commits - 1, "the last commit survives compaction and a restart"
    finally:
        check.close()

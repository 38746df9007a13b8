"""Segment files written through the broker are Kafka's format, and survive restarts.

An independent reader (kafka-python's kafka.record, not kref code) parses
every .log segment the broker wrote, batch by batch, checks each CRC-32C and
that the file holds nothing but whole batches. Then the broker is stopped
with SIGTERM (graceful: flush and checkpoints) and with SIGKILL (recovery on
the next start), and everything acknowledged before is read back, with
offsets continuing where they stopped. Each start of the single broker
begins a new leader epoch (one more than the log's latest), which the
partitionLeaderEpoch of the new batches shows.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.record.memory_records import MemoryRecords


def parse_segments(log_dirs, topic: str) -> list:
    """Every batch of every segment of partition 0, via kafka-python's reader."""
    dirs = [Path(d) / f"{topic}-0" for d in log_dirs if (Path(d) / f"{topic}-0").is_dir()]
    assert len(dirs) == 1, dirs
    batches = []
    for segment in sorted(dirs[0].glob("*.log")):
        data = segment.read_bytes()
        records = MemoryRecords(data)
        assert records.valid_bytes() == len(data), f"{segment.name}: trailing bytes that are no batch"
        while records.has_next():
            batch = records.next_batch()
            assert batch.validate_crc(), f"{segment.name}: bad CRC at offset {batch.base_offset}"
            batches.append(batch)
    return batches


def produce(bootstrap: str, topic: str, values: list[bytes], **config) -> None:
    # Small batches: the topic rolls segments at 4 KiB and refuses bigger appends.
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2, "batch.num.messages": 10, **config})
    errors = []
    for v in values:
        producer.produce(topic, v, partition=0, on_delivery=lambda err, _m: err and errors.append(err))
    assert producer.flush(30) == 0 and not errors


def consume_all(bootstrap: str, topic: str, count: int) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                out.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return out


def test_segments_parse_with_an_independent_reader_and_survive_restarts(kref_broker):
    topic = f"seg-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kref_broker.bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "4096"})])[topic].result(30)

    first = [b"first-%03d" % i + b"." * 90 for i in range(100)]
    produce(kref_broker.bootstrap, topic, first[:50], **{"compression.type": "none"})
    produce(kref_broker.bootstrap, topic, first[50:], **{"compression.type": "zstd"})

    batches = parse_segments(kref_broker.log_dirs, topic)
    assert len(list(Path(kref_broker.log_dirs[0]).glob(f"{topic}-0/*.log"))) > 1  # rolled at 4 KiB
    records = [(r.offset, r.value) for b in batches for r in b]  # a batch iterates once
    assert records == list(enumerate(first))
    assert {b.leader_epoch for b in batches} == {0}
    assert {b.compression_type for b in batches} == {0, 4}

    kref_broker.stop()  # SIGTERM
    kref_broker.restart()
    assert consume_all(kref_broker.bootstrap, topic, 100) == list(enumerate(first))
    second = [b"second-%03d" % i for i in range(50)]
    produce(kref_broker.bootstrap, topic, second)

    kref_broker.kill()  # SIGKILL: no flush, no checkpoint; recovery on start
    kref_broker.restart()
    everything = first + second
    assert consume_all(kref_broker.bootstrap, topic, 150) == list(enumerate(everything))
    produce(kref_broker.bootstrap, topic, [b"third"])

    batches = parse_segments(kref_broker.log_dirs, topic)
    assert [r.offset for b in batches for r in b] == list(range(151))
    epochs = [b.leader_epoch for b in batches]
    assert epochs == sorted(epochs) and epochs[0] == 0 and epochs[-1] == 2

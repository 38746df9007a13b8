"""confluent-kafka (librdkafka) producing to and consuming from a real `kref broker`.

Mechanisms checked end to end over real sockets: Produce with every
compression codec and with record headers, offset assignment (contiguous
from 0), Fetch by topic id (librdkafka uses Fetch v13+), ListOffsets
(earliest, latest, by timestamp, max timestamp / KIP-734), consuming from
earliest / latest / a timestamp, acks 0, 1 and all, MESSAGE_TOO_LARGE for a
batch above the topic's max.message.bytes, DeleteRecords moving the log
start offset, and a long-poll fetch woken by a produce.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def new_topic(bootstrap: str, partitions: int = 1, config: dict | None = None) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(30)
    return name


def produce(bootstrap: str, topic: str, records, **config) -> list:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    reports = []
    for r in records:
        producer.produce(topic, on_delivery=lambda err, msg: reports.append((err, msg)), **r)
    assert producer.flush(30) == 0
    return reports


def consume(bootstrap: str, topic: str, count: int, *, partition: int = 0, offset=OFFSET_BEGINNING,
            timeout_s: float = 30) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, offset)])
    out = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append(msg)
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_with_headers_round_trips(kref_broker, codec):
    topic = new_topic(kref_broker.bootstrap)
    records = [
        {"key": f"k{i}".encode(), "value": f"value-{i}-".encode() * 20, "headers": [("h", f"{i}".encode()), ("n", None)]}
        for i in range(200)
    ]
    reports = produce(kref_broker.bootstrap, topic, records, **{"compression.type": codec, "acks": "all"})
    assert all(err is None for err, _ in reports)
    assert sorted(msg.offset() for _, msg in reports) == list(range(200))

    got = consume(kref_broker.bootstrap, topic, 200)
    assert [m.offset() for m in got] == list(range(200))
    assert [m.value() for m in got] == [r["value"] for r in records]
    assert [m.key() for m in got] == [r["key"] for r in records]
    assert got[7].headers() == [("h", b"7"), ("n", None)]


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks_levels_all_land_in_the_log(kref_broker, acks):
    topic = new_topic(kref_broker.bootstrap)
    reports = produce(kref_broker.bootstrap, topic, [{"value": b"x%d" % i} for i in range(50)], acks=acks)
    assert all(err is None for err, _ in reports)
    got = consume(kref_broker.bootstrap, topic, 50)
    assert [m.value() for m in got] == [b"x%d" % i for i in range(50)]


def test_consume_from_latest_sees_only_new_records(kref_broker):
    topic = new_topic(kref_broker.bootstrap)
    produce(kref_broker.bootstrap, topic, [{"value": b"old"} for _ in range(10)])
    consumer = Consumer({"bootstrap.servers": kref_broker.bootstrap, "group.id": "latest",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
    try:
        # The first poll resolves OFFSET_END to 10 (ListOffsets LATEST) and
        # parks a long-poll fetch there; the produce below wakes it.
        assert consumer.poll(1.0) is None
        produce(kref_broker.bootstrap, topic, [{"value": b"new"} for _ in range(3)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None
                got.append(msg)
    finally:
        consumer.close()
    assert [(m.offset(), m.value()) for m in got] == [(10, b"new"), (11, b"new"), (12, b"new")]


def test_list_offsets_and_consume_by_timestamp(kref_broker):
    topic = new_topic(kref_broker.bootstrap)
    base = int(time.time() * 1000) - 100_000
    stamps = [base + 1000 * i for i in range(20)]
    stamps[13] = base + 50_000  # the max timestamp sits mid-log (KIP-734)
    for ts in stamps:  # one batch per record so the time index has many entries
        produce(kref_broker.bootstrap, topic, [{"value": str(ts).encode(), "timestamp": ts}])

    admin = AdminClient({"bootstrap.servers": kref_broker.bootstrap})
    tp = TopicPartition(topic, 0)

    def offset_for(spec):
        return admin.list_offsets({tp: spec})[tp].result(30).offset

    assert offset_for(OffsetSpec.earliest()) == 0
    assert offset_for(OffsetSpec.latest()) == 20
    assert offset_for(OffsetSpec.max_timestamp()) == 13
    assert offset_for(OffsetSpec.for_timestamp(base + 5500)) == 6
    assert offset_for(OffsetSpec.for_timestamp(base + 10**9)) == -1

    consumer = Consumer({"bootstrap.servers": kref_broker.bootstrap, "group.id": "ts"})
    [resolved] = consumer.offsets_for_times([TopicPartition(topic, 0, base + 5000)], timeout=30)
    consumer.close()
    assert resolved.offset == 5
    got = consume(kref_broker.bootstrap, topic, 15, offset=resolved.offset)
    assert [m.offset() for m in got] == list(range(5, 20))
    assert got[0].timestamp()[1] == base + 5000


def test_message_too_large_is_rejected_per_partition(kref_broker):
    topic = new_topic(kref_broker.bootstrap, config={"max.message.bytes": "2000"})
    reports = produce(kref_broker.bootstrap, topic, [{"value": b"y" * 5000}], **{"message.max.bytes": 1_000_000})
    [(err, _)] = reports
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    # The partition still takes records that fit.
    assert produce(kref_broker.bootstrap, topic, [{"value": b"small"}])[0][0] is None
    assert [m.value() for m in consume(kref_broker.bootstrap, topic, 1)] == [b"small"]


def test_delete_records_moves_the_log_start_offset(kref_broker):
    topic = new_topic(kref_broker.bootstrap)
    produce(kref_broker.bootstrap, topic, [{"value": b"%d" % i} for i in range(30)])
    admin = AdminClient({"bootstrap.servers": kref_broker.bootstrap})
    tp = TopicPartition(topic, 0, 12)
    [result] = admin.delete_records([tp]).values()
    assert result.result(30).low_watermark == 12
    tp0 = TopicPartition(topic, 0)
    assert admin.list_offsets({tp0: OffsetSpec.earliest()})[tp0].result(30).offset == 12
    got = consume(kref_broker.bootstrap, topic, 18)
    assert got[0].offset() == 12 and got[-1].offset() == 29

"""kafka-python producing to and consuming from a real `kref broker`.

kafka-python has its own protocol stack (Produce, Fetch with incremental
fetch sessions it must fall back from, ListOffsets), independent of
librdkafka. Checked: every compression codec with headers, acks 0/1/all,
consume from earliest, latest and a timestamp (offsets_for_times, beginning
and end offsets).
"""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def new_topic(bootstrap: str) -> str:
    name = f"kp-{uuid.uuid4().hex[:10]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, 1, 1)])
    finally:
        admin.close()
    return name


def read(bootstrap: str, topic: str, count: int, *, seek=None) -> list:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=20_000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    if seek is None:
        consumer.seek_to_beginning(tp)
    else:
        consumer.seek(tp, seek)
    out = []
    try:
        for msg in consumer:
            out.append(msg)
            if len(out) >= count:
                break
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_with_headers_round_trips(kref_broker, codec):
    topic = new_topic(kref_broker.bootstrap)
    producer = KafkaProducer(bootstrap_servers=kref_broker.bootstrap, compression_type=codec, acks="all", enable_idempotence=False,
                             linger_ms=5)
    futures = [
        producer.send(topic, key=b"k%d" % i, value=b"v%d-" % i * 30, headers=[("i", b"%d" % i)], partition=0)
        for i in range(100)
    ]
    producer.flush(30)
    offsets = [f.get(timeout=30).offset for f in futures]
    producer.close()
    assert offsets == list(range(100))
    got = read(kref_broker.bootstrap, topic, 100)
    assert [m.offset for m in got] == list(range(100))
    assert [m.value for m in got] == [b"v%d-" % i * 30 for i in range(100)]
    assert got[42].key == b"k42" and got[42].headers == [("i", b"42")]


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks_levels(kref_broker, acks):
    topic = new_topic(kref_broker.bootstrap)
    producer = KafkaProducer(bootstrap_servers=kref_broker.bootstrap, acks=acks, enable_idempotence=False)
    for i in range(20):
        producer.send(topic, value=b"a%d" % i, partition=0)
    producer.flush(30)
    producer.close()
    got = read(kref_broker.bootstrap, topic, 20)
    assert [m.value for m in got] == [b"a%d" % i for i in range(20)]


def test_offsets_by_time_and_ends(kref_broker):
    topic = new_topic(kref_broker.bootstrap)
    base = int(time.time() * 1000) - 60_000
    producer = KafkaProducer(bootstrap_servers=kref_broker.bootstrap, enable_idempotence=False)
    for i in range(10):
        producer.send(topic, value=b"%d" % i, partition=0, timestamp_ms=base + i * 100).get(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=kref_broker.bootstrap)
    tp = TopicPartition(topic, 0)
    try:
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 10}
        found = consumer.offsets_for_times({tp: base + 250})[tp]
        assert (found.offset, found.timestamp) == (3, base + 300)
        assert consumer.offsets_for_times({tp: base + 10_000})[tp] is None
    finally:
        consumer.close()
    got = read(kref_broker.bootstrap, topic, 7, seek=3)
    assert [m.offset for m in got] == list(range(3, 10))

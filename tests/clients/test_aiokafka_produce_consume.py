"""aiokafka (asyncio client, its own protocol code) against a real `kref broker`.

Checked: every compression codec with headers through send_and_wait (acks
all), consume from earliest, the long poll (getone waits for a record
produced after it started), and end offsets (ListOffsets LATEST).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


async def new_topic(bootstrap: str) -> str:
    name = f"aio-{uuid.uuid4().hex[:10]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, 1, 1)])
    finally:
        await admin.close()
    return name


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_with_headers_round_trips(kref_broker, codec):
    async def main():
        topic = await new_topic(kref_broker.bootstrap)
        producer = AIOKafkaProducer(bootstrap_servers=kref_broker.bootstrap, compression_type=codec, acks="all")
        await producer.start()
        try:
            batch = producer.create_batch()
            for i in range(50):
                batch.append(key=b"k%d" % i, value=b"aio-%d" % i * 10, timestamp=None, headers=[("x", b"%d" % i)])
            meta = await (await producer.send_batch(batch, topic, partition=0))
            assert meta.offset == 0
            single = await producer.send_and_wait(topic, b"last", partition=0)
            assert single.offset == 50
        finally:
            await producer.stop()

        consumer = AIOKafkaConsumer(bootstrap_servers=kref_broker.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = []
            while len(got) < 51:
                got.append(await asyncio.wait_for(consumer.getone(), 20))
            assert (await consumer.end_offsets([tp]))[tp] == 51
        finally:
            await consumer.stop()
        assert [m.offset for m in got] == list(range(51))
        assert got[3].value == b"aio-3" * 10 and got[3].key == b"k3"
        assert list(got[3].headers) == [("x", b"3")]
        assert got[-1].value == b"last"

    asyncio.run(main())


def test_long_poll_returns_a_record_produced_later(kref_broker):
    async def main():
        topic = await new_topic(kref_broker.bootstrap)
        consumer = AIOKafkaConsumer(bootstrap_servers=kref_broker.bootstrap, enable_auto_commit=False,
                                    fetch_max_wait_ms=5000)
        producer = AIOKafkaProducer(bootstrap_servers=kref_broker.bootstrap)
        await consumer.start()
        await producer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            waiter = asyncio.ensure_future(consumer.getone())
            await asyncio.sleep(0.5)
            assert not waiter.done()
            await producer.send_and_wait(topic, b"wake", partition=0)
            msg = await asyncio.wait_for(waiter, 20)
            assert (msg.offset, msg.value) == (0, b"wake")
        finally:
            await producer.stop()
            await consumer.stop()

    asyncio.run(main())

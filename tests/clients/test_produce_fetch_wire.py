"""Produce and Fetch edge cases, spoken on the wire to a real `kref broker`.

Real clients never send a corrupt batch or two batches in one partition, so
these requests are built here: kio encodes the request, and the record
batches come from kafka-python's independent DefaultRecordBatchBuilder.
Checked: per-partition errors (UNKNOWN_TOPIC_OR_PARTITION, CORRUPT_MESSAGE
for a bad CRC, INVALID_RECORD for two batches, INVALID_TOPIC_EXCEPTION for
the internal __consumer_offsets) next to a partition that
succeeds; acks=0 gets no response at all; Fetch answers OFFSET_OUT_OF_RANGE,
UNKNOWN_TOPIC_ID for an unknown topic id (v13+), returns the batch bytes
exactly as the segment file holds them, honours partition_max_bytes and the
response max_bytes with whole batches (at least one, KIP-74); a parked
long-poll fetch is answered when a produce makes data visible.
"""

from __future__ import annotations

import datetime
import socket
import struct
import threading
import time
import uuid
from pathlib import Path

import kio.schema.fetch.v12.request as f12
import kio.schema.fetch.v12.response as f12r
import kio.schema.fetch.v13.request as f13
import kio.schema.fetch.v13.response as f13r
import kio.schema.produce.v9.request as p9
import kio.schema.produce.v9.response as p9r
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.static.primitive import i32Timedelta

from kref.protocol.codec import decode_response, encode_request


class Wire:
    """One blocking connection; requests answered in order."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.correlation_id = 0

    def send(self, body) -> int:
        self.correlation_id += 1
        self.sock.sendall(encode_request(body, self.correlation_id))
        return self.correlation_id

    def receive(self, response_type):
        size = struct.unpack(">i", self._exactly(4))[0]
        return decode_response(self._exactly(size), response_type)

    def call(self, body, response_type):
        cid = self.send(body)
        got, response = self.receive(response_type)
        assert got == cid
        return response

    def _exactly(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "connection closed"
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


def ms(value: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=value))


def batch(values: list[bytes]) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    now = int(time.time() * 1000)
    for i, v in enumerate(values):
        builder.append(i, now, None, v, [])
    return bytes(builder.build())


def produce_request(topics: dict[str, dict[int, bytes]], acks: int = -1) -> p9.ProduceRequest:
    return p9.ProduceRequest(
        acks=acks,
        timeout=ms(10_000),
        topic_data=tuple(
            p9.TopicProduceData(
                name=name,
                partition_data=tuple(p9.PartitionProduceData(index=i, records=r) for i, r in parts.items()),
            )
            for name, parts in topics.items()
        ),
    )


def fetch12(topic: str, partitions: dict[int, int], *, partition_max_bytes=1 << 20, max_bytes=1 << 24,
            max_wait_ms=0, min_bytes=1) -> f12.FetchRequest:
    return f12.FetchRequest(
        max_wait=ms(max_wait_ms), min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
        topics=(f12.FetchTopic(topic=topic, partitions=tuple(
            f12.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=partition_max_bytes)
            for p, o in partitions.items())),),
    )


def new_topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"w-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def partition_errors(response) -> dict:
    return {(t.name, p.index): (int(p.error_code), int(p.base_offset))
            for t in response.responses for p in t.partition_responses}


def test_produce_errors_are_per_partition(kref_broker):
    topic = new_topic(kref_broker.bootstrap, partitions=3)
    good = batch([b"a", b"b"])
    corrupt = bytearray(batch([b"c"]))
    corrupt[-1] ^= 0xFF  # inside the CRC-covered range
    wire = Wire(kref_broker.bootstrap)
    try:
        response = wire.call(
            produce_request({topic: {0: good, 1: bytes(corrupt), 2: good + good}, "no-such-topic": {0: good},
                             "__consumer_offsets": {0: good}}),
            p9r.ProduceResponse,
        )
    finally:
        wire.close()
    assert partition_errors(response) == {
        (topic, 0): (0, 0),
        (topic, 1): (2, -1),  # CORRUPT_MESSAGE
        (topic, 2): (87, -1),  # INVALID_RECORD: one batch per partition
        ("no-such-topic", 0): (3, -1),  # UNKNOWN_TOPIC_OR_PARTITION
        ("__consumer_offsets", 0): (17, -1),  # INVALID_TOPIC_EXCEPTION: internal topic
    }


def test_acks_zero_gets_no_response(kref_broker):
    topic = new_topic(kref_broker.bootstrap)
    wire = Wire(kref_broker.bootstrap)
    try:
        wire.send(produce_request({topic: {0: batch([b"fire-and-forget"])}}, acks=0))
        fetch_id = wire.send(fetch12(topic, {0: 0}))
        cid, response = wire.receive(f12r.FetchResponse)
    finally:
        wire.close()
    assert cid == fetch_id  # the next frame on the wire answers the fetch
    [part] = response.responses[0].partitions
    assert int(part.error_code) == 0 and part.high_watermark == 1


def test_fetch_returns_stored_bytes_and_honours_byte_limits(kref_broker):
    topic = new_topic(kref_broker.bootstrap, partitions=2)
    wire = Wire(kref_broker.bootstrap)
    try:
        for p in (0, 1):
            for i in range(3):
                response = wire.call(produce_request({topic: {p: batch([b"%d" % i * 900])}}), p9r.ProduceResponse)
                assert partition_errors(response)[(topic, p)] == (0, i)
        full = wire.call(fetch12(topic, {0: 0}), f12r.FetchResponse).responses[0].partitions[0]
        one = wire.call(fetch12(topic, {0: 0}, partition_max_bytes=1500), f12r.FetchResponse)
        tiny = wire.call(fetch12(topic, {0: 1}, partition_max_bytes=10), f12r.FetchResponse)
        shared = wire.call(fetch12(topic, {0: 0, 1: 0}, max_bytes=2500), f12r.FetchResponse)
        out_of_range = wire.call(fetch12(topic, {0: 1000}), f12r.FetchResponse)
    finally:
        wire.close()

    segment = next((Path(kref_broker.log_dirs[0]) / f"{topic}-0").glob("*.log")).read_bytes()
    assert full.records == segment  # byte for byte what the segment holds
    batch_size = len(segment) // 3
    assert len(one.responses[0].partitions[0].records) == batch_size
    assert len(tiny.responses[0].partitions[0].records) == batch_size  # at least one batch (KIP-74)
    first, second = shared.responses[0].partitions
    assert len(first.records) == 2 * batch_size and len(second.records or b"") == 0
    part = out_of_range.responses[0].partitions[0]
    assert int(part.error_code) == 1  # OFFSET_OUT_OF_RANGE


def test_fetch_by_unknown_topic_id(kref_broker):
    wire = Wire(kref_broker.bootstrap)
    unknown = uuid.uuid4()
    try:
        response = wire.call(
            f13.FetchRequest(
                max_wait=ms(0), min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                forgotten_topics_data=(), rack_id="",
                topics=(f13.FetchTopic(topic_id=unknown, partitions=(
                    f13.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),),
            ),
            f13r.FetchResponse,
        )
    finally:
        wire.close()
    [topic] = response.responses
    assert topic.topic_id == unknown and int(topic.partitions[0].error_code) == 100  # UNKNOWN_TOPIC_ID


def test_long_poll_is_answered_when_data_arrives(kref_broker):
    topic = new_topic(kref_broker.bootstrap)
    result = {}

    def long_poll():
        wire = Wire(kref_broker.bootstrap)
        try:
            start = time.monotonic()
            result["response"] = wire.call(fetch12(topic, {0: 0}, max_wait_ms=20_000), f12r.FetchResponse)
            result["elapsed"] = time.monotonic() - start
        finally:
            wire.close()

    poller = threading.Thread(target=long_poll)
    poller.start()
    time.sleep(0.5)
    assert poller.is_alive()  # parked in the fetch purgatory
    wire = Wire(kref_broker.bootstrap)
    try:
        wire.call(produce_request({topic: {0: batch([b"wake up"])}}), p9r.ProduceResponse)
    finally:
        wire.close()
    poller.join(30)
    part = result["response"].responses[0].partitions[0]
    assert part.high_watermark == 1 and part.records
    assert result["elapsed"] < 15  # woken by the produce, not by max_wait (20 s)

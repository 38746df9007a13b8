"""Consumer groups, committed offsets and the idempotent producer with real clients.

Against a real `kref broker` process: a two-member group that rebalances
(confluent-kafka), commits that survive a broker restart (kafka-python,
aiokafka), static membership (KIP-345: a restarted static member gets its
partitions back without the other member rebalancing), the admin group APIs,
an idempotent producer (KIP-98) writing without duplicates, and a raw-protocol
check that a resent sequence is acknowledged with its first offsets and not
appended again (also after a restart, from the producer-state snapshot) while a
skipped sequence gets OUT_OF_ORDER_SEQUENCE_NUMBER.
"""

from __future__ import annotations

import asyncio
import datetime
import socket
import struct
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kref.protocol.codec import decode_response, encode_request
from kref.records.batch import Record, build_batch

DEADLINE_S = 30


def create_topic(bootstrap, name, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)


def produce(bootstrap, topic, count, partitions):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        p.produce(topic, value=b"m%d" % i, partition=i % partitions)
    assert p.flush(15) == 0


def confluent_consumer(bootstrap, group, **extra):
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 500,
    }
    conf.update(extra)
    return Consumer(conf)


def poll_until(consumers, predicate, what):
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.1)
        if predicate():
            return
    raise AssertionError(f"timed out waiting for {what}")


def assigned(c):
    return {(tp.topic, tp.partition) for tp in c.assignment()}


def test_confluent_two_member_group_rebalances_on_leave(kref_broker):
    create_topic(kref_broker.bootstrap, "rb", 4)
    c1 = confluent_consumer(kref_broker.bootstrap, "rb-group")
    c2 = confluent_consumer(kref_broker.bootstrap, "rb-group")
    try:
        c1.subscribe(["rb"])
        poll_until([c1], lambda: len(assigned(c1)) == 4, "c1 to own all partitions")
        c2.subscribe(["rb"])
        poll_until(
            [c1, c2],
            lambda: assigned(c1) and assigned(c2) and len(assigned(c1) | assigned(c2)) == 4
            and not assigned(c1) & assigned(c2),
            "both members to share the partitions",
        )
        c2.close()  # LeaveGroup: the survivor gets everything back
        poll_until([c1], lambda: len(assigned(c1)) == 4, "c1 to own all partitions again")
    finally:
        c1.close()


def test_kafka_python_commit_survives_restart(kref_broker):
    from kafka import KafkaConsumer

    create_topic(kref_broker.bootstrap, "resume", 2)
    produce(kref_broker.bootstrap, "resume", 20, 2)

    def consumer():
        return KafkaConsumer(
            "resume", bootstrap_servers=kref_broker.bootstrap, group_id="resume-group",
            auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=3000,
            session_timeout_ms=10_000, heartbeat_interval_ms=1000,
        )

    c = consumer()
    first = []
    for msg in c:
        first.append((msg.partition, msg.offset))
        if len(first) == 12:
            break
    c.commit()
    committed = {p: c.committed(TopicPartitionKP("resume", p)) for p in (0, 1)}
    c.close()
    assert sum(committed.values()) == 12

    kref_broker.restart()  # SIGTERM, then the same dirs: offsets reload from __consumer_offsets
    c = consumer()
    rest = [(msg.partition, msg.offset) for msg in c]
    c.close()
    assert len(rest) == 8 and not set(rest) & set(first)
    for p in (0, 1):
        resumed = [o for q, o in rest if q == p]
        assert resumed == list(range(committed[p], 10))


def TopicPartitionKP(topic, partition):
    from kafka import TopicPartition as KPTopicPartition

    return KPTopicPartition(topic, partition)


def test_aiokafka_commit_and_resume_after_unclean_restart(kref_broker):
    from aiokafka import AIOKafkaConsumer

    create_topic(kref_broker.bootstrap, "aio", 1)
    produce(kref_broker.bootstrap, "aio", 10, 1)

    async def consume(n):
        c = AIOKafkaConsumer(
            "aio", bootstrap_servers=kref_broker.bootstrap, group_id="aio-group",
            auto_offset_reset="earliest", enable_auto_commit=False,
        )
        await c.start()
        try:
            got = []
            async with asyncio.timeout(DEADLINE_S):
                while len(got) < n:
                    batch = await c.getmany(timeout_ms=500)
                    for msgs in batch.values():
                        got.extend(m.offset for m in msgs)
            got = got[:n]
            await c.commit({TopicPartitionAIO("aio", 0): got[-1] + 1})
            return got
        finally:
            await c.stop()

    assert asyncio.run(consume(4)) == [0, 1, 2, 3]
    # SIGKILL: the commit was appended to __consumer_offsets before it was acknowledged,
    # so recovery of that log brings it back
    kref_broker.restart(clean=False)
    assert asyncio.run(consume(6)) == [4, 5, 6, 7, 8, 9]


def TopicPartitionAIO(topic, partition):
    from aiokafka import TopicPartition as AIOTopicPartition

    return AIOTopicPartition(topic, partition)


def test_confluent_static_member_rejoins_without_rebalance(kref_broker):
    create_topic(kref_broker.bootstrap, "static", 4)
    revoked = []

    def make(instance):
        return confluent_consumer(kref_broker.bootstrap, "static-group", **{"group.instance.id": instance,
                                                                              "session.timeout.ms": 30_000})

    a = make("inst-a")
    a.subscribe(["static"], on_revoke=lambda c, parts: revoked.append(len(parts)))
    b = make("inst-b")
    b.subscribe(["static"])
    try:
        poll_until([a, b], lambda: assigned(a) and assigned(b) and len(assigned(a) | assigned(b)) == 4,
                   "both static members to be assigned")
        before_a, before_b = assigned(a), assigned(b)
        revoked.clear()
        b.close()  # a static member does not leave on close (KIP-345)
        b = make("inst-b")
        b.subscribe(["static"])
        poll_until([a, b], lambda: assigned(b) == before_b, "inst-b to get its old partitions back")
        for _ in range(10):
            a.poll(0.1)
        assert assigned(a) == before_a and revoked == []
        admin = AdminClient({"bootstrap.servers": kref_broker.bootstrap})
        desc = admin.describe_consumer_groups(["static-group"])["static-group"].result(10)
        assert sorted(m.group_instance_id for m in desc.members) == ["inst-a", "inst-b"]
    finally:
        a.close()
        b.close()


def test_admin_list_describe_delete_groups(kref_broker):
    create_topic(kref_broker.bootstrap, "adm", 1)
    produce(kref_broker.bootstrap, "adm", 3, 1)
    c = confluent_consumer(kref_broker.bootstrap, "adm-group")
    c.subscribe(["adm"])
    poll_until([c], lambda: assigned(c), "assignment")
    c.commit(offsets=[TopicPartition("adm", 0, 2)], asynchronous=False)
    admin = AdminClient({"bootstrap.servers": kref_broker.bootstrap})
    listed = admin.list_consumer_groups().result(10)
    assert "adm-group" in {g.group_id for g in listed.valid}
    with pytest.raises(Exception, match="NON_EMPTY_GROUP|not empty"):
        admin.delete_consumer_groups(["adm-group"])["adm-group"].result(10)
    c.close()
    admin.delete_consumer_groups(["adm-group"])["adm-group"].result(10)
    listed = admin.list_consumer_groups().result(10)
    assert "adm-group" not in {g.group_id for g in listed.valid}


def test_confluent_idempotent_producer_no_duplicates(kref_broker):
    create_topic(kref_broker.bootstrap, "idem", 3)
    p = Producer({"bootstrap.servers": kref_broker.bootstrap, "enable.idempotence": True, "linger.ms": 2,
                  "batch.num.messages": 50})
    n = 3000
    for i in range(n):
        p.produce("idem", value=b"%d" % i, partition=i % 3)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    c = confluent_consumer(kref_broker.bootstrap, "idem-check")
    c.assign([TopicPartition("idem", q, 0) for q in range(3)])
    seen = []
    deadline = time.monotonic() + DEADLINE_S
    while len(seen) < n and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            seen.append(int(m.value()))
    c.close()
    assert sorted(seen) == list(range(n))
    for q in range(3):  # per-partition order is the send order
        part = [v for v in seen if v % 3 == q]
        assert part == sorted(part)


# --- raw protocol ---------------------------------------------------------------


class RawClient:
    def __init__(self, bootstrap):
        host, port = bootstrap.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation_id = 0

    def call(self, body, response_type):
        self.correlation_id += 1
        self.sock.sendall(encode_request(body, self.correlation_id))
        size = struct.unpack(">i", self._read(4))[0]
        correlation_id, response = decode_response(self._read(size), response_type)
        assert correlation_id == self.correlation_id
        return response

    def _read(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "broker closed the connection"
            buf += chunk
        return buf

    def close(self):
        self.sock.close()


def test_raw_duplicate_sequence_acknowledged_and_gap_rejected(kref_broker):
    from kio.schema.init_producer_id.v4 import request as ipid_req
    from kio.schema.init_producer_id.v4 import response as ipid_resp
    from kio.schema.produce.v9 import request as prq
    from kio.schema.produce.v9 import response as prs

    create_topic(kref_broker.bootstrap, "raw", 1)
    client = RawClient(kref_broker.bootstrap)
    init = client.call(
        ipid_req.InitProducerIdRequest(transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
                                       producer_id=-1, producer_epoch=-1),
        ipid_resp.InitProducerIdResponse,
    )
    assert init.error_code == 0 and init.producer_id >= 0 and init.producer_epoch == 0
    pid = init.producer_id

    def send(seq, values):
        batch = build_batch([Record(timestamp=1, value=v) for v in values], producer_id=pid, producer_epoch=0,
                            base_sequence=seq)
        request = prq.ProduceRequest(
            transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
            topic_data=(prq.TopicProduceData(name="raw", partition_data=(
                prq.PartitionProduceData(index=0, records=batch),)),),
        )
        part = client.call(request, prs.ProduceResponse).responses[0].partition_responses[0]
        return int(part.error_code), part.base_offset

    assert send(0, [b"a", b"b"]) == (0, 0)
    assert send(2, [b"c"]) == (0, 2)
    assert send(0, [b"a", b"b"]) == (0, 0)  # a retry: acknowledged with its first offset
    assert send(2, [b"c"]) == (0, 2)
    assert send(4, [b"e"])[0] == 45  # sequence 3 skipped: OUT_OF_ORDER_SEQUENCE_NUMBER
    client.close()

    kref_broker.restart()  # state comes back from the .snapshot written at shutdown
    client = RawClient(kref_broker.bootstrap)
    assert send(2, [b"c"]) == (0, 2)
    assert send(4, [b"e"])[0] == 45
    assert send(3, [b"d"]) == (0, 3)
    client.close()

    c = confluent_consumer(kref_broker.bootstrap, "raw-check")
    c.assign([TopicPartition("raw", 0, 0)])
    values = []
    deadline = time.monotonic() + DEADLINE_S
    while len(values) < 4 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            values.append(m.value())
    c.close()
    assert values == [b"a", b"b", b"c", b"d"]
    # a fresh InitProducerId after restart never reuses the id
    client = RawClient(kref_broker.bootstrap)
    again = client.call(
        ipid_req.InitProducerIdRequest(transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
                                       producer_id=-1, producer_epoch=-1),
        ipid_resp.InitProducerIdResponse,
    )
    client.close()
    assert again.producer_id != pid


def test_kafka_python_idempotent_producer(kref_broker):
    from kafka import KafkaProducer

    create_topic(kref_broker.bootstrap, "idem-kp", 1)
    p = KafkaProducer(bootstrap_servers=kref_broker.bootstrap, enable_idempotence=True, acks="all")
    futures = [p.send("idem-kp", value=b"%d" % i, partition=0) for i in range(200)]
    offsets = [f.get(timeout=20).offset for f in futures]
    p.close()
    assert offsets == list(range(200))

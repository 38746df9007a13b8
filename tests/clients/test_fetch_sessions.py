"""Incremental fetch sessions (KIP-227) over the wire, and with kafka-python, which uses them.

Raw Fetch v12 (topic names) and v13 (topic ids): a full fetch (epoch 0)
opens a session; an incremental fetch naming no partition reads every
partition of the session and answers only those with news; a wrong epoch is
INVALID_FETCH_SESSION_EPOCH, an unknown or closed session
FETCH_SESSION_ID_NOT_FOUND; a forgotten partition leaves the session. A cache
of 2 slots gives a third small session no id, and a bigger session evicts
a smaller one. kafka-python consumes everything exactly once through its
sessions (the broker's DEBUG log shows the sessions it opened).
"""

from __future__ import annotations

import datetime
import importlib
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from kref.protocol.client import WireClient

NOT_FOUND, BAD_EPOCH = 70, 71


class Fetcher:
    def __init__(self, broker, version: int, topic: str, topic_id: uuid.UUID):
        self.req = importlib.import_module(f"kio.schema.fetch.v{version}.request")
        self.resp = importlib.import_module(f"kio.schema.fetch.v{version}.response")
        self.version, self.topic, self.topic_id = version, topic, topic_id
        self.client = WireClient(broker.host, broker.port)

    def _topic_fields(self):
        return {"topic_id": self.topic_id} if self.version >= 13 else {"topic": self.topic}

    def fetch(self, session_id, epoch, partitions=(), forgotten=(), wait_ms=50):
        r = self.req
        topics = (r.FetchTopic(**self._topic_fields(), partitions=tuple(
            r.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1,
                             log_start_offset=-1, partition_max_bytes=1 << 20) for p, o in partitions)),) if partitions else ()
        forgotten_topics = (r.ForgottenTopic(**self._topic_fields(), partitions=tuple(forgotten)),) if forgotten else ()
        body = r.FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(milliseconds=wait_ms), min_bytes=1, max_bytes=1 << 22,
            isolation_level=0, session_id=session_id, session_epoch=epoch, topics=topics,
            forgotten_topics_data=forgotten_topics, rack_id="",
        )
        answer = self.client.request(body, self.resp.FetchResponse)
        parts = {p.partition_index: p for t in answer.responses for p in t.partitions}
        return answer, parts


def _setup(broker, topic):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    described = admin.describe_topics([topic])[0]
    topic_id = described.get("topic_id")
    admin.close()
    return uuid.UUID(str(topic_id))


def _produce(broker, topic, partition, n):
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(n):
        producer.send(topic, value=b"r%d" % i, partition=partition)
    producer.flush(timeout=20)
    producer.close()


@pytest.mark.parametrize("version", [12, 13])
def test_session_lifecycle(kref_broker, version):
    topic = f"sessions-v{version}"
    topic_id = _setup(kref_broker, topic)
    _produce(kref_broker, topic, 0, 3)
    f = Fetcher(kref_broker, version, topic, topic_id)

    answer, parts = f.fetch(0, 0, [(0, 0), (1, 0), (2, 0)])
    session = answer.session_id
    assert answer.error_code == 0 and session != 0
    assert sorted(parts) == [0, 1, 2] and parts[0].records  # a full response names every partition

    # Incremental, naming partition 0's new position only: nothing new anywhere, nothing answered.
    answer, parts = f.fetch(session, 1, [(0, 3)])
    assert answer.error_code == 0 and answer.session_id == session and parts == {}
    _produce(kref_broker, topic, 1, 2)
    answer, parts = f.fetch(session, 2)  # names no partition: the session's are read
    assert sorted(parts) == [1] and parts[1].records and parts[1].high_watermark == 2

    assert f.fetch(session, 2)[0].error_code == BAD_EPOCH  # epoch 2 was used
    assert f.fetch(session + 1, 1)[0].error_code == NOT_FOUND

    answer, parts = f.fetch(session, 3, [(1, 2)], forgotten=[2])
    _produce(kref_broker, topic, 2, 1)  # partition 2 left the session: no news about it
    answer, parts = f.fetch(session, 4)
    assert answer.error_code == 0 and 2 not in parts

    answer, _ = f.fetch(session, -1, [(0, 3)])  # FINAL: a session-less full fetch, closing the session
    assert answer.session_id == 0
    assert f.fetch(session, 5)[0].error_code == NOT_FOUND
    f.client.close()


def test_the_cache_is_bounded_and_bigger_sessions_evict_smaller(kref_broker_factory):
    broker = kref_broker_factory({"max.incremental.fetch.session.cache.slots": "2"})
    topic_id = _setup(broker, "bounded")
    fetchers = [Fetcher(broker, 13, "bounded", topic_id) for _ in range(4)]
    small = [fetchers[i].fetch(0, 0, [(0, 0)])[0].session_id for i in range(3)]
    assert small[0] and small[1] and small[2] == 0  # full: the third gets no session
    big = fetchers[3].fetch(0, 0, [(0, 0), (1, 0), (2, 0)])[0].session_id
    assert big != 0
    outcomes = [fetchers[i].fetch(small[i], 1)[0].error_code for i in range(2)]
    assert sorted(outcomes) == [0, NOT_FOUND]  # exactly one small session was evicted
    for f in fetchers:
        f.client.close()


def test_kafka_python_consumes_through_fetch_sessions(kref_broker_factory):
    broker = kref_broker_factory(start=False)
    broker.extra_args = ["--log-level", "DEBUG"]
    broker.start()
    _setup(broker, "kp-sessions")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(300):
        producer.send("kp-sessions", value=b"m%d" % i, partition=i % 3)
    producer.flush(timeout=20)
    consumer = KafkaConsumer("kp-sessions", bootstrap_servers=broker.bootstrap, group_id="kp-sess",
                             auto_offset_reset="earliest", consumer_timeout_ms=15000, fetch_max_wait_ms=100)
    seen = []
    for message in consumer:
        seen.append(message.value)
        if len(seen) == 150:  # more arrive while the session is open
            for i in range(300, 330):
                producer.send("kp-sessions", value=b"m%d" % i, partition=i % 3)
            producer.flush(timeout=20)
        if len(seen) == 330:
            break
    consumer.close()
    producer.close()
    assert sorted(seen) == sorted(b"m%d" % i for i in range(330))  # all, once each
    assert "fetch session" in broker.log_text() and "opened with" in broker.log_text()

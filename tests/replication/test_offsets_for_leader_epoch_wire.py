"""OffsetsForLeaderEpoch (API 23) over the wire against a real kref broker.

A broker leads a partition through two terms (a restart starts a new leader
epoch); a client asks where each epoch ends: the first ends where the second
began, the current one at the log end offset; a stale current_leader_epoch is
FENCED_LEADER_EPOCH, a future one UNKNOWN_LEADER_EPOCH, an unknown partition
UNKNOWN_TOPIC_OR_PARTITION. kafka-python produces the records.
"""

from __future__ import annotations

import importlib

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from kref.protocol.errors import ErrorCode
from tests.clients.conftest import kref_broker, kref_broker_factory  # noqa: F401 - fixtures


def _ask(broker, version: int, topic: str, wanted: list[tuple[int, int, int]]):
    from kref.protocol.client import WireClient

    req = importlib.import_module(f"kio.schema.offset_for_leader_epoch.v{version}.request")
    resp = importlib.import_module(f"kio.schema.offset_for_leader_epoch.v{version}.response")
    fields = {"replica_id": -1} if version >= 3 else {}
    partitions = tuple(
        req.OffsetForLeaderPartition(partition=p, leader_epoch=e, **({"current_leader_epoch": c} if version >= 2 else {}))
        for p, e, c in wanted
    )
    body = req.OffsetForLeaderEpochRequest(topics=(req.OffsetForLeaderTopic(topic=topic, partitions=partitions),), **fields)
    with WireClient(broker.host, broker.port) as client:
        answer = client.request(body, resp.OffsetForLeaderEpochResponse)
    return [(int(p.error_code), int(p.leader_epoch), int(p.end_offset)) for p in answer.topics[0].partitions]


def _current_epoch(broker, log_end_offset: int) -> int:
    """The leader's epoch: the one epoch (of the first ten) that ends at the log end offset."""
    answers = _ask(broker, 4, "epochs", [(0, e, -1) for e in range(10)])
    current = [e for e, (code, epoch, end) in enumerate(answers) if (code, epoch, end) == (ErrorCode.NONE, e, log_end_offset)]
    assert len(current) == 1, answers
    return current[0]


def _produce(broker, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    for i in range(count):
        producer.send("epochs", value=b"x%d" % i, partition=0)
    producer.flush(timeout=20)
    producer.close()


def test_offsets_for_leader_epoch_answers_from_the_epoch_cache(kref_broker):  # noqa: F811
    admin = KafkaAdminClient(bootstrap_servers=kref_broker.bootstrap, request_timeout_ms=20000)
    admin.create_topics([NewTopic("epochs", num_partitions=1, replication_factor=1)])
    admin.close()
    _produce(kref_broker, 5)
    first_epoch = _current_epoch(kref_broker, 5)
    kref_broker.restart()
    _produce(kref_broker, 3)
    second_epoch = _current_epoch(kref_broker, 8)
    assert second_epoch > first_epoch
    # An epoch newer than any the leader knows: -1/-1 (Kafka's UNDEFINED_EPOCH_OFFSET).
    assert _ask(kref_broker, 4, "epochs", [(0, second_epoch + 1, -1)]) == [(ErrorCode.NONE, -1, -1)]
    assert _ask(kref_broker, 4, "epochs", [(0, first_epoch, second_epoch)]) == [(ErrorCode.NONE, first_epoch, 5)]
    assert _ask(kref_broker, 2, "epochs", [(0, first_epoch, first_epoch)])[0][0] == ErrorCode.FENCED_LEADER_EPOCH
    assert _ask(kref_broker, 3, "epochs", [(0, first_epoch, second_epoch + 5)])[0][0] == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert _ask(kref_broker, 2, "epochs", [(7, 0, -1)])[0][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

"""The hand-spliced Metadata encoding is byte-for-byte kio's (kref/broker/handlers/metadata.py).

The handler writes partitions with struct and splices them into kio's
encoding of an empty topic and an empty response. For every Metadata
version (0-13) these tests build the same answer as kio dataclasses, encode
it with kio, and require identical bytes: leaders with and without an
epoch, isr smaller than replicas, a leaderless partition, 200 replicas (a
compact array count of two uvarint bytes: the struct path gives way to
kio), topics with errors, a 200-byte name, a null name (v12+, a topic
asked for by id), authorized operations on and off. They also
decode the spliced bytes with kio's reader to the same topics and partitions.
"""

from __future__ import annotations

import uuid

import pytest

from kref.broker.handlers import metadata as m
from kref.protocol.codec import _reader, encode_body
from kref.protocol.errors import ErrorCode
from kref.protocol.messages import build

PARTITIONS = [
    # (error, index, leader, leader_epoch, replicas, isr)
    (ErrorCode.NONE, 0, 1, 7, (1, 2, 3), (1, 2, 3)),
    (ErrorCode.NONE, 1, 2, 0, (2, 3), (2,)),
    (ErrorCode.LEADER_NOT_AVAILABLE, 2, -1, 4, (3,), ()),
    (ErrorCode.NONE, 3, 5, 2**31 - 1, tuple(range(200)), tuple(range(130))),
]


def kio_partition(lay, error, index, leader, epoch, replicas, isr):
    return build(lay.partition_type, error_code=error, partition_index=index, leader_id=leader,
                 leader_epoch=epoch, replica_nodes=replicas, isr_nodes=isr, offline_replicas=())


def kio_topic(lay, error, name, topic_id, internal, ops, partitions):
    return build(lay.topic_type, error_code=error, name=name, topic_id=topic_id, is_internal=internal,
                 partitions=tuple(kio_partition(lay, *p) for p in partitions), topic_authorized_operations=ops)


@pytest.mark.parametrize("version", range(14))
@pytest.mark.parametrize("with_ops", [False, True])
def test_spliced_answer_equals_kio_encoding(version, with_ops):
    lay = m.layout(version)
    topic_ops = m.TOPIC_AUTHORIZED_OPERATIONS if with_ops else m.AUTHORIZED_OPERATIONS_OMITTED
    cluster_ops = m.CLUSTER_AUTHORIZED_OPERATIONS if with_ops else m.AUTHORIZED_OPERATIONS_OMITTED
    topics = [
        (ErrorCode.NONE, "orders", uuid.uuid4(), False, topic_ops, PARTITIONS),
        (ErrorCode.NONE, "__consumer_offsets", uuid.uuid4(), True, topic_ops, PARTITIONS[:1]),
        (ErrorCode.NONE, "empty", uuid.uuid4(), False, topic_ops, []),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "missing", m.ZERO_UUID, False, m.AUTHORIZED_OPERATIONS_OMITTED, []),
        # A 200-byte name: its compact length takes two uvarint bytes.
        (ErrorCode.NONE, "t" * 200, uuid.uuid4(), False, topic_ops, PARTITIONS[1:2]),
    ]
    if version >= 12:  # a topic asked for by id that does not exist has a null name
        topics.append((ErrorCode.UNKNOWN_TOPIC_ID, None, uuid.uuid4(), False, m.AUTHORIZED_OPERATIONS_OMITTED, []))
    brokers = tuple(build(lay.broker_type, node_id=i, host=f"h{i}", port=9090 + i, rack=None if i % 2 else "r")
                    for i in (1, 2, 3))
    spliced = m.encode_response(
        lay, brokers, "cluster-x", 2, cluster_ops,
        [m.encode_topic(lay, *t[:5], [m.encode_partition(lay, *p) for p in t[5]]) for t in topics],
    )
    expected = build(
        lay.response_type, brokers=brokers, cluster_id="cluster-x", controller_id=2,
        topics=tuple(kio_topic(lay, *t) for t in topics),
        cluster_authorized_operations=cluster_ops, error_code=ErrorCode.NONE,
    )
    assert spliced == encode_body(expected)
    decoded, size = _reader(lay.response_type)(spliced, 0)
    assert size == len(spliced)
    assert [(t.name, [(q.partition_index, q.leader_id, tuple(q.replica_nodes), tuple(q.isr_nodes))
                      for q in t.partitions]) for t in decoded.topics] == [
        (t[1], [(p[1], p[2], p[4], p[5]) for p in t[5]]) for t in topics]


@pytest.mark.parametrize("version", [0, 9, 12])
def test_no_topics_is_kio_encoding(version):
    lay = m.layout(version)
    brokers = (build(lay.broker_type, node_id=1, host="h", port=1, rack=None),)
    expected = build(lay.response_type, brokers=brokers, cluster_id="c", controller_id=1, topics=(),
                     cluster_authorized_operations=m.AUTHORIZED_OPERATIONS_OMITTED, error_code=ErrorCode.NONE)
    assert m.encode_response(lay, brokers, "c", 1, m.AUTHORIZED_OPERATIONS_OMITTED, []) == encode_body(expected)


def test_topic_chunk_cache_is_bounded():
    cache = m.MetadataCache(topic_max_entries=3, topic_max_bytes=100)
    for i in range(10):
        cache.topics.put(("t", i), ("state", b"x" * 30), 30)
    assert len(cache.topics) == 3
    cache.topics.put("big", ("state", b"x" * 101), 101)
    assert cache.topics.get("big") is None and len(cache.topics) == 3

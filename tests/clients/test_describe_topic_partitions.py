"""DescribeTopicPartitions (API 75, KIP-966) against the single broker, raw.

kref.protocol.client speaks the request as Kafka's admin client does: all
topics in name order, unknown topics answered with their error, and the
partition limit paginating with a cursor that resumes where the last page
stopped (inside a topic and across topics) until next_cursor is null.
"""

from __future__ import annotations

import sys

from kref.protocol.codec import request_class


def _request(topics, limit, cursor=None):
    cls = request_class(75, 0)
    m = sys.modules[cls.__module__]
    return cls(
        topics=tuple(m.TopicRequest(name=t) for t in topics), response_partition_limit=limit,
        cursor=None if cursor is None else m.Cursor(topic_name=cursor.topic_name, partition_index=cursor.partition_index),
    )


def test_describe_topic_partitions_pages_with_a_cursor(kref_broker):
    from confluent_kafka.admin import AdminClient, NewTopic

    from kref.protocol.client import WireClient

    admin = AdminClient({"bootstrap.servers": kref_broker.bootstrap})
    for name, n in (("dtp-a", 3), ("dtp-b", 2)):
        admin.create_topics([NewTopic(name, num_partitions=n, replication_factor=1)])[name].result(timeout=30)
    host, port = kref_broker.bootstrap.split(":")
    with WireClient(host, int(port)) as client:
        response = client.request(_request(["dtp-b", "dtp-a", "nope"], 100))
        assert [(t.name, t.error_code, len(t.partitions)) for t in response.topics] == [
            ("dtp-a", 0, 3), ("dtp-b", 0, 2), ("nope", 3, 0)]
        assert response.next_cursor is None
        assert all(p.leader_id == 1 and tuple(p.isr_nodes) == (1,) for t in response.topics for p in t.partitions)
        pages, cursor = [], None
        while True:
            response = client.request(_request(["dtp-a", "dtp-b"], 2, cursor))
            pages.append([(t.name, [p.partition_index for p in t.partitions]) for t in response.topics])
            cursor = response.next_cursor
            if cursor is None:
                break
            assert len(pages) < 10
    assert pages == [[("dtp-a", [0, 1])], [("dtp-a", [2]), ("dtp-b", [0])], [("dtp-b", [1])]]

"""Cached Metadata answers follow every metadata change (kref/broker/handlers/metadata.py).

The broker reuses an encoded Metadata body while the metadata image it was
built from is unchanged. Checked with confluent-kafka's AdminClient and raw
requests of several versions: answers repeated without a change are
identical; creating a topic, adding partitions and deleting a topic show in
the very next answer (all topics and named topics); an answer with a topic
error (auto-creation off) is not cached, so the topic created afterwards is
seen.
"""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from kref.protocol.client import WireClient

from tests.clients.test_metadata_wire import metadata

VERSIONS = (1, 9, 12)


def shape(response):
    return sorted((t.name, t.error_code, len(t.partitions)) for t in response.topics)


def test_cache_follows_topic_changes(kref_broker):
    admin = AdminClient({"bootstrap.servers": kref_broker.bootstrap})
    admin.create_topics([NewTopic("c1", 3, 1)])["c1"].result(15)
    with WireClient(kref_broker.host, kref_broker.port) as c:
        for v in VERSIONS:
            first, again = metadata(c, v), metadata(c, v)
            assert shape(first) == shape(again) and ("c1", 0, 3) in shape(first)
        admin.create_partitions([NewPartitions("c1", 5)])["c1"].result(15)
        for v in VERSIONS:
            assert ("c1", 0, 5) in shape(metadata(c, v))
            assert shape(metadata(c, v, ["c1"])) == [("c1", 0, 5)]
        assert len(admin.list_topics(timeout=10).topics["c1"].partitions) == 5
        admin.create_topics([NewTopic("c2", 2, 1)])["c2"].result(15)
        assert ("c2", 0, 2) in shape(metadata(c, 12))
        admin.delete_topics(["c1"])["c1"].result(15)
        for v in VERSIONS:
            assert "c1" not in [t.name for t in metadata(c, v).topics]
        assert "c1" not in admin.list_topics(timeout=10).topics


def test_topic_errors_are_not_cached(kref_broker_factory):
    broker = kref_broker_factory({"auto.create.topics.enable": "false"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with WireClient(broker.host, broker.port) as c:
        assert shape(metadata(c, 12, ["later"], auto_create=True)) == [("later", 3, 0)]
        admin.create_topics([NewTopic("later", 1, 1)])["later"].result(15)
        assert shape(metadata(c, 12, ["later"], auto_create=True)) == [("later", 0, 1)]

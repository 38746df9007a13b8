"""Metadata and topic admin over the wire, version by version (kio
requests on a raw connection): auto topic creation when enabled and
allowed (KIP-361's allow_auto_topic_creation, v4+), UNKNOWN_TOPIC_OR_PARTITION
otherwise, INVALID_TOPIC_EXCEPTION for illegal names, topic IDs (KIP-516)
stable and resolvable (UNKNOWN_TOPIC_ID for unknown ones), Metadata v0's
empty list meaning all topics, DeleteTopics v6 by topic ID, CreateTopics
v7 returning the topic ID and effective configs, DescribeCluster v2."""

from __future__ import annotations

import datetime
import uuid

from kref.protocol.client import WireClient
from kref.protocol.codec import request_class
from kref.protocol.errors import ErrorCode
from kref.protocol.messages import nested

TIMEOUT = datetime.timedelta(seconds=10)


def metadata(client, version, names=None, *, auto_create=False, ids=None):
    cls = request_class(3, version)
    topic_cls = nested(cls, "MetadataRequestTopic")
    topics = None
    if names is not None or ids is not None:
        entries = [dict(name=n, topic_id=None) for n in names or []] + [dict(name=None, topic_id=i) for i in ids or []]
        if version == 0:
            topics = tuple(topic_cls(name=e["name"]) for e in entries)
        else:
            fields = topic_cls.__dataclass_fields__
            topics = tuple(topic_cls(**{k: v for k, v in e.items() if k in fields}) for e in entries)
    kwargs = {"topics": topics}
    fields = cls.__dataclass_fields__
    if "allow_auto_topic_creation" in fields:
        kwargs["allow_auto_topic_creation"] = auto_create
    for flag in ("include_topic_authorized_operations", "include_cluster_authorized_operations"):
        if flag in fields:
            kwargs[flag] = False
    return client.request(cls(**kwargs))


def create_topic(client, name, partitions=1):
    cls = request_class(19, 7)
    topic_cls = nested(cls, "CreatableTopic")
    return client.request(
        cls(
            topics=(topic_cls(name=name, num_partitions=partitions, replication_factor=-1, assignments=(), configs=()),),
            timeout=TIMEOUT,
            validate_only=False,
        )
    )


def test_auto_create_rules(kref_broker):
    with WireClient(kref_broker.host, kref_broker.port) as c:
        r = metadata(c, 12, ["not-there"], auto_create=False)
        assert [(t.name, t.error_code) for t in r.topics] == [("not-there", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        r = metadata(c, 12, ["made-by-metadata"], auto_create=True)
        (t,) = r.topics
        assert t.error_code == ErrorCode.NONE and len(t.partitions) == 1 and t.topic_id is not None
        r = metadata(c, 12, ["bad name!"], auto_create=True)
        assert [t.error_code for t in r.topics] == [ErrorCode.INVALID_TOPIC_EXCEPTION]
        r = metadata(c, 12, ["__consumer_offsets"], auto_create=True)
        assert [t.error_code for t in r.topics] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        # v0-v3 have no flag: they always auto-create (when the broker allows it)
        r = metadata(c, 1, ["old-client-topic"])
        assert [t.error_code for t in r.topics] == [ErrorCode.NONE]
        r = metadata(c, 0, [])  # v0: empty list = all topics
        assert {t.name for t in r.topics} == {"made-by-metadata", "old-client-topic"}
        assert [(b.node_id, b.host, b.port) for b in r.brokers] == [(1, "127.0.0.1", kref_broker.port)]


def test_auto_create_disabled(kref_broker_factory):
    broker = kref_broker_factory({"auto.create.topics.enable": "false"})
    with WireClient(broker.host, broker.port) as c:
        r = metadata(c, 1, ["x"])
        assert [t.error_code for t in r.topics] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


def test_topic_ids(kref_broker):
    with WireClient(kref_broker.host, kref_broker.port) as c:
        created = create_topic(c, "by-id", 2)
        (result,) = created.topics
        assert result.error_code == ErrorCode.NONE and result.num_partitions == 2
        assert {cfg.name for cfg in result.configs} >= {"retention.ms", "segment.bytes"}
        topic_id = result.topic_id
        r = metadata(c, 12, ids=[topic_id])
        assert [(t.name, t.topic_id, t.error_code) for t in r.topics] == [("by-id", topic_id, ErrorCode.NONE)]
        unknown = uuid.uuid4()
        r = metadata(c, 12, ids=[unknown])
        assert [t.error_code for t in r.topics] == [ErrorCode.UNKNOWN_TOPIC_ID]
        r = metadata(c, 13, None)
        assert r.error_code == ErrorCode.NONE and [t.topic_id for t in r.topics] == [topic_id]
        delete_cls = request_class(20, 6)
        state = nested(delete_cls, "DeleteTopicState")
        r = c.request(delete_cls(topics=(state(name=None, topic_id=topic_id), state(name=None, topic_id=unknown)), timeout=TIMEOUT))
        assert [(x.name, x.error_code) for x in r.responses] == [
            ("by-id", ErrorCode.NONE),
            (None, ErrorCode.UNKNOWN_TOPIC_ID),
        ]
        assert metadata(c, 12, None).topics == ()


def test_create_topics_duplicate_names_in_one_request(kref_broker):
    cls = request_class(19, 7)
    topic_cls = nested(cls, "CreatableTopic")
    t = topic_cls(name="dup", num_partitions=1, replication_factor=1, assignments=(), configs=())
    with WireClient(kref_broker.host, kref_broker.port) as c:
        r = c.request(cls(topics=(t, t), timeout=TIMEOUT, validate_only=False))
        assert [x.error_code for x in r.topics] == [ErrorCode.INVALID_REQUEST] * 2
        assert metadata(c, 12, None).topics == ()


def test_describe_cluster_v2(kref_broker):
    cls = request_class(60, 2)
    with WireClient(kref_broker.host, kref_broker.port) as c:
        r = c.request(cls(include_cluster_authorized_operations=False, endpoint_type=1, include_fenced_brokers=False))
        assert r.error_code == ErrorCode.NONE and r.controller_id == 1
        assert [(b.broker_id, b.port, b.is_fenced) for b in r.brokers] == [(1, kref_broker.port, False)]
        r = c.request(cls(include_cluster_authorized_operations=False, endpoint_type=2, include_fenced_brokers=False))
        assert r.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE


def test_clean_shutdown_marks_log_dirs(kref_broker):
    with WireClient(kref_broker.host, kref_broker.port) as c:
        create_topic(c, "flushed", 1)
    assert kref_broker.stop() == 0
    data = kref_broker.log_dirs[0]
    assert (data / ".kafka_cleanshutdown").exists()
    assert (data / "meta.properties").read_text().count("node.id=1") == 1
    assert (data / "flushed-0" / "partition.metadata").exists()
    assert "stopped cleanly" in kref_broker.log_text()


def test_port_in_use_is_a_clear_error(kref_broker, tmp_path):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "kref.cli", "broker", "--override", f"listeners=PLAINTEXT://127.0.0.1:{kref_broker.port}",
         "--override", f"log.dirs={tmp_path / 'other'}"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 1
    assert f"cannot listen on PLAINTEXT://127.0.0.1:{kref_broker.port}" in out.stderr
    assert "Traceback" not in out.stderr


def test_sigint_is_a_clean_shutdown_too(kref_broker):
    import signal

    kref_broker.proc.send_signal(signal.SIGINT)
    assert kref_broker.proc.wait(60) == 0
    assert (kref_broker.log_dirs[0] / ".kafka_cleanshutdown").exists()
    assert "received SIGINT" in kref_broker.log_text()


def test_idle_connections_are_closed(kref_broker_factory):
    broker = kref_broker_factory({"connections.max.idle.ms": "300"})
    with WireClient(broker.host, broker.port) as c:
        assert c.is_closed_by_peer(timeout=30)
    assert "closing idle connection" in broker.log_text()


def test_leader_epochs_are_never_reused_across_restarts(kref_broker):
    """Issue 13: each start is a new leadership term, empty partitions included
    (KIP-101 needs an epoch to name one term only)."""
    with WireClient(kref_broker.host, kref_broker.port) as c:
        assert create_topic(c, "epochs", 2).topics[0].error_code == ErrorCode.NONE
        seen = [[p.leader_epoch for p in metadata(c, 12, ["epochs"]).topics[0].partitions]]
    for _ in range(2):
        kref_broker.stop()
        kref_broker.restart()
        with WireClient(kref_broker.host, kref_broker.port) as c:
            seen.append([p.leader_epoch for p in metadata(c, 12, ["epochs"]).topics[0].partitions])
    assert seen == [[0, 0], [1, 1], [2, 2]]

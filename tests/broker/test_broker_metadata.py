"""Broker topic metadata without a server: Kafka's topic name rules
(legal characters, length 249, '.'/'_' collisions), CreateTopics defaults
and errors, the topic image persisted atomically so topic IDs survive a
restart, meta.properties (cluster.id, node.id) and its node.id check,
auto-creation rules (never internal topics), CreatePartitions and
IncrementalAlterConfigs semantics (KIP-339)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kref.broker.broker import Broker, BrokerError
from kref.broker.config import BrokerConfig, ConfigError
from kref.broker.handlers.configs import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT, apply_incremental_ops
from kref.protocol.errors import ErrorCode


def make_broker(tmp_path, *overrides) -> Broker:
    config = BrokerConfig.load(None, [f"log.dirs={tmp_path / 'data'}", *overrides])
    broker = Broker(config)
    broker.open()
    return broker


def code_of(fn, *args, **kwargs) -> ErrorCode:
    with pytest.raises(BrokerError) as info:
        fn(*args, **kwargs)
    return info.value.error_code


def test_topic_names(tmp_path):
    b = make_broker(tmp_path)
    for bad in ["", ".", "..", "a" * 250, "has space", "slash/", "ünicode"]:
        assert code_of(b.create_topic, bad) == ErrorCode.INVALID_TOPIC_EXCEPTION, bad
    b.create_topic("a" * 249)
    b.create_topic("with.dot")
    assert code_of(b.create_topic, "with_dot") == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert code_of(b.create_topic, "with.dot") == ErrorCode.TOPIC_ALREADY_EXISTS


def test_defaults_and_errors(tmp_path):
    b = make_broker(tmp_path, "num.partitions=3")
    assert b.create_topic("t").num_partitions == 3
    assert code_of(b.create_topic, "u", 0) == ErrorCode.INVALID_PARTITIONS
    assert code_of(b.create_topic, "u", 1, 2) == ErrorCode.INVALID_REPLICATION_FACTOR
    assert code_of(b.create_topic, "u", 1, 0) == ErrorCode.INVALID_REPLICATION_FACTOR
    assert code_of(b.create_topic, "u", 1, 1, {"retention.ms": "x"}) == ErrorCode.INVALID_CONFIG
    assert code_of(b.create_topic, "u", 1, 1, {"unknown": "1"}) == ErrorCode.INVALID_CONFIG
    assert code_of(b.create_topic, "__consumer_offsets") == ErrorCode.INVALID_REQUEST
    assert b.create_topic("v", 1, validate_only=True) and b.get_topic("v") is None


def test_image_and_ids_survive_restart(tmp_path):
    b = make_broker(tmp_path)
    t = b.create_topic("t", 2, configs={"retention.ms": "10"})
    b.shutdown()
    again = make_broker(tmp_path)
    assert again.get_topic("t") == t
    assert again.cluster_id == b.cluster_id
    assert again.topic_by_id(t.topic_id).name == "t"
    assert sorted(again.partitions) == [("t", 0), ("t", 1)]


def test_meta_properties_node_id_must_match(tmp_path):
    make_broker(tmp_path).shutdown()
    with pytest.raises(ConfigError, match="belongs to node.id 1"):
        make_broker(tmp_path, "node.id=2")


def test_auto_create(tmp_path):
    assert make_broker(tmp_path / "a").maybe_auto_create("x").num_partitions == 1
    assert make_broker(tmp_path / "b").maybe_auto_create("__consumer_offsets") is None
    assert make_broker(tmp_path / "c", "auto.create.topics.enable=false").maybe_auto_create("x") is None


def test_delete_and_partitions(tmp_path):
    b = make_broker(tmp_path)
    b.create_topic("t", 1)
    b.create_partitions("t", 3)
    assert sorted(b.partitions) == [("t", 0), ("t", 1), ("t", 2)]
    assert code_of(b.create_partitions, "t", 3) == ErrorCode.INVALID_PARTITIONS
    assert code_of(b.create_partitions, "t", 2) == ErrorCode.INVALID_PARTITIONS
    deleted = []
    b.on_topic_deleted.append(lambda broker, name: deleted.append(name))
    b.delete_topic("t")
    assert deleted == ["t"] and b.partitions == {} and b.get_topic("t") is None
    assert code_of(b.delete_topic, "t") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    off = make_broker(tmp_path / "off", "delete.topic.enable=false")
    off.create_topic("t")
    assert code_of(off.delete_topic, "t") == ErrorCode.TOPIC_DELETION_DISABLED


def op(name, operation, value=None):
    return SimpleNamespace(name=name, config_operation=operation, value=value)


def test_incremental_alter_semantics():
    defaults = {"cleanup.policy": "delete"}
    current = {"retention.ms": "5", "cleanup.policy": "compact"}
    assert apply_incremental_ops(current, [op("retention.ms", OP_DELETE)], defaults) == {"cleanup.policy": "compact"}
    assert apply_incremental_ops({}, [op("cleanup.policy", OP_APPEND, "compact")], defaults) == {
        "cleanup.policy": "delete,compact"
    }
    assert apply_incremental_ops(current, [op("cleanup.policy", OP_SUBTRACT, "compact")], defaults) == {
        "retention.ms": "5",
        "cleanup.policy": "",
    }
    with pytest.raises(BrokerError) as info:
        apply_incremental_ops({}, [op("retention.ms", OP_APPEND, "1")], defaults)
    assert info.value.error_code == ErrorCode.INVALID_CONFIG
    with pytest.raises(BrokerError) as info:
        apply_incremental_ops({}, [op("retention.ms", OP_SET, "1"), op("retention.ms", OP_DELETE)], defaults)
    assert info.value.error_code == ErrorCode.INVALID_REQUEST


def test_stray_logs_are_deleted_at_open(tmp_path):
    """A crash between the image write and a partition dir change leaves
    logs the image does not know; a re-created topic must not inherit them."""
    from kref.metadata.local_source import LocalMetadataSource
    from kref.metadata.records import RemoveTopicRecord

    b = make_broker(tmp_path)
    b.create_topic("gone", 2)
    b.create_topic("kept", 1)
    gone_id = b.get_topic("gone").topic_id
    b.shutdown()
    # The crash: the removal reached the metadata records, the directories stayed.
    source = LocalMetadataSource(tmp_path / "data", b.node_id)
    source.open()
    source.commit([RemoveTopicRecord(gone_id)])
    source.close()
    again = make_broker(tmp_path)
    assert sorted(again.partitions) == [("kept", 0)]
    assert not (tmp_path / "data" / "gone-0").exists() and not (tmp_path / "data" / "gone-1").exists()
    assert (tmp_path / "data" / "kept-0").exists()

"""CreateTopics, CreatePartitions and AlterConfigs with validate_only: the controller
core makes every check it makes for a real request and writes nothing (Kafka's
validateOnly); its driver no longer re-decides them (issue 8: a decision is written
once). The same for DeleteTopics' admin gates: delete.topic.enable and a topic named
by an unknown id are refused by the core, not by its driver."""

from __future__ import annotations

import uuid

from kref.controller import controller as c
from kref.metadata import records as r
from kref.protocol.errors import ErrorCode


def active_with_unfenced(*broker_ids) -> c.ControllerCore:
    core = c.ControllerCore(node_id=100, tracing=False)
    core.step(c.BecomeActive(leader_epoch=1, next_offset=0), 0)
    for b in broker_ids:
        record = r.RegisterBrokerRecord(b, uuid.uuid4(), core.next_offset, fenced=False)
        core.step(c.Replay(core.next_offset, (record,)), 0)
    return core


def answer(core, event):
    effects = core.step(event, 0)
    assert not any(isinstance(e, c.WriteRecords) for e in effects), "validate_only wrote records"
    (reply,) = [e.reply for e in effects if isinstance(e, c.Reply)]
    return reply.error_code


def test_validate_only_create_topic_checks_everything_and_writes_nothing():
    core = active_with_unfenced(1, 2)
    zero = uuid.UUID(int=0)
    assert answer(core, c.CreateTopic(1, "t", 3, 2, zero, validate_only=True)) == ErrorCode.NONE
    assert "t" not in core.topics
    assert answer(core, c.CreateTopic(2, "t", 3, 3, zero, validate_only=True)) == ErrorCode.INVALID_REPLICATION_FACTOR
    assert answer(core, c.CreateTopic(3, "t", 0, 1, zero, validate_only=True)) == ErrorCode.INVALID_PARTITIONS
    written = core.step(c.CreateTopic(4, "t", 1, 1, uuid.uuid4()), 0)
    assert any(isinstance(e, c.WriteRecords) for e in written)
    # Checks the driver's old validate_only branch did not make:
    assert answer(core, c.CreateTopic(5, "t", 1, 1, zero, validate_only=True)) == ErrorCode.TOPIC_ALREADY_EXISTS


def test_validate_only_create_partitions_checks_everything_and_writes_nothing():
    core = active_with_unfenced(1, 2)
    core.step(c.CreateTopic(1, "t", 1, 2, uuid.uuid4()), 0)
    assert answer(core, c.CreatePartitions(2, "t", 3, validate_only=True)) == ErrorCode.NONE
    assert len(core.topics["t"].partitions) == 1
    assert answer(core, c.CreatePartitions(3, "t", 1, validate_only=True)) == ErrorCode.INVALID_PARTITIONS
    assert answer(core, c.CreatePartitions(4, "nope", 3, validate_only=True)) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_validate_only_alter_topic_configs_checks_the_topic_and_writes_nothing():
    core = active_with_unfenced(1)
    core.step(c.CreateTopic(1, "t", 1, 1, uuid.uuid4()), 0)
    assert answer(core, c.AlterTopicConfigs(2, "t", (("retention.ms", "1"),), validate_only=True)) == ErrorCode.NONE
    assert core.image.topic_configs("t") == {}
    assert answer(core, c.AlterTopicConfigs(3, "nope", (), validate_only=True)) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    written = core.step(c.AlterTopicConfigs(4, "t", (("retention.ms", "1"),)), 0)
    assert any(isinstance(e, c.WriteRecords) for e in written)


def test_validate_only_alter_broker_configs_checks_the_resource_and_writes_nothing():
    core = active_with_unfenced(1)
    assert answer(core, c.AlterBrokerConfigs(1, "1", (("log.retention.ms", "5"),), validate_only=True)) == ErrorCode.NONE
    assert answer(core, c.AlterBrokerConfigs(2, "", (), validate_only=True)) == ErrorCode.NONE
    # A check the driver's old validate_only branch did not make:
    assert answer(core, c.AlterBrokerConfigs(3, "x", (), validate_only=True)) == ErrorCode.INVALID_REQUEST


def test_delete_topic_enable_off_refuses_every_delete_topic():
    core = active_with_unfenced(1)
    core.delete_topic_enable = False
    topic_id = uuid.uuid4()
    core.step(c.CreateTopic(1, "t", 1, 1, topic_id), 0)
    assert answer(core, c.DeleteTopic(2, "t")) == ErrorCode.TOPIC_DELETION_DISABLED
    assert answer(core, c.DeleteTopic(3, None, topic_id)) == ErrorCode.TOPIC_DELETION_DISABLED
    assert answer(core, c.DeleteTopic(4, "nope")) == ErrorCode.TOPIC_DELETION_DISABLED
    assert "t" in core.topics


def test_delete_topic_by_id_is_resolved_by_the_core():
    core = active_with_unfenced(1)
    topic_id = uuid.uuid4()
    core.step(c.CreateTopic(1, "t", 1, 1, topic_id), 0)
    assert answer(core, c.DeleteTopic(2, None, uuid.uuid4())) == ErrorCode.UNKNOWN_TOPIC_ID
    assert answer(core, c.DeleteTopic(3, "nope")) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    effects = core.step(c.DeleteTopic(4, None, topic_id), 0)
    (write,) = [e for e in effects if isinstance(e, c.WriteRecords)]
    assert tuple(write.records) == (r.RemoveTopicRecord(topic_id=topic_id),)
    assert write.reply.topic_id == topic_id

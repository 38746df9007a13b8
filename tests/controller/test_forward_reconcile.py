"""A resent admin request meets its own first try (kref/node/broker_view.py's
reconcile_resent, read through its per-API table).

A controller that resigns answers NOT_CONTROLLER to requests whose records it
had proposed; the next leader may commit them, so the broker's resend is
answered "already done". CI met exactly this: confluent-kafka's
create_partitions(5) saw INVALID_PARTITIONS "topic replicated has 5
partitions; 5 is not more" after an election under load. These tests build
the real response messages and real metadata images of before and after;
ElectLeaders is reconciled by partition leaders (reconcile_elect_resent)."""

from __future__ import annotations

import datetime
import uuid

from kref.metadata import records as r
from kref.metadata.image import MetadataImage
from kref.node.broker_view import (
    _answered_not_controller,
    _counts_before,
    _elect_image_answers,
    _leaders_before,
    reconcile_elect_resent,
    reconcile_resent,
)
from kref.protocol.codec import request_class, response_class
from kref.protocol.errors import ErrorCode
from kref.protocol.messages import build, nested

TID = uuid.UUID(int=7)
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, ALTER_PARTITION = 19, 20, 37, 56


def image_with(partitions: int | None) -> MetadataImage:
    image = MetadataImage()
    if partitions is not None:
        image.apply([r.TopicRecord("orders", TID)] + [
            r.PartitionRecord(p, TID, (1, 2, 3), (1, 2, 3), 1, 0, 0) for p in range(partitions)])
    return image


def create_partitions(count: int, code: int):
    req_cls = request_class(CREATE_PARTITIONS, 3)
    request = build(req_cls, topics=(build(nested(req_cls, "CreatePartitionsTopic"), name="orders", count=count,
                                           assignments=None),), timeout=datetime.timedelta(seconds=30), validate_only=False)
    resp_cls = response_class(CREATE_PARTITIONS, 3)
    response = build(resp_cls, throttle_time_ms=0, results=(build(
        nested(resp_cls, "CreatePartitionsTopicResult"), name="orders", error_code=code,
        error_message="topic orders has 5 partitions; 5 is not more"),))
    return request, response


def test_create_partitions_resend_meeting_its_own_first_try_answers_none():
    request, response = create_partitions(5, ErrorCode.INVALID_PARTITIONS)
    before = _counts_before(request, image_with(3))
    fixed = reconcile_resent(request, response, before, image_with(5))
    assert fixed.results[0].error_code == ErrorCode.NONE and fixed.results[0].error_message is None


def test_create_partitions_genuine_errors_stay():
    request, response = create_partitions(5, ErrorCode.INVALID_PARTITIONS)
    # Already 5 before the first try: the client asked for no change.
    assert reconcile_resent(request, response, _counts_before(request, image_with(5)), image_with(5)) == response
    # Somebody else went to 6 meanwhile: not this request's effect.
    assert reconcile_resent(request, response, _counts_before(request, image_with(3)), image_with(6)) == response
    # Another error code is never rewritten.
    request, response = create_partitions(5, ErrorCode.INVALID_REPLICA_ASSIGNMENT)
    assert reconcile_resent(request, response, _counts_before(request, image_with(3)), image_with(5)) == response


def create_topics(code: int):
    req_cls = request_class(CREATE_TOPICS, 7)
    request = build(req_cls, topics=(build(nested(req_cls, "CreatableTopic"), name="orders", num_partitions=4,
                                           replication_factor=3, assignments=(), configs=()),),
                    timeout=datetime.timedelta(seconds=30), validate_only=False)
    resp_cls = response_class(CREATE_TOPICS, 7)
    response = build(resp_cls, throttle_time_ms=0, topics=(build(
        nested(resp_cls, "CreatableTopicResult"), name="orders", topic_id=uuid.UUID(int=0), error_code=code,
        error_message="Topic 'orders' already exists.", num_partitions=-1, replication_factor=-1, configs=None),))
    return request, response


def test_create_topics_resend_meeting_its_own_first_try_answers_the_topic():
    request, response = create_topics(ErrorCode.TOPIC_ALREADY_EXISTS)
    fixed = reconcile_resent(request, response, _counts_before(request, image_with(None)), image_with(4))
    entry = fixed.topics[0]
    assert (entry.error_code, entry.error_message, entry.topic_id, entry.num_partitions, entry.replication_factor) \
        == (ErrorCode.NONE, None, TID, 4, 3)
    # The topic was there before the first try: the error is the client's.
    assert reconcile_resent(request, response, _counts_before(request, image_with(4)), image_with(4)) == response


def test_delete_topics_resend_meeting_its_own_first_try_answers_none():
    req_cls = request_class(DELETE_TOPICS, 5)
    request = build(req_cls, topic_names=("orders",), timeout=datetime.timedelta(seconds=30))
    resp_cls = response_class(DELETE_TOPICS, 5)
    response = build(resp_cls, throttle_time_ms=0, responses=(build(
        nested(resp_cls, "DeletableTopicResult"), name="orders", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        error_message=None),))
    fixed = reconcile_resent(request, response, _counts_before(request, image_with(3)), image_with(None))
    assert fixed.responses[0].error_code == ErrorCode.NONE
    # It never existed: the client's error stands.
    assert reconcile_resent(request, response, _counts_before(request, image_with(None)), image_with(None)) == response


def delete_topics_by_id(topic_id: uuid.UUID, code: int):
    req_cls = request_class(DELETE_TOPICS, 6)
    request = build(req_cls, topics=(build(nested(req_cls, "DeleteTopicState"), name=None, topic_id=topic_id),),
                    timeout=datetime.timedelta(seconds=30))
    resp_cls = response_class(DELETE_TOPICS, 6)
    # The controller no longer knows the id: it echoes no name (controller_driver).
    response = build(resp_cls, throttle_time_ms=0, responses=(build(
        nested(resp_cls, "DeletableTopicResult"), name=None, topic_id=topic_id, error_code=code,
        error_message="no topic with this id"),))
    return request, response


def test_delete_topics_by_id_resend_meeting_its_own_first_try_answers_none_with_the_name():
    request, response = delete_topics_by_id(TID, ErrorCode.UNKNOWN_TOPIC_ID)
    fixed = reconcile_resent(request, response, _counts_before(request, image_with(3)), image_with(None))
    entry = fixed.responses[0]
    assert (entry.error_code, entry.error_message, entry.name, entry.topic_id) == (ErrorCode.NONE, None, "orders", TID)


def test_delete_topics_by_id_genuine_errors_stay():
    # No topic had that id before the first try: the client's error stands.
    request, response = delete_topics_by_id(uuid.UUID(int=99), ErrorCode.UNKNOWN_TOPIC_ID)
    assert reconcile_resent(request, response, _counts_before(request, image_with(3)), image_with(None)) == response
    # The topic is still there: not deleted by the first try.
    request, response = delete_topics_by_id(TID, ErrorCode.UNKNOWN_TOPIC_ID)
    assert reconcile_resent(request, response, _counts_before(request, image_with(3)), image_with(3)) == response
    # Another error code is never rewritten.
    request, response = delete_topics_by_id(TID, ErrorCode.TOPIC_DELETION_DISABLED)
    assert reconcile_resent(request, response, _counts_before(request, image_with(3)), image_with(None)) == response


def test_not_controller_is_read_from_each_apis_own_result_list():
    """Per-topic answers refuse the request only when every entry says NOT_CONTROLLER;
    one-error answers (AlterPartition, ElectLeaders v1+) by their top-level code."""
    request, response = create_partitions(5, ErrorCode.NOT_CONTROLLER)
    assert _answered_not_controller(request, response)
    request, response = create_partitions(5, ErrorCode.INVALID_PARTITIONS)
    assert not _answered_not_controller(request, response)
    alter_cls = response_class(ALTER_PARTITION, 3)
    alter_request = build(request_class(ALTER_PARTITION, 3), broker_id=1, broker_epoch=1, topics=())
    assert _answered_not_controller(alter_request, build(alter_cls, throttle_time_ms=0,
                                                         error_code=ErrorCode.NOT_CONTROLLER, topics=()))
    assert not _answered_not_controller(alter_request, build(alter_cls, throttle_time_ms=0,
                                                             error_code=ErrorCode.NONE, topics=()))


ELECT_LEADERS = 43


def image_led_by(*leaders: int) -> MetadataImage:
    """Topic orders, partition p led by leaders[p]; the preferred replica of each is 1."""
    image = MetadataImage()
    image.apply([r.TopicRecord("orders", TID)] + [
        r.PartitionRecord(p, TID, (1, 2, 3), (1, 2, 3) if leader >= 0 else (1,), leader, 0, 0)
        for p, leader in enumerate(leaders)])
    return image


def elect_leaders(election_type: int, codes: list[int]):
    req_cls = request_class(ELECT_LEADERS, 2)
    request = build(req_cls, election_type=election_type, topic_partitions=(build(
        nested(req_cls, "TopicPartitions"), topic="orders", partitions=tuple(range(len(codes)))),),
        timeout=datetime.timedelta(seconds=30))
    resp_cls = response_class(ELECT_LEADERS, 2)
    response = build(resp_cls, throttle_time_ms=0, error_code=ErrorCode.NONE, replica_election_results=(build(
        nested(resp_cls, "ReplicaElectionResult"), topic="orders", partition_result=tuple(
            build(nested(resp_cls, "PartitionResult"), partition_id=p, error_code=code, error_message="x")
            for p, code in enumerate(codes))),))
    return request, response


def codes_of(response) -> list[int]:
    return [p.error_code for p in response.replica_election_results[0].partition_result]


def test_elect_leaders_resend_meeting_its_own_first_try_answers_none():
    """A preferred election resent across a controller failover: partition 0 moved to
    its preferred replica by the first try (NONE); partition 1 was led by it already
    (the client's ELECTION_NOT_NEEDED stands); partition 2 is still not (the
    controller's answer stands, whatever the image shows)."""
    request, response = elect_leaders(0, [ErrorCode.ELECTION_NOT_NEEDED, ErrorCode.ELECTION_NOT_NEEDED,
                                          ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE])
    before = _leaders_before(request, image_led_by(2, 1, 3))
    now = image_led_by(1, 1, 3)
    assert _elect_image_answers(request, response, now)
    assert not _elect_image_answers(request, response, image_led_by(2, 1, 3))  # the image has not caught up
    assert codes_of(reconcile_elect_resent(request, response, before, now)) == [
        ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE]


def test_unclean_elect_leaders_resend_meeting_its_own_first_try_answers_none():
    request, response = elect_leaders(1, [ErrorCode.ELECTION_NOT_NEEDED, ErrorCode.ELECTION_NOT_NEEDED])
    before = _leaders_before(request, image_led_by(-1, 2))
    fixed = reconcile_elect_resent(request, response, before, image_led_by(3, 2))
    assert codes_of(fixed) == [ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED]
    # An election for every partition (no names) is left as it came.
    req_cls = request_class(ELECT_LEADERS, 2)
    everything = build(req_cls, election_type=1, topic_partitions=None, timeout=datetime.timedelta(seconds=30))
    assert _leaders_before(everything, image_led_by(-1, 2)) == {}

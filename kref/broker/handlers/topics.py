"""CreateTopics (19, v2-v7), DeleteTopics (20, v1-v6), CreatePartitions (37, v0-v3).

Theory of operation: thin translations between kio messages and the
Broker's synchronous metadata operations, which raise BrokerError with the
Kafka error code. Each topic in a request succeeds or fails on its own, as
in Kafka; a name repeated within one request is INVALID_REQUEST for every
occurrence (Kafka's rule, so the outcome cannot depend on order).
Replica assignments may only name this broker, and with them
num_partitions/replication_factor must be -1 (KIP-464 defaults).
CreateTopics v5+ returns the topic's effective configs, v7 its topic ID.
On a node of a KRaft cluster (broker.kraft set) all three are forwarded
to the active controller instead (kref/node/broker_view.py).
"""

from __future__ import annotations

import uuid
from collections import Counter

from kref.broker.broker import BrokerError
from kref.broker.handlers.configs import topic_config_entries
from kref.protocol.codec import response_class
from kref.protocol.errors import ErrorCode
from kref.protocol.messages import build, nested

CREATE_TOPICS = 19
DELETE_TOPICS = 20
CREATE_PARTITIONS = 37
ZERO_UUID = uuid.UUID(int=0)
NO_CONTROLLER = "no active controller reachable"


def register(router, broker) -> None:
    router.register(CREATE_TOPICS, 2, 7, handle_create_topics)
    router.register(DELETE_TOPICS, 1, 6, handle_delete_topics)
    router.register(CREATE_PARTITIONS, 0, 3, handle_create_partitions)


def _num_partitions_from_assignments(broker, topic) -> tuple[int, int]:
    if topic.num_partitions != -1 or topic.replication_factor != -1:
        raise BrokerError(
            ErrorCode.INVALID_REQUEST,
            "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.",
        )
    indexes = sorted(a.partition_index for a in topic.assignments)
    if indexes != list(range(len(indexes))):
        raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Partitions must be numbered 0..n-1 without gaps.")
    for a in topic.assignments:
        if list(a.broker_ids) != [broker.node_id]:
            raise BrokerError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Partition {a.partition_index} may only be assigned to broker {broker.node_id}, got {list(a.broker_ids)}.",
            )
    return len(indexes), 1


async def handle_create_topics(ctx, request):
    broker = ctx.broker
    view = getattr(broker, "kraft", None)
    if view is not None:
        # A KRaft cluster: the active controller decides (kref/node/broker_view.py).
        forwarded = await view.create_topics(request)
        if forwarded is not None:
            return forwarded
        response_type = response_class(CREATE_TOPICS, ctx.api_version)
        result_type = nested(response_type, "CreatableTopicResult")
        return build(response_type, topics=tuple(
            build(result_type, name=t.name, topic_id=ZERO_UUID, error_code=ErrorCode.NOT_CONTROLLER,
                  error_message=NO_CONTROLLER, configs=None)
            for t in request.topics
        ))
    response_type = response_class(CREATE_TOPICS, ctx.api_version)
    result_type = nested(response_type, "CreatableTopicResult")
    config_type = nested(response_type, "CreatableTopicConfigs")
    counts = Counter(t.name for t in request.topics)
    results = []
    for topic in request.topics:
        values = dict(name=topic.name, topic_id=ZERO_UUID, error_code=ErrorCode.NONE, error_message=None)
        try:
            if counts[topic.name] > 1:
                raise BrokerError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
            num_partitions, replication_factor = topic.num_partitions, topic.replication_factor
            if topic.assignments:
                num_partitions, replication_factor = _num_partitions_from_assignments(broker, topic)
            configs = {}
            for c in topic.configs:
                if c.name in configs:
                    raise BrokerError(ErrorCode.INVALID_CONFIG, f"Duplicate config name {c.name}.")
                configs[c.name] = c.value
            created = broker.create_topic(
                topic.name,
                num_partitions,
                replication_factor,
                configs,
                validate_only=request.validate_only,
            )
            values.update(
                topic_id=created.topic_id if not request.validate_only else ZERO_UUID,
                num_partitions=created.num_partitions,
                replication_factor=1,
                configs=(
                    tuple(
                        build(config_type, **entry)
                        for entry in topic_config_entries(broker, created.name, created.configs)
                    )
                    if config_type is not None
                    else None
                ),
            )
        except BrokerError as exc:
            values.update(error_code=exc.error_code, error_message=str(exc), configs=None)
        results.append(build(result_type, **values))
    return build(response_type, topics=tuple(results))


async def handle_delete_topics(ctx, request):
    broker = ctx.broker
    response_type = response_class(DELETE_TOPICS, ctx.api_version)
    result_type = nested(response_type, "DeletableTopicResult")
    view = getattr(broker, "kraft", None)
    if view is not None:
        forwarded = await view.delete_topics(request)
        if forwarded is not None:
            return forwarded
        names = [t.name for t in request.topics] if ctx.api_version >= 6 else list(request.topic_names)
        return build(response_type, responses=tuple(
            build(result_type, name=name, topic_id=ZERO_UUID, error_code=ErrorCode.NOT_CONTROLLER,
                  error_message=NO_CONTROLLER)
            for name in names
        ))
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    counts = Counter(w for w in wanted)
    results = []
    for name, topic_id in wanted:
        values = dict(name=name, topic_id=topic_id or ZERO_UUID, error_code=ErrorCode.NONE, error_message=None)
        try:
            if counts[(name, topic_id)] > 1:
                raise BrokerError(ErrorCode.INVALID_REQUEST, "Duplicate topic in request.")
            if name is None:
                if topic_id in (None, ZERO_UUID):
                    raise BrokerError(ErrorCode.INVALID_REQUEST, "Neither topic name nor topic ID given.")
                metadata = broker.topic_by_id(topic_id)
                if metadata is None:
                    raise BrokerError(ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")
                name = metadata.name
            elif topic_id not in (None, ZERO_UUID):
                raise BrokerError(ErrorCode.INVALID_REQUEST, "Give a topic name or a topic ID, not both.")
            deleted = broker.delete_topic(name)
            values.update(name=deleted.name, topic_id=deleted.topic_id)
        except BrokerError as exc:
            values.update(error_code=exc.error_code, error_message=str(exc))
        results.append(build(result_type, **values))
    return build(response_type, responses=tuple(results))


async def handle_create_partitions(ctx, request):
    broker = ctx.broker
    response_type = response_class(CREATE_PARTITIONS, ctx.api_version)
    result_type = nested(response_type, "CreatePartitionsTopicResult")
    view = getattr(broker, "kraft", None)
    if view is not None:
        forwarded = await view.create_partitions(request)
        if forwarded is not None:
            return forwarded
        return build(response_type, results=tuple(
            build(result_type, name=t.name, error_code=ErrorCode.NOT_CONTROLLER, error_message=NO_CONTROLLER)
            for t in request.topics
        ))
    counts = Counter(t.name for t in request.topics)
    results = []
    for topic in request.topics:
        try:
            if counts[topic.name] > 1:
                raise BrokerError(ErrorCode.INVALID_REQUEST, "Duplicate topic in request.")
            if topic.assignments is not None:
                for a in topic.assignments:
                    if list(a.broker_ids) != [broker.node_id]:
                        raise BrokerError(
                            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            f"New partitions may only be assigned to broker {broker.node_id}.",
                        )
                current = broker.get_topic(topic.name)
                if current is not None and len(topic.assignments) != topic.count - current.num_partitions:
                    raise BrokerError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        "The number of assignments must equal the number of new partitions.",
                    )
            broker.create_partitions(topic.name, topic.count, validate_only=request.validate_only)
            results.append(build(result_type, name=topic.name, error_code=ErrorCode.NONE, error_message=None))
        except BrokerError as exc:
            results.append(build(result_type, name=topic.name, error_code=exc.error_code, error_message=str(exc)))
    return build(response_type, results=tuple(results))

"""DescribeTopicPartitions (API 75, KIP-966): partitions of many topics, paginated.

Theory of operation
-------------------
The paginated cousin of Metadata for admin clients describing topics with
many partitions. Topics are answered in name order (all topics when the
request lists none), each with its partitions in index order, starting at
the request's cursor (topic name, partition index) and stopping after
`response_partition_limit` partitions (bounded by MAX_PARTITION_LIMIT);
`next_cursor` then names the first partition not answered, null when
everything was. Leadership comes from where Metadata takes it: on a KRaft
cluster the committed metadata (broker.kraft), alone this broker leads
every partition with the image's leader_epoch. Eligible leader replicas
(KIP-966's ELR) are not kept by kref: those lists are empty.
"""

from __future__ import annotations

import datetime
import uuid

from kref.broker.broker import BrokerError, validate_topic_name
from kref.broker.handlers.metadata import partition_leader_epoch
from kref.protocol.codec import response_class
from kref.protocol.errors import ErrorCode
from kref.protocol.messages import build, nested

DESCRIBE_TOPIC_PARTITIONS = 75
MAX_PARTITION_LIMIT = 2000  # Kafka's max.request.partition.size.limit default
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
ZERO_UUID = uuid.UUID(int=0)


def register(router, broker) -> None:
    router.register(DESCRIBE_TOPIC_PARTITIONS, 0, 0, handle_describe_topic_partitions)


def _partition(broker, view, partition_type, name: str, p: int):
    registration = view.partition(name, p) if view is not None else None
    if registration is not None:
        leader, epoch = registration.leader, registration.leader_epoch
        replicas, isr = tuple(registration.replicas), tuple(registration.isr)
    else:
        leader, epoch = broker.node_id, partition_leader_epoch(broker, name, p)
        replicas = isr = (broker.node_id,)
    return build(
        partition_type, error_code=ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
        partition_index=p, leader_id=leader, leader_epoch=epoch, replica_nodes=replicas, isr_nodes=isr,
        eligible_leader_replicas=(), last_known_elr=(), offline_replicas=(),
    )


async def handle_describe_topic_partitions(ctx, request):
    broker = ctx.broker
    view = getattr(broker, "kraft", None)
    response_type = response_class(DESCRIBE_TOPIC_PARTITIONS, ctx.api_version)
    topic_type = nested(response_type, "DescribeTopicPartitionsResponseTopic")
    partition_type = nested(response_type, "DescribeTopicPartitionsResponsePartition")
    cursor_type = nested(response_type, "Cursor")
    limit = max(1, min(request.response_partition_limit, MAX_PARTITION_LIMIT))
    names = sorted({t.name for t in request.topics}) if request.topics else sorted(broker.topics)
    cursor = request.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    topics = []
    next_cursor = None
    budget = limit
    for name in names:
        metadata = broker.get_topic(name)
        if metadata is None:
            try:
                validate_topic_name(name)
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            except BrokerError as exc:
                code = exc.error_code
            topics.append(build(topic_type, error_code=code, name=name, topic_id=ZERO_UUID, is_internal=False,
                                partitions=(), topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        if budget == 0:
            next_cursor = build(cursor_type, topic_name=name, partition_index=first)
            break
        last = min(metadata.num_partitions, first + budget)
        partitions = tuple(_partition(broker, view, partition_type, name, p) for p in range(first, last))
        budget -= len(partitions)
        topics.append(build(topic_type, error_code=ErrorCode.NONE, name=name, topic_id=metadata.topic_id,
                            is_internal=metadata.is_internal, partitions=partitions,
                            topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
        if last < metadata.num_partitions:
            next_cursor = build(cursor_type, topic_name=name, partition_index=last)
            break
    return build(response_type, throttle_time=datetime.timedelta(0), topics=tuple(topics),
                 next_cursor=next_cursor)

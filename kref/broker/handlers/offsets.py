"""OffsetCommit (API key 8, v2-v9), OffsetFetch (API key 9, v1-v9) and OffsetDelete (47, v0).

Theory of operation
-------------------
Committed offsets live in the group coordinator's cache and, durably, as
OffsetCommit records in the group's `__consumer_offsets` partition. A commit
is answered only after its records are in the log, so an acknowledged commit
survives a restart (the coordinator reloads the partition on start). The
rules of who may commit (a member of the current generation, or anyone for a
group that only stores offsets: generation -1) are the coordinator's.

OffsetFetch v8+ asks for several groups at once (KIP-709); before v2 a null
topic list was not allowed, from v2 it means "every committed partition".
Partitions without a committed offset answer offset -1, as Kafka does.
A commit for a partition that does not exist is refused per partition with
UNKNOWN_TOPIC_OR_PARTITION, as Kafka does. OffsetDelete (KIP-496) removes
offsets of partitions a group no longer consumes; the coordinator decides
which ones it may (GROUP_SUBSCRIBED_TO_TOPIC for the others).
"""

from __future__ import annotations

import datetime
from typing import Any

from kref.broker.group_area import install
from kref.broker.handlers._responses import build, error, response_types
from kref.coordinator import group as g

OFFSET_COMMIT, OFFSET_FETCH, OFFSET_DELETE = 8, 9, 47
_ZERO = datetime.timedelta(0)


async def offset_commit(ctx, request) -> Any:
    types = response_types(OFFSET_COMMIT, ctx.api_version)
    partitions = tuple(
        g.OffsetCommitPartition(
            topic.name,
            int(p.partition_index),
            int(p.committed_offset),
            int(getattr(p, "committed_leader_epoch", -1)),
            p.committed_metadata,
        )
        for topic in request.topics
        for p in topic.partitions
    )
    # As Kafka (KafkaApis' nonExistingTopicErrors): a partition that does not
    # exist gets UNKNOWN_TOPIC_OR_PARTITION and is not stored. Stored, such an
    # offset would be picked up by a topic created later under that name.
    known = tuple(p for p in partitions if _exists(ctx.broker, p.topic, p.partition))
    codes = {(p.topic, p.partition): g.Errors.UNKNOWN_TOPIC_OR_PARTITION for p in partitions}
    if known:
        result: g.OffsetCommitResult = await ctx.broker.group_coordinator.call(
            g.OffsetCommit,
            group_id=request.group_id,
            generation_id=int(request.generation_id_or_member_epoch),
            member_id=request.member_id,
            partitions=known,
            group_instance_id=getattr(request, "group_instance_id", None),
        )
        codes.update(((topic, partition), code) for topic, partition, code in result.partitions)
    by_topic: dict[str, list] = {}
    for topic, partition, code in ((p.topic, p.partition, codes[(p.topic, p.partition)]) for p in partitions):
        by_topic.setdefault(topic, []).append(
            build(types.OffsetCommitResponsePartition, partition_index=partition, error_code=error(code))
        )
    topics = tuple(
        build(types.OffsetCommitResponseTopic, name=name, partitions=tuple(parts)) for name, parts in by_topic.items()
    )
    return build(types.OffsetCommitResponse, throttle_time=_ZERO, topics=topics)


def _exists(broker, topic: str, partition: int) -> bool:
    metadata = broker.get_topic(topic)
    return metadata is not None and 0 <= partition < metadata.num_partitions


async def _fetch_group(ctx, group_id: str, topics) -> g.OffsetFetchResult:
    wanted = None
    if topics is not None:
        wanted = tuple((t.name, int(p)) for t in topics for p in t.partition_indexes)
    return await ctx.broker.group_coordinator.call(g.OffsetFetch, group_id=group_id, partitions=wanted)


def _topics(types, topic_cls: str, partition_cls: str, result: g.OffsetFetchResult) -> tuple:
    by_topic: dict[str, list] = {}
    for p in result.partitions:
        by_topic.setdefault(p.topic, []).append(
            build(
                getattr(types, partition_cls),
                partition_index=p.partition,
                committed_offset=p.offset,
                committed_leader_epoch=p.leader_epoch,
                metadata=p.metadata,
                error_code=error(p.error),
            )
        )
    return tuple(build(getattr(types, topic_cls), name=name, partitions=tuple(parts)) for name, parts in by_topic.items())


async def offset_fetch(ctx, request) -> Any:
    types = response_types(OFFSET_FETCH, ctx.api_version)
    if ctx.api_version >= 8:
        groups = []
        for group in request.groups:
            result = await _fetch_group(ctx, group.group_id, group.topics)
            groups.append(
                build(
                    types.OffsetFetchResponseGroup,
                    group_id=group.group_id,
                    topics=_topics(types, "OffsetFetchResponseTopics", "OffsetFetchResponsePartitions", result),
                    error_code=error(result.error),
                )
            )
        return build(types.OffsetFetchResponse, throttle_time=_ZERO, groups=tuple(groups))
    result = await _fetch_group(ctx, request.group_id, request.topics)
    if result.error is not g.Errors.NONE and ctx.api_version < 2:
        # v0/v1 have no top-level error: every partition carries it
        result = g.OffsetFetchResult(
            g.Errors.NONE,
            tuple(
                g.FetchedOffset(t.name, int(p), -1, -1, "", result.error)
                for t in request.topics or ()
                for p in t.partition_indexes
            ),
        )
    return build(
        types.OffsetFetchResponse,
        throttle_time=_ZERO,
        topics=_topics(types, "OffsetFetchResponseTopic", "OffsetFetchResponsePartition", result),
        error_code=error(result.error),
    )


async def offset_delete(ctx, request) -> Any:
    types = response_types(OFFSET_DELETE, ctx.api_version)
    wanted = tuple((t.name, int(p.partition_index)) for t in request.topics for p in t.partitions)
    result: g.OffsetDeleteResult = await ctx.broker.group_coordinator.call(
        g.OffsetDelete, group_id=request.group_id, partitions=wanted
    )
    by_topic: dict[str, list] = {}
    for topic, partition, code in result.partitions:
        by_topic.setdefault(topic, []).append(
            build(types.OffsetDeleteResponsePartition, partition_index=partition, error_code=error(code))
        )
    topics = tuple(
        build(types.OffsetDeleteResponseTopic, name=name, partitions=tuple(parts)) for name, parts in by_topic.items()
    )
    return build(types.OffsetDeleteResponse, error_code=error(result.error), throttle_time=_ZERO, topics=topics)


def register(router, broker) -> None:
    install(broker)
    router.register(OFFSET_DELETE, 0, 0, offset_delete)
    router.register(OFFSET_COMMIT, 2, 9, offset_commit)
    router.register(OFFSET_FETCH, 1, 9, offset_fetch)

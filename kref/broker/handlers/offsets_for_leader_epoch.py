"""OffsetsForLeaderEpoch (API key 23, v2-v4): where a leader epoch ends on the leader's log.

Theory of operation: consumers (KIP-320, after a leader change: did my
position survive?) and followers of a Fetch version without diverging epochs
(KIP-101/279) send (leader_epoch, current_leader_epoch) per partition; the
partition's leader answers from its leader-epoch cache the largest epoch <=
leader_epoch it knows and that epoch's end offset (the start of the next
one, or the log end offset for the current epoch); -1/-1 when it knows no
epoch that old. The replica core decides who may answer: not the leader ->
NOT_LEADER_OR_FOLLOWER, an older/newer current_leader_epoch ->
FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH. A partition this broker has no
replica of is NOT_LEADER_OR_FOLLOWER if the metadata knows it, else
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from typing import Any

from kref.broker.handlers._responses import build, error, response_types
from kref.protocol.errors import ErrorCode

OFFSET_FOR_LEADER_EPOCH = 23
MIN_VERSION, MAX_VERSION = 2, 4


def register(router, broker) -> None:

    async def handle(ctx, request) -> Any:
        return offsets_for_leader_epoch(ctx.broker, ctx.api_version, request)

    router.register(OFFSET_FOR_LEADER_EPOCH, MIN_VERSION, MAX_VERSION, handle)


def offsets_for_leader_epoch(broker, api_version: int, request) -> Any:
    types = response_types(OFFSET_FOR_LEADER_EPOCH, api_version)
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            index = int(p.partition)
            part = broker.partitions.get((topic.topic, index))
            if part is None:
                code = broker.absent_partition_error(topic.topic, index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                epoch, end_offset = -1, -1
            else:
                code, epoch, end_offset = part.end_offset_for_epoch(
                    int(p.leader_epoch), int(getattr(p, "current_leader_epoch", -1))
                )
            partitions.append(build(types.EpochEndOffset, error_code=error(code), partition=index,
                                    leader_epoch=epoch, end_offset=end_offset))
        topics.append(build(types.OffsetForLeaderTopicResult, topic=topic.topic, partitions=tuple(partitions)))
    return build(types.OffsetForLeaderEpochResponse, throttle_time=_zero(), topics=tuple(topics))


def _zero():
    import datetime

    from kio.static.primitive import i32Timedelta

    return i32Timedelta.parse(datetime.timedelta(0))

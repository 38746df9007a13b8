"""DeleteRecords (API key 21, v0-v2): move a partition's log start offset forward.

Theory of operation: for each partition the client names an offset (-1 =
the high watermark); records before it become unreadable at once and their
segments are deleted by retention later (Kafka's logStartOffset semantics,
KIP-107). The offset may not pass the high watermark (OFFSET_OUT_OF_RANGE).
The response's low_watermark is the new log start offset. With a single
replica there are no followers whose log start offsets must catch up, so
nothing waits in a purgatory. Internal topics are refused with
ErrorCode.INVALID_TOPIC_EXCEPTION, as Kafka does: only the group coordinator writes
(and, by compaction, removes) `__consumer_offsets` records.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.static.primitive import i32Timedelta

from kref.broker.broker import INTERNAL_TOPICS
from kref.broker.handlers._responses import build, error, response_types
from kref.protocol.errors import ErrorCode

DELETE_RECORDS = 21
MIN_VERSION, MAX_VERSION = 0, 2

_ZERO = i32Timedelta.parse(datetime.timedelta(0))


def register(router, broker) -> None:

    async def handle_delete_records(ctx, request) -> Any:
        return delete_records(ctx.broker, ctx.api_version, request)

    router.register(DELETE_RECORDS, MIN_VERSION, MAX_VERSION, handle_delete_records)


def delete_records(broker, api_version: int, request) -> Any:
    types = response_types(DELETE_RECORDS, api_version)
    now_ms = broker.now_ms()
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            part = broker.partitions.get((topic.name, int(p.partition_index)))
            if topic.name in INTERNAL_TOPICS:
                # Kafka's ReplicaManager refuses too: deleting records of
                # __consumer_offsets would lose every group's offsets.
                code, low_watermark = ErrorCode.INVALID_TOPIC_EXCEPTION, -1
            elif part is None:
                code, low_watermark = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1
            else:
                code, low_watermark = part.delete_records_before(int(p.offset), now_ms)
            partitions.append(
                build(
                    types.DeleteRecordsPartitionResult,
                    partition_index=p.partition_index,
                    low_watermark=low_watermark,
                    error_code=error(code),
                )
            )
        topics.append(build(types.DeleteRecordsTopicResult, name=topic.name, partitions=tuple(partitions)))
    return build(types.DeleteRecordsResponse, throttle_time=_ZERO, topics=tuple(topics))

"""ListOffsets (API key 2, v1-v10): offsets by time, and the special positions.

Theory of operation: for each partition the client sends a timestamp, and
the driver answers from the log (`Partition.fetch_offset_for_timestamp`):

- -2 EARLIEST (and -4 EARLIEST_LOCAL, KIP-405): the log start offset;
- -1 LATEST: the high watermark, the end of what consumers may read;
- -3 MAX_TIMESTAMP (KIP-734): the record with the largest timestamp;
- t >= 0: the first record with timestamp >= t, found through the time
  index (KIP-33); none below the high watermark -> offset -1.

From v4 the response carries the leader epoch of the answer, and a
current_leader_epoch in the request is checked (KIP-320, FENCED_LEADER_EPOCH
/ UNKNOWN_LEADER_EPOCH). Unknown partitions get ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.static.primitive import i32Timedelta

from kref.broker.handlers._responses import build, error, response_types
from kref.protocol.errors import ErrorCode

LIST_OFFSETS = 2
MIN_VERSION, MAX_VERSION = 1, 10

_ZERO = i32Timedelta.parse(datetime.timedelta(0))


def register(router, broker) -> None:

    async def handle_list_offsets(ctx, request) -> Any:
        return list_offsets(ctx.broker, ctx.api_version, request)

    router.register(LIST_OFFSETS, MIN_VERSION, MAX_VERSION, handle_list_offsets)


def list_offsets(broker, api_version: int, request) -> Any:
    types = response_types(LIST_OFFSETS, api_version)
    isolation_level = int(getattr(request, "isolation_level", 0))
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            part = broker.partitions.get((topic.name, int(p.partition_index)))
            if part is None:
                code = broker.absent_partition_error(topic.name, int(p.partition_index), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                ts, offset, epoch = -1, -1, -1
            else:
                code, ts, offset, epoch = part.fetch_offset_for_timestamp(
                    int(p.timestamp),
                    current_leader_epoch=int(getattr(p, "current_leader_epoch", -1)),
                    isolation_level=isolation_level,
                )
            partitions.append(
                build(
                    types.ListOffsetsPartitionResponse,
                    partition_index=p.partition_index,
                    error_code=error(code),
                    timestamp=ts,
                    offset=offset,
                    leader_epoch=epoch,
                )
            )
        topics.append(build(types.ListOffsetsTopicResponse, name=topic.name, partitions=tuple(partitions)))
    return build(types.ListOffsetsResponse, throttle_time=_ZERO, topics=tuple(topics))

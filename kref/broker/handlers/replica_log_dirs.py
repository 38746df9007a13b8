"""AlterReplicaLogDirs (API 34, v1-v2): which of a broker's log.dirs holds a replica.

Theory of operation
-------------------
An operator (kafka-reassign-partitions.sh with log dirs, an admin client's
alterReplicaLogDirs) sends each broker, per destination directory, the
partitions whose replica should live there. The answer is per partition:

- a destination that is not one of this broker's log.dirs: LOG_DIR_NOT_FOUND;
  one that cannot be read (removed under a running broker): KAFKA_STORAGE_ERROR;
- a replica this broker does not host yet: REPLICA_NOT_AVAILABLE, and the
  directory is remembered so that the replica is created there when it comes
  (Kafka's preferred log dir, kept in memory as Kafka does; the usual order is
  AlterReplicaLogDirs, then the reassignment that adds the replica);
- a replica already in the destination: NONE, nothing to do.

Left out: moving a replica that is hosted in another directory. Kafka copies
it into a `-future` log with a ReplicaAlterLogDirsThread while it keeps
serving, then swaps the two; kref has no future logs (DescribeLogDirs never
reports is_future_key), so such a request is refused with INVALID_REQUEST
and one log line, and nothing moves.
"""

from __future__ import annotations

import logging
import os

from kref.broker.handlers._responses import build, response_types
from kref.protocol.errors import ErrorCode

log = logging.getLogger("kref.handlers.replica_log_dirs")

ALTER_REPLICA_LOG_DIRS = 34


def register(router, broker) -> None:
    router.register(ALTER_REPLICA_LOG_DIRS, 1, 2, handle_alter_replica_log_dirs)


def decide(log_dirs: list[str], current_dir: str | None, destination: str) -> int:
    """One replica's answer; `current_dir` is the directory holding it here, or None."""
    destination = os.path.abspath(destination)
    if destination not in log_dirs:
        return ErrorCode.LOG_DIR_NOT_FOUND
    if not os.access(destination, os.R_OK | os.W_OK | os.X_OK):
        return ErrorCode.KAFKA_STORAGE_ERROR
    if current_dir is None:
        return ErrorCode.REPLICA_NOT_AVAILABLE
    if current_dir == destination:
        return ErrorCode.NONE
    return ErrorCode.INVALID_REQUEST  # a live move needs a future log (not implemented)


async def handle_alter_replica_log_dirs(ctx, request):
    broker = ctx.broker
    types = response_types(ALTER_REPLICA_LOG_DIRS, ctx.api_version)
    manager = broker.log_manager
    log_dirs = list(manager.log_dirs) if manager is not None else []
    by_topic: dict[str, list] = {}
    for wanted in request.dirs:
        destination = os.path.abspath(wanted.path)
        for topic in wanted.topics:
            for p in topic.partitions:
                key = (topic.name, int(p))
                current = manager.get_log(*key) if manager is not None else None
                current_dir = os.path.dirname(os.path.normpath(current.dir)) if current is not None else None
                code = decide(log_dirs, current_dir, destination)
                if code == ErrorCode.REPLICA_NOT_AVAILABLE:
                    manager.preferred_log_dirs[key] = destination
                elif code == ErrorCode.INVALID_REQUEST:
                    log.info("node %d: AlterReplicaLogDirs %s-%d from %s to %s refused: moving a hosted replica "
                             "between log dirs is not supported", broker.node_id, key[0], key[1], current_dir,
                             destination)
                by_topic.setdefault(topic.name, []).append(
                    build(types.AlterReplicaLogDirPartitionResult, partition_index=key[1], error_code=code))
    return build(types.AlterReplicaLogDirsResponse, results=tuple(
        build(types.AlterReplicaLogDirTopicResult, topic_name=name, partitions=tuple(parts))
        for name, parts in by_topic.items()))

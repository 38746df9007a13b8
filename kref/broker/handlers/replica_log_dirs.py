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
- a replica already in the destination: NONE, nothing to do (a move of it
  to another dir under way is abandoned);
- a replica hosted in another dir: NONE, and a live move starts (KIP-113):
  a `-future` log in the destination, filled by a local fetcher while the
  partition keeps serving, swapped in once caught up
  (kref/broker/alter_log_dirs.py); a replica already moving elsewhere is
  retargeted (the first copy abandoned, a new one started), as Kafka does.

The decisions are alter_log_dirs_core.py's; this handler only walks the
request and builds the response.
"""

from __future__ import annotations

from kref.broker.alter_log_dirs import mover_of
from kref.broker.handlers._responses import build, response_types

ALTER_REPLICA_LOG_DIRS = 34


def register(router, broker) -> None:
    router.register(ALTER_REPLICA_LOG_DIRS, 1, 2, handle_alter_replica_log_dirs)


async def handle_alter_replica_log_dirs(ctx, request):
    broker = ctx.broker
    types = response_types(ALTER_REPLICA_LOG_DIRS, ctx.api_version)
    mover = mover_of(broker)
    by_topic: dict[str, list] = {}
    for wanted in request.dirs:
        for topic in wanted.topics:
            for p in topic.partitions:
                code = mover.alter((topic.name, int(p)), wanted.path)
                by_topic.setdefault(topic.name, []).append(
                    build(types.AlterReplicaLogDirPartitionResult, partition_index=int(p), error_code=code))
    return build(types.AlterReplicaLogDirsResponse, results=tuple(
        build(types.AlterReplicaLogDirTopicResult, topic_name=name, partitions=tuple(parts))
        for name, parts in by_topic.items()))

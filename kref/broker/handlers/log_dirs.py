"""DescribeLogDirs (API 35, v1-v4): where each partition lives on this broker, and how big it is.

Theory of operation
-------------------
An operator (kafka-log-dirs.sh, an admin client's describeLogDirs) asks
each broker for its log directories: per directory the partitions it holds
with their size in bytes and offset lag, and since v4 the volume's total and
usable bytes. Kafka answers from its LogManager; so does kref, reading the
same logs the replica manager serves. The answer decides nothing; it only
reports:

- every configured log dir is listed, empty ones too; a dir that cannot be
  read (removed or unreadable under a running broker), or that a failure
  took offline (KIP-112, kref/storage/log_manager.py `mark_offline`), answers
  KAFKA_STORAGE_ERROR for that dir alone;
- `topics` = null asks for everything; otherwise only the named partitions
  are reported (unknown ones are left out, as Kafka does);
- offset_lag is Kafka's: max(0, high_watermark - log_end_offset) for the
  current log (a replica behind its own high watermark, which is 0 on a
  leader);
- a replica being moved to another dir (AlterReplicaLogDirs,
  kref/broker/alter_log_dirs.py) is listed twice: its current log, and its
  future log in the destination dir with is_future_key = true, its size so
  far, and as offset_lag how far the copy is behind the current log's end
  (Kafka's future-replica lag).
"""

from __future__ import annotations

import os
from collections import defaultdict

from kref.broker.handlers._responses import build, response_types
from kref.protocol.errors import ErrorCode

DESCRIBE_LOG_DIRS = 35


def register(router, broker) -> None:
    router.register(DESCRIBE_LOG_DIRS, 1, 4, handle_describe_log_dirs)


def _wanted(request) -> dict[str, set[int]] | None:
    if request.topics is None:
        return None
    wanted: dict[str, set[int]] = defaultdict(set)
    for topic in request.topics:
        wanted[topic.topic].update(int(p) for p in topic.partitions)
    return wanted


def _volume(path: str) -> tuple[int, int]:
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


async def handle_describe_log_dirs(ctx, request):
    broker = ctx.broker
    types = response_types(DESCRIBE_LOG_DIRS, ctx.api_version)
    wanted = _wanted(request)
    manager = broker.log_manager
    by_dir: dict[str, dict[str, list]] = {d: defaultdict(list) for d in (manager.log_dirs if manager else [])}
    mover = getattr(broker, "log_dir_mover", None)
    for log in (manager.all_logs() if manager else []):
        if log.closed or (wanted is not None and log.partition not in wanted.get(log.topic, ())):
            continue
        partition = broker.partitions.get((log.topic, log.partition))
        high_watermark = partition.high_watermark if partition is not None else log.log_end_offset
        entry = build(types.DescribeLogDirsPartition, partition_index=log.partition, partition_size=log.size_in_bytes,
                      offset_lag=max(0, high_watermark - log.log_end_offset), is_future_key=False)
        by_dir.setdefault(os.path.dirname(os.path.normpath(log.dir)), defaultdict(list))[log.topic].append(entry)
        future = mover.future_of((log.topic, log.partition)) if mover is not None else None
        if future is not None and not future.closed:
            entry = build(types.DescribeLogDirsPartition, partition_index=log.partition,
                          partition_size=future.size_in_bytes,
                          offset_lag=max(0, log.log_end_offset - future.log_end_offset), is_future_key=True)
            by_dir.setdefault(os.path.dirname(os.path.normpath(future.dir)), defaultdict(list))[log.topic].append(entry)
    results = []
    for log_dir, topics in by_dir.items():
        try:
            if manager is not None and log_dir in manager.offline_dirs:
                raise OSError(manager.offline_dirs[log_dir])  # KIP-112: offline until restart
            total, usable = _volume(log_dir)
            code = ErrorCode.NONE
        except OSError:
            total = usable = -1
            code = ErrorCode.KAFKA_STORAGE_ERROR
        described = tuple(
            build(types.DescribeLogDirsTopic, name=name,
                  partitions=tuple(sorted(parts, key=lambda p: (p.partition_index, p.is_future_key))))
            for name, parts in sorted(topics.items())
        ) if code == ErrorCode.NONE else ()
        results.append(build(types.DescribeLogDirsResult, error_code=code, log_dir=log_dir, topics=described,
                             total_bytes=total, usable_bytes=usable))
    return build(types.DescribeLogDirsResponse, error_code=ErrorCode.NONE, results=tuple(results))

"""Future logs: the copy of a replica that AlterReplicaLogDirs is moving to another log dir (KIP-113).

Theory of operation
-------------------
Kafka moves a hosted replica between two of a broker's log.dirs without
taking it offline: a *future* log `<topic>-<partition>.<id>-future` is
created in the destination dir, a local fetcher copies the current log into
it batch by batch (offsets, leader epochs and producer state kept, since the
batches are appended unchanged), and once it has caught up the two are
swapped: the future log takes the partition's plain directory name and the
old one is renamed `<topic>-<partition>.<id>-delete` and removed in the
background. This module is the storage half: names, opening a future log,
the swap's file steps and what a start finds on disk. When to copy what and
when to swap is decided elsewhere (kref/broker/alter_log_dirs.py, a pure
core); the broker's driver carries those decisions out with these functions.

The swap, in an order that survives a crash at any step (on a real disk and
on MemoryFileSystem, whose power cuts the tests use):

1. the future log is flushed and closed (segments, indexes, epoch
   checkpoint, producer-state snapshot on disk: it is complete on its own);
2. the current dir is renamed to `-delete` and its parent fsynced;
3. the future dir is renamed to the partition's name and its parent fsynced;
4. the new log is opened and takes the old one's place.

A start (`promote_orphan_future_dirs`, run by LogManager.load_logs before it
loads anything) therefore finds one of three pictures for a moving
partition: a current dir and a future dir (before 2: the copy resumes, the
future re-validated and truncated to what the current log agrees with); a
`-delete` dir and a future dir with no current one (between 2 and 3: the
future was complete when 2 began, so it is promoted, step 3 done now); or
the moved dir and a `-delete` dir (after 3: the delete is finished). Kafka
renames in the other order (future first), which leaves two current dirs
after a crash in between and stops the broker until an operator deletes one;
renaming the old dir away first never shows two live copies. The only other
way a future dir loses its current dir is a partition deleted while
moving, and the driver removes the future first there, so a promoted future
is always a complete one.

A Log names its partition after its directory, so a FutureLog passes the
plain name to Log and keeps the real path in `dir`.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any, Callable

from kref.ports.ids import SYSTEM_IDS, Ids
from kref.storage.checkpoint import fsync_dir
from kref.storage.config import LogConfig
from kref.storage.log import Log, parse_partition_dir_name

logger = logging.getLogger("kref.storage.future_log")

FUTURE_DIR_SUFFIX = "-future"
DELETE_DIR_SUFFIX = "-delete"
_SUFFIXED = re.compile(r"^(?P<plain>.+-\d+)\.(?P<id>[0-9a-f]{32})(?P<kind>-future|-delete)$")

__all__ = [
    "FutureLog",
    "future_dir_name",
    "delete_dir_name",
    "parse_suffixed_dir_name",
    "future_dirs",
    "promote_orphan_future_dirs",
    "create_future_log",
    "open_future_log",
    "remove_future_log",
    "truncate_future_log",
    "swap_future_log",
]


def future_dir_name(topic: str, partition: int, unique_id: str) -> str:
    return f"{topic}-{partition}.{unique_id}{FUTURE_DIR_SUFFIX}"


def delete_dir_name(topic: str, partition: int, ids: Ids = SYSTEM_IDS) -> str:
    """A unique name for a partition dir being removed (its random part from the ids port)."""
    return f"{topic}-{partition}.{ids.uuid().hex}{DELETE_DIR_SUFFIX}"


def parse_suffixed_dir_name(name: str) -> tuple[str, int, str] | None:
    """(topic, partition, "-future" | "-delete") of a suffixed partition dir name, else None."""
    m = _SUFFIXED.match(name)
    if m is None:
        return None
    try:
        topic, partition = parse_partition_dir_name(m.group("plain"))
    except ValueError:
        return None
    return topic, partition, m.group("kind")


class FutureLog(Log):
    """A Log in a `<topic>-<partition>.<id>-future` directory."""

    def __init__(self, directory: str, config: LogConfig, now_ms: int, topic_id, producer_state, fs=None) -> None:
        parsed = parse_suffixed_dir_name(os.path.basename(os.path.normpath(directory)))
        if parsed is None or parsed[2] != FUTURE_DIR_SUFFIX:
            raise ValueError(f"{directory!r} is not a future log directory")
        plain = os.path.join(os.path.dirname(os.path.normpath(directory)), f"{parsed[0]}-{parsed[1]}")
        super().__init__(plain, config, now_ms, topic_id, producer_state, fs)
        self.dir = directory


def future_dirs(fs, log_dirs: list[str]) -> list[tuple[str, int, str]]:
    """(topic, partition, path) of every future dir in the log dirs."""
    found = []
    for log_dir in log_dirs:
        for name in sorted(fs.listdir(log_dir)):
            parsed = parse_suffixed_dir_name(name)
            path = os.path.join(log_dir, name)
            if parsed is not None and parsed[2] == FUTURE_DIR_SUFFIX and fs.is_dir(path):
                found.append((parsed[0], parsed[1], path))
    return found


def _current_dir_of(fs, log_dirs: list[str], topic: str, partition: int) -> str | None:
    for log_dir in log_dirs:
        path = os.path.join(log_dir, f"{topic}-{partition}")
        if fs.is_dir(path):
            return path
    return None


def promote_orphan_future_dirs(fs, log_dirs: list[str]) -> list[str]:
    """Finish swaps a crash interrupted between steps 2 and 3; returns the promoted paths.

    A future dir with no current dir of its partition in any log dir takes
    the partition's name; of two future dirs of one partition (a retarget
    cut short) only the first is kept, the other removed."""
    promoted = []
    for topic, partition, path in future_dirs(fs, log_dirs):
        if _current_dir_of(fs, log_dirs, topic, partition) is not None:
            continue
        log_dir = os.path.dirname(path)
        target = os.path.join(log_dir, f"{topic}-{partition}")
        logger.warning("completing the interrupted move of %s-%d: %s becomes %s", topic, partition, path, target)
        fs.replace(path, target)
        fsync_dir(log_dir, fs)
        promoted.append(target)
    return promoted


def _producer_state(manager, path: str, topic: str, partition: int) -> Any:
    factory = manager.producer_state_factory
    return factory(path, partition, topic) if factory is not None else None


def create_future_log(manager, current: Log, destination_dir: str, unique_id: str, now_ms: int) -> FutureLog:
    """An empty future log for `current` in `destination_dir` (one of the manager's log dirs)."""
    path = os.path.join(destination_dir, future_dir_name(current.topic, current.partition, unique_id))
    log = FutureLog.open(
        path, current.config, now_ms, topic_id=current.topic_id,
        producer_state=_producer_state(manager, path, current.topic, current.partition),
        recovery_point=0, log_start_offset=current.log_start_offset, had_clean_shutdown=True, fs=manager.fs,
    )
    fsync_dir(destination_dir, manager.fs)
    return log


def open_future_log(manager, path: str, current: Log, now_ms: int) -> FutureLog:
    """Reopen a future dir found at start; everything in it is re-validated (its
    recovery point is in no checkpoint), so a torn tail is cut off."""
    topic, partition, _ = parse_suffixed_dir_name(os.path.basename(path))
    return FutureLog.open(
        path, current.config, now_ms, topic_id=current.topic_id,
        producer_state=_producer_state(manager, path, topic, partition),
        recovery_point=0, log_start_offset=0, had_clean_shutdown=False, fs=manager.fs,
    )


def truncate_future_log(future: Log, offset: int) -> None:
    """TruncateToEpochEndOffset on a future log, its producer state rebuilt from
    its own batches: ProducerStateManager.truncate_to forgets a producer whose
    retained batches all lie past the offset (Kafka reloads from a snapshot
    instead), and a moved replica must not forget producers the current one
    remembers."""
    future.truncate_to(offset)
    state = future.producer_state
    if state is not None and hasattr(state, "truncate_fully_and_start_at"):
        from kref.storage import log_loader  # the loader owns the replay

        state.truncate_fully_and_start_at(future.log_start_offset)
        log_loader._rebuild_producer_state(future)


def remove_future_log(fs, future: Log, ids: Ids = SYSTEM_IDS) -> None:
    """Abandon a move: the future dir is renamed `-delete` (atomic) and removed."""
    if not future.closed:
        future.close_uncleanly()
    parent = os.path.dirname(os.path.normpath(future.dir))
    doomed = os.path.join(parent, delete_dir_name(future.topic, future.partition, ids))
    fs.replace(future.dir, doomed)
    fsync_dir(parent, fs)
    fs.rmtree(doomed)


def swap_future_log(
    manager, current: Log, future: Log, now_ms: int, high_watermark: int | None,
    *, step: Callable[[str], None] | None = None,
) -> tuple[Log, str]:
    """Steps 1-4 of the swap (module docstring); returns (the new current log,
    the `-delete` path the caller removes in the background). The caller has
    checked that `future` holds exactly what `current` holds and runs this
    with nothing else touching either log. `step(name)` is called after each
    step (the SIGKILL tests stop the process there)."""
    step = step or (lambda name: None)
    fs = manager.fs
    key = (current.topic, current.partition)
    future.close()  # step 1: flush, producer-state snapshot, release the files
    current.close_uncleanly()  # a -delete dir needs no flush; readers got copies
    step("future-closed")
    source_dir = os.path.dirname(os.path.normpath(current.dir))
    doomed = os.path.join(source_dir, delete_dir_name(*key, manager.ids))
    fs.replace(current.dir, doomed)  # step 2
    fsync_dir(source_dir, fs)
    step("current-renamed")
    destination_dir = os.path.dirname(os.path.normpath(future.dir))
    target = os.path.join(destination_dir, f"{key[0]}-{key[1]}")
    fs.replace(future.dir, target)  # step 3
    fsync_dir(destination_dir, fs)
    step("future-renamed")
    moved = Log.open(  # step 4: closed cleanly in step 1, so its indexes are trusted
        target, current.config, now_ms, topic_id=current.topic_id,
        producer_state=_producer_state(manager, target, *key),
        recovery_point=future.log_end_offset, log_start_offset=future.log_start_offset,
        had_clean_shutdown=True, fs=fs,
    )
    if high_watermark is not None and hasattr(moved, "update_high_watermark"):
        moved.update_high_watermark(high_watermark)  # the Log's checkpointed copy, where it keeps one
    manager.replace_log(moved)
    step("reopened")
    return moved, doomed

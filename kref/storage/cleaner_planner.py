"""The log cleaner's decisions: which log to clean, how far, and which records survive.

Theory of operation (Kafka's design, "Log Compaction"; LogCleanerManager and
Cleaner). A compacted log has a *clean* head, already compacted, and a
*dirty* tail written since; the cleaner-offset-checkpoint remembers where
the dirty part begins (first_dirty_offset). A cleaning run:

1. picks a log (`CleanerManagerCore`, `cleanable_offsets`): the dirty part
   ends before the active segment and before the first segment holding a
   record younger than min.compaction.lag.ms (`first_uncleanable_offset`);
   the log with the largest dirty ratio dirty / (clean + dirty) wins among
   those above min.cleanable.dirty.ratio or overdue by
   max.compaction.lag.ms; when none is dirty enough, a log whose
   tombstones' delete horizon has passed is cleaned to drop them (KIP-534);
2. maps every key of the dirty part to its last offset (`OffsetMap`, a
   bounded number of entries sized from log.cleaner.dedupe.buffer.size as
   Kafka sizes its SkimpyOffsetMap: 16-byte hash + 8-byte offset per slot,
   times log.cleaner.io.buffer.load.factor); when the map fills, only the
   batches mapped so far count as cleaned (`end_offset`) and the rest
   waits for the next run;
3. rewrites every segment below end_offset, in groups whose total size and
   index sizes fit one segment (`group_segments_by_size`), keeping each
   batch's offsets and header; a record survives (`retain_records`) if it
   holds the last offset of its key, and a tombstone only until its batch's
   delete horizon (stamped, on the first cleaning that keeps it, as
   now + delete.retention.ms in the batch's baseTimestamp with the
   hasDeleteHorizonMs attribute bit); what happens to a batch follows
   `plan_batch` (control batches kept whole; an idempotent producer's last
   batch kept even when emptied, so its sequence state survives).

Everything here is pure: no I/O, no clock (now_ms is an argument), no
randomness. The driver (cleaner.py) reads segments, asks these functions,
writes the result and swaps it in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Callable, Iterable

if TYPE_CHECKING:
    import numpy as np

# numpy is imported where used: the broker imports this module at start-up,
# and numpy costs about a second there on a loaded machine.

from kref.records.header import BatchHeader
from kref.storage.cleaner_offset_map import OffsetMap  # the map (numpy, Kafka's layout); callers import it from here

INT_MAX = (1 << 31) - 1
LONG_MAX = (1 << 63) - 1
OFFSET_MAP_BYTES_PER_ENTRY = 16 + 8  # an MD5 digest and an offset, as Kafka's SkimpyOffsetMap


# ---------------------------------------------------------------------------
# the log as the planner sees it
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    base_offset: int
    next_offset: int
    size: int
    largest_timestamp: int
    first_batch_timestamp: int  # -1 when unknown (an empty segment)
    offset_index_bytes: int
    time_index_bytes: int


@dataclass(frozen=True, slots=True)
class LogSummary:
    """One partition log's shape; the last segment is the active one."""

    key: tuple[str, int]
    log_start_offset: int
    log_end_offset: int
    segments: tuple[SegmentSummary, ...]
    compact: bool
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX


@dataclass(frozen=True, slots=True)
class LogToClean:
    key: tuple[str, int]
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    compaction_delay_ms: int = 0  # > 0: overdue by max.compaction.lag.ms

    @property
    def cleanable_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def _bytes_between(segments: Iterable[SegmentSummary], start: int, end: int) -> int:
    """Sizes of the segments overlapping [start, end) (Kafka's logSegments(from, to))."""
    return sum(s.size for s in segments if s.base_offset < end and s.next_offset > start and s.size)


def cleanable_offsets(log: LogSummary, checkpoint: int | None, now_ms: int) -> LogToClean:
    """Where the dirty part of `log` starts and where cleaning must stop."""
    start = log.log_start_offset
    if checkpoint is None or checkpoint < start or checkpoint > log.log_end_offset:
        first_dirty = start  # no progress recorded, or it no longer fits this log
    else:
        first_dirty = checkpoint
    active = log.segments[-1]
    uncleanable = active.base_offset
    dirty_inactive = [s for s in log.segments[:-1] if s.next_offset > first_dirty or s.base_offset >= first_dirty]
    if log.min_compaction_lag_ms > 0:
        for s in dirty_inactive:
            if s.largest_timestamp > now_ms - log.min_compaction_lag_ms:
                uncleanable = min(uncleanable, s.base_offset)
                break
    first_uncleanable = max(first_dirty, uncleanable)
    delay = 0
    if log.max_compaction_lag_ms < LONG_MAX:
        firsts = [s.first_batch_timestamp for s in dirty_inactive if s.first_batch_timestamp > 0]
        if firsts:
            lag = max(log.max_compaction_lag_ms, log.min_compaction_lag_ms)
            clean_until = now_ms - lag
            earliest = min(firsts)
            if earliest < clean_until:
                delay = clean_until - earliest
    return LogToClean(
        key=log.key,
        first_dirty_offset=first_dirty,
        first_uncleanable_offset=first_uncleanable,
        clean_bytes=_bytes_between(log.segments, start, first_dirty),
        dirty_bytes=_bytes_between(log.segments, first_dirty, first_uncleanable),
        compaction_delay_ms=delay,
    )


def choose_log(
    logs: Iterable[LogSummary],
    checkpoints: dict[tuple[str, int], int],
    now_ms: int,
    *,
    skip: frozenset[tuple[str, int]] | set[tuple[str, int]] = frozenset(),
    delete_horizons: dict[tuple[str, int], int] | None = None,
) -> LogToClean | None:
    """The filthiest compacted log (Kafka's grabFilthiestCompactedLog), or None.

    Eligible: cleanable ratio above min.cleanable.dirty.ratio, or overdue by
    max.compaction.lag.ms with something to clean. If none is, a log whose
    latest delete horizon has passed is cleaned so its tombstones go.
    """
    dirty: list[tuple[LogToClean, LogSummary]] = []
    for log in logs:
        if not log.compact or log.key in skip or not log.segments:
            continue
        dirty.append((cleanable_offsets(log, checkpoints.get(log.key), now_ms), log))
    eligible = [
        ltc
        for ltc, log in dirty
        if (ltc.compaction_delay_ms > 0 and ltc.dirty_bytes > 0) or ltc.cleanable_ratio > log.min_cleanable_dirty_ratio
    ]
    if not eligible and delete_horizons:
        eligible = [
            ltc for ltc, log in dirty if 0 <= delete_horizons.get(log.key, -1) <= now_ms and ltc.clean_bytes + ltc.dirty_bytes > 0
        ]
    if not eligible:
        return None
    # Ties broken by key so that the choice never depends on iteration order.
    return max(eligible, key=lambda ltc: (ltc.cleanable_ratio, ltc.compaction_delay_ms, _neg_key(ltc.key)))


def _neg_key(key: tuple[str, int]) -> tuple[tuple[int, ...], int]:
    return tuple(-ord(c) for c in key[0]), -key[1]


def group_segments_by_size(segments: list[SegmentSummary], max_size: int, max_index_size: int) -> list[list[SegmentSummary]]:
    """Consecutive segments in groups that fit one segment: total size <= segment.bytes,
    index sizes <= segment.index.bytes, offsets relative to the group's base fit an int32."""
    groups: list[list[SegmentSummary]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size, index_bytes, time_bytes = segments[i].size, segments[i].offset_index_bytes, segments[i].time_index_bytes
        i += 1
        while i < len(segments):
            s = segments[i]
            last_offset = s.next_offset - 1
            if (
                size + s.size > max_size
                or index_bytes + s.offset_index_bytes > max_index_size
                or time_bytes + s.time_index_bytes > max_index_size
                or (s.size and last_offset - group[0].base_offset > INT_MAX)
            ):
                break
            group.append(s)
            size += s.size
            index_bytes += s.offset_index_bytes
            time_bytes += s.time_index_bytes
            i += 1
        groups.append(group)
    return groups


# ---------------------------------------------------------------------------
# the offset map
# ---------------------------------------------------------------------------


def offset_map_capacity(dedupe_buffer_size: int, threads: int, load_factor: float) -> int:
    """Entries one cleaner thread may map: Kafka gives each thread dedupe.buffer.size / threads
    bytes (capped at an int), 24 bytes a slot, filled to io.buffer.load.factor."""
    memory = min(dedupe_buffer_size // max(1, threads), INT_MAX)
    slots = memory // OFFSET_MAP_BYTES_PER_ENTRY
    return int(slots * load_factor)


# ---------------------------------------------------------------------------
# which records and batches survive
# ---------------------------------------------------------------------------


def retain_deletes(header: BatchHeader, now_ms: int) -> bool:
    """Tombstones of this batch stay until its delete horizon has passed (KIP-534)."""
    return not header.has_delete_horizon_ms or now_ms < header.base_timestamp


def retain_mask(
    offsets: "np.ndarray",
    keyed: "np.ndarray",
    tombstone: "np.ndarray",
    deletes_retained: "np.ndarray",
    offset_map: OffsetMap,
    hashes_at: Callable[["np.ndarray"], "np.ndarray"],
) -> "np.ndarray":
    """Kafka's shouldRetainRecord over many records at once: which of them stay.

    Arrays, one element a record, in offset order: offset, has a key, is a
    tombstone, and whether its batch still retains deletes (`retain_deletes`).
    Records past the mapped range (offset_map.latest_offset) were not
    considered and stay; a record without a key cannot be compacted and goes
    (producers may not write one to a compacted topic); otherwise only the
    key's last record stays, and a tombstone only while its batch still
    retains deletes.

    "Its key's last record": inside the mapped range every keyed record was
    put in the map, so a record is its key's last exactly when its offset is
    one of the map's values, which is decided for all records at once with a
    sorted search, with no key read at all. Only records below the mapped
    range (the clean head, already compacted) look their key up:
    `hashes_at(indexes)` returns their map keys (`key_hashes`).
    """
    import numpy as np

    past = offsets > offset_map.latest_offset
    candidate = keyed & ~past & (~tombstone | deletes_retained)
    last = np.zeros(len(offsets), dtype=bool)
    inside = np.flatnonzero(candidate & (offsets >= offset_map.first_offset))
    if len(inside):
        survivors = offset_map.survivor_offsets()
        wanted = offsets[inside]
        at = np.minimum(np.searchsorted(survivors, wanted), max(len(survivors) - 1, 0))
        last[inside] = survivors[at] == wanted if len(survivors) else False
    below = np.flatnonzero(candidate & (offsets < offset_map.first_offset))
    if len(below):
        last[below] = offsets[below] >= offset_map.get_many(hashes_at(below))
    return past | (candidate & last)


class BatchAction(Enum):
    COPY = "copy"  # every record stays and the header needs no change: copy the bytes
    REWRITE = "rewrite"  # some records stay: same base offset, last offset delta, producer fields
    EMPTY = "empty"  # nothing stays but the batch must (a producer's last batch): header only
    DROP = "drop"


@dataclass(frozen=True, slots=True)
class BatchPlan:
    action: BatchAction
    delete_horizon_ms: int | None = None  # the horizon the written batch carries, if any


def plan_unread_batch(header: BatchHeader, survivors: int | None, is_last_batch_of_producer: bool) -> BatchPlan | None:
    """The plan for a batch decided from its header alone, or None (read its records).

    `survivors`: OffsetMap.survivors_between over the batch's offsets.
    """
    if header.is_control_batch:
        return BatchPlan(BatchAction.COPY)  # transaction markers: kept until transactions exist
    if survivors == 0:
        return BatchPlan(BatchAction.EMPTY if is_last_batch_of_producer else BatchAction.DROP)
    return None


def plan_batch(
    header: BatchHeader,
    retained: int,
    retained_tombstones: int,
    is_last_batch_of_producer: bool,
    now_ms: int,
    delete_retention_ms: int,
) -> BatchPlan:
    """What to write for one batch, given how many of its records survive."""
    early = plan_unread_batch(header, None, is_last_batch_of_producer)
    if early is not None:
        return early
    horizon = header.base_timestamp if header.has_delete_horizon_ms else None
    if retained == 0:
        return BatchPlan(BatchAction.EMPTY if is_last_batch_of_producer else BatchAction.DROP)
    if horizon is None and retained_tombstones:
        # The first cleaning that keeps a tombstone starts its delete.retention.ms.
        return BatchPlan(BatchAction.REWRITE, min(now_ms + delete_retention_ms, LONG_MAX))
    if retained == header.records_count:
        return BatchPlan(BatchAction.COPY, horizon)
    return BatchPlan(BatchAction.REWRITE, horizon)


# ---------------------------------------------------------------------------
# the cleaner manager as a state machine
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlanCleaning:
    """A cleaner thread is free: here is every log's shape."""

    logs: tuple[LogSummary, ...]


@dataclass(frozen=True, slots=True)
class CleaningDone:
    key: tuple[str, int]
    end_offset: int  # the new first dirty offset
    latest_delete_horizon_ms: int  # -1: the log now holds no tombstone with a horizon


@dataclass(frozen=True, slots=True)
class CleaningAborted:
    """The log changed under the cleaner (truncated, deleted, retention): nothing swapped."""

    key: tuple[str, int]


@dataclass(frozen=True, slots=True)
class CleaningFailed:
    key: tuple[str, int]
    reason: str


@dataclass(frozen=True, slots=True)
class LogTruncated:
    key: tuple[str, int]
    offset: int


@dataclass(frozen=True, slots=True)
class LogDeleted:
    key: tuple[str, int]


@dataclass(frozen=True, slots=True)
class StartCleaning:
    log: LogToClean


@dataclass(frozen=True, slots=True)
class WriteCleanerCheckpoint:
    offsets: tuple[tuple[tuple[str, int], int], ...]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Nothing to clean: wait log.cleaner.backoff.ms."""


@dataclass(frozen=True, slots=True)
class ReportUncleanable:
    key: tuple[str, int]
    reason: str


@dataclass
class CleanerManagerCore:
    """Kafka's LogCleanerManager without the locks: progress, in-progress and uncleanable logs."""

    checkpoints: dict[tuple[str, int], int] = field(default_factory=dict)
    in_progress: set[tuple[str, int]] = field(default_factory=set)
    uncleanable: set[tuple[str, int]] = field(default_factory=set)
    delete_horizons: dict[tuple[str, int], int] = field(default_factory=dict)

    def step(self, event: object, now_ms: int) -> list[object]:
        if isinstance(event, PlanCleaning):
            choice = choose_log(
                event.logs,
                self.checkpoints,
                now_ms,
                skip=self.in_progress | self.uncleanable,
                delete_horizons=self.delete_horizons,
            )
            if choice is None:
                return [Backoff()]
            self.in_progress.add(choice.key)
            return [StartCleaning(choice)]
        if isinstance(event, CleaningDone):
            self.in_progress.discard(event.key)
            self.checkpoints[event.key] = event.end_offset
            if event.latest_delete_horizon_ms >= 0:
                self.delete_horizons[event.key] = event.latest_delete_horizon_ms
            else:
                self.delete_horizons.pop(event.key, None)
            return [self._checkpoint()]
        if isinstance(event, CleaningAborted):
            self.in_progress.discard(event.key)
            return []
        if isinstance(event, CleaningFailed):
            self.in_progress.discard(event.key)
            self.uncleanable.add(event.key)
            return [ReportUncleanable(event.key, event.reason)]
        if isinstance(event, LogTruncated):
            old = self.checkpoints.get(event.key)
            if old is not None and old > event.offset:
                self.checkpoints[event.key] = event.offset
                return [self._checkpoint()]
            return []
        if isinstance(event, LogDeleted):
            self.in_progress.discard(event.key)
            self.uncleanable.discard(event.key)
            self.delete_horizons.pop(event.key, None)
            if self.checkpoints.pop(event.key, None) is not None:
                return [self._checkpoint()]
            return []
        raise TypeError(f"unknown cleaner event {event!r}")

    def _checkpoint(self) -> WriteCleanerCheckpoint:
        return WriteCleanerCheckpoint(tuple(sorted(self.checkpoints.items())))

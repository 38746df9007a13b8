"""The retention planner: which prefix of a log's segments may go.

Theory of operation: retention is a decision over numbers only (segment base
offsets, sizes, largest timestamps, the log's offsets and the topic config),
so it lives here as a pure function and the local log merely carries out the
plan (rename to .deleted, delete after file.delete.delay.ms). Kafka applies
three rules in turn, each deleting a prefix of the segments: retention.ms
(segments whose newest record is older), retention.bytes (the oldest
segments while the log stays at or above the limit without them), and
segments wholly below log_start_offset (moved by DeleteRecords). No rule
deletes a segment holding an offset at or above the high watermark (what
consumers cannot read yet must stay), nor an empty active segment.
"""

from __future__ import annotations

from dataclasses import dataclass

from kref.storage.config import LogConfig

__all__ = ["SegmentSummary", "segments_to_delete"]


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    base_offset: int
    size: int
    largest_timestamp: int


def segments_to_delete(
    segments: list[SegmentSummary],
    config: LogConfig,
    *,
    now_ms: int,
    log_start_offset: int,
    log_end_offset: int,
    high_watermark: int | None,
) -> int:
    """How many of the oldest `segments` retention deletes now (0 = none)."""
    bound = log_end_offset if high_watermark is None else high_watermark
    deleted = 0

    def prefix(rule) -> int:  # type: ignore[no-untyped-def]
        n = 0
        for i in range(deleted, len(segments)):
            seg = segments[i]
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            upper = nxt.base_offset if nxt is not None else log_end_offset
            if nxt is None and seg.size == 0:
                break
            if bound < upper or not rule(seg, nxt, upper):
                break
            n += 1
        return n

    if config.delete_enabled:
        if config.retention_ms >= 0:
            deleted += prefix(lambda seg, nxt, upper: now_ms - seg.largest_timestamp > config.retention_ms)
        if config.retention_bytes >= 0 and deleted < len(segments):
            excess = sum(seg.size for seg in segments[deleted:]) - config.retention_bytes

            def over_size(seg: SegmentSummary, nxt: SegmentSummary | None, upper: int) -> bool:
                nonlocal excess
                if excess - seg.size >= 0:
                    excess -= seg.size
                    return True
                return False

            deleted += prefix(over_size)
    if deleted < len(segments):
        start = max(log_start_offset, segments[deleted].base_offset if deleted else log_start_offset)
        deleted += prefix(lambda seg, nxt, upper: nxt is not None and upper <= start)
    return deleted

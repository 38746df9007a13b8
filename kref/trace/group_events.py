"""Trace events of the group coordinator.

The classic group protocol has no TLA+ spec in this project (yet), so these
are named after the coordinator's own steps rather than spec actions: every
checked state transition of a group (`GroupStateChange`, with the post-state
a checker needs: generation, members, leader) and every coordinator write
once it is committed (`GroupWriteCommitted`: which `__consumer_offsets`
partition, how many records, what it completed). The core emits them as
`Emit` effects; the driver hands them to the broker's trace sink, so group
and replication events share one NDJSON file and one `seq`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupTraceEvent:
    time_ms: int
    group_id: str

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": type(self).__name__}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupStateChange(GroupTraceEvent):
    """The group moved from `previous_state` to `state` (always along one of Kafka's edges)."""

    previous_state: str
    state: str
    generation_id: int
    members: tuple[str, ...]
    leader: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupWriteCommitted(GroupTraceEvent):
    """A coordinator write is committed; its records were replayed into the cache."""

    partition: int
    records: int
    follow_up: str


GROUP_EVENT_TYPES = frozenset({"GroupStateChange", "GroupWriteCommitted"})

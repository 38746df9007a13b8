"""Helpers to build kio messages of any version from one set of values.

Theory of operation: kio generates one dataclass per (API, version), and
fields come and go between versions (throttle_time from Metadata v3,
topic_id from v10, ...). Handlers compute one set of values and call
`build(cls, **values)`, which keeps only the fields this version has, so a
handler is written once for its whole version range. `nested(cls, name)`
finds the nested entity type generated next to a message version.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import sys
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["build", "nested", "has_field", "results_by_topic", "ZERO_THROTTLE"]

ZERO_THROTTLE = datetime.timedelta(0)


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def has_field(cls: type, name: str) -> bool:
    return name in _field_names(cls)


def build(cls: type, **values: Any) -> Any:
    names = _field_names(cls)
    if "throttle_time" in names and "throttle_time" not in values:
        values["throttle_time"] = ZERO_THROTTLE
    return cls(**{k: v for k, v in values.items() if k in names})


@functools.cache
def nested(cls: type, name: str) -> type | None:
    """The nested entity `name` of this message version, None if the version has none."""
    return getattr(sys.modules[cls.__module__], name, None)


def results_by_topic(
    rows: Iterable[tuple], topic_type: type, topic_field: str, partitions_field: str,
    partition: Callable[..., Any],
) -> tuple:
    """Per-partition rows `(topic, *rest)` grouped into topic entries of `topic_type`,
    topics in first-seen order and partitions in row order; `partition(*rest)`
    builds each partition entry (the shape of most admin responses)."""
    grouped: dict[str, list] = {}
    for topic, *rest in rows:
        grouped.setdefault(topic, []).append(partition(*rest))
    return tuple(build(topic_type, **{topic_field: topic, partitions_field: tuple(parts)})
                 for topic, parts in grouped.items())

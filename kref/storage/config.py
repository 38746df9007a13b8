"""LogConfig: a topic's storage settings under Kafka's own names.

Kafka keeps per-topic overrides (CreateTopics configs, IncrementalAlterConfigs)
as a flat map of dotted names such as `segment.bytes` or `retention.ms`; the
log reads them as typed values. This module is that translation: one table
row per Kafka topic config (name, type, default, valid range), a frozen
dataclass whose fields are the snake_case names, and `from_properties`,
which rejects unknown names and bad values with a ConfigError naming the
config, the value and what was expected — the broker answers INVALID_CONFIG
with that message.

Every topic-level config Kafka 4 knows is accepted, even those kref does not
act on yet (compression.type, remote storage, throttles), so that a real
client's CreateTopics is never refused for a name Kafka would accept.
Bounds follow Kafka's ConfigDef validators, except segment.bytes, whose floor
is Kafka 3's 14 bytes rather than Kafka 4's 1 MiB so tests can roll tiny
segments (Kafka 4 offers internal.segment.bytes for the same purpose).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Mapping

from kref.storage.errors import ConfigError

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1

CLEANUP_POLICIES = ("delete", "compact")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


@dataclass(frozen=True)
class _Def:
    name: str
    kind: str  # "int", "long", "bool", "double", "str", "list"
    default: Any
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None


_DEFS: tuple[_Def, ...] = (
    _Def("segment.bytes", "int", 1 << 30, 14, INT_MAX),
    _Def("segment.ms", "long", 604_800_000, 1, LONG_MAX),
    _Def("segment.jitter.ms", "long", 0, 0, LONG_MAX),
    _Def("segment.index.bytes", "int", 10 * 1024 * 1024, 4, INT_MAX),
    _Def("index.interval.bytes", "int", 4096, 0, INT_MAX),
    _Def("retention.ms", "long", 604_800_000, -1, LONG_MAX),
    _Def("retention.bytes", "long", -1, None, LONG_MAX),
    _Def("flush.messages", "long", LONG_MAX, 1, LONG_MAX),
    _Def("flush.ms", "long", LONG_MAX, 0, LONG_MAX),
    _Def("max.message.bytes", "int", 1024 * 1024 + 12, 0, INT_MAX),
    _Def("message.timestamp.type", "str", "CreateTime", choices=TIMESTAMP_TYPES),
    _Def("message.timestamp.difference.max.ms", "long", LONG_MAX, 0, LONG_MAX),
    _Def("message.timestamp.before.max.ms", "long", LONG_MAX, 0, LONG_MAX),
    _Def("message.timestamp.after.max.ms", "long", LONG_MAX, 0, LONG_MAX),
    _Def("cleanup.policy", "list", ("delete",), choices=CLEANUP_POLICIES),
    _Def("file.delete.delay.ms", "long", 60_000, 0, LONG_MAX),
    _Def("min.insync.replicas", "int", 1, 1, INT_MAX),
    _Def("unclean.leader.election.enable", "bool", False),
    _Def("compression.type", "str", "producer", choices=COMPRESSION_TYPES),
    _Def("compression.gzip.level", "int", -1, -1, 9),
    _Def("compression.lz4.level", "int", 9, 1, 17),
    _Def("compression.zstd.level", "int", 3, -131072, 22),
    _Def("delete.retention.ms", "long", 86_400_000, 0, LONG_MAX),
    _Def("min.compaction.lag.ms", "long", 0, 0, LONG_MAX),
    _Def("max.compaction.lag.ms", "long", LONG_MAX, 1, LONG_MAX),
    _Def("min.cleanable.dirty.ratio", "double", 0.5, 0.0, 1.0),
    _Def("preallocate", "bool", False),
    _Def("message.downconversion.enable", "bool", True),
    _Def("message.format.version", "str", "3.0-IV1"),
    _Def("local.retention.ms", "long", -2, -2, LONG_MAX),
    _Def("local.retention.bytes", "long", -2, -2, LONG_MAX),
    _Def("remote.storage.enable", "bool", False),
    _Def("remote.log.copy.disable", "bool", False),
    _Def("remote.log.delete.on.disable", "bool", False),
    _Def("leader.replication.throttled.replicas", "list", ()),
    _Def("follower.replication.throttled.replicas", "list", ()),
)

_BY_NAME: dict[str, _Def] = {d.name: d for d in _DEFS}

# KIP-73: one "partitionId:brokerId" item of *.replication.throttled.replicas
THROTTLED_REPLICA_PAIR = re.compile(r"^\d+:\d+$")


def validate_throttled_replicas(items: tuple[str, ...]) -> str | None:
    """Kafka's ThrottledReplicaListValidator: "*" alone, or partitionId:brokerId pairs.
    Returns what is wrong, or None."""
    if items == ("*",) or not items:
        return None
    bad = [i for i in items if not THROTTLED_REPLICA_PAIR.match(i)]
    if bad:
        return f"must be '*' or a list of partitionId:brokerId pairs, not {', '.join(bad)}"
    return None


def _field(name: str) -> str:
    return name.replace(".", "_")


def _parse(d: _Def, raw: Any) -> Any:
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"invalid value {raw!r} for configuration {d.name}: {expected}")

    if raw is None:
        raise bad("a value is required")
    if d.kind in ("int", "long"):
        if isinstance(raw, bool):
            raise bad("expected an integer")
        try:
            value = int(raw.strip()) if isinstance(raw, str) else int(raw)
        except (TypeError, ValueError):
            raise bad("expected an integer") from None
        if isinstance(raw, float) and raw != value:
            raise bad("expected an integer")
        bound_high = INT_MAX if d.kind == "int" else LONG_MAX
        high = bound_high if d.high is None else min(d.high, bound_high)
        low = -bound_high - 1 if d.low is None else d.low
        if not low <= value <= high:
            raise bad(f"value must be in [{int(low)}, {int(high)}]")
        return value
    if d.kind == "double":
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise bad("expected a number") from None
        if (d.low is not None and value < d.low) or (d.high is not None and value > d.high):
            raise bad(f"value must be in [{d.low}, {d.high}]")
        return value
    if d.kind == "bool":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        raise bad("expected true or false")
    if d.kind == "list":
        if isinstance(raw, str):
            items = tuple(s.strip() for s in raw.split(",") if s.strip())
        elif isinstance(raw, (list, tuple)):
            items = tuple(str(s).strip() for s in raw)
        else:
            raise bad("expected a comma-separated list")
        if d.choices is not None:
            for item in items:
                if item not in d.choices:
                    raise bad(f"each item must be one of {', '.join(d.choices)}")
            if not items:
                raise bad("the list must not be empty")
        if d.name.endswith(".replication.throttled.replicas"):
            problem = validate_throttled_replicas(items)
            if problem is not None:
                raise bad(problem)
        return items
    if not isinstance(raw, str):
        raise bad("expected a string")
    value = raw.strip()
    if d.choices is not None and value not in d.choices:
        raise bad(f"expected one of {', '.join(d.choices)}")
    return value


@dataclass(frozen=True)
class LogConfig:
    """A topic's effective storage configuration (Kafka defaults unless overridden)."""

    segment_bytes: int = 1 << 30
    segment_ms: int = 604_800_000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 604_800_000
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1024 * 1024 + 12
    message_timestamp_type: str = "CreateTime"
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    cleanup_policy: tuple[str, ...] = ("delete",)
    file_delete_delay_ms: int = 60_000
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    preallocate: bool = False
    message_downconversion_enable: bool = True
    message_format_version: str = "3.0-IV1"
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_storage_enable: bool = False
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    leader_replication_throttled_replicas: tuple[str, ...] = ()
    follower_replication_throttled_replicas: tuple[str, ...] = ()

    @property
    def is_log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def max_index_size(self) -> int:
        return self.segment_index_bytes

    @staticmethod
    def names() -> tuple[str, ...]:
        """Every topic config name Kafka accepts, in table order."""
        return tuple(d.name for d in _DEFS)

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, Any], defaults: "LogConfig | Mapping[str, Any] | None" = None
    ) -> "LogConfig":
        """Build a config from Kafka's dotted names over `defaults`.

        `defaults` is a LogConfig (the broker's log.* defaults) or another
        mapping of dotted names; unknown names or bad values raise ConfigError.
        """
        if defaults is None:
            base = cls()
        elif isinstance(defaults, LogConfig):
            base = defaults
        else:
            base = cls.from_properties(defaults)
        changes: dict[str, Any] = {}
        for name, raw in properties.items():
            d = _BY_NAME.get(name)
            if d is None:
                raise ConfigError(f"unknown topic configuration {name!r}")
            changes[_field(name)] = _parse(d, raw)
        return dataclasses.replace(base, **changes)

    def to_properties(self) -> dict[str, str]:
        """All configs as Kafka's dotted names with string values (DescribeConfigs)."""
        out: dict[str, str] = {}
        for d in _DEFS:
            value = getattr(self, _field(d.name))
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, tuple):
                text = ",".join(value)
            else:
                text = str(value)
            out[d.name] = text
        return out

    def overrides(self) -> dict[str, str]:
        """Only the configs that differ from Kafka's defaults."""
        default = LogConfig().to_properties()
        return {k: v for k, v in self.to_properties().items() if default[k] != v}


def config_definition(name: str) -> tuple[str, Any]:
    """(type, default) of a topic config, for DescribeConfigs; ConfigError if unknown."""
    d = _BY_NAME.get(name)
    if d is None:
        raise ConfigError(f"unknown topic configuration {name!r}")
    return d.kind, d.default



"""Topic-level configs Kafka knows: names, types and value checks.

Theory of operation: CreateTopics and IncrementalAlterConfigs may set any
topic config Kafka defines. The broker checks every name and the type and
range of every value here, before anything is stored, so a typo or a bad
value is INVALID_CONFIG and never reaches a log. The storage LogConfig then
validates the configs it models once more (it is the owner of their
semantics); this table also covers configs only other areas use (tiered
storage, throttles, compaction lag).
"""

from __future__ import annotations

__all__ = ["TOPIC_CONFIGS", "LIST_CONFIGS", "validate_topic_config", "config_type_id", "TopicConfigError"]

_I32 = 2**31 - 1
_I64 = 2**63 - 1

# DescribeConfigs v3+ config_type ids (ConfigDef.Type)
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST = 1, 2, 3, 5, 6, 7


class TopicConfigError(ValueError):
    pass


# name -> (type id, minimum or allowed values)
TOPIC_CONFIGS: dict[str, tuple[int, object]] = {
    "cleanup.policy": (TYPE_LIST, ("delete", "compact")),
    "compression.type": (TYPE_STRING, ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    "compression.gzip.level": (TYPE_INT, -1),
    "compression.lz4.level": (TYPE_INT, 1),
    "compression.zstd.level": (TYPE_INT, -131072),
    "delete.retention.ms": (TYPE_LONG, 0),
    "file.delete.delay.ms": (TYPE_LONG, 0),
    "flush.messages": (TYPE_LONG, 1),
    "flush.ms": (TYPE_LONG, 0),
    "follower.replication.throttled.replicas": (TYPE_LIST, None),
    "index.interval.bytes": (TYPE_INT, 0),
    "leader.replication.throttled.replicas": (TYPE_LIST, None),
    "local.retention.bytes": (TYPE_LONG, -2),
    "local.retention.ms": (TYPE_LONG, -2),
    "max.compaction.lag.ms": (TYPE_LONG, 1),
    "max.message.bytes": (TYPE_INT, 0),
    "message.timestamp.after.max.ms": (TYPE_LONG, 0),
    "message.timestamp.before.max.ms": (TYPE_LONG, 0),
    "message.timestamp.type": (TYPE_STRING, ("CreateTime", "LogAppendTime")),
    "min.cleanable.dirty.ratio": (TYPE_DOUBLE, (0.0, 1.0)),
    "min.compaction.lag.ms": (TYPE_LONG, 0),
    "min.insync.replicas": (TYPE_INT, 1),
    "preallocate": (TYPE_BOOLEAN, None),
    "remote.storage.enable": (TYPE_BOOLEAN, None),
    "retention.bytes": (TYPE_LONG, None),
    "retention.ms": (TYPE_LONG, -1),
    "segment.bytes": (TYPE_INT, 14),
    "segment.index.bytes": (TYPE_INT, 4),
    "segment.jitter.ms": (TYPE_LONG, 0),
    "segment.ms": (TYPE_LONG, 1),
    "unclean.leader.election.enable": (TYPE_BOOLEAN, None),
}

LIST_CONFIGS = frozenset(name for name, (kind, _) in TOPIC_CONFIGS.items() if kind == TYPE_LIST)


def config_type_id(name: str) -> int:
    entry = TOPIC_CONFIGS.get(name)
    if entry is not None:
        return entry[0]
    return TYPE_LONG if name.endswith((".ms", ".bytes", ".messages")) else TYPE_STRING


def validate_topic_config(name: str, value: str | None) -> str:
    """The value, normalised; raises TopicConfigError naming the config."""
    if name not in TOPIC_CONFIGS:
        raise TopicConfigError(f"Unknown topic config name: {name}")
    if value is None:
        raise TopicConfigError(f"Null value not supported for topic config {name}")
    kind, rule = TOPIC_CONFIGS[name]
    text = value.strip()
    if kind in (TYPE_INT, TYPE_LONG):
        try:
            number = int(text)
        except ValueError:
            raise TopicConfigError(f"Invalid value {value} for configuration {name}: Not a number of type {'INT' if kind == TYPE_INT else 'LONG'}") from None
        if number > (_I32 if kind == TYPE_INT else _I64) or number < -(_I32 if kind == TYPE_INT else _I64) - 1:
            raise TopicConfigError(f"Invalid value {value} for configuration {name}: out of range")
        if rule is not None and number < rule:
            raise TopicConfigError(f"Invalid value {value} for configuration {name}: Value must be at least {rule}")
        return str(number)
    if kind == TYPE_BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise TopicConfigError(f"Invalid value {value} for configuration {name}: Expected value to be either true or false")
        return text.lower()
    if kind == TYPE_DOUBLE:
        try:
            number = float(text)
        except ValueError:
            raise TopicConfigError(f"Invalid value {value} for configuration {name}: Not a number of type DOUBLE") from None
        lo, hi = rule
        if not lo <= number <= hi:
            raise TopicConfigError(f"Invalid value {value} for configuration {name}: Value must be in [{lo}, {hi}]")
        return text
    if kind == TYPE_LIST:
        items = [item.strip() for item in text.split(",") if item.strip()]
        if rule is not None:
            bad = [item for item in items if item not in rule]
            if bad or not items:
                raise TopicConfigError(f"Invalid value {value} for configuration {name}: must be a list of {', '.join(rule)}")
        return ",".join(items)
    if rule is not None and text not in rule:
        raise TopicConfigError(f"Invalid value {value} for configuration {name}: String must be one of: {', '.join(rule)}")
    return text

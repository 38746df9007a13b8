"""Topic-level configs at the protocol edge: validation and DescribeConfigs types.

Theory of operation: the storage LogConfig (kref/storage/config.py) owns
the table of every topic config Kafka knows, with types, defaults and
ranges. CreateTopics and IncrementalAlterConfigs validate through it, so a
typo or a bad value is INVALID_CONFIG before anything is stored; this
module only maps its value kinds to DescribeConfigs v3+ `config_type` ids
and names the list-typed configs that KIP-339 APPEND/SUBTRACT apply to.
"""

from __future__ import annotations

from collections.abc import Mapping

from kref.storage.config import LogConfig, config_definition
from kref.storage.errors import ConfigError as StorageConfigError

__all__ = ["LIST_CONFIGS", "TopicConfigError", "config_type_id", "validate_topic_configs", "is_topic_config"]

# DescribeConfigs v3+ config_type ids (Kafka's ConfigDef.Type)
_TYPE_IDS = {"bool": 1, "str": 2, "int": 3, "long": 5, "double": 6, "list": 7}
_UNKNOWN_TYPE = 0

TopicConfigError = StorageConfigError


def is_topic_config(name: str) -> bool:
    return name in _NAMES


def config_type_id(name: str) -> int:
    try:
        kind, _ = config_definition(name)
    except StorageConfigError:
        return _UNKNOWN_TYPE
    return _TYPE_IDS.get(kind, _UNKNOWN_TYPE)


def validate_topic_configs(configs: Mapping[str, str | None], defaults: LogConfig) -> dict[str, str]:
    """Check a topic's overrides as a whole; returns them stripped. Raises TopicConfigError."""
    cleaned: dict[str, str] = {}
    for name, value in configs.items():
        if value is None:
            raise TopicConfigError(f"null value not supported for topic configuration {name!r}")
        cleaned[name] = value.strip()
    LogConfig.from_properties(cleaned, defaults)
    return cleaned


_NAMES = frozenset(LogConfig.names())
LIST_CONFIGS = frozenset(name for name in _NAMES if config_definition(name)[0] == "list")

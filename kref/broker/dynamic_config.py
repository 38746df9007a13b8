"""Dynamic broker configs (KIP-226): broker settings changed on a running broker.

Theory of operation: Kafka lets IncrementalAlterConfigs (and AlterConfigs)
on a BROKER resource change a defined set of settings without a restart,
either for one broker (resource name = its node id) or as the cluster-wide
default (resource name ""), stores them in the metadata log (ConfigRecord)
and applies them at once. Precedence, most specific first:

    per-broker dynamic > cluster-default dynamic > server.properties > built-in default

which is also the DescribeConfigs synonym chain (sources
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG,
DEFAULT_CONFIG). Which settings are dynamic is a property of each setting in
kref.broker.config (`dynamic=True`, Kafka's list minus what kref cannot
change live, e.g. listeners); altering any other one is refused with
INVALID_REQUEST ("Cannot update these configs dynamically"), as Kafka does.

`DynamicBrokerConfigs` is a value: `altered(...)` validates a whole new
override set for one resource (unknown name -> INVALID_CONFIG, static name ->
INVALID_REQUEST, bad value -> INVALID_CONFIG) and returns a new value, so a
refused request changes nothing; `effective()` is the BrokerConfig the
broker then runs with. The single-node broker keeps the overrides in
`kref-broker-configs.json` beside its topic image (written atomically, read
at start). In the KRaft cluster the receiving broker checks the new set the
same way and forwards it to the active controller, which writes
ConfigRecords (resource type BROKER); every broker rebuilds its overrides
from its metadata image (`from_image`), so all nodes answer DescribeConfigs
alike and a restarted node gets them back from the log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from kref.broker.config import (
    BrokerConfig,
    ConfigError,
    StartupError,
    is_broker_property,
    is_dynamic_broker_property,
)
from kref.metadata.records import BROKER_RESOURCE
from kref.protocol.errors import ErrorCode

__all__ = ["CLUSTER_DEFAULT", "DYNAMIC_CONFIG_FILE", "DynamicBrokerConfigs", "DynamicConfigError"]

CLUSTER_DEFAULT = ""
DYNAMIC_CONFIG_FILE = "kref-broker-configs.json"

# DescribeConfigsResponse.ConfigSource
SOURCE_DYNAMIC_BROKER_CONFIG = 2
SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG = 3
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5


class DynamicConfigError(Exception):
    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(frozen=True)
class DynamicBrokerConfigs:
    static: BrokerConfig
    # resource name ("" = cluster default, else a node id) -> {property: raw value}
    overrides: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def node_key(self) -> str:
        return str(self.static.node_id)

    def effective(self) -> BrokerConfig:
        merged = {**self.overrides.get(CLUSTER_DEFAULT, {}), **self.overrides.get(self.node_key, {})}
        return self.static.with_overrides(merged) if merged else self.static

    def of(self, resource_name: str) -> dict[str, str]:
        return dict(self.overrides.get(resource_name, {}))

    def altered(self, resource_name: str, new: dict[str, str]) -> DynamicBrokerConfigs:
        """The same configs with `resource_name`'s overrides replaced by `new`, validated."""
        unknown = sorted(n for n in new if not is_broker_property(n))
        if unknown:
            raise DynamicConfigError(ErrorCode.INVALID_CONFIG, f"Unknown broker configs: {', '.join(unknown)}")
        static = sorted(n for n in new if not is_dynamic_broker_property(n))
        if static:
            raise DynamicConfigError(
                ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: {', '.join(static)}"
            )
        overrides = {k: dict(v) for k, v in self.overrides.items()}
        if new:
            overrides[resource_name] = dict(new)
        else:
            overrides.pop(resource_name, None)
        result = DynamicBrokerConfigs(self.static, overrides)
        try:
            result.effective()
            # A cluster default must be valid on its own too (other brokers).
            self.static.with_overrides(overrides.get(CLUSTER_DEFAULT, {}))
        except ConfigError as exc:
            raise DynamicConfigError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        return result

    def synonyms(self, name: str, static_value: str | None, default_value: str | None) -> list[tuple[str, str, int]]:
        """(name, value, source) from the most specific source to the least."""
        chain = []
        for key, source in ((self.node_key, SOURCE_DYNAMIC_BROKER_CONFIG), (CLUSTER_DEFAULT, SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG)):
            if name in self.overrides.get(key, {}):
                chain.append((name, self.overrides[key][name], source))
        if name in self.static.explicit and static_value is not None:
            chain.append((name, static_value, SOURCE_STATIC_BROKER_CONFIG))
        if default_value is not None:
            chain.append((name, default_value, SOURCE_DEFAULT_CONFIG))
        return chain

    @classmethod
    def from_image(cls, static: BrokerConfig, image) -> DynamicBrokerConfigs:
        """The overrides a KRaft cluster's metadata image holds (ConfigRecords of
        resource type BROKER); DynamicConfigError if they do not fit this broker."""
        overrides = {name: dict(configs) for (rtype, name), configs in image.configs.items() if rtype == BROKER_RESOURCE}
        result = cls(static, overrides)
        try:
            result.effective()
        except ConfigError as exc:
            raise DynamicConfigError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        return result

    # --- persistence (single-node broker) --------------------------------------

    def to_json(self) -> str:
        return json.dumps({"version": 1, "configs": self.overrides}, indent=1, sort_keys=True)

    @classmethod
    def load(cls, static: BrokerConfig, path: Path) -> DynamicBrokerConfigs:
        if not path.exists():
            return cls(static)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            overrides = {str(k): {str(n): str(v) for n, v in vals.items()} for k, vals in data["configs"].items()}
            loaded = cls(static, overrides)
            loaded.effective()
        except (ValueError, KeyError, TypeError, AttributeError, ConfigError) as exc:
            raise StartupError(f"the dynamic broker config file {path} is corrupt ({type(exc).__name__}: {exc})") from None
        return loaded

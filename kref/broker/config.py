"""Broker configuration with Kafka's property names (server.properties): the table.

This module is the table of broker properties (name, type, default,
dynamic or not) and the construction of a BrokerConfig from it; reading
.properties text and parsing each value lives in config_parsing.py.

Theory of operation: a BrokerConfig is built from, in increasing priority,
the embedded defaults, a Java-properties file (`--config`), and
`--override key=value` pairs, exactly like `kafka-server-start.sh
server.properties --override k=v`. Every value is parsed and range-checked
at start; an unknown name or a bad value raises ConfigError naming the
property, so a typo never silently falls back to a default.

Properties of Kafka that describe machinery kref does not have (thread
pools, socket buffers, KRaft controller wiring of a combined node, SASL...)
are accepted and ignored, so Kafka's own sample server.properties starts
kref; they are listed in IGNORED_PROPERTIES and logged at start.

The topic-level defaults (log.segment.bytes -> segment.bytes, ...) are what
Kafka calls the broker's "synonyms" of topic configs; `topic_config_defaults()`
returns them with the topic-level names for the storage LogConfig and for
DescribeConfigs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "BrokerConfig",
    "Voter",
    "ConfigError",
    "StartupError",
    "Listener",
    "advertisable",
    "IGNORED_PROPERTIES",
    "TOPIC_CONFIG_SYNONYMS",
    "parse_properties",
]


from kref.broker.config_parsing import (  # noqa: F401  (re-exported: the table's value types and parsers)
    CONFIG_TYPE_IDS,
    ConfigError,
    Listener,
    StartupError,
    Voter,
    _bool,
    _choice,
    _cleanup_policy,
    _dir_list,
    _double,
    _I32,
    _I64,
    _int,
    _listener_list,
    _name_list,
    _require_plaintext,
    _roles,
    _string,
    _voter_list,
    advertisable,
    parse_properties,
)


def _prop(
    kafka_name: str,
    parse: Callable[[str, str], object],
    default: str | None,
    doc: str = "",
    *,
    kafka_type: str | None = None,
    dynamic: bool = False,
):
    """One broker property. `dynamic`: Kafka lets IncrementalAlterConfigs change it
    on a running broker (per broker or as the cluster default); kref does too."""
    return field(
        metadata={
            "name": kafka_name,
            "parse": parse,
            "default": default,
            "doc": doc,
            "type": kafka_type or getattr(parse, "kafka_type", "STRING"),
            "dynamic": dynamic,
        }
    )


@dataclass(frozen=True)
class BrokerConfig:
    """Typed broker settings; attribute = Kafka property name in snake_case."""

    node_id: int = _prop("node.id", _int(0, _I32), "1", "this broker's id (broker.id is a synonym)")
    listeners: tuple[Listener, ...] = _prop("listeners", _listener_list, "PLAINTEXT://127.0.0.1:9092")
    advertised_listeners: tuple[Listener, ...] | None = _prop("advertised.listeners", _listener_list, None)
    log_dirs: tuple[str, ...] = _prop("log.dirs", _dir_list, "./kref-data", "log.dir is a synonym")
    num_partitions: int = _prop("num.partitions", _int(1, _I32), "1")
    default_replication_factor: int = _prop("default.replication.factor", _int(1, 32767), "1")
    auto_create_topics_enable: bool = _prop("auto.create.topics.enable", _bool, "true")
    delete_topic_enable: bool = _prop("delete.topic.enable", _bool, "true")
    message_max_bytes: int = _prop("message.max.bytes", _int(0, _I32), "1048588", dynamic=True)
    socket_request_max_bytes: int = _prop("socket.request.max.bytes", _int(1, _I32), "104857600")
    connections_max_idle_ms: int = _prop("connections.max.idle.ms", _int(-1, _I64), "600000")
    queued_max_requests: int = _prop("queued.max.requests", _int(1, _I32), "500")
    # Kafka's default is unlimited; kref bounds it (a deviation, documented).
    max_connections: int = _prop("max.connections", _int(1, _I32), "4096", dynamic=True)
    fetch_max_bytes: int = _prop("fetch.max.bytes", _int(1024, _I32), "57671680")
    # KIP-227: how many incremental fetch sessions the broker keeps (0: none).
    max_incremental_fetch_session_cache_slots: int = _prop(
        "max.incremental.fetch.session.cache.slots", _int(0, _I32), "1000")
    # topic-level defaults (Kafka's broker synonyms of topic configs)
    log_segment_bytes: int = _prop("log.segment.bytes", _int(14, _I32), "1073741824", dynamic=True)
    log_roll_ms: int | None = _prop("log.roll.ms", _int(1, _I64), None, dynamic=True)
    log_roll_hours: int = _prop("log.roll.hours", _int(1, _I32), "168", dynamic=True)
    log_retention_ms: int | None = _prop("log.retention.ms", _int(-1, _I64), None, dynamic=True)
    log_retention_minutes: int | None = _prop("log.retention.minutes", _int(-1, _I32), None, dynamic=True)
    log_retention_hours: int = _prop("log.retention.hours", _int(-1, _I32), "168", dynamic=True)
    log_retention_bytes: int = _prop("log.retention.bytes", _int(-1, _I64), "-1", dynamic=True)
    log_retention_check_interval_ms: int = _prop("log.retention.check.interval.ms", _int(1, _I64), "300000")
    log_index_size_max_bytes: int = _prop("log.index.size.max.bytes", _int(4, _I32), "10485760", dynamic=True)
    log_index_interval_bytes: int = _prop("log.index.interval.bytes", _int(0, _I32), "4096", dynamic=True)
    log_flush_interval_messages: int = _prop("log.flush.interval.messages", _int(1, _I64), str(_I64), dynamic=True)
    log_flush_interval_ms: int | None = _prop("log.flush.interval.ms", _int(0, _I64), None, dynamic=True)
    log_flush_scheduler_interval_ms: int = _prop("log.flush.scheduler.interval.ms", _int(0, _I64), str(_I64))
    log_flush_offset_checkpoint_interval_ms: int = _prop(
        "log.flush.offset.checkpoint.interval.ms", _int(0, _I32), "60000"
    )
    log_cleanup_policy: str = _prop("log.cleanup.policy", _cleanup_policy, "delete", dynamic=True)
    log_message_timestamp_type: str = _prop(
        "log.message.timestamp.type", _choice("CreateTime", "LogAppendTime"), "CreateTime", dynamic=True
    )
    log_segment_delete_delay_ms: int = _prop("log.segment.delete.delay.ms", _int(0, _I64), "60000", dynamic=True)
    min_insync_replicas: int = _prop("min.insync.replicas", _int(1, _I32), "1", dynamic=True)
    compression_type: str = _prop(
        "compression.type", _choice("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), "producer", dynamic=True
    )
    # the log cleaner (compaction, docs/compaction.md); the last four are the
    # broker defaults of topic configs (see TOPIC_CONFIG_SYNONYMS)
    log_cleaner_enable: bool = _prop("log.cleaner.enable", _bool, "true")
    log_cleaner_threads: int = _prop("log.cleaner.threads", _int(0, 64), "1", dynamic=True)
    log_cleaner_dedupe_buffer_size: int = _prop("log.cleaner.dedupe.buffer.size", _int(0, _I64), "134217728", dynamic=True)
    log_cleaner_io_buffer_size: int = _prop("log.cleaner.io.buffer.size", _int(0, _I32), "524288", dynamic=True)
    log_cleaner_io_buffer_load_factor: float = _prop("log.cleaner.io.buffer.load.factor", _double(0.0, 1.0), "0.9", dynamic=True)
    log_cleaner_io_max_bytes_per_second: float = _prop(
        "log.cleaner.io.max.bytes.per.second", _double(0.0, None), "1.7976931348623157E308", dynamic=True
    )
    log_cleaner_backoff_ms: int = _prop("log.cleaner.backoff.ms", _int(0, _I64), "15000", dynamic=True)
    # AlterReplicaLogDirs' copy between log dirs (kref/broker/alter_log_dirs.py); Kafka's dynamic broker quota
    replica_alter_log_dirs_io_max_bytes_per_second: int = _prop(
        "replica.alter.log.dirs.io.max.bytes.per.second", _int(1, _I64), str(_I64), dynamic=True
    )
    log_cleaner_min_cleanable_ratio: float = _prop("log.cleaner.min.cleanable.ratio", _double(0.0, 1.0), "0.5", dynamic=True)
    log_cleaner_min_compaction_lag_ms: int = _prop("log.cleaner.min.compaction.lag.ms", _int(0, _I64), "0", dynamic=True)
    log_cleaner_max_compaction_lag_ms: int = _prop("log.cleaner.max.compaction.lag.ms", _int(1, _I64), str(_I64), dynamic=True)
    log_cleaner_delete_retention_ms: int = _prop("log.cleaner.delete.retention.ms", _int(0, _I64), "86400000", dynamic=True)
    # Thread pools Kafka sizes at run time; kref has none of them (one trio
    # thread), so they are accepted, described and dynamically settable, and
    # change nothing. (log.cleaner.threads, above, does.)
    num_replica_fetchers: int = _prop("num.replica.fetchers", _int(1, _I32), "1", dynamic=True)
    num_io_threads: int = _prop("num.io.threads", _int(1, _I32), "8", dynamic=True)
    num_network_threads: int = _prop("num.network.threads", _int(1, _I32), "3", dynamic=True)
    background_threads: int = _prop("background.threads", _int(1, _I32), "10", dynamic=True)
    num_recovery_threads_per_data_dir: int = _prop(
        "num.recovery.threads.per.data.dir", _int(1, _I32), "2", dynamic=True
    )
    # replication (one broker today; the replica core is written for more)
    replica_lag_time_max_ms: int = _prop("replica.lag.time.max.ms", _int(0, _I64), "30000")
    # the replica fetchers (kref/broker/replica_fetcher.py): Kafka's long poll and bounds
    replica_fetch_wait_max_ms: int = _prop("replica.fetch.wait.max.ms", _int(0, _I32), "500")
    replica_fetch_min_bytes: int = _prop("replica.fetch.min.bytes", _int(1, _I32), "1")
    replica_fetch_max_bytes: int = _prop("replica.fetch.max.bytes", _int(0, _I32), "1048576")
    replica_fetch_response_max_bytes: int = _prop("replica.fetch.response.max.bytes", _int(0, _I32), "10485760")
    replica_fetch_backoff_ms: int = _prop("replica.fetch.backoff.ms", _int(0, _I32), "1000")
    replica_socket_timeout_ms: int = _prop("replica.socket.timeout.ms", _int(1, _I32), "30000")
    # KIP-73 replication quotas (kref/replication/quota.py): bytes/s per broker for
    # the partitions the topics' *.replication.throttled.replicas name; unbounded by default.
    leader_replication_throttled_rate: int = _prop(
        "leader.replication.throttled.rate", _int(0, _I64), str(_I64), dynamic=True
    )
    follower_replication_throttled_rate: int = _prop(
        "follower.replication.throttled.rate", _int(0, _I64), str(_I64), dynamic=True
    )
    replication_quota_window_num: int = _prop("replication.quota.window.num", _int(1, _I32), "11")
    replication_quota_window_size_seconds: int = _prop("replication.quota.window.size.seconds", _int(1, _I32), "1")
    # KIP-392: org.apache.kafka.common.replica.RackAwareReplicaSelector lets consumers
    # with client.rack fetch from a follower in their rack; unset: the leader only.
    replica_selector_class: str | None = _prop("replica.selector.class", _string, None)
    unclean_leader_election_enable: bool = _prop("unclean.leader.election.enable", _bool, "false", dynamic=True)
    # group coordinator and __consumer_offsets
    offsets_topic_num_partitions: int = _prop("offsets.topic.num.partitions", _int(1, _I32), "50")
    offsets_topic_replication_factor: int = _prop("offsets.topic.replication.factor", _int(1, 32767), "1", kafka_type="SHORT")
    offsets_topic_segment_bytes: int = _prop("offsets.topic.segment.bytes", _int(1, _I32), "104857600")
    offsets_load_buffer_size: int = _prop("offsets.load.buffer.size", _int(1, _I32), "5242880")
    offsets_retention_minutes: int = _prop("offsets.retention.minutes", _int(1, _I32), "10080")
    offsets_retention_check_interval_ms: int = _prop(
        "offsets.retention.check.interval.ms", _int(1, _I64), "600000"
    )
    offsets_commit_timeout_ms: int = _prop("offsets.commit.timeout.ms", _int(1, _I32), "5000")
    offset_metadata_max_bytes: int = _prop("offset.metadata.max.bytes", _int(0, _I32), "4096")
    group_min_session_timeout_ms: int = _prop("group.min.session.timeout.ms", _int(0, _I32), "6000")
    group_max_session_timeout_ms: int = _prop("group.max.session.timeout.ms", _int(0, _I32), "1800000")
    group_initial_rebalance_delay_ms: int = _prop("group.initial.rebalance.delay.ms", _int(0, _I32), "3000")
    group_max_size: int = _prop("group.max.size", _int(1, _I32), str(_I32))
    # idempotent / transactional producers
    producer_id_expiration_ms: int = _prop("producer.id.expiration.ms", _int(1, _I32), "86400000")
    transactional_id_expiration_ms: int = _prop("transactional.id.expiration.ms", _int(1, _I32), "604800000")
    transaction_max_timeout_ms: int = _prop("transaction.max.timeout.ms", _int(1, _I32), "900000")
    # cluster identity (Kafka keeps it in meta.properties; this overrides a new log dir's)
    cluster_id: str | None = _prop("cluster.id", _string, None)
    # KRaft (kref/controller/settings.py checks them together). Without
    # process.roles the node is the single-node broker: a one-voter combined
    # cluster that formats its own log dirs.
    process_roles: tuple[str, ...] | None = _prop("process.roles", _roles, None, "broker, controller or both")
    controller_quorum_voters: tuple[Voter, ...] = _prop("controller.quorum.voters", _voter_list, "")
    controller_quorum_bootstrap_servers: tuple[str, ...] = _prop(
        "controller.quorum.bootstrap.servers", lambda n, raw: tuple(x.strip() for x in raw.split(",") if x.strip()), ""
    )
    controller_listener_names: tuple[str, ...] = _prop("controller.listener.names", _name_list, "")
    inter_broker_listener_name: str | None = _prop("inter.broker.listener.name", _string, None)
    broker_rack: str | None = _prop("broker.rack", _string, None)
    metadata_log_dir: str | None = _prop("metadata.log.dir", _string, None, "default: the first of log.dirs")
    broker_session_timeout_ms: int = _prop("broker.session.timeout.ms", _int(1, _I32), "9000")
    broker_heartbeat_interval_ms: int = _prop("broker.heartbeat.interval.ms", _int(1, _I32), "2000")
    # Leadership balance and controlled shutdown (kref/controller/controller.py decides).
    auto_leader_rebalance_enable: bool = _prop("auto.leader.rebalance.enable", _bool, "true")
    leader_imbalance_check_interval_seconds: int = _prop(
        "leader.imbalance.check.interval.seconds", _int(1, _I64 // 1000), "300"
    )
    leader_imbalance_per_broker_percentage: int = _prop("leader.imbalance.per.broker.percentage", _int(0, 100), "10")
    controlled_shutdown_enable: bool = _prop("controlled.shutdown.enable", _bool, "true")
    controller_quorum_election_timeout_ms: int = _prop(
        "controller.quorum.election.timeout.ms", _int(1, _I32), "1000"
    )
    controller_quorum_fetch_timeout_ms: int = _prop("controller.quorum.fetch.timeout.ms", _int(1, _I32), "2000")
    controller_quorum_retry_backoff_ms: int = _prop("controller.quorum.retry.backoff.ms", _int(1, _I32), "20")
    # Metadata snapshots and retention (kref/controller/snapshot.py). Kafka's
    # floor for metadata.log.segment.bytes is 8 MiB; kref allows small ones for tests.
    # KIP-1219 (Kafka 4.3): the most one FetchSnapshot answer carries.
    controller_quorum_fetch_snapshot_max_bytes: int = _prop(
        "controller.quorum.fetch.snapshot.max.bytes", _int(1, _I32), "1048576"
    )
    metadata_log_max_record_bytes_between_snapshots: int = _prop(
        "metadata.log.max.record.bytes.between.snapshots", _int(1, _I64), "20971520"
    )
    metadata_log_max_snapshot_interval_ms: int = _prop("metadata.log.max.snapshot.interval.ms", _int(0, _I64), "3600000")
    metadata_max_retention_bytes: int = _prop("metadata.max.retention.bytes", _int(-1, _I64), "104857600")
    metadata_max_retention_ms: int = _prop("metadata.max.retention.ms", _int(-1, _I64), "604800000")
    metadata_log_segment_bytes: int = _prop("metadata.log.segment.bytes", _int(14, _I32), "1073741824")
    metadata_log_segment_ms: int = _prop("metadata.log.segment.ms", _int(1, _I64), "604800000")
    # The CONTROLLER listeners of `listeners` (not served to clients).
    controller_listeners: tuple[Listener, ...] = ()

    # --- derived views ---------------------------------------------------------

    @property
    def broker_id(self) -> int:
        return self.node_id

    @property
    def log_retention_ms_effective(self) -> int:
        """Kafka's precedence: log.retention.ms > .minutes > .hours."""
        if self.log_retention_ms is not None:
            return self.log_retention_ms
        if self.log_retention_minutes is not None:
            return -1 if self.log_retention_minutes < 0 else self.log_retention_minutes * 60_000
        return -1 if self.log_retention_hours < 0 else self.log_retention_hours * 3_600_000

    @property
    def log_roll_ms_effective(self) -> int:
        return self.log_roll_ms if self.log_roll_ms is not None else self.log_roll_hours * 3_600_000

    @property
    def advertised(self) -> tuple[Listener, ...]:
        """advertised.listeners, defaulting to listeners (wildcard hosts -> 127.0.0.1)."""
        if self.advertised_listeners:
            return self.advertised_listeners
        return tuple(advertisable(lst) for lst in self.listeners)

    def topic_config_defaults(self) -> dict[str, str]:
        """Broker-level defaults of topic configs, keyed by topic-level names."""
        return {
            "segment.bytes": str(self.log_segment_bytes),
            "segment.ms": str(self.log_roll_ms_effective),
            "segment.index.bytes": str(self.log_index_size_max_bytes),
            "index.interval.bytes": str(self.log_index_interval_bytes),
            "retention.ms": str(self.log_retention_ms_effective),
            "retention.bytes": str(self.log_retention_bytes),
            "flush.messages": str(self.log_flush_interval_messages),
            "flush.ms": str(self.log_flush_interval_ms if self.log_flush_interval_ms is not None else _I64),
            "max.message.bytes": str(self.message_max_bytes),
            "message.timestamp.type": self.log_message_timestamp_type,
            "cleanup.policy": self.log_cleanup_policy,
            "file.delete.delay.ms": str(self.log_segment_delete_delay_ms),
            "min.insync.replicas": str(self.min_insync_replicas),
            "compression.type": self.compression_type,
            "unclean.leader.election.enable": str(self.unclean_leader_election_enable).lower(),
            "min.cleanable.dirty.ratio": repr(self.log_cleaner_min_cleanable_ratio),
            "min.compaction.lag.ms": str(self.log_cleaner_min_compaction_lag_ms),
            "max.compaction.lag.ms": str(self.log_cleaner_max_compaction_lag_ms),
            "delete.retention.ms": str(self.log_cleaner_delete_retention_ms),
        }

    def to_properties(self) -> dict[str, str]:
        """Every known broker property with its effective value (for DescribeConfigs)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or "name" not in f.metadata:
                continue
            out[f.metadata["name"]] = _render(value)
        return out

    def is_default(self, name: str) -> bool:
        return name not in self.explicit

    def with_overrides(self, overrides: Mapping[str, str]) -> BrokerConfig:
        """This config with some properties set to new raw values (dynamic configs).

        Raises ConfigError for an unknown name or a bad value; `explicit`
        stays what the static configuration set.
        """
        by_name = _fields_by_name()
        values = {}
        for name, raw in overrides.items():
            f = by_name.get(name)
            if f is None:
                raise ConfigError(f"unknown broker property {name}")
            values[f.name] = f.metadata["parse"](name, raw)
        return dataclasses.replace(self, **values)

    # names set explicitly by file or override (for DescribeConfigs config_source)
    explicit: frozenset[str] = field(default=frozenset(), compare=False)
    # Kafka settings given but ignored (IGNORED_PROPERTIES), for the start-up log
    ignored: Mapping[str, str] = field(default_factory=dict, compare=False)

    # --- construction ----------------------------------------------------------

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, str], *, log: Callable[[str], None] | None = None
    ) -> BrokerConfig:
        """Parse Kafka properties; unknown names and bad values raise ConfigError."""
        props = dict(properties)
        for synonym, canonical in _SYNONYMS.items():
            if synonym in props:
                if canonical in props and props[canonical].strip() != props[synonym].strip():
                    raise ConfigError(
                        f"{synonym}={props[synonym]!r} conflicts with {canonical}={props[canonical]!r}"
                    )
                props.setdefault(canonical, props[synonym])
                del props[synonym]
        by_name = {f.metadata["name"]: f for f in dataclasses.fields(cls) if "name" in f.metadata}
        unknown = sorted(n for n in props if n not in by_name and n not in IGNORED_PROPERTIES)
        if unknown:
            raise ConfigError(
                "unknown broker propert" + ("y " if len(unknown) == 1 else "ies ") + ", ".join(unknown)
            )
        ignored = sorted(n for n in props if n in IGNORED_PROPERTIES)
        if ignored and log is not None:
            log("ignoring Kafka properties kref does not use: " + ", ".join(ignored))
        values = {}
        for name, f in by_name.items():
            raw = props.get(name, f.metadata["default"])
            values[f.name] = None if raw is None else f.metadata["parse"](name, raw)
        controller_names = set(values["controller_listener_names"])
        from kref.controller.settings import check_kraft

        check_kraft(values)
        values["controller_listeners"] = tuple(lst for lst in values["listeners"] if lst.name in controller_names)
        plaintext = [lst for lst in values["listeners"] if lst.name not in controller_names]
        if not plaintext and values["process_roles"] != ("controller",):
            raise ConfigError("listeners: at least one client listener is required")
        _require_plaintext(plaintext, props)
        values["listeners"] = tuple(plaintext)
        if values["advertised_listeners"]:
            values["advertised_listeners"] = tuple(
                lst for lst in values["advertised_listeners"] if lst.name not in controller_names
            )
            names = {lst.name for lst in plaintext}
            for lst in values["advertised_listeners"]:
                if lst.name not in names:
                    raise ConfigError(f"advertised.listeners: {lst.name} is not one of the listeners")
        if values["group_min_session_timeout_ms"] > values["group_max_session_timeout_ms"]:
            raise ConfigError("group.min.session.timeout.ms must not exceed group.max.session.timeout.ms")
        if values["default_replication_factor"] > 1 and values["process_roles"] is None:
            raise ConfigError("default.replication.factor: a single kref broker can only host 1 replica")
        return cls(
            **values,
            explicit=frozenset(n for n in props if n in by_name),
            ignored={n: props[n] for n in ignored},
        )

    @classmethod
    def load(
        cls,
        config_file: str | Path | None = None,
        overrides: Iterable[str] = (),
        *,
        log: Callable[[str], None] | None = None,
    ) -> BrokerConfig:
        props: dict[str, str] = {}
        if config_file is not None:
            try:
                text = Path(config_file).read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"cannot read config file {config_file}: {exc.strerror}") from None
            props.update(parse_properties(text))
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"--override expects key=value, got {item!r}")
            props[key.strip()] = value
        return cls.from_properties(props, log=log)


def _fields_by_name() -> dict[str, dataclasses.Field]:
    return {f.metadata["name"]: f for f in dataclasses.fields(BrokerConfig) if "name" in f.metadata}


def is_broker_property(name: str) -> bool:
    return name in _fields_by_name()


def is_dynamic_broker_property(name: str) -> bool:
    f = _fields_by_name().get(name)
    return f is not None and f.metadata["dynamic"]


def dynamic_broker_properties() -> list[str]:
    return sorted(n for n, f in _fields_by_name().items() if f.metadata["dynamic"])


def broker_config_type_id(name: str) -> int:
    """DescribeConfigs config_type of a broker property (0 = UNKNOWN)."""
    f = _fields_by_name().get(name)
    if f is None:
        return 0
    return CONFIG_TYPE_IDS["PASSWORD"] if is_secret(name) else CONFIG_TYPE_IDS[f.metadata["type"]]


# Kafka's PASSWORD-typed settings are logged as [hidden]; these patterns
# cover them (ssl.*.password, sasl.jaas.config, *.secret*, ...).
_SECRET_MARKERS = ("password", "secret", "jaas.config", "credential")


def is_secret(name: str) -> bool:
    lowered = name.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def effective_config_lines(config: "BrokerConfig") -> list[str]:
    """`name = value` for every setting the broker runs with (and the ignored ones given), secrets masked."""
    values = dict(config.to_properties())
    values.update(config.ignored)
    return [f"\t{name} = {'[hidden]' if is_secret(name) else value}" for name, value in sorted(values.items())]


def _render(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


_SYNONYMS = {"broker.id": "node.id", "log.dir": "log.dirs"}

# Kafka settings for machinery kref does not have: accepted so Kafka's sample
# server.properties works, and otherwise ignored.
IGNORED_PROPERTIES = frozenset(
    {
        "listener.security.protocol.map",
        "socket.send.buffer.bytes",
        "socket.receive.buffer.bytes",
        "socket.listen.backlog.size",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "transaction.state.log.num.partitions",
        "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.min.isr",
        "group.coordinator.rebalance.protocols",
        "zookeeper.connect",
        "zookeeper.connection.timeout.ms",
        "confluent.support.metrics.enable",
        # TLS/SASL material of a non-PLAINTEXT listener kref does not serve
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "sasl.jaas.config",
        "sasl.enabled.mechanisms",
    }
)

# Broker property -> topic config name (Kafka's "synonyms").
TOPIC_CONFIG_SYNONYMS = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "cleanup.policy": "log.cleanup.policy",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "min.insync.replicas": "min.insync.replicas",
    "compression.type": "compression.type",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
}

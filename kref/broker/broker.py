"""The Broker object: configuration, topic metadata, logs and partitions.

Theory of operation: one Broker per process. It owns
- the BrokerConfig (Kafka property names),
- the topic metadata image: topic name -> topic_id (a UUID, KIP-516),
  partition count and per-topic config overrides. On a single node there is
  no KRaft quorum yet, so the image is persisted as a small JSON file in the
  first log dir (written to a temp file, fsynced and renamed, so a SIGKILL
  leaves either the old or the new image). Topic IDs are therefore stable
  across restarts; each partition dir also gets Kafka's partition.metadata
  from the storage LogManager.
- the storage LogManager, which creates and recovers the Logs,
- `partitions[(topic, partition)]`: the partition drivers. The partition
  area installs `partition_factory(broker, topic, partition, log)` when it
  registers its handlers; until then the Log itself stands in.
- `group_coordinator` (installed by the groups area) and a trio nursery for
  background tasks (`start_soon`).

All metadata operations are synchronous, raise BrokerError carrying a Kafka
ErrorCode, and run on the trio thread, so they never interleave.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from kref.broker.config import BrokerConfig, ConfigError, Listener, StartupError, advertisable
from kref.broker.dynamic_config import DYNAMIC_CONFIG_FILE, DynamicBrokerConfigs, DynamicConfigError
from kref.broker.resources import resource_warning
from kref.broker.topic_configs import TopicConfigError, validate_topic_configs
from kref.storage.config import LogConfig
from kref.storage.errors import StorageError
from kref.storage.segment import open_segment_files
from kref.storage.cleaner_driver import LogCleaner, cleaner_config_of
from kref.storage.log_manager import LogDirInUseError, LogManager, lock_log_dir
from kref.protocol.errors import ErrorCode

__all__ = [
    "Broker",
    "BrokerError",
    "TopicMetadata",
    "validate_topic_name",
    "INTERNAL_TOPICS",
]

log = logging.getLogger("kref.broker")

METADATA_FILE = "kref-topics.json"
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME_LENGTH = 249
# Bound on partitions per topic (Kafka has none, but an unbounded
# CreateTopics count is an easy way to fill a disk with directories).
MAX_PARTITIONS_PER_TOPIC = 10_000

class BrokerError(Exception):
    """A request cannot be served; `error_code` goes into the response."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        self.error_code = error_code
        super().__init__(message)


@dataclass
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "topic_id": str(self.topic_id),
            "num_partitions": self.num_partitions,
            "configs": dict(self.configs),
        }

    @classmethod
    def from_json(cls, obj: Mapping) -> TopicMetadata:
        return cls(obj["name"], uuid.UUID(obj["topic_id"]), int(obj["num_partitions"]), dict(obj["configs"]))


def validate_topic_name(name: str | None) -> None:
    """Kafka's Topic.validate rules; raises BrokerError(INVALID_TOPIC_EXCEPTION)."""
    if not name:
        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION, "topic name is empty")
    if name in (".", ".."):
        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise BrokerError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"topic name is {len(name)} characters, longer than {MAX_TOPIC_NAME_LENGTH}",
        )
    if not _LEGAL_TOPIC.match(name):
        raise BrokerError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'",
        )


class Broker:
    def __init__(self, config: BrokerConfig, *, trace_file: str | None = None) -> None:
        self.config = config  # the effective config: static + dynamic broker configs
        self.static_config = config
        self.dynamic_configs = DynamicBrokerConfigs(config)
        self.node_id = config.node_id
        self.trace_file = trace_file
        self.topics: dict[str, TopicMetadata] = {}
        self.partitions: dict[tuple[str, int], Any] = {}
        self.partition_factory: Callable[[Broker, str, int, Any], Any] | None = None
        self.group_coordinator: Any = None
        self.log_manager: Any = None
        self.log_cleaner: LogCleaner | None = None  # compaction (docs/compaction.md), started with the background tasks
        self.cluster_id: str = ""
        self.nursery: trio.Nursery | None = None
        # Hooks other areas may add: called with (broker, topic_name) after
        # a topic is deleted, e.g. to drop purgatory entries or group offsets.
        self.on_topic_deleted: list[Callable[[Broker, str], None]] = []
        # Called with (broker, topic_name) after IncrementalAlterConfigs
        # changed a topic's configs (the Logs already have the new LogConfig).
        self.on_topic_config_changed: list[Callable[[Broker, str], None]] = []
        # Set by the groups area before open(): (partition_dir, partition, topic)
        # -> producer state for that Log (LogManager's hook).
        self.producer_state_factory: Callable[[str, int, str], Any] | None = None
        self.default_log_config = LogConfig.from_properties(config.topic_config_defaults())
        self._log_dirs = [Path(d) for d in config.log_dirs]
        self._log_dir_locks: list[int] = []
        # Listeners as bound (port 0 resolved), set by the server.
        self.bound_listeners: tuple[Listener, ...] = ()
        self.open_connections = 0  # bounded by max.connections
        # Called (no arguments) at shutdown before the logs are closed, e.g.
        # to complete purgatory operations or write coordinator state.
        self.on_shutdown: list[Callable[[], None]] = []
        # Called (no arguments) once the nursery runs, before listeners open,
        # e.g. to start loading coordinator state in the background.
        self.on_serving: list[Callable[[], None]] = []

    # --- clock -----------------------------------------------------------------

    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000

    # --- lifecycle -------------------------------------------------------------

    def open(self) -> None:
        """Create log dirs, read meta.properties and the topic image, recover logs."""
        for d in self._log_dirs:
            # An unusable or already-used log dir is a start-up error with one
            # clear line (like Kafka's "Failed to acquire lock on file .lock"),
            # not a traceback; the lock keeps a second broker off our segments.
            if d.exists() and not d.is_dir():
                raise ConfigError(f"log.dirs: cannot use {d}: it is a file, not a directory")
            try:
                d.mkdir(parents=True, exist_ok=True)
                self._log_dir_locks.append(lock_log_dir(str(d)))
            except LogDirInUseError as exc:
                raise ConfigError(f"log.dirs: {exc}") from None
            except OSError as exc:
                raise ConfigError(f"log.dirs: cannot use {d}: {exc.strerror or exc}") from None
        open_segment_files.hold_spares()
        self.cluster_id = self._load_or_write_meta_properties()
        self._load_topic_image()
        self.dynamic_configs = DynamicBrokerConfigs.load(self.static_config, self._log_dirs[0] / DYNAMIC_CONFIG_FILE)
        self.config = self.dynamic_configs.effective()
        self.default_log_config = LogConfig.from_properties(self.config.topic_config_defaults())
        now = self.now_ms()
        self.log_manager = LogManager(
            [str(d) for d in self._log_dirs],
            self.default_log_config,
            now,
            producer_state_factory=self.producer_state_factory,
        )
        self.log_manager.load_logs(now, self._log_config_of_topic)
        self._delete_stray_logs()
        for topic in self.topics.values():
            for p in range(topic.num_partitions):
                self._attach_partition(topic, p)

    def shutdown(self) -> None:
        """Flush logs and write checkpoints (Kafka's controlled shutdown, minus the controller)."""
        for hook in self.on_shutdown:
            hook()
        if self.log_manager is not None:
            self.log_manager.shutdown()
            self.log_manager = None
        for fd in self._log_dir_locks:
            os.close(fd)  # releases the .lock flock
        self._log_dir_locks.clear()
        open_segment_files.release_spares()

    def advertised_listeners(self) -> tuple[Listener, ...]:
        """What Metadata tells clients: advertised.listeners, else the bound listeners."""
        bound = {lst.name: lst for lst in self.bound_listeners}
        if self.config.advertised_listeners:
            return tuple(
                Listener(lst.name, lst.host, bound[lst.name].port if lst.port == 0 and lst.name in bound else lst.port)
                for lst in self.config.advertised_listeners
            )
        if not self.bound_listeners:
            return self.config.advertised
        return tuple(advertisable(lst) for lst in self.bound_listeners)

    def start_soon(self, fn, *args) -> None:
        if self.nursery is None:
            raise RuntimeError("the broker is not running")
        self.nursery.start_soon(fn, *args)

    async def run_background(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Periodic storage work: retention and checkpoints on Kafka's intervals, and the log cleaner."""
        task_status.started()
        if self.log_manager is None:
            return
        self.log_cleaner = LogCleaner(self.log_manager, lambda: cleaner_config_of(self.config), self.now_ms)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.log_cleaner.run)
            await self._run_periodic()

    async def _run_periodic(self) -> None:
        cleanup_every = self.config.log_retention_check_interval_ms / 1000
        checkpoint_every = self.config.log_flush_offset_checkpoint_interval_ms / 1000
        next_cleanup = trio.current_time() + cleanup_every
        next_checkpoint = trio.current_time() + checkpoint_every
        while True:
            await trio.sleep_until(min(next_cleanup, next_checkpoint))
            now = trio.current_time()
            if now >= next_cleanup:
                self.log_manager.cleanup(self.now_ms())
                next_cleanup = now + cleanup_every
            if now >= next_checkpoint:
                self.log_manager.checkpoint()
                next_checkpoint = now + checkpoint_every

    # --- topic metadata --------------------------------------------------------

    def get_topic(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        for topic in self.topics.values():
            if topic.topic_id == topic_id:
                return topic
        return None

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
        *,
        validate_only: bool = False,
        allow_internal: bool = False,
        topic_id: uuid.UUID | None = None,
    ) -> TopicMetadata:
        validate_topic_name(name)
        if name in self.topics:
            raise BrokerError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if name in INTERNAL_TOPICS and not allow_internal:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"{name} is an internal topic created by the broker")
        collision = name.replace(".", "_")
        for other in self.topics:
            if other.replace(".", "_") == collision:
                raise BrokerError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' collides with existing topic: {other}",
                )
        if num_partitions == -1:
            num_partitions = self.config.num_partitions
        if num_partitions <= 0 or num_partitions > MAX_PARTITIONS_PER_TOPIC:
            raise BrokerError(
                ErrorCode.INVALID_PARTITIONS,
                f"Number of partitions must be between 1 and {MAX_PARTITIONS_PER_TOPIC}, got {num_partitions}.",
            )
        if replication_factor == -1:
            replication_factor = self.config.default_replication_factor
        if replication_factor <= 0:
            raise BrokerError(
                ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0, or -1."
            )
        # In a KRaft cluster (process.roles) the controller decided the
        # replicas; this broker stores the partitions it is told about.
        if replication_factor > 1 and self.config.process_roles is None:
            raise BrokerError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {replication_factor} time(s): "
                f"The target replication factor of {replication_factor} cannot be reached because only 1 broker(s) are registered.",
            )
        topic_configs = self.validate_topic_configs(dict(configs or {}))
        topic = TopicMetadata(name, topic_id or uuid.uuid4(), num_partitions, topic_configs)
        if validate_only:
            return topic
        self._attach_partitions(topic, 0, num_partitions)
        self.topics[name] = topic
        self._save_topic_image_or_undo(name, 0, num_partitions, lambda: self.topics.pop(name))
        log.info("created topic %s (%s) with %d partition(s)", name, topic.topic_id, num_partitions)
        return topic

    def maybe_auto_create(self, name: str) -> TopicMetadata | None:
        """Metadata-triggered creation when auto.create.topics.enable (never internal topics)."""
        if not self.config.auto_create_topics_enable or name in INTERNAL_TOPICS:
            return None
        return self.create_topic(name)

    def delete_topic(self, name: str) -> TopicMetadata:
        if not self.config.delete_topic_enable:
            raise BrokerError(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
        topic = self.topics.get(name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        if topic.is_internal:
            # Kafka refuses too: __consumer_offsets holds every group's state.
            raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot delete internal topic {name}.")
        del self.topics[name]
        self._save_topic_image()
        for p in range(topic.num_partitions):
            self.partitions.pop((name, p), None)
            self.log_manager.delete_log(name, p)
        for hook in self.on_topic_deleted:
            hook(self, name)
        log.info("deleted topic %s (%s)", name, topic.topic_id)
        return topic

    def create_partitions(self, name: str, count: int, *, validate_only: bool = False) -> TopicMetadata:
        topic = self.topics.get(name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        if count < topic.num_partitions:
            raise BrokerError(
                ErrorCode.INVALID_PARTITIONS,
                f"The topic {name} currently has {topic.num_partitions} partition(s); {count} would not be an increase.",
            )
        if count == topic.num_partitions:
            raise BrokerError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {topic.num_partitions} partition(s).")
        if count > MAX_PARTITIONS_PER_TOPIC:
            raise BrokerError(ErrorCode.INVALID_PARTITIONS, f"At most {MAX_PARTITIONS_PER_TOPIC} partitions per topic.")
        if validate_only:
            return topic
        old = topic.num_partitions
        self._attach_partitions(topic, old, count)
        topic.num_partitions = count

        def undo() -> None:
            topic.num_partitions = old

        self._save_topic_image_or_undo(name, old, count, undo)
        return topic

    # --- topic configs ---------------------------------------------------------

    def validate_topic_configs(self, configs: dict[str, str | None]) -> dict[str, str]:
        """Check names and values of topic config overrides; returns the cleaned dict."""
        try:
            return validate_topic_configs(configs, self.default_log_config)
        except TopicConfigError as exc:
            raise BrokerError(ErrorCode.INVALID_CONFIG, str(exc)) from None

    def alter_topic_configs(self, name: str, new_configs: dict[str, str], *, validate_only: bool = False) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        cleaned = self.validate_topic_configs(new_configs)
        if validate_only:
            return
        topic.configs = cleaned
        self._save_topic_image()
        config = self.log_config_for(topic)
        for p in range(topic.num_partitions):
            log_ = self.log_manager.get_log(name, p) if self.log_manager is not None else None
            if log_ is not None:
                log_.config = config
        for hook in self.on_topic_config_changed:
            hook(self, name)

    # --- dynamic broker configs -------------------------------------------------

    def alter_broker_configs(self, resource_name: str, new: dict[str, str], *, validate_only: bool = False) -> None:
        """Replace the dynamic overrides of one broker resource ("" = cluster default); applied at once."""
        try:
            altered = self.dynamic_configs.altered(resource_name, new)
        except DynamicConfigError as exc:
            raise BrokerError(exc.error_code, str(exc)) from None
        if validate_only:
            return
        try:
            _atomic_write(self._log_dirs[0] / DYNAMIC_CONFIG_FILE, altered.to_json())
        except OSError as exc:
            raise BrokerError(ErrorCode.KAFKA_STORAGE_ERROR, f"Cannot store broker configs: {exc.strerror or exc}") from None
        self.dynamic_configs = altered
        self.config = altered.effective()
        # The log.* defaults under every topic's overrides, without a restart.
        self.default_log_config = LogConfig.from_properties(self.config.topic_config_defaults())
        for topic in self.topics.values():
            config = self.log_config_for(topic)
            for p in range(topic.num_partitions):
                log_ = self.log_manager.get_log(topic.name, p) if self.log_manager is not None else None
                if log_ is not None:
                    log_.config = config
            for hook in self.on_topic_config_changed:
                hook(self, topic.name)
        log.info("dynamic broker configs of %s now %s", repr(resource_name) if resource_name else "the cluster default", new)

    # --- internals -------------------------------------------------------------

    def log_config_for(self, topic: TopicMetadata) -> LogConfig:
        """The topic's overrides over the broker's log.* defaults."""
        return LogConfig.from_properties(topic.configs, self.default_log_config)

    def _delete_stray_logs(self) -> None:
        """Remove logs the topic image does not know (Kafka's "stray" partitions).

        A crash between writing the image and creating or deleting partition
        dirs leaves such logs behind; keeping them would hand a re-created
        topic the old topic's records.
        """
        for log_ in list(self.log_manager.all_logs()):
            topic = self.topics.get(log_.topic)
            if topic is None or log_.partition >= topic.num_partitions:
                reason = "no such topic" if topic is None else f"topic has {topic.num_partitions} partition(s)"
            elif log_.topic_id is not None and log_.topic_id != topic.topic_id:
                reason = f"topic id {log_.topic_id} is not the topic's {topic.topic_id}"
            else:
                continue
            log.warning("deleting stray log %s-%d: %s", log_.topic, log_.partition, reason)
            self.log_manager.delete_log(log_.topic, log_.partition)

    @staticmethod
    def log_of(driver: Any) -> Any:
        """The storage Log behind a partition driver (or the Log itself)."""
        if driver is None:
            return None
        return getattr(driver, "log", driver)

    _log_of = log_of  # the name the groups area first used

    def _log_config_of_topic(self, name: str) -> LogConfig | None:
        topic = self.topics.get(name)
        return self.log_config_for(topic) if topic is not None else None

    def _attach_partitions(self, topic: TopicMetadata, start: int, end: int) -> None:
        """Create partitions [start, end) of `topic`, all or none.

        Logs are created before the topic image names them: a crash in
        between leaves stray logs, which the next start deletes; a failure
        (out of descriptors, disk full) removes those already created and
        answers KAFKA_STORAGE_ERROR, so the image and the directories agree.
        """
        try:
            for p in range(start, end):
                self._attach_partition(topic, p)
        except (OSError, StorageError) as exc:
            self._detach_partitions(topic.name, start, end)
            resource_warning(log, "cannot create partitions of topic %s: %s", topic.name, exc)
            raise BrokerError(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"Cannot create partitions of topic {topic.name}: {getattr(exc, 'strerror', None) or exc}",
            ) from None

    def _detach_partitions(self, name: str, start: int, end: int) -> None:
        with open_segment_files.spares():  # removing a directory takes descriptors
            for p in range(start, end):
                self.partitions.pop((name, p), None)
                try:
                    self.log_manager.delete_log(name, p)
                except OSError as exc:
                    log.warning("cannot remove partition %s-%d: %s", name, p, exc)

    def _save_topic_image_or_undo(self, name: str, start: int, end: int, undo: Callable[[], None]) -> None:
        try:
            self._save_topic_image()
        except OSError as exc:
            undo()
            self._detach_partitions(name, start, end)
            raise BrokerError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"Cannot write the topic image: {exc.strerror or exc}"
            ) from None

    def _attach_partition(self, topic: TopicMetadata, partition: int) -> None:
        log_ = self.log_manager.get_or_create_log(
            topic.name, partition, config=self.log_config_for(topic), topic_id=topic.topic_id
        )
        if self.partition_factory is not None:
            self.partitions[(topic.name, partition)] = self.partition_factory(self, topic.name, partition, log_)
        else:
            self.partitions[(topic.name, partition)] = log_

    def _load_or_write_meta_properties(self) -> str:
        """Kafka's meta.properties in every log dir (kref/controller/meta_properties.py):
        a node configured with process.roles needs `kref storage format` first;
        the single-node broker formats its own dirs."""
        from kref.controller import meta_properties
        from kref.controller.settings import all_log_dirs

        return meta_properties.ensure_formatted(
            all_log_dirs(self.config),
            self.node_id,
            require_formatted=self.config.process_roles is not None,
            cluster_id=self.config.cluster_id,
        )

    def _load_topic_image(self) -> None:
        path = self._log_dirs[0] / METADATA_FILE
        if not path.exists():
            return
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            self.topics = {t["name"]: TopicMetadata.from_json(t) for t in data["topics"]}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # Starting without it would delete every partition as "stray".
            raise StartupError(
                f"the topic metadata file {path} is corrupt ({type(exc).__name__}: {exc}); "
                "restore it from a backup or remove it together with the partition directories"
            ) from None

    def _save_topic_image(self) -> None:
        data = {"version": 1, "topics": [t.to_json() for t in self.topics.values()]}
        _atomic_write(self._log_dirs[0] / METADATA_FILE, json.dumps(data, indent=1, sort_keys=True))


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)

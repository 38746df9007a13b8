"""The Broker object: configuration, metadata, logs and partitions, typed parts.

Theory of operation: one Broker per process. It owns
- the BrokerConfig (Kafka property names),
- the metadata: a MetadataImage (kref/metadata/image.py) fed by the local
  metadata source (kref/metadata/local_source.py, a record file in the first
  log dir; on a single node there is no quorum, so this broker is its own
  controller). Topic create/delete, CreatePartitions and topic config changes
  become metadata records, made durable before anything acts on them;
  topic IDs (KIP-516) and leader epochs live in those records,
- the storage LogManager, which creates and recovers the Logs,
- the ReplicaManager, which turns each MetadataDelta into log creation and
  deletion and BecomeLeader / BecomeFollower on the partition drivers
  (`partitions[(topic, partition)]`, always a Partition),
- the two purgatories and the trace sink the partition drivers share,
- `group_coordinator` (the groups area) and a trio nursery for background
  tasks (`start_soon`).

All metadata operations are synchronous, raise BrokerError carrying a Kafka
ErrorCode, and run on the trio thread, so they never interleave.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from kref.broker.config import BrokerConfig, ConfigError, Listener, StartupError, advertisable
from kref.broker.alter_log_dirs import mover_of
from kref.broker.partition import MAX_DELAYED_FETCHES, MAX_DELAYED_PRODUCES, Partition, flush_trace_periodically
from kref.broker.replica_manager import ReplicaManager
from kref.metadata import records as mr
from kref.metadata.image import MetadataDelta, MetadataImage
from kref.metadata.local_source import LocalMetadataSource, MetadataSourceError, restart_leadership
from kref.ports.clock import Clock, SystemClock
from kref.ports.fs import FileHandle
from kref.ports.ids import SYSTEM_IDS, Ids
from kref.replication import replica as core
from kref.replication.purgatory import Purgatory
from kref.trace.sink import NdjsonTraceSink, NullTraceSink, TraceSink
from kref.broker.dynamic_config import DYNAMIC_CONFIG_FILE, DynamicBrokerConfigs, DynamicConfigError
from kref.broker.resources import resource_warning
from kref.controller.controller import delete_topic_refusal
from kref.broker.topic_configs import TopicConfigError, validate_topic_configs
from kref.storage.config import LogConfig
from kref.storage.errors import StorageError
from kref.storage.checkpoint import write_atomically
from kref.storage.segment import REAL_FILE_SYSTEM, open_segment_files
from kref.storage.cleaner_driver import LogCleaner, cleaner_config_of
from kref.storage.log_manager import LogDirInUseError, LogManager, lock_log_dir
from kref.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kref.broker.group_area import GroupArea
    from kref.broker.group_coordinator import GroupCoordinatorDriver
    from kref.broker.producer_id_driver import ProducerIdManager

__all__ = [
    "Broker",
    "BrokerError",
    "TopicMetadata",
    "validate_topic_name",
    "INTERNAL_TOPICS",
]

log = logging.getLogger("kref.broker")

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


@dataclass(frozen=True)
class TopicMetadata:
    """What the handlers read of a topic: a view of the metadata image."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


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
    def __init__(
        self, config: BrokerConfig, *, trace_file: str | None = None, clock: Clock | None = None,
        ids: Ids = SYSTEM_IDS,
    ) -> None:
        # The clock port: the real clock here, a ManualClock in tests and the simulator.
        self.clock: Clock = clock if clock is not None else SystemClock()
        # The ids port: the single broker's topic ids and the storage's unique dir names.
        self.ids: Ids = ids
        self.config = config  # the effective config: static + dynamic broker configs
        self.static_config = config
        self.dynamic_configs = DynamicBrokerConfigs(config)
        self.node_id = config.node_id
        self.trace_file = trace_file
        self.metadata: LocalMetadataSource | None = None
        self._topic_views: dict[str, TopicMetadata] | None = None
        self.replica_manager: ReplicaManager | None = None
        # Shared by every partition driver: acks=all produces and long-poll
        # fetches parked until their partition's high watermark moves.
        self.produce_purgatory = Purgatory("produce", max_operations=MAX_DELAYED_PRODUCES)
        self.fetch_purgatory = Purgatory("fetch", max_operations=MAX_DELAYED_FETCHES)
        self.trace_sink: TraceSink = NdjsonTraceSink(trace_file, node=self.node_id) if trace_file else NullTraceSink()
        # The groups area (kref/broker/group_area.py), attached by its handlers.
        self.group_area: GroupArea | None = None
        # InitProducerId's blocks: made by the groups area, or by the KRaft node.
        self.producer_id_manager: ProducerIdManager | None = None
        self.log_manager: Any = None
        self.log_dir_mover = None  # AlterReplicaLogDirs (kref/broker/alter_log_dirs.py), made on first use
        self.log_cleaner: LogCleaner | None = None  # compaction (docs/compaction.md), started with the background tasks
        self.cluster_id: str = ""
        self.nursery: trio.Nursery | None = None
        # Hooks other areas may add: called with (broker, topic_name) after
        # a topic is deleted, e.g. to drop purgatory entries or group offsets.
        self.on_topic_deleted: list[Callable[[Broker, str], None]] = []
        # Called with (broker, topic_name) after IncrementalAlterConfigs
        # changed a topic's configs (the Logs already have the new LogConfig).
        self.on_topic_config_changed: list[Callable[[Broker, str], None]] = []
        self.default_log_config = LogConfig.from_properties(config.topic_config_defaults())
        self._log_dirs = [Path(d) for d in config.log_dirs]
        self._log_dir_locks: list[FileHandle] = []
        # Listeners as bound (port 0 resolved), set by the server.
        self.bound_listeners: tuple[Listener, ...] = ()
        self.open_connections = 0  # bounded by max.connections
        # Called (no arguments) at shutdown before the logs are closed, e.g.
        # to complete purgatory operations or write coordinator state.
        self.on_shutdown: list[Callable[[], None]] = []
        # Called (no arguments) once the nursery runs, before listeners open,
        # e.g. to start loading coordinator state in the background.
        self.on_serving: list[Callable[[], None]] = []
        # Called as hook(topic, partition, role, leader_epoch) after the replica
        # manager made a hosted partition "leader" or "follower", or dropped it
        # ("none"): the group coordinator follows __consumer_offsets leadership.
        self.on_partition_role: list[Callable[[str, int, str, int], None]] = []

    # --- areas -----------------------------------------------------------------

    @property
    def group_coordinator(self) -> GroupCoordinatorDriver | None:
        return self.group_area.coordinator if self.group_area is not None else None

    def attach_group_area(self, area: GroupArea) -> None:
        """Before open(): the LogManager takes the area's producer state factory."""
        self.group_area = area

    def use_producer_id_manager(self, manager: ProducerIdManager) -> None:
        self.producer_id_manager = manager

    def _core_high_watermark(self, key: tuple[str, int]) -> int | None:
        """The replica core's high watermark (the one live copy) for
        replication-offset-checkpoint and retention; None: no partition here."""
        part = self.replica_manager.partitions.get(key) if self.replica_manager is not None else None
        return part.high_watermark_to_checkpoint if part is not None else None

    def _partition_retention(self, key: tuple[str, int], now_ms: int) -> int | None:
        """Retention of a hosted partition goes through its replica core (None: no partition)."""
        part = self.replica_manager.partitions.get(key) if self.replica_manager is not None else None
        return part.apply_retention(now_ms) if part is not None else None

    # --- clock -----------------------------------------------------------------

    def now_ms(self) -> int:
        return self.clock.now_ms()

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
        self.metadata = LocalMetadataSource(self._log_dirs[0], self.node_id)
        try:
            self.metadata.open()
        except (MetadataSourceError, OSError) as exc:
            raise StartupError(str(exc)) from None
        self.dynamic_configs = DynamicBrokerConfigs.load(self.static_config, self._log_dirs[0] / DYNAMIC_CONFIG_FILE)
        self.config = self.dynamic_configs.effective()
        self.default_log_config = LogConfig.from_properties(self.config.topic_config_defaults())
        now = self.now_ms()
        self.log_manager = LogManager(
            [str(d) for d in self._log_dirs],
            self.default_log_config,
            now,
            producer_state_factory=self.group_area.producer_state_factory if self.group_area else None,
            fs=REAL_FILE_SYSTEM,  # the storage's file-system port (kref/ports/fs.py)
            high_watermark_of=self._core_high_watermark,  # the checkpoint reads the cores
            ids=self.ids,
        )
        self.log_manager.load_logs(now, self._log_config_of_topic)
        self.replica_manager = ReplicaManager(self.node_id, self.log_manager, self._new_partition, self._log_config_of_topic)
        self.replica_manager.on_partition_role = self.on_partition_role
        # Big deltas are applied in bounded slices by a task in the broker's nursery.
        self.replica_manager.start_soon = self.start_soon
        self.replica_manager.now_ms = self.now_ms
        if self.config.process_roles is None:
            # A KRaft node learns its topics from __cluster_metadata after the
            # start (ClusterView): its logs are not stray before that replay.
            self._delete_stray_logs()
        # A new leadership term for every partition, durable before it leads:
        # an epoch is never reused across restarts (KIP-101).
        image = self.metadata.image
        try:
            self.metadata.commit(restart_leadership(image, self.node_id, self._latest_log_epoch))
        except MetadataSourceError as exc:
            raise StartupError(str(exc)) from None
        self._topic_views = None
        everything = MetadataImage().apply(image.to_records())
        self.replica_manager.apply_delta(everything, image, now)

    def shutdown(self) -> None:
        """Flush logs and write checkpoints (Kafka's controlled shutdown, minus the controller)."""
        for hook in self.on_shutdown:
            hook()
        self.trace_sink.close()
        if self.log_manager is not None:
            self.log_manager.shutdown()
            self.log_manager = None
        if self.metadata is not None:
            self.metadata.close()
        for lock in self._log_dir_locks:
            lock.close()  # releases the .lock flock
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
            await nursery.start(mover_of(self).run)  # AlterReplicaLogDirs' copies; resumes moves first
            if self.trace_sink.enabled:
                nursery.start_soon(flush_trace_periodically, self.trace_sink)
            await self._run_periodic()

    async def _run_periodic(self) -> None:
        cleanup_every = self.config.log_retention_check_interval_ms / 1000
        checkpoint_every = self.config.log_flush_offset_checkpoint_interval_ms / 1000
        # Kafka's isr-expiration task runs every replica.lag.time.max.ms / 2.
        isr_check_every = max(self.config.replica_lag_time_max_ms / 2000, 0.01)
        next_cleanup = trio.current_time() + cleanup_every
        next_checkpoint = trio.current_time() + checkpoint_every
        next_isr_check = trio.current_time() + isr_check_every
        while True:
            await trio.sleep_until(min(next_cleanup, next_checkpoint, next_isr_check))
            now = trio.current_time()
            if now >= next_isr_check:
                await self.replica_manager.tick_in_slices(self.now_ms)  # thousands of partitions: sliced
                next_isr_check = now + isr_check_every
            if now >= next_cleanup:
                # Each replica core admits its partition's new log start offset
                # before the Log moves (Partition.apply_retention).
                self.log_manager.cleanup(self.now_ms(), self._core_high_watermark,
                                         owned_retention=self._partition_retention)
                next_cleanup = now + cleanup_every
            if now >= next_checkpoint:
                # Taken on the loop, written (three fsyncs a log dir) in a worker thread.
                files = self.log_manager.checkpoint_files()
                await trio.to_thread.run_sync(self.log_manager.write_checkpoint_files, files)
                next_checkpoint = now + checkpoint_every

    # --- topic metadata (a view of the image) ---------------------------------

    @property
    def partitions(self) -> Mapping[tuple[str, int], Partition]:
        return self.replica_manager.partitions if self.replica_manager is not None else {}

    @property
    def image(self) -> MetadataImage:
        return self.metadata.image if self.metadata is not None else MetadataImage()

    @property
    def topics(self) -> Mapping[str, TopicMetadata]:
        if self._topic_views is None:
            image = self.image
            self._topic_views = {
                name: TopicMetadata(name, t.topic_id, len(t.partitions), image.topic_configs(name))
                for name, t in image.topics.items()
            }
        return self._topic_views

    def absent_partition_error(self, name: str | None, partition: int, unknown: int) -> int:
        """The error for a partition this broker hosts no replica of: one the
        metadata knows lives elsewhere (NOT_LEADER_OR_FOLLOWER: the client
        refreshes its metadata and goes to the leader, as with Kafka), else `unknown`."""
        if name is not None and self.image.partition(name, partition) is not None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return unknown

    def get_topic(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        topic = self.image.topic_by_id(topic_id)
        return self.topics.get(topic.name) if topic is not None else None

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
        topic = TopicMetadata(name, topic_id or self.ids.uuid(), num_partitions, topic_configs)
        if validate_only:
            return topic
        me = (self.node_id,)
        records: list[mr.MetadataRecord] = [mr.TopicRecord(name, topic.topic_id)]
        records += [mr.PartitionRecord(p, topic.topic_id, me, me, self.node_id, 0, 0) for p in range(num_partitions)]
        records += [mr.ConfigRecord(mr.TOPIC_RESOURCE, name, k, v) for k, v in sorted(topic_configs.items())]
        self._create_partitions_and_commit(name, topic.topic_id, range(num_partitions),
                                           self.log_config_for(topic), records)
        log.info("created topic %s (%s) with %d partition(s)", name, topic.topic_id, num_partitions)
        return self.topics[name]

    def maybe_auto_create(self, name: str) -> TopicMetadata | None:
        """Metadata-triggered creation when auto.create.topics.enable (never internal topics)."""
        if not self.config.auto_create_topics_enable or name in INTERNAL_TOPICS:
            return None
        return self.create_topic(name)

    def delete_topic(self, name: str) -> TopicMetadata:
        topic = self.topics.get(name)
        # The single broker is its own controller: the controller core's gates.
        refusal = delete_topic_refusal(name, topic is not None, delete_topic_enable=self.config.delete_topic_enable,
                                       internal=topic is not None and topic.is_internal)
        if refusal is not None:
            raise BrokerError(*refusal)
        self._commit([mr.RemoveTopicRecord(topic.topic_id)])
        # Parked fetches and produces on the topic answer now, not at their timeout.
        for purgatory in (self.fetch_purgatory, self.produce_purgatory):
            for key in purgatory.watched_keys():
                if key[0] == name:
                    purgatory.check_and_complete(key)
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
        me = (self.node_id,)
        new = range(topic.num_partitions, count)
        records = [mr.PartitionRecord(p, topic.topic_id, me, me, self.node_id, 0, 0) for p in new]
        self._create_partitions_and_commit(name, topic.topic_id, new, self.log_config_for(topic), records)
        return self.topics[name]

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
        # The whole new set as records: removed keys as deletions (value None).
        records = [mr.ConfigRecord(mr.TOPIC_RESOURCE, name, k, None) for k in sorted(set(topic.configs) - set(cleaned))]
        records += [mr.ConfigRecord(mr.TOPIC_RESOURCE, name, k, v) for k, v in sorted(cleaned.items())
                    if topic.configs.get(k) != v]
        self._commit(records)
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
            write_atomically(str(self._log_dirs[0] / DYNAMIC_CONFIG_FILE), altered.to_json(), fs=REAL_FILE_SYSTEM)
        except OSError as exc:
            raise BrokerError(ErrorCode.KAFKA_STORAGE_ERROR, f"Cannot store broker configs: {exc.strerror or exc}") from None
        self.use_dynamic_configs(altered)
        log.info("dynamic broker configs of %s now %s", repr(resource_name) if resource_name else "the cluster default", new)

    def use_dynamic_configs(self, altered: DynamicBrokerConfigs) -> None:
        """Run with these dynamic overrides from now on (stored already: the single
        broker's file, or the cluster's ConfigRecords)."""
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

    def _log_config_of_topic(self, name: str) -> LogConfig | None:
        topic = self.topics.get(name)
        return self.log_config_for(topic) if topic is not None else None

    def _new_partition(self, log_: Any) -> Partition:
        """A partition driver over `log_` sharing this broker's purgatories and trace sink."""
        return Partition(
            log_,
            replica_id=self.node_id,
            produce_purgatory=self.produce_purgatory,
            fetch_purgatory=self.fetch_purgatory,
            trace=self.trace_sink,
            replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
            alter_partition=self._alter_partition,
        )

    def _alter_partition(self, part: Partition, request: core.AlterPartition) -> core.AlterPartitionResponse | None:
        """The single broker is its own controller: AlterPartition is checked against
        the image (Kafka's controller rules) and committed as a PartitionChangeRecord."""
        kraft = getattr(self, "kraft", None)
        if kraft is not None and kraft.is_cluster_topic(part.topic):
            return kraft.alter_partition(part, request)  # to the active controller
        registration = self.image.partition(part.topic, part.partition)
        topic = self.image.topic(part.topic)
        if registration is None or topic is None:
            return core.AlterPartitionResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, request.leader_epoch, frozenset(), -1)
        if registration.leader != self.node_id or registration.leader_epoch != request.leader_epoch:
            return core.AlterPartitionResponse(ErrorCode.FENCED_LEADER_EPOCH, request.leader_epoch, frozenset(), -1)
        if registration.partition_epoch != request.partition_epoch:
            return core.AlterPartitionResponse(ErrorCode.INVALID_UPDATE_VERSION, request.leader_epoch, frozenset(), -1)
        if not set(request.new_isr) <= set(registration.replicas):
            return core.AlterPartitionResponse(ErrorCode.INVALID_REQUEST, request.leader_epoch, frozenset(), -1)
        try:
            self._commit([mr.PartitionChangeRecord(part.partition, topic.topic_id, isr=tuple(sorted(request.new_isr)))])
        except BrokerError as exc:
            return core.AlterPartitionResponse(exc.error_code, request.leader_epoch, frozenset(), -1)
        after = self.image.partition(part.topic, part.partition)
        return core.AlterPartitionResponse(ErrorCode.NONE, after.leader_epoch, frozenset(after.isr), after.partition_epoch)

    def _latest_log_epoch(self, name: str, partition: int) -> int:
        log_ = self.log_manager.get_log(name, partition) if self.log_manager is not None else None
        latest = log_.leader_epoch_cache.latest_epoch if log_ is not None else None
        return latest if latest is not None else -1

    def apply_cluster_records(self, records: list[mr.MetadataRecord], *, publish: bool = True) -> MetadataDelta:
        """A KRaft node: records committed to __cluster_metadata (ClusterView), replayed
        into the one image; the replica manager acts on the delta once `publish`
        (ClusterView holds it back while the node replays history at start). They are
        durable in the metadata log already, so nothing is written here."""
        def skip(record: object, exc: Exception) -> None:
            log.warning("node %d: metadata record not applied: %s", self.node_id, exc)

        delta = self.metadata.image.apply(records, on_invalid=skip)
        self._topic_views = None
        if any(rtype == mr.BROKER_RESOURCE for rtype, _ in delta.changed_configs):
            # KIP-226 in the cluster: the BROKER ConfigRecords are the dynamic configs.
            try:
                self.use_dynamic_configs(DynamicBrokerConfigs.from_image(self.static_config, self.metadata.image))
            except DynamicConfigError as exc:
                log.warning("node %d: dynamic broker configs not applied: %s", self.node_id, exc)
        if publish:
            self.replica_manager.apply_delta(delta, self.metadata.image, self.now_ms())
        return delta

    def publish_cluster_image(self) -> None:
        """The node caught up with __cluster_metadata: act on the whole image at once
        (Kafka's first metadata publication), never on the history that led to it
        (a deposed term replayed as BecomeLeader would rewrite the epoch cache).
        Logs the image does not know, or not here, are stray: deleted."""
        image = self.metadata.image
        self._topic_views = None
        self._delete_stray_logs()
        self.replica_manager.apply_delta(MetadataImage().apply(image.to_records()), image, self.now_ms())

    def commit_metadata(self, records: list[mr.MetadataRecord]) -> None:
        """Commit records as this single broker's own controller (e.g. a producer id block)."""
        self._commit(list(records))

    def _commit(self, records: list[mr.MetadataRecord]) -> None:
        """Durable first, then applied: the image, the topic views, the replica manager."""
        try:
            delta = self.metadata.commit(records)
        except MetadataSourceError as exc:
            raise BrokerError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from None
        self._topic_views = None
        self.replica_manager.apply_delta(delta, self.metadata.image, self.now_ms())

    def _create_partitions_and_commit(
        self, name: str, topic_id: uuid.UUID, partitions: range, config: LogConfig, records: list[mr.MetadataRecord]
    ) -> None:
        """Logs first, then the records naming them, all or none.

        A failure creating logs (out of descriptors, disk full) removes those
        already created and answers KAFKA_STORAGE_ERROR before any record is
        written; a failure writing the records removes the logs too. A crash
        in between leaves logs the image does not know: stray, deleted at the
        next start.
        """
        try:
            self.replica_manager.prepare_logs(name, topic_id, partitions, config)
        except (OSError, StorageError) as exc:
            resource_warning(log, "cannot create partitions of topic %s: %s", name, exc)
            raise BrokerError(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"Cannot create partitions of topic {name}: {getattr(exc, 'strerror', None) or exc}",
            ) from None
        try:
            self._commit(records)
        except BrokerError:
            self.replica_manager.drop_logs(name, partitions)
            raise

    def _load_or_write_meta_properties(self) -> str:
        """Kafka's meta.properties in every log dir (kref/storage/meta_properties.py):
        a node configured with process.roles needs `kref storage format` first;
        the single-node broker formats its own dirs."""
        from kref.storage import meta_properties
        from kref.controller.settings import all_log_dirs

        return meta_properties.ensure_formatted(
            all_log_dirs(self.config),
            self.node_id,
            require_formatted=self.config.process_roles is not None,
            cluster_id=self.config.cluster_id,
        )

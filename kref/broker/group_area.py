"""Wiring of the group coordinator and the idempotent producer into the Broker.

Theory of operation
-------------------
`install(broker)` (called by the group, offsets and init_producer_id handler
modules, idempotent) builds one typed `GroupArea` and hands it to
`Broker.attach_group_area` (the broker declares every attribute itself; no
area sets attributes on it). The area holds:

- `coordinator` (the broker's `group_coordinator`): the trio driver around
  the pure GroupCoordinator, configured from the group.* / offsets.*
  properties;
- `producer_state_factory`: every partition Log gets a ProducerStateManager
  (idempotent-producer checks, .snapshot files), since the LogManager is
  created afterwards in `Broker.open`;
- `offsets_roles` / `offsets_loads_waiting`: which `__consumer_offsets`
  partitions this broker leads, and those led before the nursery ran.

The broker's producer id manager is made lazily, once the log dirs exist
(`producer_id_manager`), unless the KRaft node gave it one. The area also
registers:

- an `on_partition_role` hook: the coordinator of a group is the leader of
  the group's `__consumer_offsets` partition. Becoming its leader (a new
  leader epoch) marks the partition loading and reads it in the background
  (requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS); leaving leadership
  unloads its groups (Kafka's onElection / onResignation). On a single
  broker every partition is led here; on `kref cluster` the controller
  decides, and FindCoordinator answers the partition's leader;
- an `on_serving` hook that starts the loads of partitions led before the
  nursery ran, and the coordinator's timer task;
- an `on_topic_deleted` hook: the coordinator forgets (and tombstones) the
  committed offsets of a deleted topic, as Kafka does.

`__consumer_offsets` is created on the first FindCoordinator for a group,
like Kafka does (on `kref cluster` in the background: that FindCoordinator
gets COORDINATOR_NOT_AVAILABLE at once and the client retries), as a compacted topic with offsets.topic.num.partitions
partitions (on `kref cluster` through the active controller, with
offsets.topic.replication.factor replicas); if it already exists its real
partition count wins, so groups keep mapping to the partition that holds
their records. Coordinator writes
go through the partition driver (so the high watermark covers them and a
consumer of `__consumer_offsets` sees them) or, without one, the Log.
"""

from __future__ import annotations

import datetime
import logging
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from kref.broker.group_coordinator import GroupCoordinatorDriver
from kref.broker.handlers.metadata import brokers_of
from kref.coordinator import group as g
from kref.coordinator.offsets_format import partition_for
from kref.coordinator.producer_id import LEGACY_STATE_FILE, PRODUCER_ID_BLOCK_SIZE, grant_block
from kref.broker.producer_id_driver import ProducerIdManager, read_legacy_file
from kref.metadata.records import ProducerIdsRecord
from kref.ports.fs import RealFileSystem
from kref.protocol.errors import ErrorCode
from kref.replication.purgatory import DelayedProduce, ProducePartitionStatus
from kref.broker.purgatory_wait import wait_for
from kref.storage.producer_state import ProducerStateManager

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
# Kafka's producer.id.expiration.check.interval.ms default
PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS = 600_000
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1

# kref has no transaction coordinator. A retriable answer such as
# COORDINATOR_NOT_AVAILABLE makes every client retry until its own timeout
# (init_transactions() blocks for transaction.timeout, aiokafka's start()
# forever); TRANSACTIONAL_ID_AUTHORIZATION_FAILED is the one error all of
# them (librdkafka, kafka-python, aiokafka, kafkajs) treat as fatal at once,
# so a transactional producer fails fast with our message. Both
# FindCoordinator(key_type=1) and InitProducerId(transactional_id) say so.
TRANSACTIONS_REFUSED = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
NO_TRANSACTIONS_MESSAGE = "kref does not support transactions (no transaction coordinator)"


class CoordinatorWriteError(Exception):
    pass


@dataclass
class GroupArea:
    """The group coordinator's part of a broker (see the module docstring)."""

    coordinator: GroupCoordinatorDriver
    producer_state_factory: Callable[[str, int, str], ProducerStateManager]
    # __consumer_offsets partition -> (role, leader_epoch)
    offsets_roles: dict[int, tuple[str, int]] = field(default_factory=dict)
    # partitions led before the nursery ran -> leader_epoch
    offsets_loads_waiting: dict[int, int] = field(default_factory=dict)
    # On `kref cluster`: True while this broker's CreateTopics for
    # __consumer_offsets is with the controller (one at a time), and why the
    # last one failed, if it did (said in the next COORDINATOR_NOT_AVAILABLE).
    offsets_creation_running: bool = False
    offsets_creation_failed: str | None = None


def _group_config(config, num_partitions: int | None = None) -> g.GroupConfig:
    return g.GroupConfig(
        group_min_session_timeout_ms=config.group_min_session_timeout_ms,
        group_max_session_timeout_ms=config.group_max_session_timeout_ms,
        group_initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
        group_max_size=config.group_max_size,
        offsets_topic_num_partitions=num_partitions or config.offsets_topic_num_partitions,
        offset_metadata_max_bytes=int(getattr(config, "offset_metadata_max_bytes", 4096)),
        offsets_retention_ms=config.offsets_retention_minutes * 60_000,
        offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
    )


def install(broker) -> None:
    if broker is None:  # a router built only to list API ranges (codec tests)
        return
    if broker.group_area is not None:
        return
    config = broker.config
    core = g.GroupCoordinator(_group_config(config), member_id_nonce=secrets.token_hex(4))

    def append(partition: int, batch: bytes) -> int | None:
        """Append with acks=all (Kafka's coordinator writes); the offset the high
        watermark must reach before the write counts as committed, or None if it does."""
        driver = broker.partitions.get((OFFSETS_TOPIC, partition))
        if driver is None:
            raise CoordinatorWriteError(f"{OFFSETS_TOPIC}-{partition} does not exist")
        result = driver.append_records_as_leader(batch, -1, _record_count(batch), broker.now_ms())
        if result.error_code != 0:
            raise CoordinatorWriteError(f"append to {OFFSETS_TOPIC}-{partition} failed: {result.error_code}")
        return result.required_offset

    async def wait_committed(partition: int, required_offset: int, timeout_ms: int) -> bool:
        key = (OFFSETS_TOPIC, partition)

        def check(key_, offset: int) -> int | None:
            driver = broker.partitions.get(key_)
            return 6 if driver is None else driver.check_produce_completion(offset)  # NOT_LEADER_OR_FOLLOWER

        op = DelayedProduce({key: ProducePartitionStatus(required_offset)}, check)
        await wait_for(broker.produce_purgatory, op, timeout_ms)
        return op.partitions[key].error_code == 0

    def trace(event) -> None:
        if broker.trace_sink.enabled:
            broker.trace_sink.emit(event)

    coordinator = GroupCoordinatorDriver(
        core,
        now_ms=broker.now_ms,
        append=append,
        wait_committed=wait_committed,
        start_soon=broker.start_soon,
        trace=trace,
        commit_timeout_ms=config.offsets_commit_timeout_ms,
    )
    expiration_ms = config.producer_id_expiration_ms
    broker.attach_group_area(GroupArea(
        coordinator,
        lambda path, partition, topic: ProducerStateManager(path, producer_id_expiration_ms=expiration_ms),
    ))
    broker.on_partition_role.append(lambda topic, p, role, epoch: _on_partition_role(broker, topic, p, role, epoch))
    broker.on_serving.append(lambda: _start(broker))
    broker.on_topic_deleted.append(_forget_offsets)


def _forget_offsets(broker, topic: str) -> None:
    """DeleteTopics: the group coordinator drops the topic's committed offsets."""
    if topic != OFFSETS_TOPIC:
        broker.group_coordinator.step(g.TopicsDeleted((topic,)))


def _record_count(batch: bytes) -> int:
    from kref.records.header import read_header

    return read_header(batch).records_count


def _start(broker) -> None:
    """The nursery runs: load the partitions this broker came up leading."""
    area: GroupArea = broker.group_area
    for p, leader_epoch in sorted(area.offsets_loads_waiting.items()):
        _schedule_load(broker, p, leader_epoch)
    area.offsets_loads_waiting.clear()
    broker.start_soon(broker.group_coordinator.run_timers)
    broker.start_soon(_expire_producers, broker)


def _on_partition_role(broker, topic: str, p: int, role: str, leader_epoch: int) -> None:
    """The coordinator of a group is the leader of its __consumer_offsets partition.

    Becoming leader (a new leader epoch) loads the partition's groups from the
    log; leaving leadership unloads them (Kafka's onElection / onResignation),
    so members move to the new leader, which has the replicated records."""
    if topic != OFFSETS_TOPIC:
        return
    area: GroupArea = broker.group_area
    driver = area.coordinator
    before = area.offsets_roles.get(p)
    area.offsets_roles[p] = (role, leader_epoch)
    if role != "leader":
        area.offsets_loads_waiting.pop(p, None)
        if before is not None and before[0] == "leader":
            driver.step(g.Unload(p))
        return
    if before == (role, leader_epoch):
        return  # the same leadership (an isr change re-announces it)
    count = _offsets_partition_count(broker)
    if count:
        driver.core.config = _group_config(broker.config, count)
    # Before any request can arrive: they must see "loading", not "not coordinator".
    driver.step(g.BeginLoad(p, leader_epoch))
    partition = broker.partitions.get((OFFSETS_TOPIC, p))
    if partition is not None and partition.log.log_end_offset <= partition.log.log_start_offset:
        driver.step(g.CompleteLoad(p, (), leader_epoch))  # nothing to read
    elif broker.nursery is None:
        area.offsets_loads_waiting[p] = leader_epoch  # _start loads it
    else:
        _schedule_load(broker, p, leader_epoch)


def _schedule_load(broker, p: int, leader_epoch: int) -> None:
    partition = broker.partitions.get((OFFSETS_TOPIC, p))
    if partition is None:
        log.error("%s-%d has no log; its groups stay unavailable", OFFSETS_TOPIC, p)
        return
    broker.start_soon(_load, broker, p, partition.log, leader_epoch)


async def _load(broker, p: int, partition_log, leader_epoch: int) -> None:
    driver: GroupCoordinatorDriver = broker.group_coordinator
    await driver.load_partition(p, partition_log, leader_epoch)
    log.info("loaded %s-%d (leader epoch %d): %d group(s) in this coordinator",
             OFFSETS_TOPIC, p, leader_epoch, len(driver.core.groups))


def _offsets_partition_count(broker) -> int | None:
    kraft = getattr(broker, "kraft", None)
    if kraft is not None:
        return kraft.partition_count(OFFSETS_TOPIC)
    topic = broker.get_topic(OFFSETS_TOPIC)
    return topic.num_partitions if topic is not None else None


async def _expire_producers(broker) -> None:
    """Forget idle producers (producer.id.expiration.ms) so producer state stays bounded."""
    while True:
        await trio.sleep(PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS / 1000)
        manager = broker.log_manager
        if manager is None:
            continue
        now = broker.now_ms()
        for partition_log in manager.all_logs():
            state = getattr(partition_log, "producer_state", None)
            if state is not None:
                state.remove_expired_producers(now)


def _offsets_topic_configs(config) -> dict[str, str]:
    return {"cleanup.policy": "compact", "segment.bytes": str(config.offsets_topic_segment_bytes),
            "compression.type": "producer"}


def ensure_offsets_topic(broker) -> None:
    """Create `__consumer_offsets` on first use (single broker); its empty
    partitions are led here at once and so loaded at once (_on_partition_role)."""
    if broker.get_topic(OFFSETS_TOPIC) is not None:
        return
    config = broker.config
    driver: GroupCoordinatorDriver = broker.group_coordinator
    driver.core.config = _group_config(config, config.offsets_topic_num_partitions)
    broker.create_topic(
        OFFSETS_TOPIC, config.offsets_topic_num_partitions, 1, _offsets_topic_configs(config), allow_internal=True,
    )


async def _ensure_offsets_topic_in_cluster(broker, kraft) -> str | None:
    """Create `__consumer_offsets` through the active controller with
    offsets.topic.replication.factor replicas (as Kafka's brokers do on the
    first FindCoordinator); None once it exists, else why not."""
    if kraft.has_topic(OFFSETS_TOPIC):
        return None
    from kref.protocol.codec import request_class
    from kref.protocol.messages import nested

    config = broker.config
    cls = request_class(19, 7)  # CreateTopics
    topic_type, config_type = nested(cls, "CreatableTopic"), nested(cls, "CreatableTopicConfig")
    request = cls(
        topics=(topic_type(
            name=OFFSETS_TOPIC, num_partitions=config.offsets_topic_num_partitions,
            replication_factor=config.offsets_topic_replication_factor, assignments=(),
            configs=tuple(config_type(name=k, value=v) for k, v in _offsets_topic_configs(config).items()),
        ),),
        timeout=datetime.timedelta(seconds=15), validate_only=False,
    )
    response = await kraft.create_topics(request)
    if kraft.has_topic(OFFSETS_TOPIC):
        return None
    if response is None:
        return "the controller cannot be reached"
    result = response.topics[0]
    return result.error_message or ErrorCode(result.error_code).name


async def _create_offsets_topic_in_background(broker, kraft) -> None:
    area: GroupArea = broker.group_area
    try:
        area.offsets_creation_failed = await _ensure_offsets_topic_in_cluster(broker, kraft)
    except Exception as exc:  # a background task must not take the broker's nursery down
        log.exception("cannot create %s", OFFSETS_TOPIC)
        area.offsets_creation_failed = f"{type(exc).__name__}: {exc}"
    finally:
        area.offsets_creation_running = False


async def _cluster_coordinator_for(broker, kraft, key: str, listener_name: str):
    if not kraft.has_topic(OFFSETS_TOPIC):
        # As Kafka's brokers do: ask the controller for the topic in the
        # background and answer COORDINATOR_NOT_AVAILABLE at once; every client
        # retries FindCoordinator (with its own backoff) until the topic's
        # partitions have leaders. Waiting here instead held the client's
        # request for up to the CreateTopics timeout (15 s), longer than some
        # clients' socket timeouts.
        area: GroupArea = broker.group_area
        if broker.nursery is None:  # not serving yet: nothing to run the task in
            why = await _ensure_offsets_topic_in_cluster(broker, kraft)
        else:
            why = area.offsets_creation_failed or "being created"
            if not area.offsets_creation_running:
                area.offsets_creation_running = True
                broker.nursery.start_soon(_create_offsets_topic_in_background, broker, kraft)
        if why is not None:
            return g.Errors.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} is not there yet: {why}", -1, "", -1
    count = kraft.partition_count(OFFSETS_TOPIC)
    p = partition_for(key, count)
    partition = kraft.partition(OFFSETS_TOPIC, p)
    leader = partition.leader if partition is not None else -1
    for node_id, host, port, _rack in kraft.brokers(listener_name):
        if node_id == leader:
            return g.Errors.NONE, None, node_id, host, port
    return g.Errors.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC}-{p} has no live leader", -1, "", -1


async def coordinator_for(broker, key: str, key_type: int, listener_name: str = "PLAINTEXT"):
    """(error_code, message, node_id, host, port) answering FindCoordinator for one key."""
    if key_type == TRANSACTION_KEY_TYPE:
        return TRANSACTIONS_REFUSED, NO_TRANSACTIONS_MESSAGE, -1, "", -1
    if key_type != GROUP_KEY_TYPE:
        return 42, f"unknown coordinator key type {key_type}", -1, "", -1  # INVALID_REQUEST
    kraft = getattr(broker, "kraft", None)
    if kraft is not None:
        return await _cluster_coordinator_for(broker, kraft, key, listener_name)
    try:
        ensure_offsets_topic(broker)
    except Exception as exc:
        log.exception("cannot create %s", OFFSETS_TOPIC)
        return g.Errors.COORDINATOR_NOT_AVAILABLE, str(exc), -1, "", -1
    node_id, host, port = brokers_of(broker, listener_name)
    return g.Errors.NONE, None, node_id, host, port


def producer_id_manager(broker) -> ProducerIdManager:
    """The single broker is its own controller: blocks are ProducerIdsRecords in
    its local metadata log (a KRaft node installs a manager that asks the
    active controller instead, kref/node/node.py)."""
    if broker.producer_id_manager is None:
        _migrate_producer_id_file(broker)

        async def reserve() -> tuple[int, int]:
            record = grant_block(broker.metadata.image.next_producer_id, broker.node_id, -1)
            broker.commit_metadata([record])  # durable before the first id is used
            return record.next_producer_id - PRODUCER_ID_BLOCK_SIZE, PRODUCER_ID_BLOCK_SIZE

        broker.use_producer_id_manager(ProducerIdManager(reserve))
    return broker.producer_id_manager


def _migrate_producer_id_file(broker) -> None:
    """kref-producer-ids.json (before KIP-730 records) becomes one record, then goes."""
    directory = broker.config.log_dirs[0]
    fs = getattr(broker.metadata, "fs", None) or RealFileSystem()  # the local metadata source's port
    legacy = read_legacy_file(directory, fs)
    if legacy is None:
        return
    if legacy > broker.metadata.image.next_producer_id:
        broker.commit_metadata([ProducerIdsRecord(broker.node_id, -1, legacy)])
    fs.unlink(os.path.join(directory, LEGACY_STATE_FILE))

"""Wiring of the group coordinator and the idempotent producer into the Broker.

Theory of operation
-------------------
`install(broker)` (called by the group, offsets and init_producer_id handler
modules, idempotent) gives the broker:

- `broker.group_coordinator`: the trio driver around the pure
  GroupCoordinator, configured from the group.* / offsets.* properties;
- `broker.producer_state_factory`: every partition Log gets a
  ProducerStateManager (idempotent-producer checks, .snapshot files), since
  the LogManager is created afterwards in `Broker.open`;
- `broker.producer_id_manager` (lazily, once the log dirs exist);
- an `on_serving` hook that, once the broker's nursery runs, marks every
  existing `__consumer_offsets` partition as loading, loads them in the
  background (requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS) and
  starts the coordinator's timer task;
- an `on_topic_deleted` hook: the coordinator forgets (and tombstones) the
  committed offsets of a deleted topic, as Kafka does.

`__consumer_offsets` is created on the first FindCoordinator for a group,
like Kafka does, as a compacted topic with offsets.topic.num.partitions
partitions; if it already exists its real partition count wins, so groups
keep mapping to the partition that holds their records. Coordinator writes
go through the partition driver (so the high watermark covers them and a
consumer of `__consumer_offsets` sees them) or, without one, the Log.
"""

from __future__ import annotations

import logging
import os
import secrets

import trio

from kref.broker.group_coordinator import GroupCoordinatorDriver
from kref.broker.handlers.metadata import brokers_of
from kref.coordinator import group as g
from kref.coordinator.producer_id import (
    LEGACY_STATE_FILE, PRODUCER_ID_BLOCK_SIZE, ProducerIdManager, grant_block, read_legacy_file,
)
from kref.metadata.records import ProducerIdsRecord
from kref.protocol.errors import ErrorCode
from kref.replication.purgatory import DelayedProduce, ProducePartitionStatus, wait_for
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
    if broker.group_coordinator is not None:
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

    broker.group_coordinator = GroupCoordinatorDriver(
        core,
        now_ms=broker.now_ms,
        append=append,
        wait_committed=wait_committed,
        start_soon=broker.start_soon,
        trace=trace,
        commit_timeout_ms=config.offsets_commit_timeout_ms,
    )
    expiration_ms = config.producer_id_expiration_ms
    broker.producer_state_factory = lambda path, partition, topic: ProducerStateManager(
        path, producer_id_expiration_ms=expiration_ms
    )
    broker.producer_id_manager = None
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
    driver: GroupCoordinatorDriver = broker.group_coordinator
    topic = broker.get_topic(OFFSETS_TOPIC)
    if topic is not None:
        driver.core.config = _group_config(broker.config, topic.num_partitions)
        partitions = list(range(topic.num_partitions))
        for p in partitions:
            # before any request can arrive: they must see "loading", not "not coordinator"
            driver.step(g.BeginLoad(p))
        broker.start_soon(_load_all, broker, partitions)
    broker.start_soon(driver.run_timers)
    broker.start_soon(_expire_producers, broker)


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


async def _load_all(broker, partitions: list[int]) -> None:
    driver: GroupCoordinatorDriver = broker.group_coordinator
    for p in partitions:
        partition = broker.partitions.get((OFFSETS_TOPIC, p))
        partition_log = partition.log if partition is not None else None
        if partition_log is None:
            log.error("%s-%d has no log; its groups stay unavailable", OFFSETS_TOPIC, p)
            continue
        await driver.load_partition(p, partition_log)
    log.info("loaded %d %s partition(s): %d group(s)", len(partitions), OFFSETS_TOPIC, len(driver.core.groups))


def ensure_offsets_topic(broker) -> None:
    """Create `__consumer_offsets` on first use; its (empty) partitions are ours at once."""
    if broker.get_topic(OFFSETS_TOPIC) is not None:
        return
    config = broker.config
    broker.create_topic(
        OFFSETS_TOPIC,
        config.offsets_topic_num_partitions,
        1,
        {"cleanup.policy": "compact", "segment.bytes": str(config.offsets_topic_segment_bytes),
         "compression.type": "producer"},
        allow_internal=True,
    )
    driver: GroupCoordinatorDriver = broker.group_coordinator
    driver.core.config = _group_config(config, config.offsets_topic_num_partitions)
    for p in range(config.offsets_topic_num_partitions):
        driver.step(g.BeginLoad(p))
        driver.step(g.CompleteLoad(p, ()))


async def coordinator_for(broker, key: str, key_type: int, listener_name: str = "PLAINTEXT"):
    """(error_code, message, node_id, host, port) answering FindCoordinator for one key."""
    if key_type == TRANSACTION_KEY_TYPE:
        return TRANSACTIONS_REFUSED, NO_TRANSACTIONS_MESSAGE, -1, "", -1
    if key_type != GROUP_KEY_TYPE:
        return 42, f"unknown coordinator key type {key_type}", -1, "", -1  # INVALID_REQUEST
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
    active controller instead, kref/controller/node.py)."""
    if broker.producer_id_manager is None:
        _migrate_producer_id_file(broker)

        async def reserve() -> tuple[int, int]:
            record = grant_block(broker.metadata.image.next_producer_id, broker.node_id, -1)
            broker.commit_metadata([record])  # durable before the first id is used
            return record.next_producer_id - PRODUCER_ID_BLOCK_SIZE, PRODUCER_ID_BLOCK_SIZE

        broker.producer_id_manager = ProducerIdManager(reserve)
    return broker.producer_id_manager


def _migrate_producer_id_file(broker) -> None:
    """kref-producer-ids.json (before KIP-730 records) becomes one record, then goes."""
    directory = broker.config.log_dirs[0]
    legacy = read_legacy_file(directory)
    if legacy is None:
        return
    if legacy > broker.metadata.image.next_producer_id:
        broker.commit_metadata([ProducerIdsRecord(broker.node_id, -1, legacy)])
    os.unlink(os.path.join(directory, LEGACY_STATE_FILE))

"""The replica manager: metadata deltas in, partition roles and logs out.

Theory of operation
-------------------
Kafka's ReplicaManager.applyDelta is the one place where a broker acts on
metadata: for every partition the delta touches it creates or deletes the
local log and tells the partition its role (BecomeLeader with the image's
leader_epoch, partition_epoch, isr and replicas; BecomeFollower with the
leader's id and the same epochs). The replica manager decides nothing
itself: epochs and roles come from the image (the controller, or the local
source of a single broker, chose them); each Partition's replica core
decides what a role change means for its offsets.

It owns the partitions (one Partition driver per hosted TopicPartition,
keyed (topic, partition)); the Broker exposes them read-only to the
handlers. Log creation for a new topic happens before the records that name
it are committed (`prepare_logs`), so a failure (no descriptors, disk full)
can be undone without ever having written the topic; a crash in between
leaves logs the image does not know, which the next start deletes as stray.

Bounded slices. A delta can name thousands of partitions (a CreateTopics of
10,000, or a node's first publication of the whole image). Kafka applies it
on the metadata publisher's thread while its request threads keep serving;
kref has one trio loop, so the partitions a delta changed go into `pending`
(keyed by partition, so bounded by the image's partition count and coalesced:
a partition changed twice is applied once, from the image as it is when its
turn comes, which is what Kafka does with a delta that spans several
commits) and a drain task applies them in slices of at most
APPLY_SLICE_PARTITIONS partitions or APPLY_SLICE_MS of work, yielding to the
loop between slices: heartbeats, metadata fetches, client requests and
SIGTERM are served while 10,000 logs are created. A small delta (at most a
slice), or one applied with no running loop (start-up, tools), is applied at
once, as before. Until its turn a partition has no local replica and the
handlers answer for it as for any partition this broker does not host
(NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION), as a Kafka broker
does before it has applied the delta.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Callable

import trio

from kref.broker.partition import Partition
from kref.metadata.image import MetadataDelta, MetadataImage, PartitionImage
from kref.storage.config import LogConfig
from kref.storage.log_manager import LogManager
from kref.storage.segment import open_segment_files

__all__ = ["ReplicaManager"]

log = logging.getLogger("kref.replica_manager")

# One slice of a delta: at most this many partitions, or this much wall time
# (a driver's budget, not a decision), before the loop gets a turn.
APPLY_SLICE_PARTITIONS = 50
APPLY_SLICE_MS = 20
# Deferred partition.metadata fsyncs handed to a worker thread at a time.
FLUSH_BATCH = 200


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        log_manager: LogManager,
        make_partition: Callable[..., Partition],
        log_config_of: Callable[[str], LogConfig],
    ) -> None:
        self.node_id = node_id
        self.log_manager = log_manager
        self._make_partition = make_partition
        self._log_config_of = log_config_of
        self.partitions: dict[tuple[str, int], Partition] = {}
        # hook(topic, partition, role, leader_epoch) after each role change;
        # role is "leader", "follower" or "none" (the partition left this broker).
        self.on_partition_role: list[Callable[[str, int, str, int], None]] = []
        # Partitions a delta changed, not applied yet (insertion order; one entry
        # per partition, so at most the image's partition count).
        self.pending: dict[tuple[str, int], None] = {}
        self._image: MetadataImage | None = None
        # Set by the Broker: start a task in its nursery (RuntimeError when it is
        # not running) and its clock; without them every delta is applied at once.
        self.start_soon: Callable[..., None] | None = None
        self.now_ms: Callable[[], int] | None = None
        self._draining = False
        self._flushing = False
        # Set whenever `pending` becomes empty (benches and tests wait on it).
        self.drained = trio.Event()
        self.drained.set()

    # ------------------------------------------------------------ logs before records

    def prepare_logs(self, name: str, topic_id: uuid.UUID, partitions: range, config: LogConfig) -> None:
        """Create the local logs of partitions about to be committed; all or none (raises OSError/StorageError)."""
        created = []
        try:
            for p in partitions:
                self.log_manager.get_or_create_log(name, p, config=config, topic_id=topic_id)
                created.append(p)
            self.log_manager.flush_partition_metadata()  # durable before the records name them
        except BaseException:
            self.drop_logs(name, created)
            raise

    def drop_logs(self, name: str, partitions) -> None:
        with open_segment_files.spares():  # removing a directory takes descriptors
            for p in partitions:
                if self.partitions.pop((name, p), None) is not None:
                    self._tell_role(name, p, "none", -1)
                try:
                    self.log_manager.delete_log(name, p)
                except OSError as exc:
                    log.warning("cannot remove partition %s-%d: %s", name, p, exc)

    # ------------------------------------------------------------ deltas

    def apply_delta(self, delta: MetadataDelta, image: MetadataImage, now_ms: int) -> None:
        self._image = image
        for name, topic in delta.deleted_topics.items():
            for p in topic.partitions:
                self.pending.pop((name, p), None)
            self.drop_logs(name, sorted(topic.partitions))
        for key in sorted(delta.changed_partitions):
            self.pending[key] = None
        for resource_type, resource_name in delta.changed_configs:
            topic = image.topic(resource_name)
            if topic is None:
                continue
            config = self._log_config_of(resource_name)
            for p in topic.partitions:
                part = self.partitions.get((resource_name, p))
                if part is not None:
                    part.log.config = config
        if not self.pending:
            return
        if self._draining:
            return  # the running drain takes them in turn
        if len(self.pending) > APPLY_SLICE_PARTITIONS and self._start_drain():
            return
        self._apply_pending(now_ms, limit=None)

    def _start_drain(self) -> bool:
        if self.start_soon is None or self.now_ms is None:
            return False
        try:
            self.start_soon(self._drain)
        except RuntimeError:  # the broker's nursery is not running (start-up)
            return False
        self._draining = True
        self.drained = trio.Event()
        return True

    async def _drain(self) -> None:
        total, started = len(self.pending), time.monotonic()
        log.info("node %d: applying a metadata delta of %d partition(s) in slices", self.node_id, total)
        try:
            while self.pending:
                await trio.sleep(0)  # a checkpoint: signals, heartbeats and requests run between slices
                await self._lay_out_next_slice()
                self._apply_pending(self.now_ms(), limit=APPLY_SLICE_PARTITIONS, budget_ms=APPLY_SLICE_MS)
                self._start_flusher()
        finally:
            self._draining = False
            if not self.pending:
                self.drained.set()
        log.info("node %d: metadata delta applied (%d partition(s) in %.1f s)",
                 self.node_id, total, time.monotonic() - started)

    async def _lay_out_next_slice(self) -> None:
        """The disk work of the next slice's new logs (creating their files) in a
        worker thread, so that the loop only opens them: on a busy disk a file
        creation costs milliseconds, and a loop that waits for it serves nothing."""
        image, manager, new_logs = self._image, self.log_manager, []
        for name, p in list(itertools.islice(self.pending, APPLY_SLICE_PARTITIONS)):
            topic = image.topic(name)
            after = topic.partitions.get(p) if topic is not None else None
            if after is None or self.node_id not in after.replicas or (name, p) in self.partitions:
                continue
            path = manager.plan_new_log(name, p)
            if path is not None:
                new_logs.append((path, topic.topic_id))
        if new_logs:
            # Abandoned on cancel (SIGTERM): what it lays out is an empty log's files,
            # which the next start loads (or deletes as stray) like any other.
            await trio.to_thread.run_sync(manager.lay_out_new_logs, new_logs, abandon_on_cancel=True)

    def _start_flusher(self) -> None:
        if self._flushing or not self.log_manager.unflushed_partition_metadata:
            return
        try:
            self.start_soon(self._flush_partition_metadata)
        except RuntimeError:
            return
        self._flushing = True

    async def _flush_partition_metadata(self) -> None:
        """The deferred partition.metadata fsyncs (Kafka's flush-metadata-file task):
        its own task, in a worker thread, so creation never waits for the disk's
        fsyncs; batches of FLUSH_BATCH until none is left."""
        manager = self.log_manager
        try:
            while manager.unflushed_partition_metadata:
                batch = manager.take_unflushed_partition_metadata(FLUSH_BATCH)
                await trio.to_thread.run_sync(manager.fsync_partition_metadata, batch, abandon_on_cancel=True)
        finally:
            self._flushing = False

    def _apply_pending(self, now_ms: int, limit: int | None, budget_ms: float | None = None) -> None:
        image = self._image
        deadline = time.monotonic() + budget_ms / 1000 if budget_ms is not None else None
        done = 0
        while self.pending and (limit is None or done < limit):
            key = next(iter(self.pending))
            del self.pending[key]
            self._apply_key(key, image, now_ms)
            done += 1
            if deadline is not None and time.monotonic() >= deadline:
                break
        if limit is None:
            self.log_manager.flush_partition_metadata()
        if not self.pending:
            self.drained.set()

    def _apply_key(self, key: tuple[str, int], image: MetadataImage, now_ms: int) -> None:
        name, p = key
        topic = image.topic(name)
        after = topic.partitions.get(p) if topic is not None else None
        if after is None or self.node_id not in after.replicas:
            self.log_manager.forget_planned(name, p)
            if after is not None:
                self.drop_logs(name, [p])
            return  # (a deleted topic's logs were dropped with it)
        self._apply_partition(name, p, topic.topic_id, after, now_ms)

    def _apply_partition(self, name: str, p: int, topic_id: uuid.UUID, after: PartitionImage, now_ms: int) -> None:
        part = self.partitions.get((name, p))
        if part is None:
            log_ = self.log_manager.get_or_create_log(name, p, config=self._log_config_of(name), topic_id=topic_id)
            part = self._make_partition(log_)
            self.partitions[(name, p)] = part
        if after.leader == self.node_id:
            part.become_leader(
                now_ms,
                leader_epoch=after.leader_epoch,
                partition_epoch=after.partition_epoch,
                isr=after.isr,
                replicas=after.replicas,
            )
            self._tell_role(name, p, "leader", after.leader_epoch)
        else:
            part.become_follower(
                now_ms,
                leader_id=after.leader,
                leader_epoch=after.leader_epoch,
                partition_epoch=after.partition_epoch,
                isr=after.isr,
                replicas=after.replicas,
            )
            self._tell_role(name, p, "follower", after.leader_epoch)

    def _tell_role(self, name: str, p: int, role: str, leader_epoch: int) -> None:
        for hook in self.on_partition_role:
            hook(name, p, role, leader_epoch)

    # ------------------------------------------------------------ periodic

    def tick(self, now_ms: int) -> None:
        """Kafka's isr-expiration task: every partition's core checks for lagging followers."""
        for part in list(self.partitions.values()):
            part.tick(now_ms)

    def report_log_start_offsets(self, now_ms: int) -> None:
        """After a retention pass: each core hears where its log now starts."""
        for part in list(self.partitions.values()):
            part.report_log_start_offset(now_ms)

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

Deletion is sliced the same way (Kafka's asyncDelete). A deleted topic's
partitions leave `partitions` at once (an in-memory step: from then on the
handlers answer for them as for any partition not hosted here) and go into
`pending_deletions` (one entry per partition, bounded likewise); the drain
task retires them first, a slice at a time: close the log and rename its
directory `-delete` (`LogManager.retire_log`). The renamed directories are
removed by their own task in a worker thread, FLUSH_BATCH at a time, and the
offset checkpoints are written once when the slices are done, not once per
log. A partition whose deletion is pending is retired before it is created
again (a topic deleted and re-created under the same name never reopens the
old files). A node stopped or killed in between leaves logs the image no
longer names (stray, deleted at the next start) or `-delete` directories
(removed at the next start).

A log dir that fails (an OSError creating a log: disk full, no permission,
the directory gone) is taken offline (KIP-112, `LogManager.mark_offline`)
instead of the error ending the node: the partitions whose logs lived there
leave `partitions` (their replicas are offline on this broker), later
partitions go to the dirs still online, and a partition that cannot be
created anywhere stays unhosted (answered as any partition not hosted
here) and is logged. What Kafka does next, reporting the dir in
BrokerHeartbeat (KIP-858) so that the controller moves leadership away,
is not done yet: the controller learns of it only if the broker is fenced.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Callable

import trio

from kref.broker.loop_steps import StepBudget
from kref.broker.partition import Partition
from kref.metadata.image import MetadataDelta, MetadataImage, PartitionImage
from kref.storage.config import LogConfig
from kref.storage.errors import KafkaStorageError
from kref.storage.log_manager import LogDirFailure, LogManager
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
        # Partitions of deleted topics whose logs are still to be retired (same bound).
        self.pending_deletions: dict[tuple[str, int], None] = {}
        # Retired (-delete) directories not removed yet: at most the retired logs.
        self.retired: list[str] = []
        self._removing = False
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
        """Delete these partitions' logs now (a few: a failed creation, replicas moved away)."""
        for p in partitions:
            self._stop_partition(name, p)
        retired = [path for p in partitions if (path := self._retire(name, p)) is not None]
        if retired:
            with open_segment_files.spares():  # removing a directory takes descriptors
                self.log_manager.remove_retired(retired)
            self.log_manager.checkpoint()

    def _stop_partition(self, name: str, p: int) -> None:
        part = self.partitions.pop((name, p), None)
        if part is not None:
            # Kafka's stopPartitions completes the partition's delayed produces and
            # fetches: an acks=all produce parked on a leader that a reassignment
            # (or a deletion) removes answers NOT_LEADER_OR_FOLLOWER now, so the
            # client retries at the new leader instead of waiting out its timeout.
            part.produce_purgatory.check_and_complete(part.key)
            part.fetch_purgatory.check_and_complete(part.key)
            self._tell_role(name, p, "none", -1)

    def _retire(self, name: str, p: int) -> str | None:
        self.pending_deletions.pop((name, p), None)
        try:
            return self.log_manager.retire_log(name, p)
        except OSError as exc:
            log.warning("cannot remove partition %s-%d: %s", name, p, exc)
            return None

    # ------------------------------------------------------------ deltas

    def apply_delta(self, delta: MetadataDelta, image: MetadataImage, now_ms: int) -> None:
        self._image = image
        for name, topic in delta.deleted_topics.items():
            for p in sorted(topic.partitions):
                self.pending.pop((name, p), None)
                self._stop_partition(name, p)
                self.pending_deletions[(name, p)] = None
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
        if not self.pending and not self.pending_deletions:
            return
        if self._draining:
            return  # the running drain takes them in turn
        if len(self.pending) + len(self.pending_deletions) > APPLY_SLICE_PARTITIONS and self._start_drain():
            return
        if self.pending_deletions:
            self.drop_logs_pending()
        self._apply_pending(now_ms, limit=None)

    def drop_logs_pending(self) -> None:
        """Every pending deletion now (a small delta, or no running loop)."""
        for name, p in list(self.pending_deletions):
            self.drop_logs(name, [p])

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
        total, started = len(self.pending) + len(self.pending_deletions), time.monotonic()
        log.info("node %d: applying a metadata delta of %d partition(s) in slices", self.node_id, total)
        try:
            while self.pending or self.pending_deletions:
                await trio.sleep(0)  # a checkpoint: signals, heartbeats and requests run between slices
                if self.pending_deletions:
                    self._retire_slice(APPLY_SLICE_PARTITIONS, APPLY_SLICE_MS)
                    if not self.pending_deletions:
                        self.log_manager.checkpoint()  # once, without every retired log
                    continue
                await self._lay_out_next_slice()
                # No await inside a slice: only its new leaders' epoch checkpoints defer their
                # fsync to the flusher started right after (LogManager._defer_epoch_sync).
                self.log_manager.deferring_epoch_syncs = True
                try:
                    self._apply_pending(self.now_ms(), limit=APPLY_SLICE_PARTITIONS, budget_ms=APPLY_SLICE_MS)
                finally:
                    self.log_manager.deferring_epoch_syncs = False
                self._start_flusher()
        finally:
            self._draining = False
            if not self.pending and not self.pending_deletions:
                self.drained.set()
        log.info("node %d: metadata delta applied (%d partition(s) in %.1f s)",
                 self.node_id, total, time.monotonic() - started)

    def _retire_slice(self, limit: int, budget_ms: float) -> None:
        deadline = time.monotonic() + budget_ms / 1000
        for name, p in list(itertools.islice(self.pending_deletions, limit)):
            path = self._retire(name, p)
            if path is not None:
                self.retired.append(path)
            if time.monotonic() >= deadline:
                break
        self._start_remover()

    def _start_remover(self) -> None:
        if self._removing or not self.retired:
            return
        try:
            self.start_soon(self._remove_retired)
        except RuntimeError:
            return  # no running loop: the next start removes -delete directories
        self._removing = True

    async def _remove_retired(self) -> None:
        """Retired directories removed in a worker thread, FLUSH_BATCH at a time (its own task,
        so retiring never waits for the disk)."""
        try:
            while self.retired:
                batch, self.retired = self.retired[:FLUSH_BATCH], self.retired[FLUSH_BATCH:]
                await trio.to_thread.run_sync(self.log_manager.remove_retired, batch, abandon_on_cancel=True)
        finally:
            self._removing = False

    async def _lay_out_next_slice(self) -> None:
        """The disk work of the next slice's new logs (creating their files) in a
        worker thread, so that the loop only opens them: on a busy disk a file
        creation costs milliseconds, and a loop that waits for it serves nothing."""
        image, manager, new_logs = self._image, self.log_manager, []
        for name, p in list(itertools.islice(self.pending, APPLY_SLICE_PARTITIONS)):
            topic = image.topic(name)
            after = topic.partitions.get(p) if topic is not None else None
            if (after is None or self.node_id not in after.replicas or (name, p) in self.partitions
                    or (name, p) in self.pending_deletions):
                continue  # (a pending deletion is retired first, then the log created on the loop)
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
        if not self.pending and not self.pending_deletions:
            self.drained.set()

    def _apply_key(self, key: tuple[str, int], image: MetadataImage, now_ms: int) -> None:
        name, p = key
        if key in self.pending_deletions:
            self.drop_logs(name, [p])  # the deleted topic's old log goes before the new one
        topic = image.topic(name)
        after = topic.partitions.get(p) if topic is not None else None
        if after is None or self.node_id not in after.replicas:
            self.log_manager.forget_planned(name, p)
            if after is not None:
                # A reassignment removed this replica (KIP-455): stopped (traced as the spec's
                # StopReplica), then its log deleted.
                part = self.partitions.get(key)
                if part is not None:
                    part.stop_replica(now_ms, leader_epoch=after.leader_epoch, partition_epoch=after.partition_epoch)
                self.drop_logs(name, [p])
            return  # (a deleted topic's logs were dropped with it)
        try:
            self._apply_partition(name, p, topic.topic_id, after, now_ms)
        except LogDirFailure as exc:
            self.log_dir_failed(exc.log_dir, str(exc))
            self._retry_elsewhere(key, now_ms)
        except KafkaStorageError as exc:  # every log dir is offline
            log.error("node %d: partition %s-%d not hosted: %s", self.node_id, name, p, exc)

    def _retry_elsewhere(self, key: tuple[str, int], now_ms: int) -> None:
        """Once more, in a log dir still online (the failed one is offline now)."""
        try:
            self._apply_key_once(key, now_ms)
        except (LogDirFailure, KafkaStorageError) as exc:
            if isinstance(exc, LogDirFailure):
                self.log_dir_failed(exc.log_dir, str(exc))
            log.error("node %d: partition %s-%d not hosted: %s", self.node_id, key[0], key[1], exc)

    def _apply_key_once(self, key: tuple[str, int], now_ms: int) -> None:
        topic = self._image.topic(key[0]) if self._image is not None else None
        after = topic.partitions.get(key[1]) if topic is not None else None
        if after is not None and self.node_id in after.replicas:
            self._apply_partition(key[0], key[1], topic.topic_id, after, now_ms)

    def log_dir_failed(self, log_dir: str, reason: str) -> None:
        """KIP-112: the dir goes offline; the replicas whose logs lived there go offline here."""
        already = log_dir in self.log_manager.offline_dirs
        keys = self.log_manager.mark_offline(log_dir, reason)
        for name, p in keys:
            self._stop_partition(name, p)
        if not already:
            log.error("node %d: log dir %s is offline (KIP-112): %s; %d replica(s) on it are offline here",
                      self.node_id, log_dir, reason, len(keys))

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

    async def tick_in_slices(self, now_ms: Callable[[], int]) -> None:
        """`tick` a slice at a time (kref/broker/loop_steps.py): every hosted partition
        once, the loop given back between slices, the clock read again after each."""
        budget, now = StepBudget(), now_ms()
        for key, part in list(self.partitions.items()):
            if await budget.spend():
                now = now_ms()
                if self.partitions.get(key) is not part:
                    continue  # deleted or replaced meanwhile
            part.tick(now)

    def report_log_start_offsets(self, now_ms: int) -> None:
        """After a retention pass: each core hears where its log now starts."""
        for part in list(self.partitions.values()):
            part.report_log_start_offset(now_ms)

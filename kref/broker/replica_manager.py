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
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from kref.broker.partition import Partition
from kref.metadata.image import MetadataDelta, MetadataImage, PartitionImage
from kref.storage.config import LogConfig
from kref.storage.log_manager import LogManager
from kref.storage.segment import open_segment_files

__all__ = ["ReplicaManager"]

log = logging.getLogger("kref.replica_manager")


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

    # ------------------------------------------------------------ logs before records

    def prepare_logs(self, name: str, topic_id: uuid.UUID, partitions: range, config: LogConfig) -> None:
        """Create the local logs of partitions about to be committed; all or none (raises OSError/StorageError)."""
        created = []
        try:
            for p in partitions:
                self.log_manager.get_or_create_log(name, p, config=config, topic_id=topic_id)
                created.append(p)
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
        for name, topic in delta.deleted_topics.items():
            self.drop_logs(name, sorted(topic.partitions))
        for (name, p), (_, after) in sorted(delta.changed_partitions.items()):
            topic = image.topic(name)
            if topic is None:
                continue
            if self.node_id not in after.replicas:
                self.drop_logs(name, [p])
                continue
            self._apply_partition(name, p, topic.topic_id, after, now_ms)
        for resource_type, resource_name in delta.changed_configs:
            topic = image.topic(resource_name)
            if topic is None:
                continue
            config = self._log_config_of(resource_name)
            for p in topic.partitions:
                part = self.partitions.get((resource_name, p))
                if part is not None:
                    part.log.config = config

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

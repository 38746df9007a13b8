"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, deleted topics,
loading `__consumer_offsets`, and offset retention.

Theory of operation. Every change to the offsets cache (and every group a
load brings back) goes through one function, `_replay(key, value)`, which
applies one `__consumer_offsets` record: an offset commit sets an offset, its
tombstone removes it, a group metadata record rebuilds a loaded group, its
tombstone removes a group left with no member and no offset. The same replay
runs for a record the coordinator wrote, once the driver reports the write
committed (WriteCommitted: the records are below the partition's high
watermark), and for every record of a partition being loaded. So what the
coordinator serves is always what the log holds and a later load rebuilds:
an OffsetCommit is answered only after its write is committed (with
replication that is when the followers have it; an answer after a mere local
append would lose acknowledged commits when a leader fails over).

OffsetDelete and deleted topics make the cache forget at once, as Kafka
does (the offsets are wrong whatever the write's outcome); their tombstones
replay as no-ops. These are methods of the GroupCoordinator (group.py).
"""

from __future__ import annotations

from kref.coordinator import offsets_format as fmt
from kref.coordinator.group_events import (
    BeginLoad,
    CompleteLoad,
    Errors,
    FetchedOffset,
    OffsetCommit,
    OffsetCommitResult,
    OffsetDelete,
    OffsetDeleteResult,
    OffsetFetch,
    OffsetFetchResult,
    JoinResult,
    SyncResult,
    TopicsDeleted,
    Unload,
)
from kref.coordinator.group_model import (
    KEY_RETENTION,
    AnswerOffsetCommit,
    AnswerOffsetDelete,
    Group,
    GroupState,
    Member,
    NoFollowUp,
    OffsetAndMetadata,
    subscribed_topics,
)


class Offsets:
    """The offsets half of GroupCoordinator (a mixin: state lives there)."""

    # --- OffsetCommit / OffsetFetch -------------------------------------------------

    def _on_offset_commit(self, ev: OffsetCommit) -> None:
        def reply_all(error: Errors) -> None:
            self._respond(ev.request_id, OffsetCommitResult(tuple((p.topic, p.partition, error) for p in ev.partitions)))

        if (error := self._coordinator_error(ev.group_id)) is not None:
            return reply_all(error)
        group = self.groups.get(ev.group_id)
        if group is None:
            if ev.generation_id >= 0:
                # a member of a generation this coordinator never saw
                return reply_all(Errors.ILLEGAL_GENERATION)
            # standalone consumers (assign(), not subscribe()) only store offsets here
            group = self.groups[ev.group_id] = Group(ev.group_id, current_state_timestamp=self._now)
        elif group.state is GroupState.DEAD:
            return reply_all(Errors.COORDINATOR_NOT_AVAILABLE)
        elif group.is_static_member_fenced(ev.member_id, ev.group_instance_id):
            return reply_all(Errors.FENCED_INSTANCE_ID)
        elif ev.generation_id < 0 and group.state is GroupState.EMPTY:
            pass
        elif group.state is GroupState.COMPLETING_REBALANCE:
            return reply_all(Errors.REBALANCE_IN_PROGRESS)
        elif ev.member_id not in group.members:
            return reply_all(Errors.UNKNOWN_MEMBER_ID)
        elif ev.generation_id != group.generation_id:
            return reply_all(Errors.ILLEGAL_GENERATION)
        else:
            self._schedule_heartbeat(group, group.members[ev.member_id])
        self._commit_offsets(group, ev)

    def _commit_offsets(self, group: Group, ev: OffsetCommit) -> None:
        records = []
        partitions: list[tuple[str, int, Errors | None]] = []
        for p in ev.partitions:
            metadata = p.metadata or ""
            if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                partitions.append((p.topic, p.partition, Errors.OFFSET_METADATA_TOO_LARGE))
                continue
            partitions.append((p.topic, p.partition, None))
            records.append(
                (
                    fmt.encode_offset_commit_key(group.group_id, p.topic, p.partition),
                    fmt.encode_offset_commit_value(fmt.OffsetCommitValue(p.offset, metadata, self._now, p.leader_epoch)),
                )
            )
        follow_up = AnswerOffsetCommit(ev.request_id, tuple(partitions))
        if not records:
            return self._answer_offset_commit(follow_up, Errors.NONE)
        self._write(group.group_id, records, follow_up)

    def _answer_offset_commit(self, follow_up: AnswerOffsetCommit, error: Errors) -> None:
        self._respond(
            follow_up.request_id,
            OffsetCommitResult(tuple((t, p, error if refused is None else refused) for t, p, refused in follow_up.partitions)),
        )

    def _on_offset_fetch(self, ev: OffsetFetch) -> None:
        if (error := self._coordinator_error(ev.group_id)) is not None:
            return self._respond(ev.request_id, OffsetFetchResult(error))
        group = self.groups.get(ev.group_id)
        offsets = group.offsets if group is not None and group.state is not GroupState.DEAD else {}
        wanted = ev.partitions if ev.partitions is not None else tuple(offsets)
        result = []
        for topic, partition in wanted:
            committed = offsets.get((topic, partition))
            if committed is None:
                result.append(FetchedOffset(topic, partition, -1, -1, ""))
            else:
                result.append(FetchedOffset(topic, partition, committed.offset, committed.leader_epoch, committed.metadata))
        self._respond(ev.request_id, OffsetFetchResult(Errors.NONE, tuple(result)))

    # --- OffsetDelete, deleted topics -----------------------------------------------

    def _on_offset_delete(self, ev: OffsetDelete) -> None:
        # Kafka's handleDeleteOffsets: an Empty group may lose any offset; a
        # live consumer group only those of topics no member subscribes to
        # (GROUP_SUBSCRIBED_TO_TOPIC for the others), because a consumer of a
        # subscribed topic would otherwise restart from auto.offset.reset.
        # A live group whose subscriptions cannot be read is NON_EMPTY_GROUP.
        if (error := self._coordinator_error(ev.group_id)) is not None:
            return self._respond(ev.request_id, OffsetDeleteResult(error))
        group = self.groups.get(ev.group_id)
        if group is None or group.state is GroupState.DEAD:
            return self._respond(ev.request_id, OffsetDeleteResult(Errors.GROUP_ID_NOT_FOUND))
        subscribed: set[str] = set()
        if group.state is not GroupState.EMPTY:
            topics = subscribed_topics(group)
            if topics is None:
                return self._respond(ev.request_id, OffsetDeleteResult(Errors.NON_EMPTY_GROUP))
            subscribed = topics
        results = []
        gone = []
        for topic, partition in ev.partitions:
            if topic in subscribed:
                results.append((topic, partition, Errors.GROUP_SUBSCRIBED_TO_TOPIC))
                continue
            results.append((topic, partition, Errors.NONE))
            if group.offsets.pop((topic, partition), None) is not None:
                gone.append((topic, partition))
        follow_up = AnswerOffsetDelete(ev.request_id, tuple(results))
        if not gone:
            return self._answer_offset_delete(follow_up, Errors.NONE)
        # As in Kafka the cache forgets at once; the tombstones let
        # compaction and the next load forget too, and the answer waits for them.
        tombstones = [(fmt.encode_offset_commit_key(group.group_id, t, p), None) for t, p in gone]
        self._write(group.group_id, tombstones, follow_up)

    def _answer_offset_delete(self, follow_up: AnswerOffsetDelete, error: Errors) -> None:
        if error is not Errors.NONE:
            return self._respond(follow_up.request_id, OffsetDeleteResult(error))
        self._respond(follow_up.request_id, OffsetDeleteResult(Errors.NONE, follow_up.partitions))

    def _on_topics_deleted(self, ev: TopicsDeleted) -> None:
        # Kafka's coordinator drops the offsets of deleted partitions
        # (onPartitionsDeleted). Without this a topic re-created under the same
        # name inherits them, and its consumers start at offsets of the old
        # topic: OFFSET_OUT_OF_RANGE at best, skipped records at worst. As in
        # Kafka the cache forgets them at once and the tombstones are best
        # effort: the offsets are wrong whatever the write's outcome.
        deleted = set(ev.topics)
        for group in self.groups.values():
            gone = [tp for tp in group.offsets if tp[0] in deleted]
            if not gone:
                continue
            for tp in gone:
                del group.offsets[tp]
            if self._coordinator_error(group.group_id) is None:
                tombstones = [(fmt.encode_offset_commit_key(group.group_id, t, p), None) for t, p in gone]
                self._write(group.group_id, tombstones, NoFollowUp())

    # --- the one replay ---------------------------------------------------------------

    def _replay(self, key_bytes: bytes, value_bytes: bytes | None, *, loading: bool = False) -> Group | None:
        """Apply one `__consumer_offsets` record to the cache; returns the group it touched."""
        key, value = fmt.decode_record(key_bytes, value_bytes)
        group = self.groups.get(key.group)
        if isinstance(key, fmt.OffsetCommitKey):
            tp = (key.topic, key.partition)
            if value is None:
                if group is not None:
                    group.offsets.pop(tp, None)
                    if self._forget_if_nothing_left(group):
                        return None
                return group
            if group is None:
                group = self.groups[key.group] = Group(key.group, current_state_timestamp=self._now)
            group.offsets[tp] = OffsetAndMetadata(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp)
            return group
        if value is None:
            # The group is gone (DeleteGroups, retention) unless a member
            # came back while the tombstone was being written.
            if group is not None and not group.members and not group.offsets:
                if group.state is not GroupState.DEAD:
                    self._transition(group, GroupState.DEAD)
                del self.groups[key.group]
            return None
        if not loading:
            return group  # our own write of a live group: the cache is already ahead of it
        loaded = self._group_from_metadata(key.group, value)
        if group is not None:
            loaded.offsets = group.offsets
        self.groups[key.group] = loaded
        return loaded

    def _forget_if_nothing_left(self, group: Group) -> bool:
        """Drop a group that only ever stored offsets and has none left (Kafka's cleanup)."""
        if group.members or group.offsets or group.protocol_type is not None or group.state is not GroupState.EMPTY:
            return False
        self._transition(group, GroupState.DEAD)
        del self.groups[group.group_id]
        return True

    # --- loading __consumer_offsets -------------------------------------------------

    def _on_unload(self, ev: Unload) -> None:
        """Resignation: forget what the partition's log holds; a later leader replays it.

        Requests we still owe an answer are told NOT_COORDINATOR (clients then
        look the coordinator up again); writes not yet committed fail the same
        way, since only the new leader's log decides whether they survived."""
        self.loading.pop(ev.partition, None)
        self.owned.discard(ev.partition)
        for token in [t for t, w in self.pending_writes.items() if w.partition == ev.partition]:
            write = self.pending_writes.pop(token)
            self._follow_up(write.follow_up, Errors.NOT_COORDINATOR)
        gone = {g for g in self.groups if self.partition_for(g) == ev.partition}
        for group_id in sorted(gone):
            group = self.groups.pop(group_id)
            for member in group.members.values():
                if member.awaiting_join is not None:
                    self._respond(member.awaiting_join, JoinResult(Errors.NOT_COORDINATOR, member_id=member.member_id))
                    member.awaiting_join = None
                if member.awaiting_sync is not None:
                    self._respond(member.awaiting_sync, SyncResult(Errors.NOT_COORDINATOR))
                    member.awaiting_sync = None
        for key in [k for k in self.timers if len(k) > 1 and k[1] in gone]:
            self._cancel_timer(key)

    def _on_begin_load(self, ev: BeginLoad) -> None:
        self.loading[ev.partition] = ev.leader_epoch

    def _on_complete_load(self, ev: CompleteLoad) -> None:
        if self.loading.get(ev.partition) != ev.leader_epoch:
            return  # stale: unloaded meanwhile, or loading again for a newer leadership
        touched: dict[str, None] = {}
        for key_bytes, value_bytes in ev.records:
            key, _ = fmt.decode_record(key_bytes, None)
            if self.partition_for(key.group) != ev.partition:
                continue  # not ours (a partition count that changed): never served from here
            touched[key.group] = None
            self._replay(key_bytes, value_bytes, loading=True)
        for group_id in touched:
            group = self.groups.get(group_id)
            if group is None or self._forget_if_nothing_left(group):
                continue
            for member in group.members.values():
                self._schedule_heartbeat(group, member)
        del self.loading[ev.partition]
        self.owned.add(ev.partition)
        if KEY_RETENTION not in self.timers:
            self._set_timer(KEY_RETENTION, self._now + self.config.offsets_retention_check_interval_ms)

    def _group_from_metadata(self, group_id: str, value: fmt.GroupMetadataValue) -> Group:
        group = Group(group_id, current_state_timestamp=self._now)
        if value.current_state_timestamp >= 0:
            group.current_state_timestamp = value.current_state_timestamp
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        for m in value.members:
            group.add_member(
                Member(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout,
                    session_timeout_ms=m.session_timeout,
                    protocol_type=value.protocol_type,
                    protocols=((value.protocol or "", m.subscription),),
                    assignment=m.assignment,
                )
            )
        group.leader_id = value.leader if value.leader in group.members else next(iter(group.members), None)
        # Rebuilt, not moved: a loaded group starts in the state its record implies.
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        return group

    # --- offset retention (KIP-211) ---------------------------------------------------

    def _expire_offsets(self) -> None:
        """Tombstone offsets past offsets.retention.minutes; drop groups left with nothing.

        An Empty consumer group's offsets all expire once the group has been
        empty for the retention time; a group that only stores offsets
        (no protocol type) loses each offset retention after its commit.
        Active groups keep theirs. The cache forgets them when the
        tombstones are committed (replay), the group with its last offset.
        """
        retention = self.config.offsets_retention_ms
        for group in list(self.groups.values()):
            if group.state is not GroupState.EMPTY or self._coordinator_error(group.group_id) is not None:
                continue
            if group.protocol_type is not None:
                # a consumer group: everything goes once it has been empty long enough
                if group.current_state_timestamp + retention > self._now:
                    continue
                expired = list(group.offsets)
            else:
                expired = [tp for tp, o in group.offsets.items() if o.commit_timestamp + retention <= self._now]
                if not expired:
                    continue
            records = [(fmt.encode_offset_commit_key(group.group_id, t, p), None) for t, p in expired]
            if len(expired) == len(group.offsets):
                records.append((fmt.encode_group_metadata_key(group.group_id), None))
            self._write(group.group_id, records, NoFollowUp())

"""The classic consumer group coordinator as a pure state machine.

What: Kafka's "classic" group coordinator (JoinGroup / SyncGroup / Heartbeat /
LeaveGroup, KIP-62 rebalance timeouts, KIP-134 initial rebalance delay,
KIP-345 static membership, KIP-394 MEMBER_ID_REQUIRED, KIP-814 skip
assignment) plus the offset cache behind OffsetCommit / OffsetFetch, for all
groups of one coordinator. Every group moves through Kafka's five states:

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup stored--> Stable
    Stable / CompletingRebalance --join, leave, expiry--> PreparingRebalance
    PreparingRebalance --nobody left--> Empty;   Empty --DeleteGroups--> Dead

How: `GroupCoordinator.step(event, now_ms) -> list[Effect]`. The code is split
along its responsibilities: the vocabulary of events, effects and answers
(group_events.py), the state with its checked transitions and the pending
writes as data (group_model.py), membership and rebalancing
(group_membership.py), committed offsets, loading and the one record replay
(group_offsets.py); this module holds the coordinator itself, the admin
requests and the completion of writes.

Writes. State that Kafka persists changes only once its write is committed:
a `WriteRecords` effect carries the records, and the `PendingWrite` kept
under its token says, as data, what to do when the driver reports
`WriteCommitted` (replay the records into the cache, then answer the
OffsetCommit, finish the SyncGroup, ...) or `WriteFailed` (answer with the
error, undo). The driver sends WriteCommitted when the records are below the
high watermark of their `__consumer_offsets` partition, so once partitions
replicate an acknowledged commit survives a leader change. Every state
transition is checked against Kafka's table and emitted as a trace event
(`Emit`, kref/trace/group_events.py). The core reads no clock and draws no
randomness: member ids come from a counter and a per-process nonce given by
the driver.

Why: one implementation serves the trio broker, the simulator and scripted
interaction tests (tests/coordinator/), which check Kafka's semantics event by
event.
"""

from __future__ import annotations

from collections.abc import Iterable

from kref.coordinator import offsets_format as fmt
from kref.coordinator.group_events import *  # noqa: F401,F403  (the public vocabulary, re-exported)
from kref.coordinator.group_events import (
    BeginLoad,
    CancelTimer,
    CompleteLoad,
    DeleteGroups,
    DeleteResult,
    DescribedGroup,
    DescribedMember,
    DescribeGroups,
    DescribeResult,
    Effect,
    Emit,
    Errors,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    ListGroups,
    ListResult,
    OffsetCommit,
    OffsetDelete,
    OffsetFetch,
    Respond,
    SetTimer,
    SyncGroup,
    TimerExpired,
    TopicsDeleted,
    Unload,
    WriteCommitted,
    WriteFailed,
    WriteRecords,
)
from kref.coordinator.group_membership import Membership
from kref.coordinator.group_model import *  # noqa: F401,F403  (the state types, re-exported)
from kref.coordinator.group_model import (
    KEY_RETENTION,
    AnswerOffsetCommit,
    AnswerOffsetDelete,
    AnswerStaticRejoin,
    DeleteBatch,
    FinishDelete,
    FinishSync,
    FollowUp,
    Group,
    GroupConfig,
    GroupState,
    NoFollowUp,
    PendingWrite,
)
from kref.coordinator.group_offsets import Offsets
from kref.trace.group_events import GroupStateChange, GroupWriteCommitted


class GroupCoordinator(Membership, Offsets):
    """All classic groups of one coordinator and their committed offsets."""

    def __init__(self, config: GroupConfig | None = None, *, member_id_nonce: str = "0") -> None:
        self.config = config or GroupConfig()
        self.groups: dict[str, Group] = {}
        self.timers: dict[tuple, int] = {}
        self.loading: dict[int, int] = {}  # partition -> leader_epoch of its load
        self.owned: set[int] = set()
        self.pending_writes: dict[int, PendingWrite] = {}
        self.delete_batches: dict[int, DeleteBatch] = {}
        self._member_id_nonce = member_id_nonce
        self._member_id_seq = 0
        self._next_token = 0
        self._next_batch = 0
        self._effects: list[Effect] = []
        self._now = 0

    # --- driver interface -----------------------------------------------------

    def step(self, event: object, now_ms: int) -> list[Effect]:
        self._now = now_ms
        self._effects = []
        handler = self._HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"not a group coordinator event: {event!r}")
        getattr(self, handler)(event)
        effects, self._effects = self._effects, []
        return effects

    def next_deadline(self) -> int | None:
        return min(self.timers.values(), default=None)

    def partition_for(self, group_id: str) -> int:
        return fmt.partition_for(group_id, self.config.offsets_topic_num_partitions)

    # --- effect helpers ---------------------------------------------------------

    def _respond(self, request_id: object, response: object) -> None:
        self._effects.append(Respond(request_id, response))

    def _set_timer(self, key: tuple, deadline_ms: int) -> None:
        self.timers[key] = deadline_ms
        self._effects.append(SetTimer(key, deadline_ms))

    def _cancel_timer(self, key: tuple) -> None:
        if self.timers.pop(key, None) is not None:
            self._effects.append(CancelTimer(key))

    def _write(self, group_id: str, records: Iterable[tuple[bytes, bytes | None]], follow_up: FollowUp) -> None:
        self._next_token += 1
        write = PendingWrite(self._next_token, self.partition_for(group_id), tuple(records), follow_up)
        self.pending_writes[write.token] = write
        self._effects.append(WriteRecords(write.partition, write.records, write.token))

    def _transition(self, group: Group, state: GroupState) -> None:
        previous = group.transition_to(state, self._now)
        self._effects.append(
            Emit(
                GroupStateChange(
                    time_ms=self._now,
                    group_id=group.group_id,
                    previous_state=previous.value,
                    state=state.value,
                    generation_id=group.generation_id,
                    members=tuple(sorted(group.members)),
                    leader=group.leader_id or "",
                )
            )
        )

    def _new_member_id(self, prefix: str) -> str:
        self._member_id_seq += 1
        return f"{prefix}-{self._member_id_nonce}-{self._member_id_seq:08x}"

    def _coordinator_error(self, group_id: str) -> Errors | None:
        """Whether this coordinator may serve the group right now."""
        partition = self.partition_for(group_id)
        if partition in self.loading:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.owned:
            return Errors.NOT_COORDINATOR
        return None

    # --- completion of writes ---------------------------------------------------

    def _on_write_committed(self, ev: WriteCommitted) -> None:
        write = self.pending_writes.pop(ev.token, None)
        if write is None:
            return
        for key, value in write.records:
            self._replay(key, value)
        self._effects.append(
            Emit(
                GroupWriteCommitted(
                    time_ms=self._now,
                    group_id=fmt.decode_record(write.records[0][0], None)[0].group if write.records else "",
                    partition=write.partition,
                    records=len(write.records),
                    follow_up=type(write.follow_up).__name__,
                )
            )
        )
        self._follow_up(write.follow_up, Errors.NONE)

    def _on_write_failed(self, ev: WriteFailed) -> None:
        write = self.pending_writes.pop(ev.token, None)
        if write is not None:
            self._follow_up(write.follow_up, ev.error)

    def _follow_up(self, follow_up: FollowUp, error: Errors) -> None:
        if isinstance(follow_up, AnswerOffsetCommit):
            self._answer_offset_commit(follow_up, error)
        elif isinstance(follow_up, AnswerOffsetDelete):
            self._answer_offset_delete(follow_up, error)
        elif isinstance(follow_up, FinishSync):
            self._finish_sync(follow_up, error)
        elif isinstance(follow_up, AnswerStaticRejoin):
            self._answer_static_rejoin(follow_up, error)
        elif isinstance(follow_up, FinishDelete):
            self._finish_delete(follow_up, error)
        elif not isinstance(follow_up, NoFollowUp):
            raise TypeError(f"unknown follow-up {follow_up!r}")

    # --- admin ----------------------------------------------------------------------

    def _on_describe(self, ev: DescribeGroups) -> None:
        out = []
        for group_id in ev.group_ids:
            if (error := self._coordinator_error(group_id)) is not None:
                out.append(DescribedGroup(error, group_id))
                continue
            group = self.groups.get(group_id)
            if group is None:
                out.append(DescribedGroup(Errors.NONE, group_id, GroupState.DEAD.value))
                continue
            stable = group.state is GroupState.STABLE
            members = tuple(
                DescribedMember(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata_for(group.protocol_name) if stable else b"",
                    m.assignment if stable else b"",
                )
                for m in group.members.values()
            )
            out.append(
                DescribedGroup(
                    Errors.NONE,
                    group_id,
                    group.state.value,
                    group.protocol_type or "",
                    (group.protocol_name or "") if stable else "",
                    members,
                )
            )
        self._respond(ev.request_id, DescribeResult(tuple(out)))

    def _on_list(self, ev: ListGroups) -> None:
        if self.loading:
            return self._respond(ev.request_id, ListResult(Errors.COORDINATOR_LOAD_IN_PROGRESS, ()))
        states = {s.lower() for s in ev.states_filter}
        types = {t.lower() for t in ev.types_filter}
        groups = []
        for group in self.groups.values():
            if group.state is GroupState.DEAD:
                continue
            if states and group.state.value.lower() not in states:
                continue
            # classic groups report their protocol type; the types filter is about group types ("classic")
            if types and "classic" not in types:
                continue
            groups.append((group.group_id, group.protocol_type or "", group.state.value))
        self._respond(ev.request_id, ListResult(Errors.NONE, tuple(groups)))

    def _on_delete(self, ev: DeleteGroups) -> None:
        self._next_batch += 1
        batch = DeleteBatch(ev.request_id, ev.group_ids)
        for group_id in ev.group_ids:
            if group_id in batch.results or group_id in batch.waiting:
                continue
            if (error := self._coordinator_error(group_id)) is not None:
                batch.results[group_id] = error
                continue
            group = self.groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                batch.results[group_id] = Errors.GROUP_ID_NOT_FOUND
                continue
            if group.state is not GroupState.EMPTY:
                batch.results[group_id] = Errors.NON_EMPTY_GROUP
                continue
            # tombstones for every offset and the metadata let compaction forget the group
            records = [(fmt.encode_offset_commit_key(group_id, t, p), None) for t, p in group.offsets]
            records.append((fmt.encode_group_metadata_key(group_id), None))
            self._transition(group, GroupState.DEAD)
            batch.waiting.add(group_id)
            self._write(group_id, records, FinishDelete(self._next_batch, group_id))
        if batch.waiting:
            self.delete_batches[self._next_batch] = batch
        else:
            self._respond(batch.request_id, DeleteResult(tuple((g, batch.results[g]) for g in batch.group_ids)))

    def _finish_delete(self, follow_up: FinishDelete, error: Errors) -> None:
        batch = self.delete_batches.get(follow_up.batch)
        if error is not Errors.NONE:
            group = self.groups.get(follow_up.group_id)
            if group is not None and group.state is GroupState.DEAD:
                # the log still holds the group: so must the coordinator
                self._transition(group, GroupState.EMPTY)
        if batch is None:
            return
        batch.results[follow_up.group_id] = error
        batch.waiting.discard(follow_up.group_id)
        if not batch.waiting:
            del self.delete_batches[follow_up.batch]
            self._respond(batch.request_id, DeleteResult(tuple((g, batch.results[g]) for g in batch.group_ids)))

    # --- timers ---------------------------------------------------------------------

    def _on_timer(self, ev: TimerExpired) -> None:
        deadline = self.timers.get(ev.key)
        if deadline is None or deadline > self._now:
            return  # cancelled or pushed back since the driver armed it
        del self.timers[ev.key]
        kind = ev.key[0]
        if kind == "heartbeat":
            self._on_heartbeat_expired(ev.key[1], ev.key[2])
        elif kind == "join":
            self._on_join_timer(ev.key[1])
        elif kind == "sync":
            self._on_sync_timer(ev.key[1])
        elif kind == "offsets_retention":
            self._expire_offsets()
            self._set_timer(KEY_RETENTION, self._now + self.config.offsets_retention_check_interval_ms)

    def expire_due_timers(self, now_ms: int) -> list[Effect]:
        """Step every timer whose deadline has passed, earliest first."""
        effects: list[Effect] = []
        while True:
            due = [(d, k) for k, d in self.timers.items() if d <= now_ms]
            if not due:
                return effects
            _, key = min(due)
            effects.extend(self.step(TimerExpired(key), now_ms))

    # event type -> handler method (in this class or a mixin)
    _HANDLERS: dict[type, str] = {
        JoinGroup: "_on_join",
        SyncGroup: "_on_sync",
        Heartbeat: "_on_heartbeat",
        LeaveGroup: "_on_leave",
        OffsetCommit: "_on_offset_commit",
        OffsetFetch: "_on_offset_fetch",
        DescribeGroups: "_on_describe",
        ListGroups: "_on_list",
        DeleteGroups: "_on_delete",
        OffsetDelete: "_on_offset_delete",
        TopicsDeleted: "_on_topics_deleted",
        TimerExpired: "_on_timer",
        WriteCommitted: "_on_write_committed",
        WriteFailed: "_on_write_failed",
        BeginLoad: "_on_begin_load",
        CompleteLoad: "_on_complete_load",
        Unload: "_on_unload",
    }

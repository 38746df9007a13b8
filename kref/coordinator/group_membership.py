"""Group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the rebalance.

Theory of operation: Kafka's classic rebalance protocol. A join (or a leave,
or a member whose session expired) moves a group to PreparingRebalance;
once every member has rejoined, or the rebalance timeout has passed and the
stragglers are dropped, the next generation starts (CompletingRebalance)
and every member gets its JoinGroup answer, the leader with the members'
subscriptions; the leader's SyncGroup carries the assignment, which is
stored in `__consumer_offsets` and handed out only once that write is
committed (Stable). KIP-62 rebalance timeouts, KIP-134 initial delay,
KIP-345 static members, KIP-394 member ids handed out first, KIP-814 skip
assignment. These are methods of the GroupCoordinator (kref/coordinator/
group.py), which owns the state and the effect helpers they call.
"""

from __future__ import annotations

import dataclasses

from kref.coordinator import offsets_format as fmt
from kref.coordinator.group_events import (
    Errors,
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    JoinMember,
    JoinResult,
    LeaveGroup,
    LeaveResult,
    SyncGroup,
    SyncResult,
)
from kref.coordinator.group_model import (
    AnswerStaticRejoin,
    FinishSync,
    FollowUp,
    Group,
    GroupState,
    Member,
    NoFollowUp,
    key_heartbeat,
    key_join,
    key_sync,
)


class Membership:
    """The membership half of GroupCoordinator (a mixin: state lives there)."""

    # --- heartbeats ---------------------------------------------------------------

    def _schedule_heartbeat(self, group: Group, member: Member, timeout_ms: int | None = None) -> None:
        """A heartbeat arrived (or an equivalent): restart the member's session timer."""
        member.heartbeat_satisfied = True
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        self._set_timer(key_heartbeat(group.group_id, member.member_id), self._now + timeout)
        # the next expiry needs a new heartbeat unless the member is mid-rebalance
        member.heartbeat_satisfied = False

    def _keeps_alive(self, member: Member) -> bool:
        if member.is_new:
            return member.heartbeat_satisfied
        if member.awaiting_join is not None or member.awaiting_sync is not None:
            return True
        return member.heartbeat_satisfied

    def _on_heartbeat_expired(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            if group.state is GroupState.PREPARING_REBALANCE:
                self._try_complete_join(group)
            return
        member = group.members.get(member_id)
        if member is not None and not self._keeps_alive(member):
            self._remove_member_and_update_group(group, member)

    # --- JoinGroup ---------------------------------------------------------------

    def _on_join(self, ev: JoinGroup) -> None:
        def fail(error: Errors, member_id: str = ev.member_id) -> None:
            self._respond(ev.request_id, JoinResult(error, member_id=member_id))

        if not ev.group_id:
            return fail(Errors.INVALID_GROUP_ID)
        if (error := self._coordinator_error(ev.group_id)) is not None:
            return fail(error)
        cfg = self.config
        if not cfg.group_min_session_timeout_ms <= ev.session_timeout_ms <= cfg.group_max_session_timeout_ms:
            return fail(Errors.INVALID_SESSION_TIMEOUT)
        group = self.groups.get(ev.group_id)
        if group is None:
            if ev.member_id:
                return fail(Errors.UNKNOWN_MEMBER_ID)
            group = self.groups[ev.group_id] = Group(ev.group_id, current_state_timestamp=self._now)
        if group.state is GroupState.DEAD:
            # the group was deleted while this request was in flight
            return fail(Errors.COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(ev.protocol_type, ev.protocols):
            return fail(Errors.INCONSISTENT_GROUP_PROTOCOL)
        if not ev.member_id:
            self._join_unknown_member(group, ev)
        else:
            self._join_known_member(group, ev)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    def _join_unknown_member(self, group: Group, ev: JoinGroup) -> None:
        if ev.group_instance_id is not None:
            new_member_id = self._new_member_id(ev.group_instance_id)
            old_member_id = group.static_members.get(ev.group_instance_id)
            if old_member_id is not None:
                return self._replace_static_member(group, ev, old_member_id, new_member_id)
        else:
            new_member_id = self._new_member_id(ev.client_id)
            if ev.require_known_member_id:
                # KIP-394: hand out the id first, so a client that times out
                # and retries does not leave ghost members in the group
                if len(group.members) + len(group.pending_members) >= self.config.group_max_size:
                    return self._respond(ev.request_id, JoinResult(Errors.GROUP_MAX_SIZE_REACHED))
                group.pending_members.add(new_member_id)
                self._set_timer(key_heartbeat(group.group_id, new_member_id), self._now + ev.session_timeout_ms)
                return self._respond(ev.request_id, JoinResult(Errors.MEMBER_ID_REQUIRED, member_id=new_member_id))
        if len(group.members) >= self.config.group_max_size:
            return self._respond(ev.request_id, JoinResult(Errors.GROUP_MAX_SIZE_REACHED))
        self._add_member_and_rebalance(group, ev, new_member_id)

    def _join_known_member(self, group: Group, ev: JoinGroup) -> None:
        if ev.member_id in group.pending_members:
            group.pending_members.discard(ev.member_id)
            self._cancel_timer(key_heartbeat(group.group_id, ev.member_id))
            if len(group.members) >= self.config.group_max_size:
                return self._respond(ev.request_id, JoinResult(Errors.GROUP_MAX_SIZE_REACHED, member_id=ev.member_id))
            return self._add_member_and_rebalance(group, ev, ev.member_id)
        if group.is_static_member_fenced(ev.member_id, ev.group_instance_id):
            return self._respond(ev.request_id, JoinResult(Errors.FENCED_INSTANCE_ID, member_id=ev.member_id))
        member = group.members.get(ev.member_id)
        if member is None or group.state in (GroupState.EMPTY, GroupState.DEAD):
            return self._respond(ev.request_id, JoinResult(Errors.UNKNOWN_MEMBER_ID, member_id=ev.member_id))
        if group.state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, ev)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            if member.protocols == ev.protocols:
                # a retried JoinGroup whose answer was lost: answer it again
                self._respond(ev.request_id, self._join_result(group, member))
            else:
                self._update_member_and_rebalance(group, member, ev)
        else:  # Stable
            if group.is_leader(member.member_id) or member.protocols != ev.protocols:
                # the leader rejoining means it wants a new assignment (e.g. metadata changed)
                self._update_member_and_rebalance(group, member, ev)
            else:
                self._respond(ev.request_id, self._join_result(group, member, include_members=False))

    def _join_result(self, group: Group, member: Member, *, include_members: bool | None = None) -> JoinResult:
        leader = group.is_leader(member.member_id)
        if include_members is None:
            include_members = leader
        members = ()
        if include_members:
            members = tuple(
                JoinMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                for m in group.members.values()
            )
        return JoinResult(
            Errors.NONE,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            members=members,
        )

    def _answer_join(self, member: Member, result: JoinResult) -> None:
        if member.awaiting_join is not None:
            self._respond(member.awaiting_join, result)
            member.awaiting_join = None
            member.is_new = False

    def _answer_sync(self, member: Member, result: SyncResult) -> None:
        if member.awaiting_sync is not None:
            self._respond(member.awaiting_sync, result)
            member.awaiting_sync = None

    def _add_member_and_rebalance(self, group: Group, ev: JoinGroup, member_id: str) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=ev.group_instance_id,
            client_id=ev.client_id,
            client_host=ev.client_host,
            rebalance_timeout_ms=ev.rebalance_timeout_ms if ev.rebalance_timeout_ms >= 0 else ev.session_timeout_ms,
            session_timeout_ms=ev.session_timeout_ms,
            protocol_type=ev.protocol_type,
            protocols=ev.protocols,
            awaiting_join=ev.request_id,
            is_new=True,
        )
        if group.state is GroupState.PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True
        group.add_member(member)
        # a new member that never finishes joining is dropped after the new-member timeout
        self._schedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group)

    def _update_member_and_rebalance(self, group: Group, member: Member, ev: JoinGroup) -> None:
        if member.awaiting_join is not None and member.awaiting_join != ev.request_id:
            # the member retried: the newer request supersedes the one we still hold
            self._respond(member.awaiting_join, JoinResult(Errors.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        member.protocols = ev.protocols
        member.rebalance_timeout_ms = ev.rebalance_timeout_ms if ev.rebalance_timeout_ms >= 0 else ev.session_timeout_ms
        member.session_timeout_ms = ev.session_timeout_ms
        member.awaiting_join = ev.request_id
        self._maybe_prepare_rebalance(group)

    def _replace_static_member(self, group: Group, ev: JoinGroup, old_member_id: str, new_member_id: str) -> None:
        """KIP-345: a static member restarted; it takes over its old identity under a new member id."""
        old = group.members[old_member_id]
        self._answer_join(old, JoinResult(Errors.FENCED_INSTANCE_ID, member_id=old_member_id))
        self._answer_sync(old, SyncResult(Errors.FENCED_INSTANCE_ID))
        self._cancel_timer(key_heartbeat(group.group_id, old_member_id))
        was_leader = group.is_leader(old_member_id)
        del group.members[old_member_id]
        group.pending_sync_members.discard(old_member_id)
        old.member_id = new_member_id
        old.protocols = ev.protocols
        old.rebalance_timeout_ms = ev.rebalance_timeout_ms if ev.rebalance_timeout_ms >= 0 else ev.session_timeout_ms
        old.session_timeout_ms = ev.session_timeout_ms
        old.client_id, old.client_host = ev.client_id, ev.client_host
        group.members[new_member_id] = old
        group.static_members[ev.group_instance_id] = new_member_id
        if was_leader:
            group.leader_id = new_member_id
        member = old

        if group.state is GroupState.STABLE:
            if group.select_protocol() == group.protocol_name:
                # nothing the assignment depends on changed: persist the new
                # member id and hand back the current generation, no rebalance
                self._schedule_heartbeat(group, member)
                self._store_group(group, AnswerStaticRejoin(group.group_id, ev.request_id, new_member_id, was_leader))
                return
            member.awaiting_join = ev.request_id
            self._prepare_rebalance(group)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            member.awaiting_join = ev.request_id
            self._prepare_rebalance(group)
        else:  # PreparingRebalance: wait for the join to complete like everyone else
            member.awaiting_join = ev.request_id
            self._schedule_heartbeat(group, member)

    # --- rebalance ---------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: Group) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(group, Errors.REBALANCE_IN_PROGRESS)
        group.pending_sync_members.clear()
        self._cancel_timer(key_sync(group.group_id))
        rebalance_timeout = group.rebalance_timeout_ms
        if group.state is GroupState.EMPTY:
            # KIP-134: wait a little for more members before the first generation
            delay = min(self.config.group_initial_rebalance_delay_ms, rebalance_timeout)
            group.initial_join_remaining_ms = max(rebalance_timeout - self.config.group_initial_rebalance_delay_ms, 0)
            group.new_member_added = False
            self._set_timer(key_join(group.group_id), self._now + delay)
        else:
            group.initial_join_remaining_ms = None
            self._set_timer(key_join(group.group_id), self._now + rebalance_timeout)
        self._transition(group, GroupState.PREPARING_REBALANCE)

    def _try_complete_join(self, group: Group) -> None:
        # an initial delayed join waits out its delay even when everyone is in
        if group.initial_join_remaining_ms is None and group.has_all_members_joined():
            self._cancel_timer(key_join(group.group_id))
            self._complete_join(group)

    def _on_join_timer(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.state is not GroupState.PREPARING_REBALANCE:
            return
        remaining = group.initial_join_remaining_ms
        if remaining is not None and group.new_member_added and remaining > 0:
            # KIP-134: another member arrived during the delay; extend it, within the rebalance timeout
            delay = min(self.config.group_initial_rebalance_delay_ms, remaining)
            group.initial_join_remaining_ms = max(remaining - self.config.group_initial_rebalance_delay_ms, 0)
            group.new_member_added = False
            self._set_timer(key_join(group_id), self._now + delay)
            return
        group.initial_join_remaining_ms = None
        self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        # dynamic members that did not rejoin in time are out; static ones keep their place (KIP-345)
        for member in [m for m in group.members.values() if m.awaiting_join is None and m.group_instance_id is None]:
            self._cancel_timer(key_heartbeat(group.group_id, member.member_id))
            group.remove_member(member.member_id)
        if group.state is GroupState.DEAD:
            return
        if group.members and not self._elect_joined_leader(group):
            # nobody rejoined: keep waiting until session expiry clears the stragglers
            self._set_timer(key_join(group.group_id), self._now + group.rebalance_timeout_ms)
            return
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            self._transition(group, GroupState.EMPTY)
            self._store_group(group, NoFollowUp())
            return
        group.protocol_name = group.select_protocol()
        self._transition(group, GroupState.COMPLETING_REBALANCE)
        for member in group.members.values():
            self._answer_join(member, self._join_result(group, member))
            self._schedule_heartbeat(group, member)
        # members that never send SyncGroup must not stall the group forever
        group.pending_sync_members = set(group.members)
        self._set_timer(key_sync(group.group_id), self._now + group.rebalance_timeout_ms)

    def _elect_joined_leader(self, group: Group) -> bool:
        leader = group.members.get(group.leader_id) if group.leader_id is not None else None
        if leader is not None and leader.awaiting_join is not None:
            return True
        for member in group.members.values():
            if member.awaiting_join is not None:
                group.leader_id = member.member_id
                return True
        return False

    def _on_sync_timer(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        if not group.pending_sync_members:
            return
        for member_id in list(group.pending_sync_members):
            member = group.members.get(member_id)
            if member is not None:
                self._cancel_timer(key_heartbeat(group_id, member_id))
                group.remove_member(member_id)
        group.pending_sync_members.clear()
        self._prepare_rebalance(group)
        self._try_complete_join(group)

    def _reset_and_propagate_assignment_error(self, group: Group, error: Errors) -> None:
        for member in group.members.values():
            member.assignment = b""
            self._answer_sync(member, SyncResult(error))

    def _remove_member_and_update_group(self, group: Group, member: Member) -> None:
        self._answer_join(member, JoinResult(Errors.UNKNOWN_MEMBER_ID, member_id=member.member_id))
        self._answer_sync(member, SyncResult(Errors.UNKNOWN_MEMBER_ID))
        self._cancel_timer(key_heartbeat(group.group_id, member.member_id))
        group.remove_member(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
            self._try_complete_join(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    # --- SyncGroup ---------------------------------------------------------------

    def _known_member(self, ev: SyncGroup | Heartbeat) -> tuple[Errors, None] | tuple[Group, Member]:
        """The checks SyncGroup and Heartbeat share: (error, None) or (group, member)."""
        if (error := self._coordinator_error(ev.group_id)) is not None:
            return error, None
        group = self.groups.get(ev.group_id)
        if group is None:
            return Errors.UNKNOWN_MEMBER_ID, None
        if group.state is GroupState.DEAD:
            return Errors.COORDINATOR_NOT_AVAILABLE, None
        if group.is_static_member_fenced(ev.member_id, ev.group_instance_id):
            return Errors.FENCED_INSTANCE_ID, None
        member = group.members.get(ev.member_id)
        if member is None:
            return Errors.UNKNOWN_MEMBER_ID, None
        return group, member

    def _on_sync(self, ev: SyncGroup) -> None:
        def reply(error: Errors) -> None:
            self._respond(ev.request_id, SyncResult(error))

        group, member = self._known_member(ev)
        if member is None:
            return reply(group)
        if ev.generation_id != group.generation_id:
            return reply(Errors.ILLEGAL_GENERATION)
        if ev.protocol_type is not None and ev.protocol_type != group.protocol_type:
            return reply(Errors.INCONSISTENT_GROUP_PROTOCOL)
        if ev.protocol_name is not None and ev.protocol_name != group.protocol_name:
            return reply(Errors.INCONSISTENT_GROUP_PROTOCOL)
        if group.state is GroupState.EMPTY:
            return reply(Errors.UNKNOWN_MEMBER_ID)
        if group.state is GroupState.PREPARING_REBALANCE:
            return reply(Errors.REBALANCE_IN_PROGRESS)
        self._remove_pending_sync_member(group, ev.member_id)
        if group.state is GroupState.STABLE:
            self._respond(ev.request_id, SyncResult(Errors.NONE, member.assignment, group.protocol_type, group.protocol_name))
            self._schedule_heartbeat(group, member)
            return
        # CompletingRebalance
        if member.awaiting_sync is not None:
            self._respond(member.awaiting_sync, SyncResult(Errors.REBALANCE_IN_PROGRESS))
        member.awaiting_sync = ev.request_id
        if not group.is_leader(ev.member_id):
            return
        given = dict(ev.assignments)
        assignment = {mid: given.get(mid, b"") for mid in group.members}
        self._store_group(
            group, FinishSync(group.group_id, group.generation_id, tuple(assignment.items())), assignment
        )

    def _finish_sync(self, follow_up: FinishSync, error: Errors) -> None:
        group = self.groups.get(follow_up.group_id)
        # the group may have moved on while the write was in flight
        if group is None or group.state is not GroupState.COMPLETING_REBALANCE or group.generation_id != follow_up.generation_id:
            return
        if error is not Errors.NONE:
            self._reset_and_propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(group)
            return
        assignment = dict(follow_up.assignment)
        for mid, m in group.members.items():
            m.assignment = assignment.get(mid, b"")
            if m.awaiting_sync is not None:
                self._answer_sync(m, SyncResult(Errors.NONE, m.assignment, group.protocol_type, group.protocol_name))
                self._schedule_heartbeat(group, m)
        self._transition(group, GroupState.STABLE)

    def _answer_static_rejoin(self, follow_up: AnswerStaticRejoin, error: Errors) -> None:
        group = self.groups.get(follow_up.group_id)
        member = group.members.get(follow_up.member_id) if group is not None else None
        if error is not Errors.NONE or member is None:
            self._respond(follow_up.request_id, JoinResult(error if error is not Errors.NONE else Errors.UNKNOWN_MEMBER_ID, member_id=follow_up.member_id))
            return
        result = self._join_result(group, member, include_members=follow_up.was_leader)
        # KIP-814: a returning leader gets the members but must not reassign
        self._respond(follow_up.request_id, dataclasses.replace(result, skip_assignment=follow_up.was_leader))

    def _remove_pending_sync_member(self, group: Group, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self._cancel_timer(key_sync(group.group_id))

    # --- Heartbeat ---------------------------------------------------------------

    def _on_heartbeat(self, ev: Heartbeat) -> None:
        def reply(error: Errors) -> None:
            self._respond(ev.request_id, HeartbeatResult(error))

        group, member = self._known_member(ev)
        if member is None:
            return reply(group)
        if group.state is GroupState.EMPTY:
            return reply(Errors.UNKNOWN_MEMBER_ID)
        if ev.generation_id != group.generation_id:
            return reply(Errors.ILLEGAL_GENERATION)
        self._schedule_heartbeat(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            # tells the member to rejoin
            return reply(Errors.REBALANCE_IN_PROGRESS)
        reply(Errors.NONE)

    # --- LeaveGroup -----------------------------------------------------------------

    def _on_leave(self, ev: LeaveGroup) -> None:
        if (error := self._coordinator_error(ev.group_id)) is not None:
            return self._respond(ev.request_id, LeaveResult(error))
        group = self.groups.get(ev.group_id)
        if group is None:
            results = tuple((mid, iid, Errors.UNKNOWN_MEMBER_ID) for mid, iid in ev.members)
            return self._respond(ev.request_id, LeaveResult(Errors.NONE, results))
        if group.state is GroupState.DEAD:
            return self._respond(ev.request_id, LeaveResult(Errors.COORDINATOR_NOT_AVAILABLE))
        results = []
        for member_id, instance_id in ev.members:
            results.append((member_id, instance_id, self._leave_one(group, member_id, instance_id)))
        self._respond(ev.request_id, LeaveResult(Errors.NONE, tuple(results)))

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None) -> Errors:
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                return Errors.UNKNOWN_MEMBER_ID
            if member_id and member_id != known:
                return Errors.FENCED_INSTANCE_ID
            member_id = known
        elif member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._cancel_timer(key_heartbeat(group.group_id, member_id))
            if group.state is GroupState.PREPARING_REBALANCE:
                self._try_complete_join(group)
            return Errors.NONE
        member = group.members.get(member_id)
        if member is None:
            return Errors.UNKNOWN_MEMBER_ID
        self._remove_member_and_update_group(group, member)
        return Errors.NONE

    # --- persistence of group metadata -------------------------------------------

    def _group_metadata_value(self, group: Group, assignment: dict[str, bytes] | None = None) -> bytes:
        members = tuple(
            fmt.MemberMetadata(
                member_id=m.member_id,
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata_for(group.protocol_name),
                assignment=assignment[m.member_id] if assignment is not None else m.assignment,
                rebalance_timeout=m.rebalance_timeout_ms,
                group_instance_id=m.group_instance_id,
            )
            for m in group.members.values()
        )
        return fmt.encode_group_metadata_value(
            fmt.GroupMetadataValue(
                protocol_type=group.protocol_type or "",
                generation=group.generation_id,
                protocol=group.protocol_name,
                leader=group.leader_id if group.members else None,
                members=members,
                current_state_timestamp=group.current_state_timestamp,
            )
        )

    def _store_group(self, group: Group, follow_up: FollowUp, assignment: dict[str, bytes] | None = None) -> None:
        key = fmt.encode_group_metadata_key(group.group_id)
        self._write(group.group_id, [(key, self._group_metadata_value(group, assignment))], follow_up)

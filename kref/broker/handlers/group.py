"""Classic consumer group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, ListGroups, DescribeGroups, DeleteGroups.

Theory of operation
-------------------
Each handler translates a kio request of any supported version into a
version-independent event of the pure group coordinator
(kref/coordinator/group.py), awaits its answer through the trio driver
(kref/broker/group_coordinator.py) and builds the response of the request's
version with `build`, which keeps the fields that version has.

This node is the coordinator of every group: FindCoordinator answers with
this broker, after creating the compacted `__consumer_offsets` topic on first
use (offsets.topic.num.partitions partitions, as Kafka does lazily). Groups
whose `__consumer_offsets` partition is still being loaded after a restart
get COORDINATOR_LOAD_IN_PROGRESS, which clients retry.

Version notes: JoinGroup v4+ requires a known member id (KIP-394,
MEMBER_ID_REQUIRED); v5+ and SyncGroup/Heartbeat v3+ carry
group.instance.id (KIP-345); LeaveGroup v3+ leaves several members at once;
FindCoordinator v4+ looks up a batch of keys (KIP-699); JoinGroup v9 tells a
returning static leader to skip assignment (KIP-814).
"""

from __future__ import annotations

import datetime
from typing import Any

from kref.broker.group_area import GROUP_KEY_TYPE, coordinator_for, install
from kref.broker.handlers._responses import build, error, response_types
from kref.coordinator import group as g

FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = 15, 16, 42

_ZERO = datetime.timedelta(0)
_MS = datetime.timedelta(milliseconds=1)


def _ms(value: Any, default: int = -1) -> int:
    if value is None:
        return default
    if isinstance(value, datetime.timedelta):
        return int(value / _MS)
    return int(value)


async def find_coordinator(ctx, request) -> Any:
    types = response_types(FIND_COORDINATOR, ctx.api_version)
    key_type = int(getattr(request, "key_type", GROUP_KEY_TYPE))
    keys = getattr(request, "coordinator_keys", None)
    if keys is None:
        keys = (request.key,)
    answers = [await coordinator_for(ctx.broker, key, key_type, ctx.listener_name) for key in keys]
    if ctx.api_version >= 4:
        coordinators = tuple(
            build(types.Coordinator, key=key, node_id=node, host=host, port=port, error_code=error(code),
                  error_message=message)
            for key, (code, message, node, host, port) in zip(keys, answers)
        )
        return build(types.FindCoordinatorResponse, throttle_time=_ZERO, coordinators=coordinators)
    code, message, node, host, port = answers[0]
    return build(
        types.FindCoordinatorResponse, throttle_time=_ZERO, error_code=error(code), error_message=message,
        node_id=node, host=host, port=port,
    )


async def join_group(ctx, request) -> Any:
    types = response_types(JOIN_GROUP, ctx.api_version)
    session_timeout_ms = _ms(request.session_timeout)
    result: g.JoinResult = await ctx.broker.group_coordinator.call(
        g.JoinGroup,
        group_id=request.group_id,
        member_id=request.member_id,
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=_ms(getattr(request, "rebalance_timeout", None), session_timeout_ms),
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.client_id or "",
        client_host="/" + (ctx.client_host or ""),
        require_known_member_id=ctx.api_version >= 4,
    )
    members = tuple(
        build(types.JoinGroupResponseMember, member_id=m.member_id, group_instance_id=m.group_instance_id,
              metadata=m.metadata)
        for m in result.members
    )
    # protocol_name is nullable only from v7
    protocol_name = result.protocol_name if ctx.api_version >= 7 else (result.protocol_name or "")
    return build(
        types.JoinGroupResponse,
        throttle_time=_ZERO,
        error_code=error(result.error),
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=protocol_name,
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=members,
    )


async def sync_group(ctx, request) -> Any:
    types = response_types(SYNC_GROUP, ctx.api_version)
    result: g.SyncResult = await ctx.broker.group_coordinator.call(
        g.SyncGroup,
        group_id=request.group_id,
        generation_id=int(request.generation_id),
        member_id=request.member_id,
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in request.assignments),
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
    )
    return build(
        types.SyncGroupResponse,
        throttle_time=_ZERO,
        error_code=error(result.error),
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


async def heartbeat(ctx, request) -> Any:
    types = response_types(HEARTBEAT, ctx.api_version)
    result: g.HeartbeatResult = await ctx.broker.group_coordinator.call(
        g.Heartbeat,
        group_id=request.group_id,
        generation_id=int(request.generation_id),
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
    )
    return build(types.HeartbeatResponse, throttle_time=_ZERO, error_code=error(result.error))


async def leave_group(ctx, request) -> Any:
    types = response_types(LEAVE_GROUP, ctx.api_version)
    if ctx.api_version >= 3:
        members = tuple((m.member_id, m.group_instance_id) for m in request.members)
    else:
        members = ((request.member_id, None),)
    result: g.LeaveResult = await ctx.broker.group_coordinator.call(
        g.LeaveGroup, group_id=request.group_id, members=members
    )
    if ctx.api_version >= 3:
        responses = tuple(
            build(types.MemberResponse, member_id=mid, group_instance_id=iid, error_code=error(code))
            for mid, iid, code in result.members
        )
        return build(types.LeaveGroupResponse, throttle_time=_ZERO, error_code=error(result.error), members=responses)
    code = result.error
    if code is g.Errors.NONE and result.members:
        code = result.members[0][2]
    return build(types.LeaveGroupResponse, throttle_time=_ZERO, error_code=error(code))


async def list_groups(ctx, request) -> Any:
    types = response_types(LIST_GROUPS, ctx.api_version)
    result: g.ListResult = await ctx.broker.group_coordinator.call(
        g.ListGroups,
        states_filter=tuple(getattr(request, "states_filter", ()) or ()),
        types_filter=tuple(getattr(request, "types_filter", ()) or ()),
    )
    groups = tuple(
        build(types.ListedGroup, group_id=gid, protocol_type=ptype, group_state=state, group_type="classic")
        for gid, ptype, state in result.groups
    )
    return build(types.ListGroupsResponse, throttle_time=_ZERO, error_code=error(result.error), groups=groups)


async def describe_groups(ctx, request) -> Any:
    types = response_types(DESCRIBE_GROUPS, ctx.api_version)
    result: g.DescribeResult = await ctx.broker.group_coordinator.call(g.DescribeGroups, group_ids=tuple(request.groups))
    groups = []
    for d in result.groups:
        code = d.error
        if code is g.Errors.NONE and d.state == g.GroupState.DEAD.value and ctx.api_version >= 6:
            code = g.Errors.GROUP_ID_NOT_FOUND  # v6 (KIP-1043) names a missing group instead of calling it Dead
        members = tuple(
            build(types.DescribedGroupMember, member_id=m.member_id, group_instance_id=m.group_instance_id,
                  client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                  member_assignment=m.assignment)
            for m in d.members
        )
        groups.append(
            build(types.DescribedGroup, error_code=error(code), error_message=None, group_id=d.group_id,
                  group_state=d.state, protocol_type=d.protocol_type, protocol_data=d.protocol, members=members,
                  authorized_operations=-2147483648)
        )
    return build(types.DescribeGroupsResponse, throttle_time=_ZERO, groups=tuple(groups))


async def delete_groups(ctx, request) -> Any:
    types = response_types(DELETE_GROUPS, ctx.api_version)
    result: g.DeleteResult = await ctx.broker.group_coordinator.call(g.DeleteGroups, group_ids=tuple(request.groups_names))
    results = tuple(build(types.DeletableGroupResult, group_id=gid, error_code=error(code)) for gid, code in result.groups)
    return build(types.DeleteGroupsResponse, throttle_time=_ZERO, results=results)


def register(router, broker) -> None:
    install(broker)
    router.register(FIND_COORDINATOR, 0, 6, find_coordinator)
    router.register(JOIN_GROUP, 0, 9, join_group)
    router.register(SYNC_GROUP, 0, 5, sync_group)
    router.register(HEARTBEAT, 0, 4, heartbeat)
    router.register(LEAVE_GROUP, 0, 5, leave_group)
    router.register(LIST_GROUPS, 0, 5, list_groups)
    router.register(DESCRIBE_GROUPS, 0, 6, describe_groups)
    router.register(DELETE_GROUPS, 0, 2, delete_groups)

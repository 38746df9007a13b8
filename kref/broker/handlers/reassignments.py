"""AlterPartitionReassignments (API 45, v0-1) and ListPartitionReassignments (API 46), KIP-455.

Theory of operation
-------------------
Moving replicas is the active controller's decision (kref/controller/
controller.py, `AlterPartitionReassignments`): it grows the replica set to
target + the leaving replicas, the brokers act on the PartitionChangeRecord
as on any other (an added broker creates the log and fetches as a follower,
the leader takes it into the isr through AlterPartition), and the controller
completes the move in the isr change that takes in the last added replica;
removed brokers then delete their logs (the replica manager). The list is
what the controller's image says is in progress. v1 (KIP-860) carries
allow_replication_factor_change: when false, a target whose length differs
from the partition's replica count is INVALID_REPLICATION_FACTOR.

On a KRaft node the request is forwarded as it came to the active
controller's CONTROLLER listener (an unreachable controller: NOT_CONTROLLER,
retriable). `register_controller` answers it there, through the core. A
single broker (its own controller) has nowhere to move a replica: a target
naming only itself changes nothing, any other broker is not registered
(INVALID_REPLICA_ASSIGNMENT), and nothing is ever in progress.
"""

from __future__ import annotations

import logging
from typing import Any

from kref.protocol.codec import response_class
from kref.protocol.errors import ErrorCode
from kref.protocol.messages import build, nested, results_by_topic

log = logging.getLogger("kref.handlers.reassignments")

ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 45, 46


def register(router, broker) -> None:
    router.register(ALTER_PARTITION_REASSIGNMENTS, 0, 1, handle_alter_reassignments)
    router.register(LIST_PARTITION_REASSIGNMENTS, 0, 0, handle_list_reassignments)


def register_controller(router, driver) -> None:
    """The controller's side: the same APIs answered through its core."""
    from kref.controller import controller as c

    async def alter(ctx, request):
        allow = bool(getattr(request, "allow_replication_factor_change", True))  # v1, KIP-860
        reply = await driver.request(lambda rid: c.AlterPartitionReassignments(rid, _wanted_targets(request), allow))
        return alter_response(ctx.api_version, reply.error_code, getattr(reply, "results", ()))

    async def list_(ctx, request):
        wanted = None if request.topics is None else tuple(
            (t.name, int(p)) for t in request.topics for p in t.partition_indexes)
        reply = await driver.request(lambda rid: c.ListPartitionReassignments(rid, wanted))
        return list_response(ctx.api_version, reply.error_code, getattr(reply, "results", ()))

    router.register(ALTER_PARTITION_REASSIGNMENTS, 0, 1, alter)
    router.register(LIST_PARTITION_REASSIGNMENTS, 0, 0, list_)


def _wanted_targets(request) -> tuple:
    return tuple(
        (t.name, int(p.partition_index), None if p.replicas is None else tuple(int(b) for b in p.replicas))
        for t in request.topics for p in t.partitions)


def alter_response(version: int, error_code: int, results) -> Any:
    """An AlterPartitionReassignmentsResponse from (topic, partition, error_code, message), in order."""
    response_type = response_class(ALTER_PARTITION_REASSIGNMENTS, version)
    topic_type = nested(response_type, "ReassignableTopicResponse")
    partition_type = nested(response_type, "ReassignablePartitionResponse")
    message = None if error_code == ErrorCode.NONE else ErrorCode(error_code).name
    return build(response_type, error_code=error_code, error_message=message, responses=results_by_topic(
        results, topic_type, "name", "partitions", lambda partition, code, text: build(
            partition_type, partition_index=partition, error_code=code, error_message=text)))


def list_response(version: int, error_code: int, results) -> Any:
    """A ListPartitionReassignmentsResponse from (topic, partition, replicas, adding, removing)."""
    response_type = response_class(LIST_PARTITION_REASSIGNMENTS, version)
    topic_type = nested(response_type, "OngoingTopicReassignment")
    partition_type = nested(response_type, "OngoingPartitionReassignment")
    message = None if error_code == ErrorCode.NONE else ErrorCode(error_code).name
    return build(response_type, error_code=error_code, error_message=message, topics=results_by_topic(
        results, topic_type, "name", "partitions", lambda partition, replicas, adding, removing: build(
            partition_type, partition_index=partition, replicas=tuple(replicas),
            adding_replicas=tuple(adding), removing_replicas=tuple(removing))))


async def _forward(broker, request, name: str):
    from kref.node.controller_driver import RPC_ERRORS

    try:
        return await broker.kraft.forward(request)
    except RPC_ERRORS as exc:
        log.info("node %d: forwarding %s failed: %s", broker.node_id, name, exc)
        return None


async def handle_alter_reassignments(ctx, request):
    broker = ctx.broker
    if getattr(broker, "kraft", None) is not None:
        response = await _forward(broker, request, "AlterPartitionReassignments")
        return response if response is not None else alter_response(ctx.api_version, ErrorCode.NOT_CONTROLLER, ())
    results = []
    for name, partition, target in _wanted_targets(request):
        topic = broker.get_topic(name)
        if topic is None or not 0 <= partition < topic.num_partitions:
            results.append((name, partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {name}-{partition}"))
        elif target is None:
            results.append((name, partition, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "no reassignment in progress"))
        elif target != (broker.node_id,):
            others = [b for b in target if b != broker.node_id]
            reason = f"broker {others[0]} is not registered" if others else "the replica list is invalid"
            results.append((name, partition, ErrorCode.INVALID_REPLICA_ASSIGNMENT, reason))
        else:
            results.append((name, partition, ErrorCode.NONE, None))
    return alter_response(ctx.api_version, ErrorCode.NONE, results)


async def handle_list_reassignments(ctx, request):
    broker = ctx.broker
    if getattr(broker, "kraft", None) is not None:
        response = await _forward(broker, request, "ListPartitionReassignments")
        return response if response is not None else list_response(ctx.api_version, ErrorCode.NOT_CONTROLLER, ())
    return list_response(ctx.api_version, ErrorCode.NONE, ())

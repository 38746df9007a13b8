"""ElectLeaders (API 43, KIP-460): preferred or unclean leader election on request.

Theory of operation
-------------------
Leadership is the active controller's decision (kref/controller/controller.py,
`ElectLeaders`). On a node of a KRaft cluster (broker.kraft set) the request is
forwarded as it came to the controller's CONTROLLER listener and its answer is
passed back (a resend across a controller failover that meets its own first
try is reconciled: kref/node/broker_view.py, `reconcile_elect_resent`); an unreachable controller answers every partition with
NOT_CONTROLLER (retriable: admin clients retry). The single broker leads every
partition it has, so nothing ever needs electing there: ELECTION_NOT_NEEDED for
known partitions, UNKNOWN_TOPIC_OR_PARTITION for the rest.
"""

from __future__ import annotations

import logging

from kref.node.controller_driver import ELECT_LEADERS, RPC_ERRORS, elect_leaders_response
from kref.protocol.errors import ErrorCode

log = logging.getLogger("kref.handlers.elect_leaders")


def register(router, broker) -> None:
    router.register(ELECT_LEADERS, 0, 2, handle_elect_leaders)


def _wanted(broker, request) -> list[tuple[str, int]]:
    if request.topic_partitions is not None:
        return [(t.topic, int(p)) for t in request.topic_partitions for p in t.partitions]
    return [(name, p) for name in sorted(broker.topics) for p in range(broker.topics[name].num_partitions)]


async def handle_elect_leaders(ctx, request):
    broker = ctx.broker
    view = getattr(broker, "kraft", None)
    if view is not None:
        try:
            return await view.elect_leaders(request)
        except RPC_ERRORS as exc:
            log.info("node %d: forwarding ElectLeaders failed: %s", broker.node_id, exc)
            results = [(t, p, ErrorCode.NOT_CONTROLLER, "no active controller reachable")
                       for t, p in _wanted(broker, request)] if request.topic_partitions is not None else []
            return elect_leaders_response(ctx.api_version, ErrorCode.NONE, results)
    results = []
    for name, partition in _wanted(broker, request):
        topic = broker.get_topic(name)
        if topic is not None and 0 <= partition < topic.num_partitions:
            if request.topic_partitions is not None:  # Kafka omits "not needed" when asked for all
                results.append((name, partition, ErrorCode.ELECTION_NOT_NEEDED, None))
        else:
            results.append((name, partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {name}-{partition}"))
    return elect_leaders_response(ctx.api_version, ErrorCode.NONE, results)

"""DescribeCluster (60, v0-v2, KIP-700): cluster id, controller, brokers.

Theory of operation: one broker, which is also the "controller" clients
are told about (there is no separate KRaft quorum yet). Asking for
controller endpoints (endpoint_type 2, KIP-919) from a broker is
UNSUPPORTED_ENDPOINT_TYPE, as on Kafka.
"""

from __future__ import annotations

from kref.broker.handlers.metadata import (
    AUTHORIZED_OPERATIONS_OMITTED,
    CLUSTER_AUTHORIZED_OPERATIONS,
    brokers_of,
)
from kref.protocol.codec import response_class
from kref.protocol.errors import ErrorCode
from kref.protocol.messages import build, nested

DESCRIBE_CLUSTER = 60
ENDPOINT_TYPE_BROKER = 1


def register(router, broker) -> None:
    router.register(DESCRIBE_CLUSTER, 0, 2, handle_describe_cluster)


async def handle_describe_cluster(ctx, request):
    broker = ctx.broker
    response_type = response_class(DESCRIBE_CLUSTER, ctx.api_version)
    broker_type = nested(response_type, "DescribeClusterBroker")
    endpoint_type = getattr(request, "endpoint_type", ENDPOINT_TYPE_BROKER)
    if endpoint_type != ENDPOINT_TYPE_BROKER:
        return build(
            response_type,
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message="The target broker only supports broker endpoints.",
            endpoint_type=endpoint_type,
            cluster_id=broker.cluster_id,
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        )
    view = getattr(broker, "kraft", None)  # a KRaft cluster: kref/node/broker_view.py
    if view is not None:
        controller_id = view.controller_id()
        brokers = tuple(
            build(broker_type, broker_id=node_id, host=host, port=port, rack=rack, is_fenced=False)
            for node_id, host, port, rack in view.brokers(ctx.listener_name)
        )
    else:
        node_id, host, port = brokers_of(broker, ctx.listener_name)
        controller_id = broker.node_id
        brokers = (build(broker_type, broker_id=node_id, host=host, port=port, rack=None, is_fenced=False),)
    return build(
        response_type,
        error_code=ErrorCode.NONE,
        error_message=None,
        endpoint_type=ENDPOINT_TYPE_BROKER,
        cluster_id=broker.cluster_id,
        controller_id=controller_id,
        brokers=brokers,
        cluster_authorized_operations=(
            CLUSTER_AUTHORIZED_OPERATIONS
            if request.include_cluster_authorized_operations
            else AUTHORIZED_OPERATIONS_OMITTED
        ),
    )

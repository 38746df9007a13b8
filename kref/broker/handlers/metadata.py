"""Metadata (API key 3, v0-v13): brokers, topics, partitions, topic IDs.

Theory of operation: answers from the broker's topic image. A single node
leads every partition (leader_id = node.id, replicas = isr = [node.id]);
leader_epoch comes from the partition driver when it has one. Unknown
topics are auto-created when auto.create.topics.enable and the request
allows it (v4+ flag; always for v0-v3), otherwise UNKNOWN_TOPIC_OR_PARTITION;
illegal names get INVALID_TOPIC_EXCEPTION and are never created. Topics
requested by ID (v10+, KIP-516) that do not exist get UNKNOWN_TOPIC_ID.
Auto-created topics are created synchronously, so they are returned ready
(Kafka answers LEADER_NOT_AVAILABLE first because its creation is async).

Encoded answers are cached (MetadataCache): kio encodes in pure Python,
about 2 us per partition, so a client asking for 10,000 partitions every
few seconds would cost the broker tens of milliseconds each time. A body
is reused for the same request shape (version, listener, flags, the topics
asked for) while nothing it was built from changed: the key carries the
generation of every metadata image it reads (bumped by each apply) and the
active controller's id. Only answers without a topic error are cached (an
error may depend on broker config that is not in the image).
"""

from __future__ import annotations

import uuid

from kref.broker.broker import BrokerError, validate_topic_name
from collections import OrderedDict

from kref.protocol.codec import PreEncoded, encode_body, response_class
from kref.protocol.errors import ErrorCode
from kref.protocol.messages import build, nested

API_KEY = 3
ZERO_UUID = uuid.UUID(int=0)
# -2^31: "authorized operations not requested" (KIP-430).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
# No ACLs in kref: every topic operation is allowed (READ..ALTER_CONFIGS bits).
TOPIC_AUTHORIZED_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_AUTHORIZED_OPERATIONS = sum(1 << op for op in (4, 5, 7, 8, 9, 10, 11, 12))


# Bounds of the cache: entries and total encoded bytes (least recently used go first).
CACHE_MAX_ENTRIES = 64
CACHE_MAX_BYTES = 64 * 1024 * 1024


class MetadataCache:
    def __init__(self, max_entries: int = CACHE_MAX_ENTRIES, max_bytes: int = CACHE_MAX_BYTES) -> None:
        self._entries: OrderedDict[tuple, PreEncoded] = OrderedDict()
        self._bytes = 0
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.hits = self.misses = 0

    def get(self, key: tuple) -> PreEncoded | None:
        found = self._entries.get(key)
        if found is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return found

    def put(self, key: tuple, value: PreEncoded) -> None:
        if len(value) > self.max_bytes:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= len(old)
        self._entries[key] = value
        self._bytes += len(value)
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self._bytes -= len(dropped)


def register(router, broker) -> None:
    cache = MetadataCache()

    async def handle(ctx, request):
        key = cache_key(ctx, request)
        found = cache.get(key) if key is not None else None
        if found is not None:
            return found
        response = await handle_metadata(ctx, request)
        if key is not None and all(t.error_code == ErrorCode.NONE for t in response.topics):
            # Keyed after the build: an auto-created topic bumped the generation.
            key = cache_key(ctx, request)
            found = PreEncoded(type(response), encode_body(response))
            cache.put(key, found)
            return found
        return response

    broker.metadata_cache = cache
    router.register(API_KEY, 0, 13, handle)


def cache_key(ctx, request) -> tuple | None:
    """What a Metadata answer depends on, or None when the images are not known."""
    broker = ctx.broker
    if getattr(broker, "metadata", None) is None:
        return None
    image = broker.image
    view = getattr(broker, "kraft", None)
    if view is not None:
        # The cluster image (brokers, partition leaders and isr) the view
        # answers from, and the controller id it names.
        cluster_image = getattr(view, "image", None)
        if cluster_image is None or getattr(cluster_image, "generation", None) is None:
            return None
        cluster = (id(cluster_image), cluster_image.generation, view.controller_id())
    else:
        cluster = None
    requested = request.topics
    if requested is not None:
        requested = tuple((getattr(t, "name", None), getattr(t, "topic_id", None)) for t in requested)
    return (
        id(image), image.generation, cluster, ctx.api_version, ctx.listener_name, requested,
        getattr(request, "include_topic_authorized_operations", False),
        getattr(request, "include_cluster_authorized_operations", False),
        getattr(request, "allow_auto_topic_creation", True),
    )


def brokers_of(broker, listener_name: str):
    """(node_id, host, port) of this broker on the connection's listener."""
    listeners = broker.advertised_listeners()
    chosen = next((lst for lst in listeners if lst.name == listener_name), listeners[0])
    return broker.node_id, chosen.host, chosen.port


def partition_leader_epoch(broker, topic: str, partition: int) -> int:
    """From the metadata image, as Kafka answers from its metadata cache."""
    registration = broker.image.partition(topic, partition)
    return registration.leader_epoch if registration is not None else 0


async def handle_metadata(ctx, request):
    broker = ctx.broker
    version = ctx.api_version
    response_type = response_class(API_KEY, version)
    topic_type = nested(response_type, "MetadataResponseTopic")
    partition_type = nested(response_type, "MetadataResponsePartition")
    broker_type = nested(response_type, "MetadataResponseBroker")
    include_topic_ops = getattr(request, "include_topic_authorized_operations", False)
    include_cluster_ops = getattr(request, "include_cluster_authorized_operations", False)
    allow_auto_create = getattr(request, "allow_auto_topic_creation", True)

    # In a KRaft cluster the committed metadata says who leads what
    # (kref/controller/broker_view.py); alone, this broker leads everything.
    view = getattr(broker, "kraft", None)

    def partition_entry(name, p):
        kraft = view.partition(name, p) if view is not None else None
        if kraft is not None:
            return build(
                partition_type,
                error_code=ErrorCode.NONE if kraft.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                partition_index=p,
                leader_id=kraft.leader,
                leader_epoch=kraft.leader_epoch,
                replica_nodes=kraft.replicas,
                isr_nodes=kraft.isr,
                offline_replicas=(),
            )
        return build(
            partition_type,
            error_code=ErrorCode.NONE,
            partition_index=p,
            leader_id=broker.node_id,
            leader_epoch=partition_leader_epoch(broker, name, p),
            replica_nodes=(broker.node_id,),
            isr_nodes=(broker.node_id,),
            offline_replicas=(),
        )

    def topic_entry(error_code, name, topic_id, metadata=None):
        partitions = ()
        if metadata is not None:
            partitions = tuple(partition_entry(metadata.name, p) for p in range(metadata.num_partitions))
        return build(
            topic_type,
            error_code=error_code,
            name=name,
            topic_id=topic_id,
            is_internal=metadata.is_internal if metadata is not None else False,
            partitions=partitions,
            topic_authorized_operations=(
                TOPIC_AUTHORIZED_OPERATIONS if include_topic_ops and metadata else AUTHORIZED_OPERATIONS_OMITTED
            ),
        )

    requested = request.topics
    if version == 0 and not requested:
        requested = None  # v0: an empty list means all topics
    topics = []
    if requested is None:
        for metadata in list(broker.topics.values()):
            topics.append(topic_entry(ErrorCode.NONE, metadata.name, metadata.topic_id, metadata))
    else:
        seen = set()
        for wanted in requested:
            name = getattr(wanted, "name", None)
            topic_id = getattr(wanted, "topic_id", None)
            if name is None and topic_id not in (None, ZERO_UUID):
                metadata = broker.topic_by_id(topic_id)
                if metadata is None:
                    topics.append(topic_entry(ErrorCode.UNKNOWN_TOPIC_ID, None, topic_id))
                else:
                    topics.append(topic_entry(ErrorCode.NONE, metadata.name, metadata.topic_id, metadata))
                continue
            if name in seen:
                continue
            seen.add(name)
            try:
                validate_topic_name(name)
            except BrokerError as exc:
                topics.append(topic_entry(exc.error_code, name, ZERO_UUID))
                continue
            metadata = broker.get_topic(name)
            if metadata is None and allow_auto_create and view is not None:
                metadata = await view.auto_create(name)
            elif metadata is None and allow_auto_create:
                try:
                    metadata = broker.maybe_auto_create(name)
                except BrokerError as exc:
                    topics.append(topic_entry(exc.error_code, name, ZERO_UUID))
                    continue
            if metadata is None:
                topics.append(topic_entry(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name, ZERO_UUID))
            else:
                topics.append(topic_entry(ErrorCode.NONE, metadata.name, metadata.topic_id, metadata))
    if view is not None:
        brokers = tuple(
            build(broker_type, node_id=node_id, host=host, port=port, rack=rack)
            for node_id, host, port, rack in view.brokers(ctx.listener_name)
        )
        controller_id = view.controller_id()
    else:
        node_id, host, port = brokers_of(broker, ctx.listener_name)
        brokers = (build(broker_type, node_id=node_id, host=host, port=port, rack=None),)
        controller_id = broker.node_id
    return build(
        response_type,
        brokers=brokers,
        cluster_id=broker.cluster_id,
        controller_id=controller_id,
        topics=tuple(topics),
        cluster_authorized_operations=(
            CLUSTER_AUTHORIZED_OPERATIONS if include_cluster_ops else AUTHORIZED_OPERATIONS_OMITTED
        ),
        error_code=ErrorCode.NONE,
    )

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

Encoding, and why it is done here: kio encodes in pure Python, tens of
microseconds per partition on a loaded box, so one all-topics answer for
10,000 partitions took over a second and blocked the event loop. Two
levels of reuse (MetadataCache, both bounded):
- a whole encoded body per request shape (version, listener, flags, the
  topics asked for), valid while nothing it was built from changed: the key
  carries the generation of every metadata image it reads (bumped by each
  apply) and the active controller's id. Only answers without a topic
  error are cached (an error may depend on broker config not in the image);
- an encoded chunk per (version, topic, flags), valid while the topic's
  state is the same: its id, partition count and the PartitionImage objects
  it was encoded from (immutable; a change replaces the object). A new
  image generation therefore re-encodes only the topics that changed.
Partitions and each topic's fields around them are encoded with struct
(the layout below, checked against kio for every version by
tests/broker/test_metadata_encoding.py); the response envelope (written
once per answer) is kio's own encoding with an empty array, split where
the array goes.
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections import OrderedDict
from dataclasses import dataclass

from kref.broker.broker import BrokerError, validate_topic_name
from kref.protocol.codec import PreEncoded, encode_body, response_class
from kref.protocol.errors import ErrorCode
from kref.protocol.messages import build, has_field, nested
from kref.protocol.wire import array_count, uvarint

API_KEY = 3
ZERO_UUID = uuid.UUID(int=0)
# -2^31: "authorized operations not requested" (KIP-430).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
# No ACLs in kref: every topic operation is allowed (READ..ALTER_CONFIGS bits).
TOPIC_AUTHORIZED_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_AUTHORIZED_OPERATIONS = sum(1 << op for op in (4, 5, 7, 8, 9, 10, 11, 12))


# Bounds of the caches: entries and total encoded bytes (least recently used go first).
CACHE_MAX_ENTRIES = 64
CACHE_MAX_BYTES = 64 * 1024 * 1024
TOPIC_CHUNKS_MAX_ENTRIES = 100_000
TOPIC_CHUNKS_MAX_BYTES = 64 * 1024 * 1024


class _BoundedLru:
    """key -> (bytes-like or object with len); least recently used dropped first."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self._entries: OrderedDict = OrderedDict()
        self._bytes = 0
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key):
        found = self._entries.get(key)
        if found is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return found[1]

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def put(self, key, value, size: int) -> None:
        if size > self.max_bytes:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old[0]
        self._entries[key] = (size, value)
        self._bytes += size
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            _, (dropped, _) = self._entries.popitem(last=False)
            self._bytes -= dropped


class MetadataCache:
    """Whole encoded answers (`get`/`put`) and per-topic encoded chunks (`topics`)."""

    def __init__(
        self,
        max_entries: int = CACHE_MAX_ENTRIES,
        max_bytes: int = CACHE_MAX_BYTES,
        topic_max_entries: int = TOPIC_CHUNKS_MAX_ENTRIES,
        topic_max_bytes: int = TOPIC_CHUNKS_MAX_BYTES,
    ) -> None:
        self._answers = _BoundedLru(max_entries, max_bytes)
        # (version, topic name, include_topic_authorized_operations) -> (state, chunk)
        self.topics = _BoundedLru(topic_max_entries, topic_max_bytes)

    @property
    def hits(self) -> int:
        return self._answers.hits

    @property
    def misses(self) -> int:
        return self._answers.misses

    def get(self, key: tuple) -> PreEncoded | None:
        return self._answers.get(key)

    def put(self, key: tuple, value: PreEncoded) -> None:
        self._answers.put(key, value, len(value))

    def clear(self) -> None:
        self._answers.clear()
        self.topics.clear()


def register(router, broker) -> None:
    cache = MetadataCache()

    async def handle(ctx, request):
        key = cache_key(ctx, request)
        found = cache.get(key) if key is not None else None
        if found is not None:
            return found
        answer, has_topic_error = await handle_metadata(ctx, request, cache if key is not None else None)
        if key is not None and not has_topic_error:
            # Keyed after the build: an auto-created topic bumped the generation.
            cache.put(cache_key(ctx, request), answer)
        return answer

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




# --- wire layout -------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    """What differs between Metadata versions where the encoder writes by hand."""

    version: int
    response_type: type
    topic_type: type
    partition_type: type
    broker_type: type
    flexible: bool
    leader_epoch: bool  # v7+
    offline_replicas: bool  # v5+
    # Bytes after the topics array in the body (cluster_authorized_operations
    # v8-v10, error_code v13+, the tag buffer v9+) and after the partitions
    # array in a topic (topic_authorized_operations v8+, the tag buffer).
    response_suffix: int
    topic_suffix: int
    # The topic entry's head, written by hand (encode_topic): topic_id v10+,
    # is_internal v1+, a nullable name v12+ (a topic asked for by id).
    topic_id: bool = False
    is_internal: bool = False
    nullable_name: bool = False


@functools.cache
def layout(version: int) -> Layout:
    rt = response_class(API_KEY, version)
    tt, pt = nested(rt, "MetadataResponseTopic"), nested(rt, "MetadataResponsePartition")
    flexible = bool(rt.__flexible__)
    return Layout(
        version, rt, tt, pt, nested(rt, "MetadataResponseBroker"), flexible,
        leader_epoch=has_field(pt, "leader_epoch"),
        offline_replicas=has_field(pt, "offline_replicas"),
        response_suffix=4 * has_field(rt, "cluster_authorized_operations") + 2 * has_field(rt, "error_code") + flexible,
        topic_suffix=4 * has_field(tt, "topic_authorized_operations") + flexible,
        topic_id=has_field(tt, "topic_id"),
        is_internal=has_field(tt, "is_internal"),
        nullable_name=version >= 12,
    )


@functools.cache
def _partition_struct(lay: Layout, replicas: int, isr: int) -> struct.Struct | None:
    """One struct for a partition entry with this many replicas and isr members
    (array counts passed as values); None when a count needs a multi-byte uvarint."""
    count = "B" if lay.flexible else "i"
    if lay.flexible and max(replicas, isr) + 1 >= 0x80:
        return None
    fmt = ">hii" + ("i" if lay.leader_epoch else "") + f"{count}{replicas}i{count}{isr}i"
    if lay.offline_replicas:
        fmt += count
    if lay.flexible:
        fmt += "B"  # empty tag buffer
    return struct.Struct(fmt)


def encode_partition(lay: Layout, error_code: int, index: int, leader: int, leader_epoch: int,
                     replicas: tuple, isr: tuple) -> bytes:
    """A MetadataResponsePartition in wire form (offline_replicas always empty)."""
    one = 1 if lay.flexible else 0  # compact arrays count n + 1
    packer = _partition_struct(lay, len(replicas), len(isr))
    if packer is not None:
        values = [error_code, index, leader]
        if lay.leader_epoch:
            values.append(leader_epoch)
        values += (len(replicas) + one, *replicas, len(isr) + one, *isr)
        if lay.offline_replicas:
            values.append(one)
        if lay.flexible:
            values.append(0)
        return packer.pack(*values)
    entry = build(lay.partition_type, error_code=ErrorCode(error_code), partition_index=index, leader_id=leader,
                  leader_epoch=leader_epoch, replica_nodes=tuple(replicas), isr_nodes=tuple(isr),
                  offline_replicas=())
    return encode_body(entry)


def _split(encoded: bytes, flexible: bool, suffix: int) -> tuple[bytes, bytes]:
    """(before, after) an empty array that ends `suffix` bytes before the end."""
    end = len(encoded) - suffix
    return encoded[: end - (1 if flexible else 4)], encoded[end:]


def _topic_head(lay: Layout, error_code: int, name, topic_id, is_internal: bool) -> bytes | None:
    """A MetadataResponseTopic's fields before its partitions array, or None
    for a shape left to kio (a null name where the version forbids it, a
    missing topic id): error_code, name, topic_id (v10+), is_internal (v1+)."""
    if name is None:
        if not lay.nullable_name:
            return None
        name_bytes = b"\x00"  # compact nullable string: length + 1 = 0
    else:
        raw = name.encode("utf-8")
        name_bytes = (uvarint(len(raw) + 1) if lay.flexible else _I16.pack(len(raw))) + raw
    head = _I16.pack(error_code) + name_bytes
    if lay.topic_id:
        if topic_id is None:
            return None
        head += topic_id.bytes
    if lay.is_internal:
        head += b"\x01" if is_internal else b"\x00"
    return head


def encode_topic(lay: Layout, error_code: int, name, topic_id, is_internal: bool, operations: int,
                 partitions: list[bytes]) -> bytes:
    """A MetadataResponseTopic around hand-encoded partitions.

    Written with struct: kio's encoding of the envelope cost about 20 us a
    topic, most of an all-topics answer for 10,000 one-partition topics
    (tests/broker/test_metadata_encoding.py compares the bytes with kio's).
    """
    head = _topic_head(lay, error_code, name, topic_id, is_internal)
    if head is not None:
        tail = _I32.pack(operations) if lay.topic_suffix >= 4 else b""
        if lay.flexible:
            tail += b"\x00"  # empty tag buffer
        return b"".join((head, array_count(len(partitions), lay.flexible), *partitions, tail))
    envelope = encode_body(build(
        lay.topic_type, error_code=ErrorCode(error_code), name=name, topic_id=topic_id, is_internal=is_internal,
        partitions=(), topic_authorized_operations=operations,
    ))
    if not partitions:
        return envelope
    before, after = _split(envelope, lay.flexible, lay.topic_suffix)
    return b"".join((before, array_count(len(partitions), lay.flexible), *partitions, after))


def encode_response(lay: Layout, brokers: tuple, cluster_id, controller_id: int, cluster_operations: int,
                    topics: list[bytes]) -> bytes:
    envelope = encode_body(build(
        lay.response_type, brokers=brokers, cluster_id=cluster_id, controller_id=controller_id, topics=(),
        cluster_authorized_operations=cluster_operations, error_code=ErrorCode.NONE,
    ))
    if not topics:
        return envelope
    before, after = _split(envelope, lay.flexible, lay.response_suffix)
    return b"".join((before, array_count(len(topics), lay.flexible), *topics, after))


# --- answering ----------------------------------------------------------------


def _topic_state(broker, cluster_image, metadata) -> tuple:
    """Everything a topic's encoded chunk depends on. PartitionImages are
    immutable and replaced on change, so comparing the tuples is mostly an
    identity check per partition."""
    n = metadata.num_partitions
    indexes = range(n)
    cluster_parts = None
    if cluster_image is not None:
        found = cluster_image.topic(metadata.name)
        if found is not None:
            cluster_parts = tuple(map(found.partitions.get, indexes))
    local_parts = None
    if cluster_parts is None or None in cluster_parts:
        found = broker.image.topic(metadata.name)
        if found is not None:
            local_parts = tuple(map(found.partitions.get, indexes))
    return metadata.topic_id, n, broker.node_id, cluster_parts, local_parts


def _encode_partitions(lay: Layout, state: tuple) -> list[bytes]:
    _, n, node_id, cluster_parts, local_parts = state
    me = (node_id,)
    out = []
    for p in range(n):
        kraft = cluster_parts[p] if cluster_parts is not None else None
        if kraft is not None:
            # In a KRaft cluster the committed metadata says who leads what
            # (kref/node/broker_view.py).
            error = ErrorCode.NONE if kraft.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE
            out.append(encode_partition(lay, error, p, kraft.leader, kraft.leader_epoch, kraft.replicas, kraft.isr))
            continue
        # Alone, this broker leads everything; the epoch is the image's, as
        # Kafka answers from its metadata cache.
        local = local_parts[p] if local_parts is not None else None
        epoch = local.leader_epoch if local is not None else 0
        out.append(encode_partition(lay, ErrorCode.NONE, p, node_id, epoch, me, me))
    return out


def _topic_chunk(lay: Layout, broker, cluster_image, metadata, operations: int, cache) -> bytes:
    state = _topic_state(broker, cluster_image, metadata)
    key = (lay.version, metadata.name, operations)
    if cache is not None:
        found = cache.topics.get(key)
        if found is not None and found[0] == state:
            return found[1]
    chunk = encode_topic(lay, ErrorCode.NONE, metadata.name, metadata.topic_id, metadata.is_internal, operations,
                         _encode_partitions(lay, state))
    if cache is not None:
        cache.topics.put(key, (state, chunk), len(chunk))
    return chunk


async def handle_metadata(ctx, request, cache: MetadataCache | None = None) -> tuple[PreEncoded, bool]:
    """(the encoded answer, whether any topic in it carries an error)."""
    broker = ctx.broker
    lay = layout(ctx.api_version)
    include_topic_ops = getattr(request, "include_topic_authorized_operations", False)
    include_cluster_ops = getattr(request, "include_cluster_authorized_operations", False)
    allow_auto_create = getattr(request, "allow_auto_topic_creation", True)
    topic_ops = TOPIC_AUTHORIZED_OPERATIONS if include_topic_ops else AUTHORIZED_OPERATIONS_OMITTED
    view = getattr(broker, "kraft", None)
    topics: list[bytes] = []
    has_error = False

    def found(metadata) -> None:
        cluster_image = getattr(view, "image", None) if view is not None else None
        topics.append(_topic_chunk(lay, broker, cluster_image, metadata, topic_ops, cache))

    def failed(error_code, name, topic_id) -> None:
        nonlocal has_error
        has_error = True
        topics.append(encode_topic(lay, error_code, name, topic_id, False, AUTHORIZED_OPERATIONS_OMITTED, []))

    requested = request.topics
    if ctx.api_version == 0 and not requested:
        requested = None  # v0: an empty list means all topics
    if requested is None:
        for metadata in list(broker.topics.values()):
            found(metadata)
    else:
        seen = set()
        for wanted in requested:
            name = getattr(wanted, "name", None)
            topic_id = getattr(wanted, "topic_id", None)
            if name is None and topic_id not in (None, ZERO_UUID):
                metadata = broker.topic_by_id(topic_id)
                if metadata is None:
                    failed(ErrorCode.UNKNOWN_TOPIC_ID, None, topic_id)
                else:
                    found(metadata)
                continue
            if name in seen:
                continue
            seen.add(name)
            try:
                validate_topic_name(name)
            except BrokerError as exc:
                failed(exc.error_code, name, ZERO_UUID)
                continue
            metadata = broker.get_topic(name)
            if metadata is None and allow_auto_create and view is not None:
                metadata = await view.auto_create(name)
            elif metadata is None and allow_auto_create:
                try:
                    metadata = broker.maybe_auto_create(name)
                except BrokerError as exc:
                    failed(exc.error_code, name, ZERO_UUID)
                    continue
            if metadata is None:
                failed(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name, ZERO_UUID)
            else:
                found(metadata)
    if view is not None:
        brokers = tuple(
            build(lay.broker_type, node_id=node_id, host=host, port=port, rack=rack)
            for node_id, host, port, rack in view.brokers(ctx.listener_name)
        )
        controller_id = view.controller_id()
    else:
        node_id, host, port = brokers_of(broker, ctx.listener_name)
        brokers = (build(lay.broker_type, node_id=node_id, host=host, port=port, rack=None),)
        controller_id = broker.node_id
    cluster_ops = CLUSTER_AUTHORIZED_OPERATIONS if include_cluster_ops else AUTHORIZED_OPERATIONS_OMITTED
    body = encode_response(lay, brokers, broker.cluster_id, controller_id, cluster_ops, topics)
    return PreEncoded(lay.response_type, body), has_error

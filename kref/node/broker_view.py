"""A broker's view of the committed cluster metadata: __cluster_metadata -> image -> replicas.

Theory of operation
-------------------
In a KRaft cluster a broker learns everything about the cluster from the
metadata log: which brokers are registered and unfenced (and where they
listen), which topics exist with which ids, and each partition's replicas,
isr, leader, leader_epoch and partition_epoch. `ClusterView` takes the
committed records the node's RaftNode hands over and gives them to the
broker (`Broker.apply_cluster_records`), which replays them into its one
MetadataImage (kref/metadata/image.py, the same replay the controller core
uses) and hands the delta to its replica manager: only the brokers a
partition names as replicas create its log, the leader's replica core gets
BecomeLeader and the others BecomeFollower with the image's epochs, and the
replica fetchers (kref/broker/replica_fetcher.py) follow the leaders. A
partition that no longer names this broker loses its local log.

It answers the broker's handlers from the image:

- Metadata and DescribeCluster list the unfenced brokers with their
  endpoint on the connection's listener, each partition's leader,
  leader_epoch, replicas and isr, and as controller_id an alive broker
  (this one when it is alive): KRaft clients send admin requests to any
  broker, which forwards them, so the id must be one the answer lists;
- CreateTopics, DeleteTopics and CreatePartitions are forwarded to the
  active controller over its CONTROLLER listener (Kafka's brokers forward
  too); the broker answers once the controller has committed the change and
  this broker's view shows it.

The client listeners answer nothing until this incarnation's registration
is applied and unfenced in the image (`serving`): an answer before that
would leave this broker, often every broker, out of Metadata.

Produce, Fetch, ListOffsets and OffsetsForLeaderEpoch need nothing from
here: each partition's replica core refuses what it does not lead
(NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH).

Until __consumer_offsets is created through the controller, a node's
internal topics still come from its local metadata source; both sources feed
the same image (their topics never overlap).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import sys
import uuid
from dataclasses import dataclass
from typing import Any, Callable

import trio

from kref.node.raft_driver import RaftNode
from kref.metadata.image import MetadataImage, PartitionImage, TopicImage
from kref.node.controller_driver import controller_rpc
from kref.protocol.codec import request_class
from kref.protocol.errors import ErrorCode
from kref.protocol.framing import FrameError
from kref.replication import replica as core

log = logging.getLogger("kref.cluster_view")

FORWARD_TIMEOUT_S = 15.0
FORWARD_MAX_TIMEOUT_S = 60.0  # bound on a client-given operation timeout while forwarding
# How long a resent admin request waits for this broker's image to show what the
# controller's answer describes before reconciling (the image trails by milliseconds).
RECONCILE_WAIT_S = 5.0
FORWARD_RETRY_BACKOFF_S = 0.1  # between tries while no controller answers (Kafka: retry.backoff.ms 100)
CREATE_TOPICS = 19
DELETE_TOPICS = 20
ALTER_CONFIGS = 33
CREATE_PARTITIONS = 37
ELECT_LEADERS = 43
PREFERRED_ELECTION = 0  # ElectLeadersRequest.election_type (1: unclean)
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
ALTER_PARTITION = 56
ALTER_PARTITION_VERSION = 3  # NewIsrWithEpochs (KIP-903)
# Partitions per AlterPartition request: bounds the request and the
# controller's one step over it (each partition is one core event).
ALTER_PARTITION_MAX_BATCH = 500


class ClusterView:
    def __init__(self, raft: RaftNode, broker: Any, lifecycle: Any = None) -> None:
        self.raft = raft
        self.broker = broker
        # Its broker_epoch goes into AlterPartition (the controller checks it).
        self.lifecycle = lifecycle
        # Topics that came from __cluster_metadata (the rest are local internal ones).
        self.cluster_topics: set[str] = set()
        self.changed = trio.Event()
        # False while replaying the metadata log's history at start: the image
        # grows but the replica manager waits (see _on_commit).
        self.caught_up = lifecycle is None
        # Set once this incarnation is registered and unfenced in the image: the
        # client listeners hold every connection until then (kref/broker/server.py),
        # as Kafka's brokers enable request processing only once caught up.
        self.serving = trio.Event()
        if lifecycle is not None:
            broker.serving_gate = self.serving
        # AlterPartition, batched as Kafka's AlterPartitionManager batches: the
        # newest proposal of each partition waits in `_alter_pending`; one
        # request at a time carries the pending proposals of up to
        # ALTER_PARTITION_MAX_BATCH partitions, so a broker that must add a
        # returning follower to thousands of isrs sends a handful of requests,
        # not thousands (which starved its heartbeats and got it fenced).
        self._alter_pending: dict[Any, tuple[Any, core.AlterPartition]] = {}
        # Partitions whose core waits out its resend backoff: key -> (partition, due ms).
        self._alter_resend_due: dict[Any, tuple[Any, int]] = {}
        self._alter_sender_running = False
        self._alter_wake = trio.Event()
        self.alter_partition_requests = 0  # AlterPartition requests sent (numbered in the per-request log line)
        raft.on_commit.append(self._on_commit)
        raft.on_snapshot.append(self._on_snapshot)
        broker.kraft = self  # the handlers' hook

    @property
    def image(self) -> MetadataImage:
        return self.broker.image

    # ------------------------------------------------------------ log -> image -> replica manager

    def _on_commit(self, decoded: list) -> None:
        """Committed records, decoded once by the RaftNode (it logged and skipped unreadable ones)."""
        self._apply(decoded)

    def _on_snapshot(self, load) -> None:
        """A snapshot (at start, or from the leader): the records that turn what
        this broker applied into the snapshot's image go the way committed ones do."""
        self._apply(list(load.changes))

    def _apply(self, decoded: list) -> None:
        delta = self.broker.apply_cluster_records(decoded, publish=self.caught_up)
        self.cluster_topics.update(delta.created_topics)
        self.cluster_topics.difference_update(delta.deleted_topics)
        if not self.caught_up and self._own_registration_applied():
            # Everything before our own registration is history: act on the
            # image as it is now, once (Kafka publishes only a caught-up image).
            self.caught_up = True
            self.broker.publish_cluster_image()
        if (self.lifecycle is not None and not self.serving.is_set()
                and self.image.ready_to_serve(self.broker.node_id, self.lifecycle.incarnation_id)):
            log.info("node %d: registered and unfenced in the metadata image; answering clients", self.broker.node_id)
            self.serving.set()
        self.changed.set()
        self.changed = trio.Event()

    def _own_registration_applied(self) -> bool:
        b = self.image.brokers.get(self.broker.node_id)
        return b is not None and self.lifecycle is not None and b.incarnation_id == self.lifecycle.incarnation_id

    # ------------------------------------------------------------ queries for the handlers

    def controller_id(self) -> int:
        """The controller_id clients see: a broker that forwards (see
        MetadataImage.client_controller_id), never an unlisted node."""
        return self.image.client_controller_id(self.broker.node_id)

    def active_controller_id(self) -> int:
        """The quorum leader this node knows (-1: none yet)."""
        return self.raft.core.leader_id

    def broker_endpoint(self, broker_id: int, listener_name: str | None) -> tuple[str, int] | None:
        """(host, port) of an unfenced broker on `listener_name` (else its first listener)."""
        b = self.image.brokers.get(broker_id)
        if b is None or b.fenced or not b.end_points:
            return None
        endpoint = next((e for e in b.end_points if e.name == listener_name), b.end_points[0])
        return endpoint.host or "127.0.0.1", endpoint.port

    def brokers(self, listener_name: str) -> list[tuple[int, str, int, str | None]]:
        """(node_id, host, port, rack) of the unfenced brokers on `listener_name`."""
        out = []
        for broker_id, b in sorted(self.image.brokers.items()):
            if b.fenced:
                continue
            endpoint = next((e for e in b.end_points if e.name == listener_name), b.end_points[0] if b.end_points else None)
            if endpoint is not None:
                out.append((broker_id, endpoint.host, endpoint.port, b.rack))
        return out

    def partition(self, topic: str, partition: int) -> PartitionImage | None:
        return self.image.partition(topic, partition)

    def has_topic(self, name: str) -> bool:
        return name in self.image.topics

    # ------------------------------------------------------------ AlterPartition (KIP-497)

    def is_cluster_topic(self, name: str) -> bool:
        return name in self.cluster_topics

    def alter_partition(self, part: Any, request: core.AlterPartition) -> core.AlterPartitionResponse | None:
        """Queue a leader's AlterPartition for the active controller; the answer reaches
        the partition's core later, paired with this request (None now). Without a
        running broker nothing can be sent: OPERATION_NOT_ATTEMPTED now."""
        if self.broker.nursery is None:
            return core.AlterPartitionResponse(ErrorCode.OPERATION_NOT_ATTEMPTED, request.leader_epoch, frozenset(), -1,
                                               request)
        # A newer proposal supersedes an unsent older one (the core answers only
        # the request it last sent) and ends the wait for a resend.
        self._alter_pending[part.key] = (part, request)
        self._alter_resend_due.pop(part.key, None)
        self._alter_wake.set()
        if not self._alter_sender_running:
            self._alter_sender_running = True
            self.broker.start_soon(self._alter_partition_sender)
        return None

    async def _alter_partition_sender(self) -> None:
        """Send what is pending, one request at a time; step each answer into its core.

        A failure (no answer, NOT_CONTROLLER) goes to each core like an answer;
        the core decides when to send again (its backoff) and names the time in
        `alter_partition_resend_due_ms`: this task steps it then (a Tick, which
        does nothing else while a change is pending), and the core's resend lands
        in `_alter_pending`. The task ends when nothing is pending or due."""
        try:
            while True:
                now_ms = self.broker.now_ms()
                for key, (part, due) in list(self._alter_resend_due.items()):
                    if due <= now_ms:
                        del self._alter_resend_due[key]
                        if self.broker.partitions.get(key) is part:
                            part.tick(now_ms)  # the core's resend lands in _alter_pending
                if not self._alter_pending:
                    if not self._alter_resend_due:
                        return
                    self._alter_wake = trio.Event()
                    next_due = min(due for _, due in self._alter_resend_due.values())
                    with trio.move_on_after(max(0, next_due - now_ms) / 1000):
                        await self._alter_wake.wait()
                    continue
                batch = []
                for key in list(self._alter_pending)[:ALTER_PARTITION_MAX_BATCH]:
                    part, request = self._alter_pending.pop(key)
                    if self.broker.partitions.get(key) is part:
                        batch.append((part, request))
                if not batch:
                    continue
                responses = await self._send_alter_partitions(batch)
                now_ms = self.broker.now_ms()
                for (part, request), response in zip(batch, responses):
                    if self.broker.partitions.get(part.key) is not part:
                        continue
                    # A stale answer (to a request the core no longer waits for) changes nothing there.
                    part.on_alter_partition_response(response, now_ms)
                    due = part.core.alter_partition_resend_due_ms
                    if due is not None and part.key not in self._alter_pending:
                        self._alter_resend_due[part.key] = (part, due)
        finally:
            self._alter_sender_running = False
            if self._alter_pending and self.broker.nursery is not None:
                # Queued while this task was ending (or it was cancelled): go on.
                self._alter_sender_running = True
                self.broker.start_soon(self._alter_partition_sender)

    async def _send_alter_partitions(self, batch: list[tuple[Any, core.AlterPartition]]) -> list[core.AlterPartitionResponse]:
        """One AlterPartition request for `batch` (partition, proposal) pairs: an answer for each, in order."""
        cls = request_class(ALTER_PARTITION, ALTER_PARTITION_VERSION)
        m = sys.modules[cls.__module__]
        own_epoch = self.lifecycle.broker_epoch if self.lifecycle is not None else -1
        answers: dict[tuple[uuid.UUID, int], Any] = {}
        by_topic: dict[uuid.UUID, list[Any]] = {}
        topic_ids: list[uuid.UUID | None] = []
        for part, request in batch:
            topic = self.image.topic(part.topic)
            topic_ids.append(topic.topic_id if topic is not None else None)
            if topic is None:
                continue
            # v3 (KIP-903): each isr member with the broker epoch the core counted for
            # it; this leader's own entry is its own epoch.
            by_topic.setdefault(topic.topic_id, []).append(m.PartitionData(
                partition_index=part.partition, leader_epoch=request.leader_epoch,
                new_isr_with_epochs=tuple(
                    m.BrokerState(broker_id=b, broker_epoch=epoch)
                    for b, epoch in request.isr_with_broker_epochs(self.broker.node_id, own_epoch)),
                leader_recovery_state=0, partition_epoch=request.partition_epoch))
        failed: int | None = None
        if by_topic:
            body = cls(broker_id=self.broker.node_id, broker_epoch=own_epoch, topics=tuple(
                m.TopicData(topic_id=topic_id, partitions=tuple(partitions)) for topic_id, partitions in by_topic.items()))
            self.alter_partition_requests += 1
            # One line per request (Kafka logs each isr change): how many partitions it carries.
            log.info("node %d: AlterPartition request %d for %d partition(s)", self.broker.node_id,
                     self.alter_partition_requests, sum(len(ps) for ps in by_topic.values()))
            try:
                response = await self.forward(body)
                for t in response.topics:
                    for p in t.partitions:
                        answers[(t.topic_id, p.partition_index)] = p
                if response.error_code:
                    failed = int(response.error_code)
            except (OSError, ConnectionError, trio.TooSlowError, trio.BrokenResourceError, FrameError,
                    AttributeError) as exc:
                log.info("node %d: AlterPartition of %d partition(s) failed: %s", self.broker.node_id,
                         len(batch), exc or type(exc).__name__)
                failed = ErrorCode.REQUEST_TIMED_OUT
        out = []
        for (part, request), topic_id in zip(batch, topic_ids):
            p = answers.get((topic_id, part.partition)) if failed is None else None
            if topic_id is None:
                code, leader_epoch, isr, partition_epoch = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, request.leader_epoch, (), -1
            elif p is None:
                # A request-level error, a failed exchange, or a partition the
                # answer left out: no answer for it (the core backs off and resends).
                code = failed if failed is not None else ErrorCode.UNKNOWN_SERVER_ERROR
                leader_epoch, isr, partition_epoch = request.leader_epoch, (), -1
            else:
                code, leader_epoch, isr, partition_epoch = p.error_code, p.leader_epoch, tuple(p.isr), p.partition_epoch
            out.append(core.AlterPartitionResponse(int(code), int(leader_epoch), frozenset(isr), int(partition_epoch),
                                                   request))
        return out

    def partition_count(self, name: str) -> int | None:
        t = self.image.topics.get(name)
        return len(t.partitions) if t is not None else None

    # ------------------------------------------------------------ forwarding

    async def forward(self, body: Any, timeout_s: float = FORWARD_TIMEOUT_S) -> Any:
        """Send a request to the active controller's CONTROLLER listener; its response
        (see `forward_resending`)."""
        response, _ = await self.forward_resending(body, timeout_s)
        return response

    async def forward_resending(self, body: Any, timeout_s: float = FORWARD_TIMEOUT_S) -> tuple[Any, bool]:
        """The controller's response, and whether the request went more than once.

        As Kafka's broker-to-controller channel does, a request that finds no
        active controller (none known yet, or its listener gone in a failover) or
        is answered NOT_CONTROLLER by a node that just lost the leadership goes
        again once the quorum names a leader, within `timeout_s` in all; a
        client then sees a failover as a slower answer, not as an error.

        A resend is ambiguous: a controller that resigns answers NOT_CONTROLLER
        to requests whose records it had already proposed, and the next leader
        may commit them (Raft commits an earlier epoch's tail). The resend then
        meets its own first try already applied (TOPIC_ALREADY_EXISTS,
        INVALID_PARTITIONS "not more"). The second value lets the caller
        reconcile that (`reconcile_resent`)."""
        deadline = trio.current_time() + timeout_s
        client_id = f"kref-forward-{self.broker.node_id}"
        tries = 0
        while True:
            remaining = deadline - trio.current_time()
            tries += 1
            try:
                response = await controller_rpc(self.raft, body, remaining, client_id)
            except (OSError, ConnectionError, trio.BrokenResourceError, FrameError):
                if deadline - trio.current_time() <= FORWARD_RETRY_BACKOFF_S:
                    raise
            else:
                if not _answered_not_controller(body, response) or deadline - trio.current_time() <= FORWARD_RETRY_BACKOFF_S:
                    return response, tries > 1
            await trio.sleep(FORWARD_RETRY_BACKOFF_S)

    async def auto_create(self, name: str) -> Any:
        """Metadata-triggered creation, forwarded like CreateTopics; the local topic or None."""
        config = self.broker.config
        if not config.auto_create_topics_enable:
            return None
        cls = request_class(CREATE_TOPICS, 7)
        m = sys.modules[cls.__module__]
        request = cls(
            topics=(m.CreatableTopic(name=name, num_partitions=-1, replication_factor=-1, assignments=(), configs=()),),
            timeout=datetime.timedelta(seconds=FORWARD_TIMEOUT_S),
            validate_only=False,
        )
        await self.create_topics(request)
        return self.broker.get_topic(name)

    async def _forward_then_wait(self, request: Any, applied) -> Any:
        """Forward an admin request; wait (bounded) until this broker's view
        shows what the controller committed (`applied(response)`), so that the
        client's next Metadata request, to this broker, sees it."""
        before = _counts_before(request, self.image)
        try:
            response, resent = await self.forward_resending(request, _client_timeout_s(request))
        except (OSError, ConnectionError, trio.TooSlowError, trio.BrokenResourceError, FrameError) as exc:
            log.info("node %d: forwarding %s failed: %s", self.broker.node_id, type(request).__name__, exc)
            return None
        if getattr(request, "validate_only", False):
            return response
        if resent:
            # The answer to a resend may describe the first try's own effect; wait
            # until this broker's image has caught up with it, then reconcile.
            with trio.move_on_after(RECONCILE_WAIT_S):
                while not applied(response) or not _image_answers(request, response, before, self.image):
                    await self.changed.wait()
            response = reconcile_resent(request, response, before, self.image)
        with trio.move_on_after(FORWARD_TIMEOUT_S):
            while not applied(response):
                await self.changed.wait()
        return response

    async def elect_leaders(self, request: Any) -> Any:
        """Forward ElectLeaders to the active controller. A resend answered
        ELECTION_NOT_NEEDED for a partition its own first try elected is reconciled
        (`reconcile_elect_resent`) once this broker's image shows the election."""
        before = _leaders_before(request, self.image)
        response, resent = await self.forward_resending(request)
        if resent and before:
            with trio.move_on_after(RECONCILE_WAIT_S):
                while not _elect_image_answers(request, response, self.image):
                    await self.changed.wait()
            response = reconcile_elect_resent(request, response, before, self.image)
        return response

    async def alter_topic_configs(self, name: str, configs: dict[str, str]) -> tuple[int, str | None]:
        """A cluster topic's whole new override set, to the active controller (it
        writes ConfigRecords); (error_code, message) once this broker's image shows it."""
        return await self._alter_configs(2, name, configs, lambda: self.image.topic_configs(name))

    async def alter_broker_configs(self, resource_name: str, configs: dict[str, str]) -> tuple[int, str | None]:
        """A BROKER resource's whole new dynamic override set ("" = cluster default),
        the same way (KIP-226: ConfigRecords every broker applies)."""
        return await self._alter_configs(4, resource_name, configs,
                                         lambda: self.image.configs.get((4, resource_name), {}))

    async def _alter_configs(self, resource_type: int, name: str, configs: dict[str, str], shown) -> tuple[int, str | None]:
        cls = request_class(ALTER_CONFIGS, 2)
        m = sys.modules[cls.__module__]
        request = cls(resources=(m.AlterConfigsResource(
            resource_type=resource_type, resource_name=name,
            configs=tuple(m.AlterableConfig(name=k, value=v) for k, v in sorted(configs.items()))),),
            validate_only=False)
        response = await self._forward_then_wait(request, lambda response: all(
            shown() == configs for r in response.responses if r.error_code == ErrorCode.NONE))
        if response is None:
            return ErrorCode.REQUEST_TIMED_OUT, "the active controller did not answer"
        result = response.responses[0]
        return result.error_code, result.error_message

    async def create_topics(self, request: Any) -> Any:
        return await self._forward_then_wait(request, lambda response: all(
            self.has_topic(t.name) for t in response.topics if t.error_code == ErrorCode.NONE
        ))

    async def delete_topics(self, request: Any) -> Any:
        return await self._forward_then_wait(request, lambda response: not any(
            self.has_topic(t.name) for t in response.responses if t.error_code == ErrorCode.NONE
        ))

    async def create_partitions(self, request: Any) -> Any:
        counts = {t.name: t.count for t in request.topics}
        return await self._forward_then_wait(request, lambda response: all(
            len(self.image.topics[t.name].partitions) >= counts[t.name]
            for t in response.results if t.error_code == ErrorCode.NONE and t.name in self.image.topics
        ))


# ------------------------------------------------------------ the forwarded APIs, one row each


@dataclass(frozen=True)
class _Forwarded:
    """How the broker reads one forwarded API's answer (and, for the topic admin
    APIs, its request): where the per-topic results are, and what "already done"
    means for a resend that meets its own first try.

    `results` None: the answer has one top-level error_code (absent in some old
    versions, e.g. ElectLeaders v0: then there is nothing to resend on)."""

    results: str | None = None  # the response's list of per-topic (per-resource) results
    name: str = "name"  # a result's name field
    # The per-topic errors a resend may meet as its own first try's effect ...
    already_done: frozenset[int] = frozenset()
    # ... the topics the request names, as (name, topic id, partition count asked) ...
    targets: Callable[[Any], list[tuple[str | None, uuid.UUID | None, int | None]]] = lambda request: []
    # ... whether the image now shows what such an answer claims (partitions now, asked) ...
    shown: Callable[[int | None, int | None], bool] = lambda now, asked: True
    # ... and whether it is this request's effect (partitions before the first try, now, asked).
    done: Callable[[int | None, int | None, int | None], bool] = lambda before, now, asked: False


def _delete_targets(request: Any) -> list[tuple[str | None, uuid.UUID | None, int | None]]:
    if request.__version__ >= 6:  # by name or by topic id (KIP-516)
        return [(t.name, t.topic_id if t.name is None else None, None) for t in request.topics]
    return [(name, None, None) for name in request.topic_names]


_FORWARDED: dict[int, _Forwarded] = {
    CREATE_TOPICS: _Forwarded(
        "topics", already_done=frozenset({ErrorCode.TOPIC_ALREADY_EXISTS}),
        targets=lambda request: [(t.name, None, None) for t in request.topics],
        shown=lambda now, asked: now is not None,
        done=lambda before, now, asked: before is None and now is not None),
    DELETE_TOPICS: _Forwarded(
        "responses", already_done=frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID}),
        targets=_delete_targets,
        shown=lambda now, asked: now is None,
        done=lambda before, now, asked: before is not None and now is None),
    CREATE_PARTITIONS: _Forwarded(
        "results", already_done=frozenset({ErrorCode.INVALID_PARTITIONS}),  # "not more" than it has
        targets=lambda request: [(t.name, None, t.count) for t in request.topics],
        shown=lambda now, asked: now is not None and now >= (asked or 0),
        done=lambda before, now, asked: before is not None and now is not None and before < (asked or 0) == now),
    ALTER_CONFIGS: _Forwarded("responses", name="resource_name"),
    ALTER_PARTITION: _Forwarded(),
    ELECT_LEADERS: _Forwarded(),
    ALTER_PARTITION_REASSIGNMENTS: _Forwarded(),
    LIST_PARTITION_REASSIGNMENTS: _Forwarded(),
}


def _forwarded(message: Any) -> _Forwarded:
    row = _FORWARDED.get(message.__api_key__)
    if row is None:
        raise ValueError(f"API {message.__api_key__} ({type(message).__name__}) is not one a broker forwards")
    return row


# What the image showed of the topics an admin request names, before its first
# try: key (the name, or the topic id a by-id delete names) -> (name, partitions;
# None: no such topic).
Before = dict[Any, tuple[str | None, int | None]]


def _counts_before(request: Any, image: MetadataImage) -> Before:
    """Partition counts, before the first try, of the topics an admin request names
    (None: no such topic); DeleteTopics by id names them through the image."""
    before: Before = {}
    for name, topic_id, _ in _forwarded(request).targets(request):
        resolved = name if name is not None else image.topics_by_id.get(topic_id)
        topic = image.topics.get(resolved) if resolved is not None else None
        before[name if name is not None else topic_id] = (resolved, len(topic.partitions) if topic is not None else None)
    return before


def _entry_key(entry: Any, row: _Forwarded) -> Any:
    """The key `_counts_before` filed a result's topic under: its name, else (a
    delete by id of a topic the controller no longer knows) its topic id."""
    name = getattr(entry, row.name)
    return name if name is not None else getattr(entry, "topic_id", None)


def _partitions(image: MetadataImage, name: str | None) -> int | None:
    topic = image.topics.get(name) if name is not None else None
    return len(topic.partitions) if topic is not None else None


def reconcile_resent(request: Any, response: Any, before: Before, now: MetadataImage) -> Any:
    """The answer a client should see after a resent admin request.

    A per-topic error that says "already done" (TOPIC_ALREADY_EXISTS,
    INVALID_PARTITIONS because the count is already there, UNKNOWN_TOPIC_OR_PARTITION
    or UNKNOWN_TOPIC_ID on a delete) is the first try's own effect when this
    broker's image showed the change missing before the first try (`before`,
    from `_counts_before`) and shows it present now; that entry then answers
    NONE. Anything else is left as the controller said it. Kafka's forwarding
    has the same ambiguity and passes the error on; kref resolves it here
    because the broker holds both images. The one cost: a client racing an
    identical request through a failover may also see NONE."""
    row = _forwarded(request)
    if not row.already_done:
        return response
    asked = {name if name is not None else topic_id: count for name, topic_id, count in row.targets(request)}
    entries = []
    for entry in getattr(response, row.results):
        key = _entry_key(entry, row)
        if entry.error_code in row.already_done and key in before:
            name, partitions_before = before[key]
            if name is not None and row.done(partitions_before, _partitions(now, name), asked.get(key)):
                entry = dataclasses.replace(entry, error_code=ErrorCode.NONE, error_message=None,
                                            **_done_fields(entry, name, now.topics.get(name)))
        entries.append(entry)
    return dataclasses.replace(response, **{row.results: tuple(entries)})


# ElectLeaders: (topic, partition) -> (leader, preferred replica) before the first try.
LeadersBefore = dict[tuple[str, int], tuple[int, int]]


def _leaders_before(request: Any, image: MetadataImage) -> LeadersBefore:
    """The leaders, before the first try, of the partitions an ElectLeaders names
    (a request for every partition names none: Kafka leaves "not needed" out of
    that answer, so nothing there can need reconciling)."""
    before: LeadersBefore = {}
    for t in request.topic_partitions or ():
        for pid in t.partitions:
            p = image.partition(t.topic, int(pid))
            if p is not None:
                before[(t.topic, int(pid))] = (p.leader, p.replicas[0] if p.replicas else -1)
    return before


def _election_done(election_type: int, leader: int, preferred: int) -> bool:
    """What ELECTION_NOT_NEEDED claims: the preferred replica leads (preferred), or
    some replica leads (unclean)."""
    return leader == preferred if election_type == PREFERRED_ELECTION else leader >= 0


def _not_needed(response: Any):
    """(topic, partition) of each ELECTION_NOT_NEEDED result."""
    for result in response.replica_election_results:
        for p in result.partition_result:
            if p.error_code == ErrorCode.ELECTION_NOT_NEEDED:
                yield result.topic, int(p.partition_id)


def _elect_image_answers(request: Any, response: Any, image: MetadataImage) -> bool:
    """Whether `image` shows what every ELECTION_NOT_NEEDED of `response` claims."""
    election_type = getattr(request, "election_type", PREFERRED_ELECTION)  # v0: preferred only
    for name, pid in _not_needed(response):
        p = image.partition(name, pid)
        if p is None or not _election_done(election_type, p.leader, p.replicas[0] if p.replicas else -1):
            return False
    return True


def reconcile_elect_resent(request: Any, response: Any, before: LeadersBefore, now: MetadataImage) -> Any:
    """A resent ElectLeaders' answer as the client should see it: an
    ELECTION_NOT_NEEDED for a partition whose election was missing before the
    first try and is there now is that try's own work, and answers NONE (as
    `reconcile_resent` does for topics). Other results are left as they are."""
    election_type = getattr(request, "election_type", PREFERRED_ELECTION)
    results = []
    for result in response.replica_election_results:
        partitions = []
        for p in result.partition_result:
            key = (result.topic, int(p.partition_id))
            current = now.partition(*key)
            if (p.error_code == ErrorCode.ELECTION_NOT_NEEDED and key in before and current is not None
                    and not _election_done(election_type, *before[key])
                    and _election_done(election_type, current.leader, current.replicas[0] if current.replicas else -1)):
                p = dataclasses.replace(p, error_code=ErrorCode.NONE, error_message=None)
            partitions.append(p)
        results.append(dataclasses.replace(result, partition_result=tuple(partitions)))
    return dataclasses.replace(response, replica_election_results=tuple(results))


def _done_fields(entry: Any, name: str, topic: TopicImage | None) -> dict[str, Any]:
    """Fields of a reconciled entry that the controller left empty: a by-id delete's
    topic name; CreateTopics' (v5+) topic id, partition count and replication
    factor, from the image."""
    fields = {f.name for f in dataclasses.fields(entry)}
    values: dict[str, Any] = {}
    if "name" in fields and entry.name is None:
        values["name"] = name
    if topic is not None and "num_partitions" in fields:  # CreateTopics v5+
        values["topic_id"] = topic.topic_id
        values["num_partitions"] = len(topic.partitions)
        if topic.partitions:
            values["replication_factor"] = len(next(iter(topic.partitions.values())).replicas)
    return values


def _image_answers(request: Any, response: Any, before: Before, image: MetadataImage) -> bool:
    """Whether `image` already shows what an "already done" answer to a resend claims
    (so that `reconcile_resent` reads the state the controller answered from)."""
    row = _forwarded(request)
    if not row.already_done:
        return True
    asked = {name if name is not None else topic_id: count for name, topic_id, count in row.targets(request)}
    for entry in getattr(response, row.results):
        key = _entry_key(entry, row)
        if entry.error_code in row.already_done and key in before:
            name = before[key][0]
            if name is not None and not row.shown(_partitions(image, name), asked.get(key)):
                return False
    return True


def _client_timeout_s(request: Any) -> float:
    """How long a forwarded admin request may wait for a controller: the client's own
    operation timeout where the request carries one (CreateTopics, DeleteTopics,
    CreatePartitions; Kafka's controller works to that deadline too), at least
    FORWARD_TIMEOUT_S and at most FORWARD_MAX_TIMEOUT_S."""
    timeout = getattr(request, "timeout", None)
    seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else 0.0
    return min(max(FORWARD_TIMEOUT_S, seconds), FORWARD_MAX_TIMEOUT_S)


def _answered_not_controller(request: Any, response: Any) -> bool:
    """True when a controller's answer refused the whole request as NOT_CONTROLLER: its
    top-level error, or every entry of its result list (CreateTopics and the like
    answer per topic)."""
    row = _forwarded(request)
    if row.results is None:
        return getattr(response, "error_code", ErrorCode.NONE) == ErrorCode.NOT_CONTROLLER
    entries = getattr(response, row.results)
    return bool(entries) and all(e.error_code == ErrorCode.NOT_CONTROLLER for e in entries)

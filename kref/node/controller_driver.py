"""Trio glue for the controller core, and the broker's side of membership.

Theory of operation
-------------------
`ControllerDriver` runs kref/controller/controller.py's ControllerCore on
every controller node, next to its RaftNode:

- a standby does no work per commit: the node's RaftNode already keeps the
  committed MetadataImage (snapshot + records). When its quorum core
  becomes leader the controller core is handed a copy of that image
  (`LoadImage`, O(partitions) dict entries, no replay), replays the rest of
  its own log (the uncommitted tail of earlier epochs, which this leader
  will commit), then becomes active with a fresh heartbeat session per
  broker. Before, a standby decoded and replayed every committed record a
  second time inside the quorum's step, and a deposed controller rebuilt its
  core from the whole image (about 1.1 s of CPU at 10,000 partitions, on
  the event loop the quorum's timers share);
- a request (BrokerRegistration, BrokerHeartbeat on the CONTROLLER
  listener) is stepped through the core; records it writes are proposed to
  the quorum as one batch and the reply waits until the high watermark
  passes the batch (bounded by `REPLY_TIMEOUT_S`, then REQUEST_TIMED_OUT);
  a reply with nothing to write waits for the offset the core names (its
  uncommitted state), as Kafka's controller does;
- a tick fences brokers whose session expired (FenceBroker records);
- with tracing on, the decision's trace events are written before its records
  are proposed, and each PartitionRecord it writes is traced as the
  partition's creation (the replication check starts there);
- on losing leadership the core only resigns (its optimistic state may hold
  records the quorum never committed: the next `LoadImage` replaces all of
  it) and every waiting request is answered NOT_CONTROLLER.

`BrokerLifecycle` is the broker side (Kafka's BrokerLifecycleManager): it
drives kref/controller/lifecycle.py's pure core, which decides what to send
and when and what each answer means; the driver draws the incarnation id and
carries the requests to the active controller (found through the quorum: the
leader id this node's quorum core knows, at its controller.quorum.voters
address).

The heartbeat's current_metadata_offset is Kafka's inclusive "last offset
applied"; the core works with the exclusive end (the spec's
broker_metadata_offset), so the two sides add and subtract one.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import trio

from kref.broker.config import BrokerConfig
from kref.broker.router import RequestContext, Router
from kref.controller import controller as c
from kref.controller import lifecycle as lc
from kref.controller import quorum as q
from kref.node.raft_driver import RaftNode, _kio
from kref.node.controller_channel import DEFAULT_LANE, LIFECYCLE_LANE
from kref.metadata import serde
from kref.protocol.codec import response_class
from kref.protocol.errors import ErrorCode
from kref.trace.events import partition_creations
from kref.protocol.framing import FrameError
from kref.protocol.messages import build, nested, results_by_topic

log = logging.getLogger("kref.controller")

BROKER_REGISTRATION, BROKER_HEARTBEAT, CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 62, 63, 19, 20, 37
ALLOCATE_PRODUCER_IDS = 67
ALTER_PARTITION = 56
ELECT_LEADERS = 43
ALTER_CONFIGS = 33
TOPIC_RESOURCE_TYPE = 2
BROKER_RESOURCE_TYPE = 4
REPLY_TIMEOUT_S = 10.0
CONTROLLER_TICK_S = 0.05
MAX_PENDING = 10_000


class ControllerDriver:
    def __init__(self, raft: RaftNode, config: BrokerConfig, trace_sink: Any = None) -> None:
        self.raft = raft
        self.config = config
        self.trace_sink = trace_sink
        self.core = self._new_core()
        self.next_request_id = 0
        # request id -> [last offset of its batch, reply, trio.Event]
        self.pending: dict[int, list] = {}
        raft.on_high_watermark.append(self._on_high_watermark)
        raft.on_leader_change.append(self._on_leader_change)

    def _new_core(self) -> c.ControllerCore:
        tracing = self.trace_sink is not None and getattr(self.trace_sink, "enabled", False)
        return c.ControllerCore(
            self.config.node_id, broker_session_timeout_ms=self.config.broker_session_timeout_ms, tracing=tracing,
            unclean_leader_election_enable=self.config.unclean_leader_election_enable,
            auto_leader_rebalance_enable=self.config.auto_leader_rebalance_enable,
            leader_imbalance_check_interval_ms=self.config.leader_imbalance_check_interval_seconds * 1000,
            leader_imbalance_per_broker_percentage=self.config.leader_imbalance_per_broker_percentage,
            delete_topic_enable=self.config.delete_topic_enable,
        )

    def now_ms(self) -> int:
        # The raft node's clock: the controller core's timers and the quorum's run on one clock.
        return self.raft.now_ms()

    # ------------------------------------------------------------ log -> core

    def _replay_tail(self) -> None:
        """The log past the committed image: records of earlier epochs that this
        leader will commit (read from its own log, not yet delivered)."""
        start = self.raft.applied_offset
        for offset, value in self.raft.metadata_log.committed_records(start, self.raft.metadata_log.log_end_offset):
            self.core.step(c.Replay(offset, (serde.decode(value),)), self.now_ms())

    def _on_high_watermark(self, high_watermark: int) -> None:
        for request_id, entry in list(self.pending.items()):
            if entry[0] < high_watermark:
                del self.pending[request_id]
                entry[2].set()

    def _on_leader_change(self, leader_id: int, leader_epoch: int, state: q.State) -> None:
        if state is q.State.LEADER and leader_id == self.config.node_id:
            # The raft node's image is exactly what is committed (snapshot + log).
            self.core.step(c.LoadImage(self.raft.image, self.raft.applied_offset), self.now_ms())
            self._replay_tail()
            # The quorum core's log end includes the LeaderChange record it is
            # about to append (this callback runs before that effect).
            self.core.step(c.BecomeActive(leader_epoch, self.raft.core.log_end_offset), self.now_ms())
            log.info("node %d: active controller in epoch %d", self.config.node_id, leader_epoch)
        elif self.core.active:
            # What it wrote past the commit may be truncated by the next leader:
            # the next LoadImage replaces the whole state, nothing to rebuild now.
            self.core.step(c.Resign(), self.now_ms())
            for entry in self.pending.values():
                entry[1] = _with_error(entry[1], ErrorCode.NOT_CONTROLLER)
                entry[2].set()
            self.pending.clear()

    # ------------------------------------------------------------ core -> log

    def _carry_out(self, effects: list[c.Effect]) -> list[tuple[int | None, object, trio.Event | None]]:
        """Propose written records; the replies, each with an event to wait on (None: answer now).

        Consecutive WriteRecords (the decisions of several requests taken in one
        turn, `request_many`) go to the quorum as one append: one write and one
        replication round for all of them, as Kafka's controller appends a
        whole AlterPartition request's records together.

        A decision's trace events (RegisterBroker, FenceBroker, an election:
        spec actions that append a record) are emitted before its records are
        proposed: a single voter commits inside the proposal and logs its
        AdvanceHighWatermark over them there, and the spec's append must come
        first."""
        replies: list[tuple[int | None, object, trio.Event | None]] = []
        writes: list[c.WriteRecords] = []

        def flush() -> None:
            if not writes:
                return
            batch = list(writes)
            writes.clear()
            values = [serde.encode(record) for w in batch for record in w.records]
            base = self.raft.propose(values)
            if base != batch[0].base_offset:
                # Lost leadership between the decision and the write.
                log.warning("node %d: proposal at %s, expected %d", self.config.node_id, base, batch[0].base_offset)
                self._on_leader_change(-1, -1, q.State.RESIGNED)
                for w in batch:
                    if w.request_id is not None:
                        replies.append((w.request_id, _with_error(w.reply, ErrorCode.NOT_CONTROLLER), None))
                return
            for w in batch:
                if w.request_id is not None:
                    replies.append(self._after_commit(w.request_id, w.base_offset + len(w.records), w.reply))

        for effect in effects:
            match effect:
                case c.WriteRecords():
                    if writes and writes[-1].base_offset + len(writes[-1].records) != effect.base_offset:
                        flush()
                    writes.append(effect)
                    self._trace_creations(effect)
                case c.Emit():
                    if self.trace_sink is not None:
                        self.trace_sink.emit(effect.event)
                case c.Reply():
                    flush()
                    if effect.commit_offset > self.raft.high_watermark:
                        replies.append(self._after_commit(effect.request_id, effect.commit_offset, effect.reply))
                    else:
                        replies.append((effect.request_id, effect.reply, None))
        flush()
        return replies

    def _trace_creations(self, write: c.WriteRecords) -> None:
        """A PartitionRecord (CreateTopics, CreatePartitions) is traced as the partition's creation,
        its first registration: the replication check starts there, also when no replica applied it
        before a later change (its leader was down or shutting down). Emitted with the batch's other
        events, before the proposal (see _carry_out)."""
        if self.trace_sink is None or not getattr(self.trace_sink, "enabled", False):
            return
        for event in partition_creations(write.records, write.base_offset, self.core.topics_by_id,
                                         replica=self.config.node_id, time_ms=self.now_ms()):
            self.trace_sink.emit(event)

    def _after_commit(self, request_id: int, commit_offset: int, reply: object) -> tuple:
        """A reply that waits until the high watermark reaches `commit_offset`."""
        if len(self.pending) >= MAX_PENDING:
            return request_id, _with_error(reply, ErrorCode.THROTTLING_QUOTA_EXCEEDED), None
        done = trio.Event()
        entry = [commit_offset - 1, reply, done]
        self.pending[request_id] = entry
        if commit_offset <= self.raft.high_watermark:
            self._on_high_watermark(self.raft.high_watermark)
        return request_id, entry, done

    async def request(self, make_event) -> object:
        return (await self.request_many([make_event]))[0]

    async def request_many(self, make_events: list) -> list[object]:
        """The core's replies to several requests, decided one after the other in
        one loop turn (each sees the ones before it); their records go to the
        quorum as one append (see `_carry_out`). Each reply waits for its own
        commit, all within one REPLY_TIMEOUT_S."""
        request_ids = []
        effects: list[c.Effect] = []
        now_ms = self.now_ms()
        for make_event in make_events:
            self.next_request_id += 1
            request_ids.append(self.next_request_id)
            effects.extend(self.core.step(make_event(self.next_request_id), now_ms))
        carried = {rid: (reply, done) for rid, reply, done in self._carry_out(effects)}
        out = []
        with trio.move_on_after(REPLY_TIMEOUT_S):
            for rid in request_ids:
                reply, done = carried.get(rid, (None, None))
                if reply is None:
                    out.append(c.TopicReply(ErrorCode.UNKNOWN_SERVER_ERROR, "no reply"))
                elif done is None:
                    out.append(reply)
                else:
                    await done.wait()
                    out.append(reply[1])  # the pending entry: NOT_CONTROLLER if leadership was lost
        for rid in request_ids[len(out):]:
            # Timed out: the rest answer REQUEST_TIMED_OUT (what they would have said, with that code).
            reply, done = carried.get(rid, (None, None))
            self.pending.pop(rid, None)
            if reply is None:
                out.append(c.TopicReply(ErrorCode.UNKNOWN_SERVER_ERROR, "no reply"))
            else:
                out.append(_with_error(reply[1] if done is not None else reply, ErrorCode.REQUEST_TIMED_OUT))
        return out

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            if self.core.active:
                self._carry_out(self.core.step(c.Tick(), self.now_ms()))
            await trio.sleep(CONTROLLER_TICK_S)

    # ------------------------------------------------------------ RPCs

    def register(self, router: Router) -> None:
        router.register(BROKER_REGISTRATION, 0, 0, self._handle_registration)
        router.register(BROKER_HEARTBEAT, 0, 0, self._handle_heartbeat)
        router.register(CREATE_TOPICS, 2, 7, self._handle_create_topics)
        router.register(DELETE_TOPICS, 1, 6, self._handle_delete_topics)
        router.register(CREATE_PARTITIONS, 0, 3, self._handle_create_partitions)
        router.register(ALLOCATE_PRODUCER_IDS, 0, 0, self._handle_allocate_producer_ids)
        router.register(ALTER_PARTITION, 2, 3, self._handle_alter_partition)
        router.register(ELECT_LEADERS, 0, 2, self._handle_elect_leaders)
        router.register(ALTER_CONFIGS, 0, 2, self._handle_alter_configs)
        from kref.broker.handlers import reassignments  # noqa: PLC0415 (the handlers import this module)

        reassignments.register_controller(router, self)

    async def _handle_alter_configs(self, ctx: RequestContext, request: Any) -> Any:
        """A topic's or a broker resource's whole new override set, forwarded by a
        broker (which applied the IncrementalAlterConfigs operations and checked the
        values): ConfigRecords."""
        response_type = response_class(ALTER_CONFIGS, ctx.api_version)
        result_type = nested(response_type, "AlterConfigsResourceResponse")
        results = []
        for resource in request.resources:
            # validate_only: the core makes every check and writes nothing.
            configs = tuple((cfg.name, cfg.value) for cfg in resource.configs if cfg.value is not None)
            validate_only = bool(request.validate_only)
            if resource.resource_type == BROKER_RESOURCE_TYPE:
                reply = await self.request(lambda rid, n=resource.resource_name, cf=configs: c.AlterBrokerConfigs(
                    rid, n, cf, validate_only=validate_only))
            elif resource.resource_type != TOPIC_RESOURCE_TYPE:
                reply = c.TopicReply(ErrorCode.INVALID_REQUEST, "the controller takes topic and broker configs only")
            else:
                reply = await self.request(lambda rid, n=resource.resource_name, cf=configs: c.AlterTopicConfigs(
                    rid, n, cf, validate_only=validate_only))
            results.append(build(result_type, resource_type=resource.resource_type, resource_name=resource.resource_name,
                                 error_code=reply.error_code, error_message=getattr(reply, "message", None)))
        return build(response_type, throttle_time=_zero(), responses=tuple(results))

    async def _handle_elect_leaders(self, ctx: RequestContext, request: Any) -> Any:
        """ElectLeaders (KIP-460) forwarded by a broker or sent by an admin tool."""
        election_type = getattr(request, "election_type", c.PREFERRED_ELECTION)  # v0: preferred only
        wanted = None if request.topic_partitions is None else tuple(
            (t.topic, int(p)) for t in request.topic_partitions for p in t.partitions)
        reply = await self.request(lambda rid: c.ElectLeaders(rid, election_type, wanted))
        return elect_leaders_response(ctx.api_version, reply.error_code, getattr(reply, "results", ()))

    async def _handle_delete_topics(self, ctx: RequestContext, request: Any) -> Any:
        response_type = response_class(DELETE_TOPICS, ctx.api_version)
        result_type = nested(response_type, "DeletableTopicResult")
        if ctx.api_version >= 6:
            wanted = [(t.name, t.topic_id) for t in request.topics]
        else:
            wanted = [(name, None) for name in request.topic_names]
        results = []
        for name, topic_id in wanted:
            # The core resolves an id and refuses (unknown id, delete.topic.enable off);
            # the name read here only echoes the topic in the response.
            echoed = name if name is not None else self.raft.image.topics_by_id.get(topic_id)
            reply = await self.request(lambda rid, n=name, i=topic_id: c.DeleteTopic(rid, n, i))
            results.append(build(
                result_type, name=echoed, topic_id=getattr(reply, "topic_id", None) or topic_id or uuid.UUID(int=0),
                error_code=reply.error_code, error_message=getattr(reply, "message", None),
            ))
        return build(response_type, responses=tuple(results))

    async def _per_topic(self, topics, make_event) -> list[tuple[Any, object]]:
        """(topic, reply) for each topic of a CreateTopics or CreatePartitions,
        in order: one core request each (`make_event(request_id, topic)`); a
        manual replica assignment is refused (not supported yet)."""
        out = []
        for topic in topics:
            if topic.assignments:
                reply = c.TopicReply(ErrorCode.INVALID_REQUEST, "manual replica assignments are not supported yet")
            else:
                reply = await self.request(lambda rid, t=topic: make_event(rid, t))
            out.append((topic, reply))
        return out

    async def _handle_create_partitions(self, ctx: RequestContext, request: Any) -> Any:
        response_type = response_class(CREATE_PARTITIONS, ctx.api_version)
        result_type = nested(response_type, "CreatePartitionsTopicResult")
        # validate_only: the core makes every check and writes nothing.
        replies = await self._per_topic(request.topics, lambda rid, t: c.CreatePartitions(
            rid, t.name, t.count, validate_only=bool(request.validate_only)))
        return build(response_type, results=tuple(
            build(result_type, name=topic.name, error_code=reply.error_code, error_message=getattr(reply, "message", None))
            for topic, reply in replies))

    async def _handle_create_topics(self, ctx: RequestContext, request: Any) -> Any:
        """CreateTopics forwarded by a broker (or sent by an admin tool to the controller)."""
        response_type = response_class(CREATE_TOPICS, ctx.api_version)
        result_type = nested(response_type, "CreatableTopicResult")

        def num_partitions(topic) -> int:
            return self.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions

        def replication_factor(topic) -> int:
            rf = topic.replication_factor
            return self.config.default_replication_factor if rf == -1 else rf

        def create(rid: int, topic) -> c.CreateTopic:
            configs = tuple((cfg.name, cfg.value) for cfg in topic.configs if cfg.value is not None)
            # The topic id is drawn here (the node's ids port) and handed to the core as data.
            # validate_only: the core makes every check and writes nothing.
            topic_id = uuid.UUID(int=0) if request.validate_only else self.raft.ids.uuid()
            return c.CreateTopic(rid, topic.name, num_partitions(topic), replication_factor(topic), topic_id, configs,
                                 validate_only=bool(request.validate_only))

        results = []
        for topic, reply in await self._per_topic(request.topics, create):
            topic_id = getattr(reply, "topic_id", None) if reply.error_code == ErrorCode.NONE else None
            results.append(build(
                result_type, name=topic.name, topic_id=topic_id or uuid.UUID(int=0),
                num_partitions=num_partitions(topic), replication_factor=replication_factor(topic), configs=None,
                error_code=reply.error_code, error_message=getattr(reply, "message", None),
            ))
        return build(response_type, topics=tuple(results))

    async def _handle_registration(self, ctx: RequestContext, request: Any) -> Any:
        cls, m = _kio(BROKER_REGISTRATION, 0, "response")
        if request.cluster_id != self.raft.cluster_id:
            return cls(throttle_time=_zero(), error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)
        from kref.metadata import records as r

        end_points = tuple(
            r.BrokerEndpoint(name=lst.name, host=lst.host, port=int(lst.port), security_protocol=int(lst.security_protocol))
            for lst in request.listeners
        )
        reply = await self.request(lambda rid: c.BrokerRegistration(
            rid, request.broker_id, request.incarnation_id, end_points, request.rack
        ))
        return cls(throttle_time=_zero(), error_code=reply.error_code, broker_epoch=getattr(reply, "broker_epoch", -1))

    async def _handle_heartbeat(self, ctx: RequestContext, request: Any) -> Any:
        cls, m = _kio(BROKER_HEARTBEAT, 0, "response")
        reply = await self.request(lambda rid: c.BrokerHeartbeatRequest(
            rid, request.broker_id, request.broker_epoch, request.current_metadata_offset + 1,
            want_shut_down=bool(request.want_shut_down),
        ))
        return cls(
            throttle_time=_zero(), error_code=reply.error_code, is_caught_up=getattr(reply, "is_caught_up", False),
            is_fenced=getattr(reply, "is_fenced", True), should_shut_down=getattr(reply, "should_shut_down", False),
        )

    async def _handle_allocate_producer_ids(self, ctx: RequestContext, request: Any) -> Any:
        cls, _ = _kio(ALLOCATE_PRODUCER_IDS, 0, "response")
        reply = await self.request(lambda rid: c.AllocateProducerIds(rid, request.broker_id, request.broker_epoch))
        return cls(throttle_time=_zero(), error_code=reply.error_code,
                   producer_id_start=getattr(reply, "producer_id_start", -1),
                   producer_id_len=getattr(reply, "producer_id_len", 0))

    async def _handle_alter_partition(self, ctx: RequestContext, request: Any) -> Any:
        """KIP-497 from a partition leader (v2: topic ids, plain isr; v3: the isr with each
        member's broker epoch, KIP-903); the core decides."""
        cls, m = _kio(ALTER_PARTITION, ctx.api_version, "response")
        # Every partition of the request is decided in one turn and its records
        # appended together (Kafka handles an AlterPartition request as one
        # controller event); the answers keep the request's order.
        asked = []
        for topic in request.topics:
            for p in topic.partitions:
                if ctx.api_version >= 3:
                    isr = tuple(int(s.broker_id) for s in p.new_isr_with_epochs)
                    epochs = tuple(int(s.broker_epoch) for s in p.new_isr_with_epochs)
                else:
                    isr, epochs = tuple(p.new_isr), ()
                asked.append((topic, p, isr, epochs))
        replies = await self.request_many([
            lambda rid, t=topic, p=p, isr=isr, epochs=epochs: c.AlterPartition(
                rid, request.broker_id, request.broker_epoch, t.topic_id, p.partition_index,
                p.leader_epoch, p.partition_epoch, isr, epochs)
            for topic, p, isr, epochs in asked])
        topics: dict[Any, list] = {}
        for (topic, p, _, _), reply in zip(asked, replies):
            topics.setdefault(topic.topic_id, []).append(m.PartitionData(
                partition_index=p.partition_index, error_code=reply.error_code,
                leader_id=getattr(reply, "leader", -1), leader_epoch=getattr(reply, "leader_epoch", -1),
                isr=tuple(getattr(reply, "isr", ())), leader_recovery_state=0,
                partition_epoch=getattr(reply, "partition_epoch", -1)))
        return cls(throttle_time=_zero(), error_code=ErrorCode.NONE, topics=tuple(
            m.TopicData(topic_id=topic_id, partitions=tuple(partitions)) for topic_id, partitions in topics.items()))


def elect_leaders_response(version: int, error_code: int, results) -> Any:
    """An ElectLeadersResponse from (topic, partition, error_code, message) results, in order."""
    response_type = response_class(ELECT_LEADERS, version)
    result_type = nested(response_type, "ReplicaElectionResult")
    partition_type = nested(response_type, "PartitionResult")
    values = dict(throttle_time=_zero(), replica_election_results=results_by_topic(
        results, result_type, "topic", "partition_result", lambda partition, code, message: build(
            partition_type, partition_id=partition, error_code=code, error_message=message)))
    if version >= 1:
        values["error_code"] = error_code
    return build(response_type, **values)


# What a failed controller RPC may raise: a refused or reset connection, a
# timeout, a garbled frame. Each is one failed request, never a node exit.
RPC_ERRORS = (OSError, ConnectionError, trio.TooSlowError, trio.BrokenResourceError, FrameError)


async def controller_rpc(raft: RaftNode, body: Any, timeout_s: float, client_id: str,
                         lane: str = DEFAULT_LANE) -> Any:
    """One request to the active controller's CONTROLLER listener (the leader
    this node's quorum core knows, at its controller.quorum.voters address),
    on the channel's `lane` (heartbeats have their own: see controller_channel)."""
    leader_id = raft.core.leader_id
    voter = raft.voters.get(leader_id)
    if voter is None:
        raise ConnectionError("no known active controller")
    # Over the node's kept connections (kref/node/controller_channel.py).
    return await raft.controller_channel.request(
        leader_id, (voter.host or "127.0.0.1", voter.port), body, timeout_s, client_id, lane,
    )


class BrokerLifecycle:
    """The trio driver of kref/controller/lifecycle.py's BrokerLifecycleCore:
    it draws this process's incarnation id, sends what the core says over
    controller RPCs and steps the answers (or the failure) back in."""

    def __init__(self, raft: RaftNode, config: BrokerConfig, advertised) -> None:
        self.raft = raft
        self.config = config
        self.advertised = advertised
        self.incarnation_id = raft.ids.uuid()  # the node's ids port
        self.core = lc.BrokerLifecycleCore(
            heartbeat_interval_ms=config.broker_heartbeat_interval_ms,
            session_timeout_ms=config.broker_session_timeout_ms,
            request_timeout_ms=config.broker_session_timeout_ms,
            controlled_shutdown_enable=config.controlled_shutdown_enable,
        )
        self.shut_down = trio.Event()  # set once the controller answered should_shut_down
        self._shutdown_over = trio.Event()
        self._wake = trio.Event()

    @property
    def broker_epoch(self) -> int:
        return self.core.broker_epoch

    @property
    def fenced(self) -> bool:
        return self.core.fenced

    def _step(self, event: lc.Event) -> list:
        sends = []
        for effect in self.core.step(event, self.raft.now_ms()):
            match effect:
                case lc.SendRegistration() | lc.SendHeartbeat():
                    sends.append(effect)
                case lc.Registered():
                    log.info("broker %d: registered with broker epoch %d", self.config.node_id, effect.broker_epoch)
                case lc.RegistrationRefused():
                    log.info("broker %d: registration refused: %s", self.config.node_id,
                             ErrorCode(effect.error_code).name)
                case lc.FenceChanged():
                    log.info("broker %d: %s", self.config.node_id, "fenced" if effect.fenced else "unfenced")
                case lc.ShutdownDone():
                    if effect.complete:
                        self.shut_down.set()
                    self._shutdown_over.set()
        return sends

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            for send in self._step(lc.Tick(self.raft.applied_offset)):
                await self._send(send)
            wait_s = min(60.0, max(0.0, (self.core.next_due_ms() - self.raft.now_ms()) / 1000))
            with trio.move_on_after(wait_s):
                await self._wake.wait()
            self._wake = trio.Event()

    async def _send(self, send) -> None:
        client_id = f"kref-broker-{self.config.node_id}"
        if isinstance(send, lc.SendRegistration):
            cls, m = _kio(BROKER_REGISTRATION, 0, "request")
            body = cls(
                broker_id=self.config.node_id, cluster_id=self.raft.cluster_id, incarnation_id=self.incarnation_id,
                listeners=tuple(m.Listener(name=lst.name, host=lst.host, port=lst.port, security_protocol=0)
                                for lst in self.advertised),
                features=(), rack=self.config.broker_rack,
            )
        else:
            cls, _ = _kio(BROKER_HEARTBEAT, 0, "request")
            body = cls(broker_id=self.config.node_id, broker_epoch=send.broker_epoch,
                       current_metadata_offset=send.metadata_offset - 1, want_fence=False,
                       want_shut_down=send.want_shut_down)
        try:
            response = await controller_rpc(self.raft, body, send.timeout_ms / 1000, client_id, LIFECYCLE_LANE)
        except RPC_ERRORS as exc:
            log.debug("broker %d: controller RPC failed: %s", self.config.node_id, exc)
            self._step(lc.RequestFailed(send.request_id))
            return
        if isinstance(send, lc.SendRegistration):
            self._step(lc.RegistrationAnswered(send.request_id, response.error_code, response.broker_epoch))
        else:
            self._step(lc.HeartbeatAnswered(send.request_id, response.error_code, response.is_caught_up,
                                            response.is_fenced, response.should_shut_down))

    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move this broker's leaderships away (the core's
        heartbeats with want_shut_down) and wait until it says should_shut_down;
        False if it did not (see the core: bounded by broker.session.timeout.ms)."""
        self._step(lc.BeginControlledShutdown())
        self._wake.set()
        await self._shutdown_over.wait()
        log.info("broker %d: controlled shutdown %s", self.config.node_id,
                 "complete" if self.shut_down.is_set() else "timed out")
        return self.shut_down.is_set()

    async def allocate_producer_ids(self) -> tuple[int, int]:
        """The next producer id block from the active controller (KIP-730), as
        (first id, count); ProducerIdUnavailable while none can be had."""
        from kref.coordinator.producer_id import ProducerIdUnavailable

        if self.broker_epoch < 0:
            raise ProducerIdUnavailable("this broker is not registered yet")
        cls, _ = _kio(ALLOCATE_PRODUCER_IDS, 0, "request")
        try:
            response = await controller_rpc(self.raft, cls(broker_id=self.config.node_id, broker_epoch=self.broker_epoch),
                                            self.config.broker_session_timeout_ms / 1000,
                                            f"kref-broker-{self.config.node_id}")
        except RPC_ERRORS as exc:
            raise ProducerIdUnavailable(f"controller unreachable: {exc}") from None
        if response.error_code != ErrorCode.NONE:
            raise ProducerIdUnavailable(f"controller answered {ErrorCode(response.error_code).name}")
        return response.producer_id_start, response.producer_id_len


def _zero():
    import datetime

    return datetime.timedelta(0)


def _with_error(reply: object, code: int) -> object:
    """The same kind of reply, carrying only an error (every reply type defaults the rest)."""
    return type(reply)(code)


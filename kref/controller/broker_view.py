"""A broker's view of the committed cluster metadata, until the metadata image lands.

Theory of operation
-------------------
In a KRaft cluster a broker learns everything about the cluster from the
metadata log: which brokers are registered and unfenced (and where they
listen), which topics exist with which ids, and each partition's replicas,
isr, leader and leader_epoch. `ClusterView` replays the committed records
the node's RaftNode hands over into a replay-only ControllerCore (so the
meaning of each record is decided in one place, ControllerCore._apply) and
answers the broker's handlers from it:

- Metadata and DescribeCluster list the unfenced brokers with their
  endpoint on the connection's listener, the active controller, and each
  partition's leader, leader_epoch, replicas and isr;
- CreateTopics, DeleteTopics and CreatePartitions are forwarded to the
  active controller over its CONTROLLER listener (Kafka's brokers forward
  too); the broker answers once the controller has committed the change and
  this broker's view shows it.

It also keeps the broker's local storage in step with the view: a topic in
the committed metadata gets its local partition logs on every broker (with
the cluster's topic id), and a removed topic is deleted locally.

What this is not yet: the metadata image and replica manager of
kref/metadata (issue 8): a broker stores every partition locally and does
not refuse produce or fetch for partitions it does not lead, and followers
do not replicate (issue 10). Partition leaders and isr come from the
controller's decisions, not from the brokers' replica cores.
"""

from __future__ import annotations

import datetime
import logging
import sys
from typing import Any

import trio

from kref.controller import controller as c
from kref.controller.raft_driver import RaftNode
from kref.metadata import serde
from kref.controller.controller_driver import controller_rpc
from kref.protocol.codec import request_class
from kref.protocol.errors import ErrorCode

log = logging.getLogger("kref.cluster_view")

FORWARD_TIMEOUT_S = 15.0
CREATE_TOPICS = 19


class ClusterView:
    def __init__(self, raft: RaftNode, broker: Any) -> None:
        self.raft = raft
        self.broker = broker
        self.state = c.ControllerCore(broker.node_id, tracing=False)
        self.changed = trio.Event()
        raft.on_commit.append(self._on_commit)
        broker.kraft = self  # the handlers' hook

    # ------------------------------------------------------------ log -> view -> local storage

    def _on_commit(self, records: list[tuple[int, bytes]]) -> None:
        for offset, value in records:
            self.state.step(c.Replay(offset, (serde.decode(value),)), 0)
        self._sync_local_topics()
        self.changed.set()
        self.changed = trio.Event()

    def _sync_local_topics(self) -> None:
        from kref.broker.broker import INTERNAL_TOPICS, BrokerError

        for name, topic in sorted(self.state.topics.items()):
            local = self.broker.get_topic(name)
            try:
                if local is not None and local.topic_id != topic.topic_id:
                    self.broker.delete_topic(name)
                    local = None
                if local is None:
                    self.broker.create_topic(
                        name, len(topic.partitions), -1, self.state.image.topic_configs(name), allow_internal=True,
                        topic_id=topic.topic_id,
                    )
                elif local.num_partitions < len(topic.partitions):
                    self.broker.create_partitions(name, len(topic.partitions))
            except BrokerError as exc:
                log.warning("node %d: cannot store topic %s locally: %s", self.broker.node_id, name, exc)
        for name in list(self.broker.topics):
            if name not in self.state.topics and name not in INTERNAL_TOPICS:
                try:
                    self.broker.delete_topic(name)
                except BrokerError as exc:
                    log.warning("node %d: cannot delete topic %s locally: %s", self.broker.node_id, name, exc)

    # ------------------------------------------------------------ queries for the handlers

    def controller_id(self) -> int:
        return self.raft.core.leader_id

    def brokers(self, listener_name: str) -> list[tuple[int, str, int, str | None]]:
        """(node_id, host, port, rack) of the unfenced brokers on `listener_name`."""
        out = []
        for broker_id, b in sorted(self.state.brokers.items()):
            if b.fenced:
                continue
            endpoint = next((e for e in b.end_points if e.name == listener_name), b.end_points[0] if b.end_points else None)
            if endpoint is not None:
                out.append((broker_id, endpoint.host, endpoint.port, b.rack))
        return out

    def partition(self, topic: str, partition: int) -> c.Partition | None:
        t = self.state.topics.get(topic)
        return t.partitions.get(partition) if t is not None else None

    def has_topic(self, name: str) -> bool:
        return name in self.state.topics

    def partition_count(self, name: str) -> int | None:
        t = self.state.topics.get(name)
        return len(t.partitions) if t is not None else None

    # ------------------------------------------------------------ forwarding

    async def forward(self, body: Any) -> Any:
        """Send a request to the active controller's CONTROLLER listener; its response."""
        return await controller_rpc(self.raft, body, FORWARD_TIMEOUT_S, f"kref-forward-{self.broker.node_id}")

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
        try:
            response = await self.forward(request)
        except (OSError, ConnectionError, trio.TooSlowError) as exc:
            log.info("node %d: forwarding %s failed: %s", self.broker.node_id, type(request).__name__, exc)
            return None
        if not getattr(request, "validate_only", False):
            with trio.move_on_after(FORWARD_TIMEOUT_S):
                while not applied(response):
                    await self.changed.wait()
        return response

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
            len(self.state.topics[t.name].partitions) >= counts[t.name]
            for t in response.results if t.error_code == ErrorCode.NONE and t.name in self.state.topics
        ))

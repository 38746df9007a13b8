"""Kept connections from a node to the active controller (the transport of controller RPCs).

Theory of operation
-------------------
A broker (or a combined node) sends the controller BrokerRegistration,
BrokerHeartbeat, AlterPartition, AllocateProducerIds and the admin requests
it forwards. Opening a TCP connection for each of them cost more CPU than the
RPC itself (a heartbeat every few hundred ms on every node). Kafka keeps one
connection per channel (NodeToControllerChannelManager); here a
`ControllerChannel` keeps, per destination node id, a small pool of open
connections:

- a request takes an idle connection of its destination, or opens one; after
  a whole answer it puts the connection back (at most `max_idle` per
  destination are kept; the rest are closed), with its next correlation id;
- at most `max_in_flight` requests per destination are under way at once; the
  others wait their turn inside their own timeout (the bound on in-flight
  requests). Concurrent requests get their own connections, so a forwarded
  CreateTopics that waits for a commit never holds up a heartbeat;
- any failure, timeout or cancellation closes that connection (never reused
  half-read); the next request opens a new one (reconnect on failure);
- a kept connection idle for longer than `idle_close_s` is closed rather
  than reused (the server closes idle connections after
  connections.max.idle.ms); idle time is measured on the Clock port's
  monotonic clock (the raft node's; trio's own clock when none is given);
- a request that finds its reused connection already closed by the peer
  (nothing of an answer read) is sent once more on a new connection: the
  peer never read it.

The channel decides nothing about what is sent or what an answer means:
which controller to ask is the caller's (the quorum's known leader).

Lanes. As Kafka gives BrokerLifecycleManager its own channel to the
controller, apart from the one that carries AlterPartition and forwarded
requests, a request names its lane and each (destination, lane) has its own
connections and its own in-flight bound. A broker's BrokerRegistration and
BrokerHeartbeat go on the "lifecycle" lane: when thousands of partitions
change their ISR at once (a broker back after a failover), heartbeats must
not wait behind them, or the controller fences a live broker after
broker.session.timeout.ms (seen at 10,000 partitions before lanes).
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from kref.ports.clock import Clock, TrioClock
from kref.protocol.codec import decode_response, encode_request, response_class
from kref.protocol.framing import FrameDecoder

log = logging.getLogger("kref.controller.channel")

MAX_IN_FLIGHT = 8  # per destination
MAX_IDLE = 2  # kept connections per destination
MAX_RESPONSE_BYTES = 16 << 20  # bound on a controller RPC's answer
DEFAULT_LANE = "default"  # AlterPartition, AllocateProducerIds, forwarded admin requests
LIFECYCLE_LANE = "lifecycle"  # BrokerRegistration and BrokerHeartbeat


class _Connection:
    __slots__ = ("stream", "correlation_id", "last_used")

    def __init__(self, stream: trio.SocketStream, now_ms: int) -> None:
        self.stream = stream
        self.correlation_id = 0
        self.last_used = now_ms  # the clock port's monotonic ms


class _StaleConnection(ConnectionError):
    """A reused connection the peer had closed: the request never reached it."""


class ControllerChannel:
    def __init__(
        self,
        *,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        idle_close_s: float = 300.0,
        max_in_flight: int = MAX_IN_FLIGHT,
        max_idle: int = MAX_IDLE,
        clock: Clock | None = None,
    ) -> None:
        self.clock: Clock = clock or TrioClock()
        self.max_response_bytes = max_response_bytes
        self.idle_close_s = idle_close_s
        self.max_in_flight = max_in_flight
        self.max_idle = max_idle
        # Keyed by (destination node id, lane).
        self._idle: dict[tuple[int, str], list[_Connection]] = {}
        self._slots: dict[tuple[int, str], trio.Semaphore] = {}
        self.connects = 0  # connections opened (tests and the bench read it)

    async def request(self, destination: int, address: tuple[str, int], body: Any, timeout_s: float, client_id: str,
                      lane: str = DEFAULT_LANE) -> Any:
        """Send `body` to node `destination` at `address` on `lane` and return its decoded response."""
        destination_lane = (destination, lane)
        slots = self._slots.setdefault(destination_lane, trio.Semaphore(self.max_in_flight))
        with trio.fail_after(timeout_s):
            async with slots:
                connection = self._take_idle(destination_lane)
                if connection is not None:
                    try:
                        return await self._exchange(destination_lane, connection, body, client_id)
                    except _StaleConnection:
                        log.debug("kept connection to node %d was closed by the peer; reconnecting", destination)
                connection = _Connection(await trio.open_tcp_stream(*address), self.clock.monotonic_ms())
                self.connects += 1
                try:
                    return await self._exchange(destination_lane, connection, body, client_id)
                except _StaleConnection as exc:
                    raise ConnectionError("controller closed the connection") from exc

    def _take_idle(self, destination: tuple[int, str]) -> _Connection | None:
        idle = self._idle.get(destination)
        now_ms = self.clock.monotonic_ms()
        while idle:
            connection = idle.pop()
            if now_ms - connection.last_used < self.idle_close_s * 1000:
                return connection
            connection.stream.socket.close()
        return None

    async def _exchange(self, destination: tuple[int, str], connection: _Connection, body: Any, client_id: str) -> Any:
        reused = connection.correlation_id > 0
        done = False
        try:
            connection.correlation_id += 1
            correlation_id = connection.correlation_id
            try:
                await connection.stream.send_all(encode_request(body, correlation_id, client_id))
            except (trio.BrokenResourceError, OSError) as exc:
                if reused:
                    raise _StaleConnection(str(exc)) from exc
                raise
            decoder = FrameDecoder(self.max_response_bytes)
            got_bytes = False
            while (frame := decoder.next_frame()) is None:
                try:
                    data = await connection.stream.receive_some(65536)
                except (trio.BrokenResourceError, OSError) as exc:
                    if reused and not got_bytes:
                        raise _StaleConnection(str(exc)) from exc
                    raise
                if not data:
                    if reused and not got_bytes:
                        raise _StaleConnection("closed before any answer")
                    raise ConnectionError("controller closed the connection")
                got_bytes = True
                decoder.feed(data)
            got, response = decode_response(frame, response_class(type(body).__api_key__, type(body).__version__))
            if got != correlation_id:
                raise ConnectionError(f"correlation id {got}, expected {correlation_id}")
            done = True
            return response
        finally:
            if done and len(self._idle.setdefault(destination, [])) < self.max_idle:
                connection.last_used = self.clock.monotonic_ms()
                self._idle[destination].append(connection)
            else:
                # Failed, cancelled mid-exchange, or the pool is full: never reuse.
                connection.stream.socket.close()

    def close(self) -> None:
        """Close the kept connections; also called after trio.run returned (the node exiting)."""
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                try:
                    connection.stream.socket.close()
                except RuntimeError:
                    # Outside trio's run: trio cannot close its socket, and the
                    # process is exiting; the kernel closes the descriptor.
                    pass

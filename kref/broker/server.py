"""The trio server: listeners, one task pair per connection, shutdown.

Theory of operation: every accepted connection gets three tasks joined by
bounded channels (and an idle watchdog). The reader feeds socket bytes to the sans-IO
FrameDecoder and decodes each frame (codec.decode_request); the processor
takes requests one by one and runs the router's handler; the writer sends
the encoded responses, coalescing those that are ready together into one
write. Responses therefore leave in request order, as Kafka guarantees per
connection. A lone request (the processor idle, no other frame received
with it) skips both hand-offs: the reader answers it itself and sends the
response straight to the socket, since each hand-off costs a scheduling
round on that request's latency; pipelined requests take the tasks, so
their responses are still coalesced. Each channel holds at most MAX_IN_FLIGHT_REQUESTS items; when
they are full the reader stops reading and TCP pushes back on the client,
so memory per connection is bounded by about
(2 * MAX_IN_FLIGHT_REQUESTS + 1) * socket.request.max.bytes.

The reader waits for readability and then reads once; a lone response
is written with one non-blocking write(), falling back to trio's send_all
for what the kernel does not take; connections.max.idle.ms is a watchdog
task that reads when the reader started waiting, rather than a deadline
re-armed around every receive. Each of these removed work from every
request (see docs/performance.md); none may leave bytes unread or unsent
while the connection's tasks sleep (see receive and answer).

A framing or decoding error, an unknown API key or an unsupported version
closes only that connection, with the reason logged (Kafka does the same);
an exception inside a handler is a bug: it is logged with its traceback and
that connection is closed, the broker keeps serving everyone else.

SIGTERM / SIGINT cancel the server; the broker then flushes its logs and
writes checkpoints (Broker.shutdown). A SIGKILL skips that, and the next
start recovers the logs (storage's recovery after an unclean shutdown).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from collections.abc import Callable

import trio

from kref.broker.broker import Broker
from kref.broker.config import Listener
from kref.broker.resources import is_out_of_resources, resource_warning
from kref.broker.router import DECLINED, RequestContext, Router
from kref.protocol.codec import WARM_AT_START, DecodedRequest, RequestReader, encode_response_parts, warm_layout
from kref.protocol.errors import ProtocolError
from kref.protocol.framing import FrameDecoder, FrameError
from kref.records.walker import ACCELERATOR_NOTE
from kref.storage.segment import open_segment_files

__all__ = ["serve", "run_broker", "handle_connection", "ListenError", "MAX_IN_FLIGHT_REQUESTS"]

log = logging.getLogger("kref.server")
request_log = logging.getLogger("kref.request")

MAX_IN_FLIGHT_REQUESTS = 8
RECEIVE_CHUNK_BYTES = 256 * 1024
# A large request's remaining bytes are asked for in one read, up to this
# (a read allocates what it asks for, so a lying size prefix must not make
# it allocate socket.request.max.bytes at once).
RECEIVE_MAX_BYTES = 4 * 1024 * 1024
WRITE_BATCH_BYTES = 256 * 1024
ACCEPT_RETRY_S = 0.1  # out of descriptors: how soon to try accept() again


class _CloseConnection(Exception):
    pass


class ListenError(OSError):
    """A listener cannot be bound (port in use, bad address)."""


def leaf_exceptions(group: BaseExceptionGroup) -> list[BaseException]:
    """The exceptions inside nested groups: `except*` keeps trio's nursery nesting,
    whose str() is only "Exceptions from Trio nursery"."""
    leaves: list[BaseException] = []
    for exc in group.exceptions:
        leaves.extend(leaf_exceptions(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return leaves


async def handle_connection(stream: trio.SocketStream, broker: Broker, router: Router, listener_name: str) -> None:
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        host, port = "?", 0
    peer = f"{host}:{port}"
    decoder = FrameDecoder(broker.config.socket_request_max_bytes)
    # A producer's repeated request shape is parsed once per connection.
    read_request = RequestReader(router.supported_versions).decode
    inline_handlers = router.inline_handlers
    idle_ms = broker.config.connections_max_idle_ms
    idle_timeout = math.inf if idle_ms < 0 else idle_ms / 1000
    send_requests, receive_requests = trio.open_memory_channel[DecodedRequest](MAX_IN_FLIGHT_REQUESTS)
    send_frames, receive_frames = trio.open_memory_channel[bytes](MAX_IN_FLIGHT_REQUESTS)

    # Requests handed to the processor and not yet answered, and frames
    # handed to the writer and not yet written. Counted (not read off the
    # channels) because a channel hands an item straight to a waiting task,
    # which holds it before it runs: an empty channel does not mean idle.
    unanswered = 0
    unsent = 0
    # When the reader started waiting for bytes (trio clock), None while it
    # handles what it read: read by the idle watchdog (close_when_idle).
    waiting_since: float | None = None

    fd = stream.socket.fileno()

    async def receive(max_bytes: int) -> bytes:
        """The next bytes from the peer (b"" at end of stream).

        Waits for readability first, then reads once: trio's receive_some
        tries the read first, which fails with EAGAIN whenever the client
        waits for each answer, and wraps it in a cancellation sandwich
        (several context managers and a second scheduling point), 7-12% of a
        lone request's CPU. The wait is level-triggered (trio re-arms its
        one-shot epoll registration with EPOLL_CTL_MOD, which reports bytes
        already queued), so bytes left in the kernel by a read that took only
        part of them, or a frame whose rest arrives while this task was busy
        answering, still wake it; and the wait is a scheduling point, so one
        busy connection cannot starve the others.
        """
        while True:
            await trio.lowlevel.wait_readable(fd)
            try:
                return os.read(fd, max_bytes)
            except BlockingIOError:
                continue  # a spurious wake-up: wait again
            except OSError as exc:
                # What trio's stream raises for a dead socket (reset, timeout).
                raise trio.BrokenResourceError(f"receive failed: {exc}") from exc

    def write_now(frame: bytes) -> int:
        """Write what the socket takes now, without waiting: the bytes written."""
        try:
            return os.write(fd, frame)
        except BlockingIOError:
            return 0
        except OSError as exc:
            raise trio.BrokenResourceError(f"send failed: {exc}") from exc

    async def write_gathered(parts: list[bytes]) -> None:
        """Write a frame given as buffers with writev, waiting for the socket
        to drain as often as it takes. The same rule as write_now: only when
        no other task is writing (unsent == 0), and this task answers nothing
        else until the frame is out, so the byte order holds."""
        views = [memoryview(p) for p in parts]
        while views:
            try:
                written = os.writev(fd, views)
            except BlockingIOError:
                written = 0
            except OSError as exc:
                raise trio.BrokenResourceError(f"send failed: {exc}") from exc
            while views and written >= len(views[0]):
                written -= len(views.pop(0))
            if views:
                if written:
                    views[0] = views[0][written:]
                await trio.lowlevel.wait_writable(fd)

    async def answer(request: DecodedRequest, *, more_waiting: bool) -> None:
        """Run the handler for `request` and send (or queue) its response."""
        nonlocal unsent
        started = time.perf_counter() if request_log.isEnabledFor(logging.DEBUG) else None
        try:
            # An inline handler answers without coroutines or a context
            # (acks 0/1 produce); it declines what may have to wait.
            inline = inline_handlers.get(request.api_key)
            response = DECLINED if inline is None else inline(broker, request.api_version, request.body)
            if response is DECLINED:
                ctx = RequestContext(broker, request.api_key, request.api_version, request.correlation_id,
                                     request.client_id, host, port, listener_name)
                response = await router.dispatch(ctx, request)
            frame = None if response is None else encode_response_parts(request, response)
        except Exception:
            log.exception(
                "internal error on API key %d v%d (correlation id %d) from %s; closing the connection",
                request.api_key,
                request.api_version,
                request.correlation_id,
                peer,
            )
            raise _CloseConnection from None
        if started is not None:
            # Kafka's kafka.request.logger at DEBUG: one line per request.
            request_log.debug(
                "completed request api_key=%d v%d correlation_id=%d client_id=%s from %s on %s: %d response bytes in %.2f ms",
                request.api_key, request.api_version, request.correlation_id, request.client_id, peer,
                listener_name, 0 if frame is None else len(frame) if type(frame) is bytes else sum(map(len, frame)),
                (time.perf_counter() - started) * 1000,
            )
        if frame is None:
            return
        if type(frame) is list:
            # A large fetch response as [header, *chunks]: one writev, no join.
            if unsent == 0 and not more_waiting:
                await write_gathered(frame)
                return
            frame = b"".join(frame)  # the writer coalesces queued responses into one write
        if unsent == 0 and not more_waiting:
            # Nothing queued before it and nothing to answer right after: a
            # hand-off to the writer task would only add a scheduling round
            # to the latency of this response (a lone request's case). And
            # no other task is writing (unsent == 0: the writer holds
            # nothing, and only this task answers now), so one write()
            # straight to the socket keeps the byte order; trio's send_all
            # ends even a complete send in a scheduling round of its own.
            # What the kernel does not take (a large response, a full
            # socket buffer: EAGAIN) goes through send_all, which waits for
            # writability, before this task reads or answers anything else.
            written = write_now(frame)
            if written < len(frame):
                with memoryview(frame) as view:
                    await stream.send_all(view[written:])
        else:
            unsent += 1
            await send_frames.send(frame)

    async def read_requests() -> None:
        nonlocal unanswered, waiting_since
        async with send_requests:
            clock = trio.lowlevel.current_clock()  # trio.current_time() is three calls deep
            while True:
                waiting_since = clock.current_time()
                data = await receive(max(RECEIVE_CHUNK_BYTES, min(decoder.missing_bytes, RECEIVE_MAX_BYTES)))
                waiting_since = None
                if not data:
                    decoder.end_of_stream()
                    return
                frame = decoder.whole_frame(data)
                if frame is not None:
                    # One whole request and nothing else (a client waiting for
                    # each answer): no buffering, and no look-ahead to do.
                    request = read_request(frame)
                    if unanswered == 0:
                        await answer(request, more_waiting=False)
                    else:
                        unanswered += 1
                        await send_requests.send(request)
                    continue
                decoder.feed(data)
                # Frame by frame with one frame of look-ahead (whether another
                # follows decides who answers); bounded: these are bytes the
                # decoder holds already. A bad frame is raised after answering
                # those before it.
                bad_frame = None
                frame = decoder.next_frame()
                while frame is not None:
                    try:
                        following = decoder.next_frame()
                    except FrameError as exc:
                        following, bad_frame = None, exc
                    request = read_request(frame)
                    frame = following
                    if unanswered == 0 and following is None:
                        # A lone request with the processor idle: answering it
                        # here keeps the order and saves two task switches
                        # (reader -> processor -> writer) on its latency.
                        # Pipelined requests still go through the processor,
                        # so their responses are coalesced into one write.
                        await answer(request, more_waiting=False)
                    else:
                        unanswered += 1
                        await send_requests.send(request)
                if bad_frame is not None:
                    raise bad_frame

    async def close_when_idle(scope: trio.CancelScope) -> None:
        """connections.max.idle.ms: close the connection once the reader has
        waited that long for a request.

        A watchdog task that wakes about once per timeout, instead of a
        cancel scope around each receive: re-arming a scope's deadline twice
        per request (trio's deadline heap) cost about as much as a scheduling
        round on a lone request. It holds no cancel scope over the reader, so
        it cannot cut a request short: it only reads `waiting_since`, which
        the reader sets when it starts waiting and clears when bytes arrive.
        """
        with scope:  # cancelled when the reader ends, however it ends
            while True:
                since = waiting_since
                await trio.sleep_until((trio.current_time() if since is None else since) + idle_timeout)
                since = waiting_since
                if since is not None and trio.current_time() - since >= idle_timeout:
                    log.info("closing idle connection from %s after %d ms", peer, idle_ms)
                    raise _CloseConnection

    async def process_requests() -> None:
        nonlocal unanswered
        async with receive_requests, send_frames:
            async for request in receive_requests:
                await answer(request, more_waiting=unanswered > 1)
                unanswered -= 1

    async def write_responses() -> None:
        # Responses that are ready together leave in one write: with
        # pipelining clients a syscall per response was the largest cost.
        nonlocal unsent
        async with receive_frames:
            async for frame in receive_frames:
                batch, size = [frame], len(frame)
                while size < WRITE_BATCH_BYTES:
                    try:
                        more = receive_frames.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    batch.append(more)
                    size += len(more)
                await stream.send_all(batch[0] if len(batch) == 1 else b"".join(batch))
                unsent -= len(batch)

    try:
        async with stream:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(process_requests)
                nursery.start_soon(write_responses)
                watchdog = trio.CancelScope()
                if idle_timeout != math.inf:
                    nursery.start_soon(close_when_idle, watchdog)
                try:
                    await read_requests()
                except (FrameError, ProtocolError) as exc:
                    log.warning("closing connection from %s: %s", peer, exc)
                    # Answer what was decoded before the bad frame, then close.
                except _CloseConnection:
                    nursery.cancel_scope.cancel()
                finally:
                    # The nursery then waits only for the answers still owed
                    # (an end of stream, a bad frame), not for the watchdog.
                    watchdog.cancel()
    except* (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
        log.debug("connection from %s closed by peer", peer)
    except* _CloseConnection:
        pass
    except* Exception as group:
        # A bug in this connection's code must not take the listener down.
        log.error("closing connection from %s after an internal error", peer, exc_info=group)


async def serve(
    broker: Broker,
    router: Router,
    *,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    """Open the listeners and serve until cancelled. Reports bound listeners via task_status."""
    bound: list[tuple[Listener, list[trio.SocketListener]]] = []
    for listener in broker.config.listeners:
        host = listener.host or None
        if host in ("0.0.0.0", "::"):
            host = None
        try:
            sockets = await trio.open_tcp_listeners(listener.port, host=host)
        except OSError as exc:
            raise ListenError(f"cannot listen on {listener}: {exc.strerror or exc}") from None
        port = sockets[0].socket.getsockname()[1]
        bound.append((Listener(listener.name, listener.host, port), sockets))
    broker.bound_listeners = tuple(lst for lst, _ in bound)
    async with trio.open_nursery() as nursery:
        broker.nursery = nursery
        await nursery.start(broker.run_background)
        for hook in broker.on_serving:
            hook()
        for listener, sockets in bound:
            handler = _connection_handler(broker, router, listener.name)
            for sock in sockets:
                nursery.start_soon(_accept_connections, sock, handler, nursery, str(listener))
            log.info("kref broker %d listening on %s", broker.node_id, listener)
        if ACCELERATOR_NOTE is not None:
            log.warning("%s", ACCELERATOR_NOTE)
        nursery.start_soon(_warm_protocol_layouts, router)
        task_status.started(broker.bound_listeners)


async def _warm_protocol_layouts(router: Router) -> None:
    """Load the kio types of the Produce and Fetch versions clients use
    (codec.WARM_AT_START) once the listeners are up, one version per
    scheduling pass, so that a client's first request does not pay for it."""
    supported = router.supported_versions
    for api_key, version in WARM_AT_START:
        versions = supported.get(api_key)
        if versions is not None and versions[0] <= version <= versions[1]:
            warm_layout(api_key, version)
            await trio.sleep(0)


async def _accept_connections(sock: trio.SocketListener, handler: Callable, nursery: trio.Nursery, where: str) -> None:
    """Accept forever; out of descriptors, free segment ones or wait, with one log line.

    trio.serve_listeners logs a traceback for every failed accept (ten a
    second); a shortage is a state, so it gets one rate-limited line, and
    the connections already open keep being served meanwhile.
    """
    while True:
        try:
            stream = await sock.accept()
        except OSError as exc:
            if not is_out_of_resources(exc):
                raise
            if open_segment_files.shed():
                continue  # old segments reopen lazily; a client cannot wait
            resource_warning(
                log, "cannot accept connections on %s: %s; serving open connections, retrying", where, exc.strerror or exc
            )
            await trio.sleep(ACCEPT_RETRY_S)
            continue
        nursery.start_soon(handler, stream)


def _connection_handler(broker: Broker, router: Router, listener_name: str) -> Callable:
    async def handler(stream: trio.SocketStream) -> None:
        limit = broker.config.max_connections
        if broker.open_connections >= limit:
            log.warning("closing a new connection: max.connections=%d reached", limit)
            await stream.aclose()
            return
        broker.open_connections += 1
        try:
            # A KRaft node holds clients until it is caught up and unfenced (ClusterView.serving).
            gate = getattr(broker, "serving_gate", None)
            if gate is not None and not gate.is_set():
                await gate.wait()
            await handle_connection(stream, broker, router, listener_name)
        finally:
            broker.open_connections -= 1

    return handler


async def run_broker(broker: Broker, router: Router, *, on_started: Callable | None = None) -> None:
    """Serve until SIGTERM/SIGINT, then shut the broker down cleanly."""
    try:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                listeners = await nursery.start(serve, broker, router)
                if on_started is not None:
                    on_started(listeners)

                async def wait_for_signal() -> None:
                    async for signum in signals:
                        log.info("received %s, shutting down", signal.Signals(signum).name)
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(wait_for_signal)
    except BaseException:
        # The logs are still flushed and checkpointed, but a broker that
        # failed (e.g. could not listen) did not stop cleanly: the caller
        # reports the error, and only that.
        broker.shutdown()
        raise
    broker.shutdown()
    log.info("kref broker %d stopped cleanly", broker.node_id)

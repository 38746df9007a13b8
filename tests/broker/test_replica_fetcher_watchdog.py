"""kref/broker/replica_fetcher.py's RequestWatchdog: replica.socket.timeout.ms without a
trio timeout per request. On trio's virtual clock (MockClock, autojump), over a real
loopback socket whose peer never answers: an overdue request's receive fails (the
connection is closed, as a timeout drops it), a request answered in time leaves the
connection open, and a stopped watchdog ends its task."""

from __future__ import annotations

import trio
import trio.testing

from kref.broker.replica_fetcher import RequestWatchdog


def run(fn):
    trio.run(fn, clock=trio.testing.MockClock(autojump_threshold=0))


async def _pair(nursery):
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    accepted: list[trio.SocketStream] = []

    async def accept():
        accepted.append(await listeners[0].accept())

    nursery.start_soon(accept)
    client = await trio.open_tcp_stream("127.0.0.1", port)
    while not accepted:
        await trio.sleep(0.001)
    return client, accepted[0], listeners


def test_an_overdue_request_fails_its_receive_and_an_answered_one_does_not():
    outcome = {}

    async def main():
        async with trio.open_nursery() as nursery:
            client, server, listeners = await _pair(nursery)
            watchdog = RequestWatchdog()
            watchdog.stream = client
            nursery.start_soon(watchdog.run)
            # Answered in time: the stream stays open past the deadline it had.
            with watchdog.request(5.0):
                await client.send_all(b"ping")
                assert await server.receive_some(4) == b"ping"
                await server.send_all(b"pong")
                assert await client.receive_some(4) == b"pong"
            await trio.sleep(10)
            await client.send_all(b"still open")
            assert await server.receive_some(10) == b"still open"
            # Never answered: the receive fails once the request is overdue.
            start = trio.current_time()
            try:
                with watchdog.request(5.0):
                    await client.send_all(b"ping")
                    await client.receive_some(4)
            except trio.ClosedResourceError:
                outcome["failed_after"] = trio.current_time() - start
            watchdog.stop()
            await server.aclose()
            for listener in listeners:
                await listener.aclose()

    run(main)
    assert 5.0 <= outcome["failed_after"] < 5.1

"""Controller RPCs over kept connections (kref/node/controller_channel.py).

A small trio server on 127.0.0.1 plays the controller: it decodes each
BrokerHeartbeat with kref's codec and answers it, counting the connections it
accepted, and can close a connection after an answer or hold an answer back.
The channel must reuse one connection for back-to-back RPCs, reconnect after
the peer closed it (the request is sent again only when the peer never read
it), close a connection whose RPC timed out, and keep at most max_in_flight
RPCs per destination and lane under way; a full default lane never holds up
the lifecycle lane (heartbeats).
"""

from __future__ import annotations

import datetime
import functools

import pytest
import trio

from kref.node.controller_channel import LIFECYCLE_LANE, ControllerChannel
from kref.ports.clock import ManualClock
from kref.protocol.codec import decode_request, encode_response, request_class, response_class
from kref.protocol.errors import ErrorCode
from kref.protocol.framing import FrameDecoder

HEARTBEAT = 63


class FakeController:
    def __init__(self) -> None:
        self.accepted = 0
        self.answered = 0
        self.close_after_answer = False
        self.hold = trio.Event()
        self.hold.set()
        self.held_brokers: set[int] | None = None  # only these brokers' requests wait for `hold` (None: all)
        self.in_flight = 0
        self.max_in_flight = 0

    async def serve(self, stream: trio.SocketStream) -> None:
        self.accepted += 1
        decoder = FrameDecoder(1 << 20)
        async with stream:
            while True:
                try:
                    data = await stream.receive_some(65536)
                except trio.BrokenResourceError:
                    return
                if not data:
                    return
                decoder.feed(data)
                while (frame := decoder.next_frame()) is not None:
                    request = decode_request(frame, {HEARTBEAT: (0, 0)})
                    self.in_flight += 1
                    self.max_in_flight = max(self.max_in_flight, self.in_flight)
                    if self.held_brokers is None or request.body.broker_id in self.held_brokers:
                        await self.hold.wait()
                    self.in_flight -= 1
                    response = response_class(HEARTBEAT, 0)(
                        throttle_time=datetime.timedelta(0), error_code=ErrorCode.NONE, is_caught_up=True,
                        is_fenced=False, should_shut_down=False,
                    )
                    self.answered += 1
                    try:
                        await stream.send_all(encode_response(request, response))
                    except trio.BrokenResourceError:
                        return
                    if self.close_after_answer:
                        return


def heartbeat(broker_id: int = 7):
    return request_class(HEARTBEAT, 0)(
        broker_id=broker_id, broker_epoch=1, current_metadata_offset=0, want_fence=False, want_shut_down=False,
    )


async def start(nursery: trio.Nursery, controller: FakeController) -> tuple[str, int]:
    listeners = await nursery.start(functools.partial(trio.serve_tcp, controller.serve, 0, host="127.0.0.1"))
    return "127.0.0.1", listeners[0].socket.getsockname()[1]


def run(test) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            controller = FakeController()
            address = await start(nursery, controller)
            await test(controller, address)
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_back_to_back_rpcs_share_one_connection():
    async def body(controller, address):
        channel = ControllerChannel()
        for _ in range(20):
            response = await channel.request(1, address, heartbeat(), 5.0, "kref-broker-7")
            assert response.error_code == 0 and response.is_caught_up
        assert (controller.accepted, controller.answered, channel.connects) == (1, 20, 1)
        channel.close()

    run(body)


def test_reconnects_after_the_peer_closed_the_kept_connection():
    async def body(controller, address):
        channel = ControllerChannel()
        controller.close_after_answer = True
        for _ in range(5):
            await trio.sleep(0.01)  # the peer's close reaches us before the next request
            response = await channel.request(1, address, heartbeat(), 5.0, "c")
            assert response.error_code == 0
        # Every request answered once: a resend only happened where the peer had not read it.
        assert controller.answered == 5
        assert controller.accepted == channel.connects == 5
        channel.close()

    run(body)


def test_a_timed_out_rpc_closes_its_connection():
    async def body(controller, address):
        channel = ControllerChannel()
        await channel.request(1, address, heartbeat(), 5.0, "c")
        controller.hold = trio.Event()
        with pytest.raises(trio.TooSlowError):
            await channel.request(1, address, heartbeat(), 0.2, "c")
        controller.hold.set()
        response = await channel.request(1, address, heartbeat(), 5.0, "c")
        assert response.error_code == 0
        assert channel.connects == 2  # the half-answered connection was not reused
        channel.close()

    run(body)


def test_a_kept_connection_idle_too_long_on_the_clock_port_is_not_reused():
    """The idle timer reads the channel's Clock port: a virtual clock moved past
    idle_close_s retires the kept connection, one moved less keeps it."""
    async def body(controller, address):
        clock = ManualClock(1_000)
        channel = ControllerChannel(idle_close_s=1.0, clock=clock)
        await channel.request(1, address, heartbeat(), 5.0, "c")
        clock.advance(999)
        await channel.request(1, address, heartbeat(), 5.0, "c")
        assert channel.connects == 1  # idle 0.999 s: reused
        clock.advance(1_000)
        await channel.request(1, address, heartbeat(), 5.0, "c")
        assert channel.connects == 2 and controller.answered == 3  # idle 1 s: closed, a new one opened
        channel.close()

    run(body)


def test_concurrent_rpcs_are_bounded_per_destination():
    async def body(controller, address):
        channel = ControllerChannel(max_in_flight=3, max_idle=2)
        controller.hold = trio.Event()
        answers = []

        async def one() -> None:
            answers.append(await channel.request(1, address, heartbeat(), 10.0, "c"))

        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(one)
            await trio.sleep(0.3)
            assert controller.in_flight == 3  # the other 7 wait for a slot
            controller.hold.set()
        assert len(answers) == 10 and controller.max_in_flight == 3
        assert channel.connects <= 10 and controller.accepted == channel.connects
        channel.close()

    run(body)


def test_a_full_default_lane_never_holds_up_the_lifecycle_lane():
    """Thousands of AlterPartition RPCs once took every slot to the controller and a
    live broker's heartbeats waited behind them until it was fenced: the
    lifecycle lane has its own connections and slots."""
    async def body(controller, address):
        channel = ControllerChannel(max_in_flight=2)
        controller.hold = trio.Event()
        controller.held_brokers = {7}
        answered = []

        async def blocked() -> None:
            answered.append(await channel.request(1, address, heartbeat(7), 10.0, "c"))

        async with trio.open_nursery() as nursery:
            for _ in range(6):
                nursery.start_soon(blocked)
            await trio.sleep(0.2)
            assert controller.in_flight == 2  # the default lane is full, 4 more wait for a slot
            for _ in range(3):
                response = await channel.request(1, address, heartbeat(8), 2.0, "c", lane=LIFECYCLE_LANE)
                assert response.error_code == 0
            # On the default lane the same request would wait behind the six.
            with pytest.raises(trio.TooSlowError):
                await channel.request(1, address, heartbeat(8), 0.3, "c")
            assert answered == []
            controller.hold.set()
        assert len(answered) == 6
        channel.close()

    run(body)


def test_close_after_the_trio_run_ended():
    """A node closes its channel after trio.run returned (kref/node/node.py): no error."""
    channel = ControllerChannel()

    async def body(controller, address):
        await channel.request(1, address, heartbeat(), 5.0, "c")

    run(body)
    channel.close()
    channel.close()

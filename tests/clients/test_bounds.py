"""Bounded resources under hostile clients, against a real kref broker:
a client that pipelines thousands of requests and never reads responses
(the per-connection in-flight bound and TCP back-pressure stop the broker
from reading more), a client holding a frame just under
socket.request.max.bytes half-sent, and random bytes on many connections
(hypothesis). Other connections keep being served and the broker's
resident memory stays within a fixed bound."""

from __future__ import annotations

import struct
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0

from kref.protocol.client import WireClient, size_prefix
from kref.protocol.codec import encode_request

MAX_REQUEST = 1024 * 1024
RSS_GROWTH_LIMIT = 96 * 1024 * 1024


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def serves(broker) -> bool:
    with WireClient(broker.host, broker.port) as c:
        return c.request(ApiVersionsRequestV0()).error_code == 0


def test_unread_pipeline_and_half_sent_frames_stay_bounded(kref_broker_factory):
    broker = kref_broker_factory({"socket.request.max.bytes": str(MAX_REQUEST)})
    assert serves(broker)
    before = rss_bytes(broker.proc.pid)
    flooders = []
    for _ in range(3):
        c = WireClient(broker.host, broker.port, timeout=2)
        c.sock.setblocking(False)
        one = encode_request(ApiVersionsRequestV0(), 1)
        sent = 0
        try:
            for _ in range(20000):
                sent += c.sock.send(one * 50)
        except BlockingIOError:
            pass  # the broker stopped reading: back-pressure reached the client
        flooders.append(c)
    holders = []
    for _ in range(4):
        c = WireClient(broker.host, broker.port)
        c.send_raw(size_prefix(MAX_REQUEST) + b"\x00" * (MAX_REQUEST - 10))
        holders.append(c)
    assert serves(broker)
    growth = rss_bytes(broker.proc.pid) - before
    print(f"broker RSS growth: {growth / 2**20:.1f} MiB")
    assert growth < RSS_GROWTH_LIMIT, f"RSS grew by {growth / 2**20:.1f} MiB"
    for c in flooders + holders:
        c.close()
    assert serves(broker)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.lists(st.binary(min_size=1, max_size=200), min_size=1, max_size=5))
def test_random_bytes_over_sockets(kref_broker, data):
    with WireClient(kref_broker.host, kref_broker.port, timeout=5) as c:
        for chunk in data:
            try:
                c.send_raw(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
    assert serves(kref_broker)
    assert "Traceback" not in kref_broker.log_text()


def test_unknown_key_after_valid_requests(kref_broker):
    """Responses already owed are sent before the connection closes."""
    with WireClient(kref_broker.host, kref_broker.port) as c:
        c.send_raw(encode_request(ApiVersionsRequestV0(), 1) + size_prefix(8) + struct.pack(">hhi", 5000, 0, 2))
        assert struct.unpack_from(">i", c.read_frame(), 0)[0] == 1
        assert c.is_closed_by_peer()


def served_connection(broker, attempts: int = 100) -> WireClient:
    """A connection the broker answers on; retries while slots of just-closed
    connections (e.g. the fixture's readiness probe) are still counted."""
    for _ in range(attempts):
        c = WireClient(broker.host, broker.port)
        try:
            if c.request(ApiVersionsRequestV0()).error_code == 0:
                return c
        except ConnectionError:
            pass
        c.close()
        time.sleep(0.1)
    raise AssertionError("the broker never accepted a connection")


def test_max_connections(kref_broker_factory):
    broker = kref_broker_factory({"max.connections": "3"})
    held = [served_connection(broker) for _ in range(3)]
    with WireClient(broker.host, broker.port) as extra:
        assert extra.is_closed_by_peer(timeout=10)
    held.pop().close()
    held.append(served_connection(broker))  # the freed slot is usable again
    for c in held:
        c.close()
    assert "max.connections=3 reached" in broker.log_text()

"""The connection's reads and writes (kref/broker/server.py) over real sockets.

The server reads once per readability and writes a lone response with one
non-blocking write(), falling back to trio's send_all; an earlier version
of that path stalled requests for seconds and no test saw it. These check
that no byte is left behind whatever the split: a size prefix or a frame
cut across writes, a frame completed after its predecessor was answered,
lone and pipelined requests alternating on one connection, and responses
larger than the socket buffers while the client is not reading. Every
wait is bounded by the client's socket timeout (a lost wake-up fails the
test instead of hanging it); none asserts how fast anything is.
"""

from __future__ import annotations

import struct
import time

import kio.schema.fetch.v12.response as f12r
import kio.schema.produce.v9.response as p9r
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12
from tests.clients.test_produce_fetch_wire import Wire, batch, fetch12, new_topic, partition_errors, produce_request

from kref.protocol.client import WireClient
from kref.protocol.codec import encode_request

PAUSE_S = 0.05  # long enough for each piece to arrive in a read of its own


def correlation_id(frame: bytes) -> int:
    return struct.unpack_from(">i", frame, 0)[0]


def metadata_request() -> MetadataRequestV12:
    return MetadataRequestV12(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def test_frames_cut_anywhere_are_answered(kref_broker):
    one = encode_request(ApiVersionsRequestV0(), 1)
    two = encode_request(metadata_request(), 2)
    three = encode_request(ApiVersionsRequestV0(), 3)
    with WireClient(kref_broker.host, kref_broker.port) as client:
        for piece in (one[:2], one[2:7], one[7:] + two[:5]):  # the size prefix itself cut in two
            client.send_raw(piece)
            time.sleep(PAUSE_S)
        assert correlation_id(client.read_frame()) == 1
        # The rest of frame 2 arrives after frame 1 was answered, with frame 3 behind it.
        client.send_raw(two[5:] + three)
        assert [correlation_id(client.read_frame()) for _ in range(2)] == [2, 3]
        client.send_raw(one)  # and a lone request after all that
        assert correlation_id(client.read_frame()) == 1


def test_lone_and_pipelined_requests_alternate(kref_broker):
    with WireClient(kref_broker.host, kref_broker.port) as client:
        cid = 0
        for round_no in range(40):
            count = round_no % 4 + 1  # 1 (a lone request), 2, 3, 4 pipelined in one write
            ids = list(range(cid, cid + count))
            cid += count
            bodies = [ApiVersionsRequestV0() if i % 2 else metadata_request() for i in ids]
            client.send_raw(b"".join(encode_request(body, i) for body, i in zip(bodies, ids, strict=True)))
            assert [correlation_id(client.read_frame()) for _ in ids] == ids


def test_responses_larger_than_socket_buffers_while_the_client_waits(kref_broker):
    topic = new_topic(kref_broker.bootstrap)
    wire = Wire(kref_broker.bootstrap)
    try:
        for i in range(4):
            response = wire.call(produce_request({topic: {0: batch([bytes([i]) * 900_000])}}), p9r.ProduceResponse)
            assert partition_errors(response)[(topic, 0)] == (0, i)
        big = fetch12(topic, {0: 0}, partition_max_bytes=8 << 20, max_bytes=8 << 20)
        # A lone fetch of ~3.6 MB answered while the client does not read: the
        # first write() takes part of it, send_all must deliver the rest.
        cid = wire.send(big)
        time.sleep(0.3)
        got, lone = wire.receive(f12r.FetchResponse)
        assert got == cid
        records = lone.responses[0].partitions[0].records
        assert len(records) > 3_600_000
        # The same twice pipelined (the writer task's path), then a lone small request.
        first, second = wire.send(big), wire.send(big)
        time.sleep(0.3)
        for expected in (first, second):
            got, response = wire.receive(f12r.FetchResponse)
            assert got == expected and response.responses[0].partitions[0].records == records
        assert wire.call(fetch12(topic, {0: 3}), f12r.FetchResponse).responses[0].partitions[0].high_watermark == 4
    finally:
        wire.close()


def test_a_busy_connection_is_not_idle(kref_broker_factory):
    # The idle watchdog must measure from the reader's last wait, not from
    # the connection's start: requests every 50 ms for 1.5 s keep a
    # connection with connections.max.idle.ms=400 open.
    broker = kref_broker_factory({"connections.max.idle.ms": "400"})
    with WireClient(broker.host, broker.port) as client:
        for _ in range(30):
            assert client.request(ApiVersionsRequestV0()).error_code == 0
            time.sleep(0.05)
        assert client.is_closed_by_peer(timeout=30)  # and once quiet, it is closed
    assert broker.log_text().count("closing idle connection") == 1

"""The wire protocol over real sockets against a real kref broker.

ApiVersions (KIP-35/KIP-511): every supported version answers with
exactly the registered ranges; an unsupported version gets
UNSUPPORTED_VERSION in the v0 body layout behind a v0 header; no tagged
fields are sent. Bad input: garbage, oversize and negative size prefixes,
a truncated frame, an unknown API key, an unsupported version and a
malformed body each close only that connection with a logged reason,
while other connections (opened before and after) keep being served.
Requests pipelined on one connection are answered in order.
"""

from __future__ import annotations

import struct
import time

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12

from kref.protocol.client import WireClient, size_prefix
from kref.protocol.codec import encode_request, request_class

ADMIN_APIS = {3, 18, 19, 20, 32, 37, 44, 60}


def connect(broker) -> WireClient:
    return WireClient(broker.host, broker.port)


def api_versions_request(version: int):
    cls = request_class(18, version)
    if version >= 3:
        return cls(client_software_name="kref-test", client_software_version="1.0")
    return cls()


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_every_version(kref_broker, version):
    with connect(kref_broker) as client:
        response = client.request(api_versions_request(version))
    assert response.error_code == 0
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ADMIN_APIS <= set(ranges)
    assert ranges[18] == (0, 4)
    assert ranges[3] == (0, 13)
    assert 71 not in ranges  # GetTelemetrySubscriptions is not implemented, so not advertised


def test_api_versions_unsupported_version_falls_back_to_v0_layout(kref_broker):
    # A future ApiVersions v9 request: flexible header v2, body we cannot parse.
    header = struct.pack(">hhih", 18, 9, 4242, 4) + b"test" + b"\x00"
    with connect(kref_broker) as client:
        client.send_raw(size_prefix(len(header) + 3) + header + b"\x01\x02\x03")
        frame = client.read_frame()
    correlation_id, error_code, count = struct.unpack_from(">ihi", frame, 0)
    assert correlation_id == 4242  # response header v0: no tag buffer follows
    assert error_code == 35  # UNSUPPORTED_VERSION
    entries = [struct.unpack_from(">hhh", frame, 10 + 6 * i) for i in range(count)]
    assert len(frame) == 10 + 6 * count  # v0 body: nothing after the array
    assert (18, 0, 4) in entries


def test_api_versions_v3_has_v0_header_and_no_tagged_fields(kref_broker):
    with connect(kref_broker) as client:
        correlation_id = client.send(api_versions_request(3))
        frame = client.read_frame()
    (got,) = struct.unpack_from(">i", frame, 0)
    assert got == correlation_id
    error_code = struct.unpack_from(">h", frame, 4)[0]
    assert error_code == 0
    # body: error_code, compact array of (key, min, max, tags), throttle_time, tags
    (n_plus_one,) = frame[6:7]
    end_of_array = 7 + (n_plus_one - 1) * 7
    assert all(frame[7 + 7 * i + 6] == 0 for i in range(n_plus_one - 1))
    assert frame[end_of_array + 4 :] == b"\x00"


def assert_still_serving(broker) -> None:
    with connect(broker) as client:
        assert client.request(ApiVersionsRequestV0()).error_code == 0


def test_pipelined_requests_answered_in_order(kref_broker):
    with connect(kref_broker) as client:
        metadata = MetadataRequestV12(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        bodies = [ApiVersionsRequestV0(), metadata] * 5
        payload = b"".join(encode_request(body, 100 + i) for i, body in enumerate(bodies))
        client.send_raw(payload)
        ids = [struct.unpack_from(">i", client.read_frame(), 0)[0] for _ in bodies]
    assert ids == [100 + i for i in range(len(bodies))]


def framed(payload: bytes) -> bytes:
    return size_prefix(len(payload)) + payload


BAD_INPUTS = {
    "garbage": b"\x00\x00\x00\x10" + bytes(range(200, 216)),
    "oversize_prefix": struct.pack(">i", 2**30) + b"x" * 100,
    "negative_prefix": struct.pack(">i", -7) + b"x" * 10,
    "shorter_than_header": size_prefix(3) + b"abc",
    "unknown_api_key": size_prefix(10) + struct.pack(">hhih", 9999, 0, 1, -1),
    "not_advertised_api_key": size_prefix(10) + struct.pack(">hhih", 71, 0, 1, -1),
    "unsupported_version": size_prefix(11) + struct.pack(">hhih", 3, 99, 1, -1) + b"\x00",
    "version_below_kio_floor": size_prefix(10) + struct.pack(">hhih", 19, 0, 1, -1),
    "malformed_body": framed(
        # Metadata v12 header (v2: client id "x", no tags), then a topics
        # array that claims ~2^28 entries with one byte behind it.
        struct.pack(">hhih", 3, 12, 1, 1) + b"x" + b"\x00" + b"\xff\xff\xff\x7f\x01"
    ),
}


def test_bad_input_closes_only_that_connection(kref_broker_factory):
    broker = kref_broker_factory({"socket.request.max.bytes": str(1024 * 1024)})
    bystander = connect(broker)
    assert bystander.request(ApiVersionsRequestV0()).error_code == 0
    for case, data in sorted(BAD_INPUTS.items()):
        with connect(broker) as bad:
            bad.send_raw(data)
            assert bad.is_closed_by_peer(timeout=10), case
        assert bystander.request(ApiVersionsRequestV0()).error_code == 0, case
        assert_still_serving(broker)
    bystander.close()
    log = broker.log_text()
    assert log.count("closing connection from") >= len(BAD_INPUTS), log
    for reason in ("larger than socket.request.max.bytes", "negative frame size", "unknown or unsupported API key 9999",
                   "unsupported version 99 of API key 3", "malformed API key 3 v12 request"):
        assert reason in log, reason
    assert "Traceback" not in log


def test_truncated_frame_then_close_is_logged(kref_broker):
    with connect(kref_broker) as bad:
        bad.send_raw(size_prefix(100) + b"0123456789")
    deadline = time.monotonic() + 10
    while "connection closed inside a frame" not in kref_broker.log_text():
        assert time.monotonic() < deadline, kref_broker.log_text()
        time.sleep(0.05)
    assert_still_serving(kref_broker)


def test_answers_decoded_requests_before_closing_on_bad_frame(kref_broker):
    with connect(kref_broker) as client:
        client.send_raw(encode_request(ApiVersionsRequestV0(), 7) + struct.pack(">i", -1))
        frame = client.read_frame()
        assert struct.unpack_from(">i", frame, 0)[0] == 7
        assert client.is_closed_by_peer()


def test_flexible_request_header_v2_round_trip(kref_broker):
    with connect(kref_broker) as client:
        response = client.request(ApiVersionsRequestV3(client_software_name="x", client_software_version="y"))
    assert response.error_code == 0


def test_api_versions_v3_checks_client_software_name(kref_broker):
    with connect(kref_broker) as client:
        bad = ApiVersionsRequestV3(client_software_name="bad name!", client_software_version="1.0")
        response = client.request(bad)
        assert response.error_code == 42 and response.api_keys == ()  # INVALID_REQUEST
        good = ApiVersionsRequestV3(client_software_name="librdkafka", client_software_version="2.16.1")
        assert client.request(good).error_code == 0

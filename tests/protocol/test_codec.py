"""Request decoding and response encoding on kio: header versions follow
the schema's flexibility (KIP-482), ApiVersions gets its v0 response
header and the UNSUPPORTED_VERSION v0 fallback (KIP-511), unknown keys and
versions are typed UnsupportedApiError, and every request kio can encode
for a registered range decodes back to the same value. Hypothesis feeds
arbitrary frames to decode_request: it returns a request or raises a
ProtocolError subclass, nothing else."""

from __future__ import annotations

import datetime
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from kref.broker.broker import Broker
from kref.broker.config import BrokerConfig
from kref.broker.handlers import register_all
from kref.broker.router import Router
from kref.protocol.api_versions import api_versions_response, unsupported_version_response
from kref.protocol.codec import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_parts,
    kio_version_range,
    request_class,
    response_class,
)
from kref.protocol.errors import ErrorCode, ProtocolError, RequestDecodeError, UnsupportedApiError
from kref.protocol.messages import ZERO_THROTTLE


def full_router() -> Router:
    # A Broker that is never opened: registration must not touch the disk.
    broker = Broker(BrokerConfig.load(None, ["log.dirs=/nonexistent/kref-codec-test"]))
    router = Router()
    register_all(router, broker)
    return router


RANGES = full_router().supported_versions


def payload(frame: bytes) -> bytes:
    return frame[4:]


def test_round_trip_flexible_request():
    body = CreateTopicsRequest(
        topics=(
            CreatableTopic(
                name="t",
                num_partitions=3,
                replication_factor=-1,
                assignments=(),
                configs=(CreatableTopicConfig(name="retention.ms", value="1"),),
            ),
        ),
        timeout=datetime.timedelta(seconds=30),
        validate_only=False,
    )
    decoded = decode_request(payload(encode_request(body, 99, "cid")), RANGES)
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id, decoded.client_id) == (19, 7, 99, "cid")
    assert decoded.header_version == 2
    assert decoded.body == body


def test_round_trip_non_flexible_request_uses_header_v1():
    body = request_class(3, 4)(topics=None, allow_auto_topic_creation=True)
    decoded = decode_request(payload(encode_request(body, 1, None)), RANGES)
    assert decoded.header_version == 1 and decoded.client_id is None and decoded.body == body


def test_unknown_api_key_and_version_are_typed():
    with pytest.raises(UnsupportedApiError, match="API key 9999"):
        decode_request(struct.pack(">hhih", 9999, 0, 1, -1), RANGES)
    with pytest.raises(UnsupportedApiError, match="unsupported version 14"):
        decode_request(struct.pack(">hhih", 3, 14, 1, -1), RANGES)
    with pytest.raises(RequestDecodeError):
        decode_request(b"\x00\x03", RANGES)


def test_unsupported_api_versions_request_is_not_parsed():
    decoded = decode_request(struct.pack(">hhih", 18, 77, 5, 3) + b"abc" + b"\xff\xff", RANGES)
    assert decoded.is_unsupported_api_versions and decoded.client_id == "abc"
    frame = encode_response(decoded, unsupported_version_response(RANGES))
    correlation_id, body = decode_response(payload(frame), ApiVersionsResponseV0)
    assert correlation_id == 5 and body.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {(k.api_key, k.min_version, k.max_version) for k in body.api_keys} >= {(18, 0, 4)}


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_response_header_is_v0(version):
    request = decode_request(payload(encode_request(request_class(18, version)(
        **({"client_software_name": "a", "client_software_version": "b"} if version >= 3 else {})
    ), 11)), RANGES)
    frame = payload(encode_response(request, api_versions_response(version, RANGES)))
    assert struct.unpack_from(">i", frame, 0)[0] == 11
    assert struct.unpack_from(">h", frame, 4)[0] == 0  # error_code follows the correlation id directly
    if version >= 3:
        assert frame.endswith(b"\x00")  # empty top-level tag buffer: no tagged fields sent


def test_response_of_wrong_version_is_refused():
    request = decode_request(payload(encode_request(MetadataRequest(topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False), 1)), RANGES)
    with pytest.raises(ValueError):
        encode_response(request, api_versions_response(3, RANGES))


def test_registered_ranges_are_inside_kio():
    for key, (lo, hi) in RANGES.items():
        kio_lo, kio_hi = kio_version_range(key)
        assert kio_lo <= lo <= hi <= kio_hi
        for v in range(lo, hi + 1):
            assert request_class(key, v) is not None and response_class(key, v) is not None


def test_router_rejects_versions_kio_lacks():
    router = Router()
    with pytest.raises(ValueError):
        router.register(0, 0, 13, None)  # kio's Produce starts at v3
    with pytest.raises(ValueError):
        router.register(4242, 0, 0, None)


frames = st.one_of(
    st.binary(max_size=300),
    # a valid prefix for a registered (key, version), followed by noise
    st.builds(
        lambda kv, corr, rest: struct.pack(">hhi", kv[0], kv[1], corr) + rest,
        st.sampled_from([(k, v) for k, (lo, hi) in RANGES.items() for v in range(lo, hi + 1)]),
        st.integers(-(2**31), 2**31 - 1),
        st.binary(max_size=300),
    ),
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frame=frames)
def test_fuzz_decode_request_only_typed_errors(frame):
    try:
        decoded = decode_request(frame, RANGES)
    except ProtocolError:
        return
    assert decoded.api_key in RANGES


@settings(max_examples=300, deadline=None)
@given(
    topics=st.lists(st.text(min_size=0, max_size=20), max_size=5),
    cut=st.integers(min_value=0, max_value=200),
)
def test_fuzz_truncated_valid_requests(topics, cut):
    body = MetadataRequest(
        # kio reads the zero UUID as None
        topics=tuple(MetadataRequestTopic(topic_id=None, name=t) for t in topics),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    frame = payload(encode_request(body, 3))
    try:
        decoded = decode_request(frame[: len(frame) - cut] if cut else frame, RANGES)
    except ProtocolError:
        assert cut > 0
        return
    if not cut:
        assert decoded.body == body


def test_zero_throttle_is_a_timedelta():
    assert ZERO_THROTTLE == datetime.timedelta(0)


@pytest.mark.parametrize("api_key, version", [(18, 0), (18, 3), (3, 12), (3, 4)])
def test_pre_encoded_body_gives_the_same_frame(api_key, version):
    from kref.protocol.codec import PreEncoded, encode_body

    body_type = request_class(api_key, version)
    fields = body_type.__dataclass_fields__
    kwargs = {}
    if "topics" in fields:
        kwargs = {k: v for k, v in dict(topics=None, allow_auto_topic_creation=True,
                                        include_topic_authorized_operations=False).items() if k in fields}
    if "client_software_name" in fields:
        kwargs = dict(client_software_name="a", client_software_version="b")
    request = decode_request(payload(encode_request(body_type(**kwargs), 77)), RANGES)
    if api_key == 18:
        response = api_versions_response(version, RANGES)
    else:
        response = response_class(3, version)(
            **{k: v for k, v in dict(throttle_time=ZERO_THROTTLE, brokers=(), cluster_id="c", controller_id=1,
                                     topics=(), cluster_authorized_operations=-(2**31)).items()
               if k in response_class(3, version).__dataclass_fields__}
        )
    direct = encode_response(request, response)
    assert encode_response(request, PreEncoded(type(response), encode_body(response))) == direct
    assert struct.unpack_from(">i", direct, 0)[0] == len(direct) - 4


@pytest.mark.parametrize("version", [11, 12, 13])
def test_a_large_chunked_body_is_gathered_not_joined(version):
    """encode_response_parts: a pre-encoded body of chunks of GATHER_MIN_BYTES or more
    comes back as [header, *chunks] with the record chunk itself (not a copy), and
    their concatenation is encode_response's frame; small bodies and bodies of too
    many chunks come back joined."""
    from kref.broker.handlers.fetch_response import fetch_response_chunks
    from kref.protocol.codec import GATHER_MAX_PARTS, GATHER_MIN_BYTES, PreEncoded

    request = decode_request(payload(encode_request(request_class(1, version)(
        **{k: v for k, v in dict(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
                                 isolation_level=0, session_id=0, session_epoch=-1, topics=(),
                                 forgotten_topics_data=(), rack_id="", cluster_id=None,
                                 replica_state=None).items()
           if k in request_class(1, version).__dataclass_fields__}), 5)), {1: (4, 17)})
    records = bytes(range(256)) * (GATHER_MIN_BYTES // 256 + 1)
    for size, partitions, gathered in ((len(records), 1, True), (100, 1, False),
                                       (200, GATHER_MAX_PARTS, False)):
        body = fetch_response_chunks(version, 0, 0, [("t", None, [(i, 0, 1, 1, 0, records[:size])
                                                                   for i in range(partitions)])])
        pre = PreEncoded(response_class(1, version), body)
        frame = encode_response_parts(request, pre)
        assert (type(frame) is list) is gathered
        joined = b"".join(frame) if gathered else frame
        assert joined == encode_response(request, pre)
        assert struct.unpack_from(">i", joined, 0)[0] == len(joined) - 4
        if gathered:
            assert any(part is body[i] for part in frame for i in range(len(body)) if len(part) == size)

"""Request decoding and response encoding on top of kio's generated types.

Theory of operation: a request frame starts with api_key (int16),
api_version (int16) and correlation_id (int32) in every header version, so
we read those three with `struct`, then pick kio's request class for the
(api_key, api_version) pair and decode the header version that class names
(v1 for non-flexible versions, v2 with tagged fields for flexible ones,
KIP-482) followed by the body.

Kafka's rules that we keep:
- An unknown API key, or a version the broker does not support, makes Kafka
  close the connection (its RequestContext throws InvalidRequestException and
  the SocketServer closes the channel). We raise UnsupportedApiError and the
  server does the same, logging why.
- ApiVersions is the exception (KIP-511): a client may ask for a version the
  broker does not know, so the broker cannot parse the body. It answers with
  UNSUPPORTED_VERSION (35) in the v0 body layout, listing its own ranges, so
  the client retries with a version it finds there (kafka-python v4 -> v2,
  librdkafka v3 -> v0). The ApiVersions response header is always v0, even
  for flexible versions, because the client cannot know yet whether the
  broker understands flexible headers.
- We never send tagged fields in ApiVersions responses: librdkafka before 2.2
  mis-parses them (kio omits tagged fields that hold their default values).

Decoding errors of any kind surface as RequestDecodeError (typed), never as
a crash of the connection task with an arbitrary exception. Every body is
length-checked (bounds.py) before kio reads it: kio reserves memory for the
lengths a message claims, and a huge claim would abort the process.
"""

from __future__ import annotations

import functools
import io
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from kref.protocol.bounds import check_body, skip_tagged_fields
from kref.protocol.errors import RequestDecodeError, UnsupportedApiError
from kref.protocol.produce_request import ProduceBody, decode_produce

__all__ = [
    "API_VERSIONS_KEY",
    "DecodedRequest",
    "PreEncoded",
    "encode_body",
    "decode_request",
    "RequestReader",
    "encode_response",
    "encode_response_parts",
    "kio_version_range",
    "request_class",
    "response_class",
    "warm_layout",
    "WARM_AT_START",
    "encode_request",
    "decode_response",
]

API_VERSIONS_KEY = 18
PRODUCE_KEY = 0  # read by produce_request.py when it has the plain shape
_PREFIX = struct.Struct(">hhi")
_HEADER = struct.Struct(">ii")  # frame size, correlation id
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# Everything kio's Rust reader or the enum/timedelta constructors may raise on
# malformed input. Anything else is a bug in us and should crash loudly.
# KeyError: kio 0.6 rejects a tagged field its schema lacks ("Unknown tagged
# field tag"), where Kafka skips it; found by tests/protocol fuzzing.
_DECODE_FAILURES = (SerialError, ValueError, OverflowError, UnicodeError, IndexError, TypeError, KeyError)


@dataclass(frozen=True, slots=True)
class DecodedRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    # kio request payload; None for an ApiVersions request of an unsupported version.
    body: object | None
    header_version: int

    @property
    def is_unsupported_api_versions(self) -> bool:
        return self.body is None and self.api_key == API_VERSIONS_KEY


@functools.cache
def request_class(api_key: int, api_version: int) -> type | None:
    try:
        return load_request_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        return None


@functools.cache
def response_class(api_key: int, api_version: int) -> type | None:
    try:
        return load_response_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        return None


@functools.cache
def kio_version_range(api_key: int) -> tuple[int, int] | None:
    """The versions kio has generated types for (contiguous in kio 0.6).

    Read from kio's index, not by importing each version's module: probing
    imports made broker start-up take seconds.
    """
    name = api_key_map.get(api_key)
    if name is None:
        return None
    versions = sorted(v for v, entities in schema_name_map[name].items() if EntityType.request in entities)
    if not versions:
        return None
    return versions[0], versions[-1]


@functools.cache
def _reader(entity_type: type):
    return entity_reader(entity_type)


@functools.cache
def _writer(entity_type: type):
    return entity_writer(entity_type)


@functools.cache
def _request_layout(api_key: int, api_version: int) -> tuple[type, int] | None:
    """(body class, request header version) of a request: one cached lookup per request."""
    body_type = request_class(api_key, api_version)
    if body_type is None:
        return None
    return body_type, int(body_type.__header_schema__.__version__)


# Loading one version of one API from kio costs 10-30 ms of CPU (its module
# builds dozens of dataclasses on import). Left lazy, that lands on the first
# Produce or Fetch of that version a client sends: about a quarter of the
# broker's CPU in a 200,000-record consume (bench/broker.py). The broker
# loads these at start instead, in the background (server.py): the versions
# librdkafka 2.4+ (Produce v10, Fetch v16) and current Java clients (Produce
# v11-v13, Fetch v17) negotiate with kref. Others stay lazy.
WARM_AT_START = ((0, 10), (1, 16), (0, 11), (0, 12), (0, 13), (1, 17))


def warm_layout(api_key: int, api_version: int) -> None:
    """Load (and cache) the kio types of one request/response version now."""
    _request_layout(api_key, api_version)
    response_type = response_class(api_key, api_version)
    if response_type is not None:
        _response_layout(response_type)


@functools.cache
def _response_layout(response_type: type) -> tuple[int, int, bool]:
    """(api key, version, flexible header?) of a response class, read once
    (each is a class attribute converted by int(), on every response)."""
    return (int(response_type.__api_key__), int(response_type.__version__),
            bool(response_type.__header_schema__.__flexible__))


def decode_request(frame: bytes, supported: Mapping[int, tuple[int, int]]) -> DecodedRequest:
    """Decode one request frame (without its size prefix).

    `supported` maps api_key -> (min_version, max_version) as advertised.
    Raises UnsupportedApiError (close the connection) or RequestDecodeError.
    """
    if len(frame) < _PREFIX.size:
        raise RequestDecodeError(f"request of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _PREFIX.unpack_from(frame, 0)
    versions = supported.get(api_key)
    if api_key == API_VERSIONS_KEY and (versions is None or not versions[0] <= api_version <= versions[1]):
        return DecodedRequest(
            api_key, api_version, correlation_id, _client_id_best_effort(frame), None, header_version=0
        )
    if versions is None:
        raise UnsupportedApiError(api_key, api_version, f"unknown or unsupported API key {api_key}")
    if not versions[0] <= api_version <= versions[1]:
        raise UnsupportedApiError(
            api_key,
            api_version,
            f"unsupported version {api_version} of API key {api_key} (supported {versions[0]}-{versions[1]})",
        )
    layout = _request_layout(api_key, api_version)
    if layout is None:  # a registration outside kio's range is refused by the router
        raise UnsupportedApiError(api_key, api_version, f"no schema for API key {api_key} v{api_version}")
    body_type, header_version = layout
    try:
        client_id, header_size = _request_header_rest(frame, header_version)
        body = decode_produce(frame, header_size, api_version) if api_key == PRODUCE_KEY else None
        if body is None:
            check_body(body_type, frame, header_size)
            body, _ = _reader(body_type)(frame, header_size)
    except _DECODE_FAILURES as exc:
        raise RequestDecodeError(
            f"malformed API key {api_key} v{api_version} request: {type(exc).__name__}: {exc}"
        ) from exc
    return DecodedRequest(api_key, api_version, correlation_id, client_id, body, header_version=header_version)


# Only a small batch's request is remembered: remembering checks the records'
# place by comparing them (a copy and a compare of up to this much), and
# batches of many records rarely come twice at one size.
REMEMBER_MAX_RECORD_BYTES = 4096


class RequestReader:
    """decode_request for one connection, which reads a repeated Produce shape once.

    A producer waiting for each answer sends the same request again and
    again: the same header (client id), transactional id, acks, timeout,
    topic and partition, and a batch of the same size. Only the correlation
    id (bytes 4-8) and the record bytes differ. After a plain Produce for
    one partition (the struct reader's ProduceBody, records of at most
    REMEMBER_MAX_RECORD_BYTES), the reader keeps that frame's bytes around
    the records; a frame of the same length whose bytes there are equal
    has the same parse, since the records are an opaque run whose length prefix is among
    the equal bytes. It gets the remembered fields with its own correlation
    id and records, without a walk. Any other frame, or any byte that
    differs, goes through decode_request, with its checks and errors.

    `supported` is the router's version table, which is fixed once the
    broker serves; the remembered shape was accepted against it.
    """

    __slots__ = ("supported", "_size", "_key_version", "_middle", "_tail", "_records_at", "_records_end", "_fields")

    def __init__(self, supported: Mapping[int, tuple[int, int]]) -> None:
        self.supported = supported
        self._size = -1  # no shape remembered

    def decode(self, frame: bytes) -> DecodedRequest:
        if len(frame) == self._size:
            at, end = self._records_at, self._records_end
            if frame[:4] == self._key_version and frame[8:at] == self._middle and frame[end:] == self._tail:
                api_version, client_id, header_version, txn, acks, timeout_ms, name, topic_id, index = self._fields
                body = ProduceBody(txn, acks, timeout_ms, ((name, topic_id, ((index, frame[at:end]),)),))
                (correlation_id,) = _I32.unpack_from(frame, 4)
                return DecodedRequest(PRODUCE_KEY, api_version, correlation_id, client_id, body, header_version)
        request = decode_request(frame, self.supported)
        body = request.body
        if request.api_key == PRODUCE_KEY and type(body) is ProduceBody:
            self._remember(frame, request, body)
        return request

    def _remember(self, frame: bytes, request: DecodedRequest, body: ProduceBody) -> None:
        topics = body.topics
        if len(topics) != 1 or len(topics[0][2]) != 1:
            return
        name, topic_id, ((index, records),) = topics[0]
        if type(records) is not bytes or len(records) > REMEMBER_MAX_RECORD_BYTES:
            return
        # The plain shape ends with the records and then, in flexible
        # versions, three empty tag buffers (partition, topic, request).
        end = len(frame) - (3 if request.api_version >= 9 else 0)
        at = end - len(records)
        if at < 8 or frame[at:end] != records:
            return
        self._size = len(frame)
        self._key_version = frame[:4]
        self._middle = frame[8:at]
        self._tail = frame[end:]
        self._records_at, self._records_end = at, end
        self._fields = (request.api_version, request.client_id, request.header_version, body.transactional_id,
                        body.acks, body.timeout_ms, name, topic_id, index)


def _request_header_rest(frame: bytes, header_version: int) -> tuple[str | None, int]:
    """client_id and where the body starts, for request header v1 or v2.

    Read with struct rather than kio's reader: the header is on every
    request and small enough that the generic reader's call cost showed.
    client_id is a legacy nullable string in both versions (KIP-482 keeps
    it so that any broker can read it); v2 adds a tag buffer.
    """
    if len(frame) < 10:
        raise ValueError("request header cut short before client_id")
    (length,) = _I16.unpack_from(frame, 8)
    if length < 0:
        client_id, pos = None, 10
    else:
        pos = 10 + length
        if pos > len(frame):
            raise ValueError(f"client_id of {length} bytes runs past the end of the request")
        client_id = frame[10:pos].decode("utf-8")
    if header_version >= 2:
        pos = skip_tagged_fields(frame, pos)
    return client_id, pos


def _client_id_best_effort(frame: bytes) -> str | None:
    """client_id of a header we cannot fully parse (legacy nullable string)."""
    if len(frame) < 10:
        return None
    (length,) = struct.unpack_from(">h", frame, 8)
    if length < 0 or 10 + length > len(frame):
        return None
    return frame[10 : 10 + length].decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class PreEncoded:
    """A response body already in wire form, e.g. a cached ApiVersions body,
    or a Fetch response assembled around record bytes read from a segment.
    `response_type` is the kio class it is an encoding of (for the header).
    `body` may be a tuple of chunks: they are joined once, with the header, so
    a fetch response's megabytes of records are copied once on their way out
    (a join of the body and then a header concatenation copied them twice)."""

    response_type: type
    body: bytes | bytearray | memoryview | tuple

    def __len__(self) -> int:
        return len(self.body) if not isinstance(self.body, tuple) else sum(map(len, self.body))


# A pre-encoded body of chunks this large (a consumer's fetch: record bytes,
# up to megabytes) can leave as a list of buffers that the server writes with
# one writev: joining it with its header copied every record byte once more in
# user space, about a tenth of a 1 MiB fetch's CPU. Smaller ones are joined
# (one write of one buffer is cheaper than gathering a few small ones).
GATHER_MIN_BYTES = 64 * 1024
# writev takes at most IOV_MAX (1024 on Linux) buffers; a body of more chunks
# (a fetch of hundreds of partitions) is joined instead.
GATHER_MAX_PARTS = 512


def encode_response(request: DecodedRequest, response: object) -> bytes:
    """Encode header + body of `response` to a frame, size prefix included."""
    return _encode_frame(request, response, False)  # type: ignore[return-value]


def encode_response_parts(request: DecodedRequest, response: object) -> bytes | list[bytes]:
    """encode_response, except that a pre-encoded body of chunks of
    GATHER_MIN_BYTES or more comes back as a list [header, *chunks], uncopied,
    for one writev (the frame is their concatenation)."""
    return _encode_frame(request, response, True)


def _encode_frame(request: DecodedRequest, response: object, gather: bool) -> bytes | list[bytes]:
    pre_encoded = type(response) is PreEncoded
    response_type = response.response_type if pre_encoded else type(response)
    api_key, version, flexible_header = _response_layout(response_type)
    if api_key != request.api_key or version != request.api_version:
        # Only an ApiVersions request of a version we do not know gets another
        # version back: the v0 body (KIP-511).
        if not request.is_unsupported_api_versions:
            raise ValueError(
                f"response {response_type.__qualname__} v{version} does not match "
                f"request key {request.api_key} v{request.api_version}"
            )
        if version != 0 or api_key != API_VERSIONS_KEY:
            raise ValueError("an unsupported ApiVersions request is answered with a v0 body")
    # Response header v0 is the correlation id; v1 adds an empty tag buffer
    # (we never send response-header tagged fields).
    if pre_encoded:
        body = response.body
        if type(body) is tuple:
            size = sum(map(len, body))
            header = _HEADER.pack(size + (5 if flexible_header else 4), request.correlation_id)
            if gather and size >= GATHER_MIN_BYTES and len(body) < GATHER_MAX_PARTS:
                return [header + b"\x00" if flexible_header else header, *body]
            return b"".join((header, b"\x00" if flexible_header else b"", *body))
        header = _HEADER.pack(len(body) + (5 if flexible_header else 4), request.correlation_id)
        return b"".join((header, b"\x00", body)) if flexible_header else header + body
    buffer = io.BytesIO()
    buffer.write(_HEADER.pack(0, request.correlation_id))
    if flexible_header:
        buffer.write(b"\x00")
    _writer(response_type)(buffer, response)
    frame = buffer.getbuffer()
    struct.pack_into(">i", frame, 0, len(frame) - 4)
    del frame
    return buffer.getvalue()


def encode_body(response: object) -> bytes:
    """The wire form of a response body alone (for PreEncoded)."""
    buffer = io.BytesIO()
    _writer(type(response))(buffer, response)
    return buffer.getvalue()


# --- client side, used by tests and by kref's own tools -----------------------


def encode_request(body: object, correlation_id: int, client_id: str | None = "kref") -> bytes:
    body_type = type(body)
    header_type = body_type.__header_schema__
    buffer = io.BytesIO()
    _writer(header_type)(
        buffer,
        header_type(
            request_api_key=body_type.__api_key__,
            request_api_version=body_type.__version__,
            correlation_id=correlation_id,
            client_id=client_id,
        ),
    )
    _writer(body_type)(buffer, body)
    payload = buffer.getvalue()
    return struct.pack(">i", len(payload)) + payload


def decode_response(frame: bytes, response_type: type) -> tuple[int, object]:
    """(correlation_id, body) of a response frame without its size prefix."""
    header, size = _reader(response_type.__header_schema__)(frame, 0)
    body, _ = _reader(response_type)(frame, size)
    return header.correlation_id, body

"""kref/protocol/produce_request.py reads Produce v3-v13 with struct; kio's
reader is the judge. For every version, requests of many shapes written by
kio's writer must decode to equal bodies on both paths (the struct reader's
ProduceBody against `from_kio` of kio's dataclasses, which must themselves
equal what was written), and mangled frames (cut short, bytes flipped,
bytes appended) must give the generic path's outcome: the same request, or
the same error type."""

from __future__ import annotations

import datetime
import random
import uuid

import pytest

from kref.protocol.codec import decode_request, encode_request, request_class
from kref.protocol.errors import ProtocolError
from kref.protocol import codec
from kref.protocol.messages import nested
from kref.protocol.produce_request import ProduceBody, decode_produce, from_kio

SEED = 1207
SUPPORTED = {0: (3, 13)}


def _request(version: int, rng: random.Random):
    cls = request_class(0, version)
    topic_type, part_type = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    topics = []
    for t in range(rng.choice([0, 1, 1, 1, 2, 3])):
        parts = tuple(
            part_type(index=rng.randrange(0, 1 << 31),
                      records=None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 1, 61, 200, 300])))
            for _ in range(rng.choice([0, 1, 1, 2, 5]))
        )
        if version >= 13:
            key = {"topic_id": None if rng.random() < 0.2 else uuid.UUID(int=rng.getrandbits(128))}
        else:
            key = {"name": rng.choice(["t", "topic-ä", "x" * 200, f"t{t}"])}
        topics.append(topic_type(**key, partition_data=parts))
    return cls(
        transactional_id=rng.choice([None, None, "", "tx-1", "é" * 70]),
        acks=rng.choice([-1, 0, 1]),
        timeout=datetime.timedelta(milliseconds=rng.choice([0, 1500, 30000, (1 << 31) - 1])),
        topic_data=tuple(topics),
    )


def _generic(frame: bytes):
    """decode_request with the struct reader switched off."""
    real = codec.decode_produce
    codec.decode_produce = lambda *a: None
    try:
        return decode_request(frame, SUPPORTED)
    finally:
        codec.decode_produce = real


def _outcome(decode, frame: bytes):
    try:
        body = decode(frame).body
    except ProtocolError as exc:
        return type(exc)
    return body if type(body) is ProduceBody else from_kio(body)


@pytest.mark.parametrize("version", range(3, 14))
def test_struct_reader_equals_kio(version):
    rng = random.Random(SEED + version)
    print(f"seed {SEED + version}")
    plain = 0
    for _ in range(60):
        request = _request(version, rng)
        frame = encode_request(request, 7)[4:]
        decoded = decode_request(frame, SUPPORTED)
        assert type(decoded.body) is ProduceBody
        assert decoded.body == from_kio(request)
        assert _generic(frame).body == request
        plain += decode_produce(frame, len(frame) - len(_body_bytes(request)), version) is not None
        # Mangled frames: the same outcome on both paths.
        for _ in range(8):
            mangled = bytearray(frame)
            choice = rng.random()
            if choice < 0.4:
                mangled = mangled[: rng.randrange(8, len(mangled) + 1)]
            elif choice < 0.8:
                i = rng.randrange(10, len(mangled)) if len(mangled) > 10 else 9
                mangled[min(i, len(mangled) - 1)] = rng.randrange(256)
            else:
                mangled += bytes([rng.randrange(256)])
            assert _outcome(lambda f: decode_request(f, SUPPORTED), bytes(mangled)) == _outcome(_generic, bytes(mangled))
    assert plain == 60  # every request written by kio took the struct path


def _body_bytes(request) -> bytes:
    """The body alone, as kio writes it (the frame minus its header)."""
    import io

    buffer = io.BytesIO()
    codec._writer(type(request))(buffer, request)
    return buffer.getvalue()


def test_a_tagged_field_takes_the_generic_path():
    request = _request(9, random.Random(SEED))
    frame = encode_request(request, 1)[4:]
    body_at = len(frame) - len(_body_bytes(request))
    tagged = frame[:-1] + b"\x01\x05\x01\x00"  # one unknown tag (5), one byte long
    assert decode_produce(tagged, body_at, 9) is None
    assert _outcome(lambda f: decode_request(f, SUPPORTED), tagged) == _outcome(_generic, tagged)


def test_large_records_are_a_view_into_the_frame_with_the_same_bytes():
    from kref.protocol.produce_request import VIEW_BYTES

    rng = random.Random(SEED)
    for version in (3, 9, 13):
        cls = request_class(0, version)
        topic_type, part_type = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
        key = {"topic_id": uuid.UUID(int=7)} if version >= 13 else {"name": "big"}
        records = rng.randbytes(VIEW_BYTES + 17)
        request = cls(transactional_id=None, acks=1, timeout=datetime.timedelta(milliseconds=1500),
                      topic_data=(topic_type(**key, partition_data=(part_type(index=0, records=records),)),))
        frame = encode_request(request, 3)[4:]
        body = decode_request(frame, SUPPORTED).body
        assert body == from_kio(request)
        decoded = body.topics[0][2][0][1]
        assert isinstance(decoded, memoryview) and bytes(decoded) == records
        # Cut one byte short: the generic path decides, as for any other frame.
        assert _outcome(lambda f: decode_request(f, SUPPORTED), frame[:-1]) == _outcome(_generic, frame[:-1])


def _decoded(decode, frame: bytes):
    """A decode's whole outcome: every field of the DecodedRequest, or the error type."""
    try:
        r = decode(frame)
    except ProtocolError as exc:
        return type(exc)
    body = r.body if type(r.body) is ProduceBody else from_kio(r.body)
    return (r.api_key, r.api_version, r.correlation_id, r.client_id, r.header_version, body)


@pytest.mark.parametrize("version", range(3, 14))
def test_request_reader_gives_what_decode_request_gives(version):
    """codec.RequestReader reuses the parse of a repeated single-partition
    Produce shape. Over a stream of repeats (new correlation ids and record
    bytes), mangled repeats (a byte flipped anywhere, cut short, one byte
    more, a record one byte longer) and other shapes, each frame must decode
    to exactly what decode_request gives it, errors included, and repeats
    must take the remembered shape."""
    rng = random.Random(SEED + 100 + version)
    print(f"seed {SEED + 100 + version}")
    cls = request_class(0, version)
    topic_type, part_type = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")

    def frame_of(records: bytes, *, acks=1, index=0, name="t", client_id="rdkafka", correlation_id=None) -> bytes:
        key = {"topic_id": uuid.UUID(int=5)} if version >= 13 else {"name": name}
        request = cls(transactional_id=None, acks=acks, timeout=datetime.timedelta(milliseconds=30000),
                      topic_data=(topic_type(**key, partition_data=(part_type(index=index, records=records),)),))
        cid = rng.randrange(1 << 31) if correlation_id is None else correlation_id
        return encode_request(request, cid, client_id=client_id)[4:]

    reader = codec.RequestReader(SUPPORTED)
    reused = 0
    for _ in range(300):
        choice = rng.random()
        records = rng.randbytes(61)
        if choice < 0.5:
            frame = frame_of(records)  # the repeated shape
        elif choice < 0.6:
            frame = frame_of(rng.randbytes(62))  # one byte more of records: another length
        elif choice < 0.7:
            frame = frame_of(records, acks=rng.choice([-1, 0, 1, 2]), index=rng.choice([0, 1]),
                             name=rng.choice(["t", "u"]), client_id=rng.choice(["rdkafka", "other", None]))
        elif choice < 0.9:
            mangled = bytearray(frame_of(records))
            kind = rng.random()
            if kind < 0.6:
                mangled[rng.randrange(len(mangled))] = rng.randrange(256)
            elif kind < 0.8:
                mangled = mangled[: rng.randrange(len(mangled))]
            else:
                mangled += bytes([rng.randrange(256)])
            frame = bytes(mangled)
        else:
            frame = encode_request(_request(version, rng), 9)[4:]  # another shape altogether
        real = codec.decode_request
        calls = []
        codec.decode_request = lambda f, s: calls.append(f) or real(f, s)
        try:
            got = _decoded(reader.decode, frame)
        finally:
            codec.decode_request = real
        assert got == _decoded(lambda f: decode_request(f, SUPPORTED), frame)
        reused += not calls
    assert reused > 100  # most repeats skipped the walk

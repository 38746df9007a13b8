"""The hand-written Fetch response encoder equals kio's writer, byte for byte.

kref/broker/handlers/fetch_response.py writes Fetch v4-v17 response bodies
with struct around the segment bytes (the fetch handler's PreEncoded
body); kio's generated writer is the reference. For every version, several
topics and partitions, with records, without, with an error code: the two
encodings must be identical, and kio must read ours back.
"""

from __future__ import annotations

import datetime
import uuid

import pytest
from kio.static.primitive import i32Timedelta

from kref.broker.handlers._responses import build, error, response_types, topic_key_fields
from kref.broker.handlers.fetch_response import encode_fetch_response
from kref.protocol.codec import _reader, encode_body, response_class

RECORDS = bytes(range(256)) * 3  # opaque to the encoder; 768 bytes needs a two-byte varint
TOPICS = [
    ("orders", uuid.UUID(int=0x1234), [(0, 0, 42, 42, 0, RECORDS), (3, 1, -1, -1, -1, b"")]),
    ("ünïcode-topic", uuid.uuid4(), [(1, 0, 7, 7, 5, b"\x01" * 5)]),
    ("empty", uuid.uuid4(), []),
]


def kio_body(version: int, error_code: int, session_id: int) -> bytes:
    types = response_types(1, version)
    topics = []
    for name, topic_id, partitions in TOPICS:
        parts = tuple(
            build(
                types.PartitionData,
                partition_index=index,
                error_code=error(code),
                high_watermark=hw,
                last_stable_offset=lso,
                log_start_offset=log_start,
                aborted_transactions=None,
                preferred_read_replica=-1,
                records=records,
            )
            for index, code, hw, lso, log_start, records in partitions
        )
        topics.append(build(types.FetchableTopicResponse,
                            **topic_key_fields(types.FetchableTopicResponse, name, topic_id), partitions=parts))
    response = build(types.FetchResponse, throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
                     error_code=error(error_code), session_id=session_id, responses=tuple(topics))
    return encode_body(response)


@pytest.mark.parametrize("version", range(4, 18))
@pytest.mark.parametrize(("error_code", "session_id"), [(0, 0), (1, 0)])
def test_matches_kio_writer(version, error_code, session_id):
    ours = encode_fetch_response(version, error_code, session_id, TOPICS)
    assert ours == kio_body(version, error_code, session_id)
    decoded, size = _reader(response_class(1, version))(ours, 0)
    assert size == len(ours)
    assert bytes(decoded.responses[0].partitions[0].records) == RECORDS


def test_refuses_versions_outside_v4_v17():
    with pytest.raises(ValueError):
        encode_fetch_response(3, 0, 0, [])
    with pytest.raises(ValueError):
        encode_fetch_response(18, 0, 0, [])

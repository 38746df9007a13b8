"""The hand-written Produce response encoder equals kio's writer, byte for byte.

kref/broker/handlers/produce_response.py writes Produce v3-v13 response
bodies with struct for speed; kio's generated writer is the reference. For
every version, several topics and partitions, errors with and without a
message, LogAppendTime set or not: the two encodings must be identical.
"""

from __future__ import annotations

import datetime
import uuid

import pytest

from kref.broker.handlers._responses import build, error, response_types, topic_key_fields
from kref.broker.handlers.produce_response import encode_produce_response, encode_single_partition_response
from kref.protocol.codec import encode_body

TOPICS = [
    ("orders", uuid.UUID(int=0x1234), [(0, 0, 42, -1, 0, None), (3, 10, -1, -1, -1, "too large: 5000 bytes")]),
    ("ünïcode-topic", uuid.uuid4(), [(1, 0, 7, 1_700_000_000_123, 5, None)]),
]


def kio_body(version: int) -> bytes:
    types = response_types(0, version)
    topics = []
    for name, topic_id, partitions in TOPICS:
        parts = tuple(
            build(
                types.PartitionProduceResponse,
                index=index,
                error_code=error(code),
                base_offset=base,
                log_append_time=None if append < 0 else datetime.datetime.fromtimestamp(
                    append / 1000, tz=datetime.timezone.utc),
                log_start_offset=lso,
                record_errors=(),
                error_message=message,
            )
            for index, code, base, append, lso, message in partitions
        )
        topics.append(build(types.TopicProduceResponse, **topic_key_fields(types.TopicProduceResponse, name, topic_id),
                            partition_responses=parts))
    return encode_body(build(types.ProduceResponse, responses=tuple(topics)))


@pytest.mark.parametrize("version", range(3, 14))
def test_matches_kio(version):
    assert encode_produce_response(version, TOPICS) == kio_body(version)


def test_empty_response_and_version_bounds():
    for version in (3, 9, 13):
        assert encode_produce_response(version, []) == encode_body(
            build(response_types(0, version).ProduceResponse, responses=()))
    with pytest.raises(ValueError):
        encode_produce_response(2, [])


@pytest.mark.parametrize("version", range(3, 14))
def test_single_partition_answer_equals_the_general_encoder(version):
    for name, topic_id, partitions in TOPICS:
        for partition in partitions:
            for _ in range(2):  # the second answer reuses the cached head
                assert encode_single_partition_response(version, name, topic_id, partition) == (
                    encode_produce_response(version, [(name, topic_id, [partition])]))
    assert encode_single_partition_response(version, None, None, (0, 3, -1, -1, -1, None)) == (
        encode_produce_response(version, [(None, None, [(0, 3, -1, -1, -1, None)])]))

"""The __consumer_offsets key/value layouts (Kafka's OffsetCommitKey/Value, GroupMetadataKey/Value).

Checks hand-assembled bytes for each schema version against the field order
of Kafka's coordinator record schemas, round trips, bounded decoding of
corrupt input, and Kafka's group -> partition mapping (Utils.abs(hashCode) % n).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kref.coordinator import offsets_format as fmt


def s(text):
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def test_offset_commit_key_layout():
    key = fmt.encode_offset_commit_key("grp", "topic", 7)
    assert key == struct.pack(">h", 1) + s("grp") + s("topic") + struct.pack(">i", 7)
    assert fmt.decode_key(key) == fmt.OffsetCommitKey("grp", "topic", 7)
    # version 0 keys (written by Kafka before 0.9's v1) have the same layout
    assert fmt.decode_key(b"\x00\x00" + key[2:]) == fmt.OffsetCommitKey("grp", "topic", 7)


def test_group_metadata_key_layout():
    key = fmt.encode_group_metadata_key("grp")
    assert key == struct.pack(">h", 2) + s("grp")
    assert fmt.decode_key(key) == fmt.GroupMetadataKey("grp")


@pytest.mark.parametrize(
    "version, body",
    [
        (0, struct.pack(">q", 42) + s("m") + struct.pack(">q", 1000)),
        (1, struct.pack(">q", 42) + s("m") + struct.pack(">qq", 1000, 2000)),
        (2, struct.pack(">q", 42) + s("m") + struct.pack(">q", 1000)),
        (3, struct.pack(">qi", 42, 5) + s("m") + struct.pack(">q", 1000)),
    ],
)
def test_offset_commit_value_versions(version, body):
    raw = struct.pack(">h", version) + body
    value = fmt.decode_offset_commit_value(raw)
    assert (value.offset, value.metadata, value.commit_timestamp) == (42, "m", 1000)
    assert value.leader_epoch == (5 if version == 3 else -1)
    assert value.expire_timestamp == (2000 if version == 1 else -1)
    assert fmt.encode_offset_commit_value(value, version) == raw


def _member_bytes(version):
    out = s("member-1")
    if version >= 3:
        out += s("instance-1")
    out += s("client") + s("/127.0.0.1")
    if version >= 1:
        out += struct.pack(">i", 30000)
    out += struct.pack(">i", 10000) + struct.pack(">i", 3) + b"sub" + struct.pack(">i", 2) + b"as"
    return out


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_group_metadata_value_versions(version):
    raw = struct.pack(">h", version) + s("consumer") + struct.pack(">i", 4) + s("range") + s("member-1")
    if version >= 2:
        raw += struct.pack(">q", 123)
    raw += struct.pack(">i", 1) + _member_bytes(version)
    value = fmt.decode_group_metadata_value(raw)
    assert (value.protocol_type, value.generation, value.protocol, value.leader) == ("consumer", 4, "range", "member-1")
    m = value.members[0]
    assert (m.member_id, m.client_id, m.client_host, m.session_timeout) == ("member-1", "client", "/127.0.0.1", 10000)
    assert (m.subscription, m.assignment) == (b"sub", b"as")
    assert m.group_instance_id == ("instance-1" if version >= 3 else None)
    assert m.rebalance_timeout == (30000 if version >= 1 else 10000)
    assert fmt.encode_group_metadata_value(value, version) == raw


def test_empty_group_value_has_null_protocol_and_leader():
    value = fmt.GroupMetadataValue("consumer", 3, None, None, ())
    raw = fmt.encode_group_metadata_value(value)
    assert raw == struct.pack(">h", 3) + s("consumer") + struct.pack(">ihhqi", 3, -1, -1, -1, 0)
    assert fmt.decode_group_metadata_value(raw) == value


def test_tombstone_decodes_to_none():
    key = fmt.encode_group_metadata_key("g")
    assert fmt.decode_record(key, None) == (fmt.GroupMetadataKey("g"), None)


@given(st.binary(max_size=200))
def test_garbage_raises_typed_error_only(data):
    for decode in (fmt.decode_key, fmt.decode_offset_commit_value, fmt.decode_group_metadata_value):
        try:
            decode(data)
        except fmt.OffsetsRecordError:
            pass


def test_huge_member_count_is_refused_before_allocation():
    raw = struct.pack(">h", 3) + s("consumer") + struct.pack(">i", 1) + s("r") + s("l") + struct.pack(">qi", -1, 2**31 - 1)
    with pytest.raises(fmt.OffsetsRecordError):
        fmt.decode_group_metadata_value(raw)


def test_partition_for_matches_java_hash_code():
    assert fmt.java_string_hash("hello") == 99162322
    assert fmt.java_string_hash("Hello World") == -862545276
    # the famous string whose hashCode is Integer.MIN_VALUE: Utils.abs masks it to 0
    assert fmt.java_string_hash("polygenelubricants") == -(2**31)
    assert fmt.partition_for("polygenelubricants", 50) == 0
    assert fmt.partition_for("hello", 50) == 99162322 % 50
    assert fmt.java_string_hash("é😀") == ((0xE9 * 31 + 0xD83D) * 31 + 0xDE00)

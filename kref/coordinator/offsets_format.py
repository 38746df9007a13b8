"""Record keys and values of the `__consumer_offsets` topic, in Kafka's layout.

The group coordinator keeps its state in a compacted topic: each committed
offset and each group's metadata is one record whose key names what it
describes and whose value is its latest state (or null: a tombstone, which
compaction eventually removes). Kafka defines the layouts as versioned
"coordinator key/value" schemas; tools that read `__consumer_offsets`
(kafka-console-consumer's OffsetsMessageFormatter, kafka-dump-log
--offsets-decoder) rely on them, and so does our own reload on start.

Every key and value starts with an int16 schema version. Keys:

    version 0, 1  OffsetCommitKey     group string, topic string, partition int32
    version 2     GroupMetadataKey    group string

Values (non-flexible versions; Kafka writes v3 of both since 2.3):

    OffsetCommitValue   v0: offset int64, metadata string, commit_timestamp int64
                        v1: ... commit_timestamp int64, expire_timestamp int64
                        v2: offset, metadata, commit_timestamp
                        v3: offset, leader_epoch int32, metadata, commit_timestamp
    GroupMetadataValue  protocol_type string, generation int32,
                        protocol nullable string, leader nullable string,
                        current_state_timestamp int64 (v2+),
                        members [member_id string, group_instance_id nullable
                        string (v3+), client_id string, client_host string,
                        rebalance_timeout int32 (v1+), session_timeout int32,
                        subscription bytes, assignment bytes]

Strings are int16-length-prefixed UTF-8 (-1 = null), bytes int32-prefixed,
arrays int32-counted. Decoding is bounded by the input: every length is
checked against what remains, so a corrupt record raises
OffsetsRecordError instead of allocating.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3


class OffsetsRecordError(ValueError):
    """A `__consumer_offsets` key or value that does not parse."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    leader_epoch: int = -1
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    subscription: bytes
    assignment: bytes
    rebalance_timeout: int = -1
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    members: tuple[MemberMetadata, ...] = field(default_factory=tuple)
    current_state_timestamp: int = -1


# --- primitive writers --------------------------------------------------------

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def _string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += _I16.pack(-1)
        return
    raw = value.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise OffsetsRecordError(f"string of {len(raw)} bytes does not fit an int16 length")
    out += _I16.pack(len(raw))
    out += raw


def _bytes(out: bytearray, value: bytes) -> None:
    out += _I32.pack(len(value))
    out += value


# --- primitive reader -----------------------------------------------------------


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = bytes(buf)
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise OffsetsRecordError(f"need {n} bytes at {self.pos}, only {len(self.buf) - self.pos} left")
        chunk = self.buf[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def int64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n == -1:
            return None
        if n < 0:
            raise OffsetsRecordError(f"negative string length {n}")
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise OffsetsRecordError(f"string is not UTF-8: {e}") from None

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise OffsetsRecordError("null where a non-null string is required")
        return value

    def bytes_(self) -> bytes:
        n = self.int32()
        if n == -1:
            return b""
        return self._take(n)

    def array_length(self, min_element_size: int) -> int:
        n = self.int32()
        if n < 0:
            raise OffsetsRecordError(f"negative array length {n}")
        # Each element needs at least min_element_size bytes: refuse counts the
        # remaining input cannot hold before building anything.
        if n * min_element_size > len(self.buf) - self.pos:
            raise OffsetsRecordError(f"array of {n} elements cannot fit in {len(self.buf) - self.pos} bytes")
        return n


# --- keys -------------------------------------------------------------------------


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    out = bytearray(_I16.pack(OFFSET_COMMIT_KEY_VERSION))
    _string(out, group)
    _string(out, topic)
    out += _I32.pack(partition)
    return bytes(out)


def encode_group_metadata_key(group: str) -> bytes:
    out = bytearray(_I16.pack(GROUP_METADATA_KEY_VERSION))
    _string(out, group)
    return bytes(out)


def decode_key(buf: bytes) -> OffsetCommitKey | GroupMetadataKey:
    r = _Reader(buf)
    version = r.int16()
    if version in (0, 1):
        return OffsetCommitKey(r.string(), r.string(), r.int32())
    if version == 2:
        return GroupMetadataKey(r.string())
    raise OffsetsRecordError(f"unknown __consumer_offsets key version {version}")


# --- offset commit values -------------------------------------------------------


def encode_offset_commit_value(value: OffsetCommitValue, version: int = OFFSET_COMMIT_VALUE_VERSION) -> bytes:
    out = bytearray(_I16.pack(version))
    out += _I64.pack(value.offset)
    if version >= 3:
        out += _I32.pack(value.leader_epoch)
    elif version not in (0, 1, 2):
        raise OffsetsRecordError(f"unsupported OffsetCommitValue version {version}")
    _string(out, value.metadata)
    out += _I64.pack(value.commit_timestamp)
    if version == 1:
        out += _I64.pack(value.expire_timestamp)
    return bytes(out)


def decode_offset_commit_value(buf: bytes) -> OffsetCommitValue:
    r = _Reader(buf)
    version = r.int16()
    if version not in (0, 1, 2, 3):
        raise OffsetsRecordError(f"unsupported OffsetCommitValue version {version}")
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else -1
    return OffsetCommitValue(offset, metadata, commit_timestamp, leader_epoch, expire_timestamp)


# --- group metadata values ----------------------------------------------------


def encode_group_metadata_value(value: GroupMetadataValue, version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    if version not in (0, 1, 2, 3):
        raise OffsetsRecordError(f"unsupported GroupMetadataValue version {version}")
    out = bytearray(_I16.pack(version))
    _string(out, value.protocol_type)
    out += _I32.pack(value.generation)
    _string(out, value.protocol)
    _string(out, value.leader)
    if version >= 2:
        out += _I64.pack(value.current_state_timestamp)
    out += _I32.pack(len(value.members))
    for m in value.members:
        _string(out, m.member_id)
        if version >= 3:
            _string(out, m.group_instance_id)
        _string(out, m.client_id)
        _string(out, m.client_host)
        if version >= 1:
            out += _I32.pack(m.rebalance_timeout)
        out += _I32.pack(m.session_timeout)
        _bytes(out, m.subscription)
        _bytes(out, m.assignment)
    return bytes(out)


def decode_group_metadata_value(buf: bytes) -> GroupMetadataValue:
    r = _Reader(buf)
    version = r.int16()
    if version not in (0, 1, 2, 3):
        raise OffsetsRecordError(f"unsupported GroupMetadataValue version {version}")
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    current_state_timestamp = r.int64() if version >= 2 else -1
    members = []
    # smallest member: three empty strings, two int32s and two empty bytes
    for _ in range(r.array_length(min_element_size=2 * 3 + 4 + 4 * 2)):
        member_id = r.string()
        group_instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        members.append(
            MemberMetadata(
                member_id,
                client_id,
                client_host,
                session_timeout,
                subscription,
                assignment,
                rebalance_timeout if rebalance_timeout != -1 else session_timeout,
                group_instance_id,
            )
        )
    return GroupMetadataValue(protocol_type, generation, protocol, leader, tuple(members), current_state_timestamp)


def decode_record(
    key: bytes | None, value: bytes | None
) -> tuple[OffsetCommitKey | GroupMetadataKey, OffsetCommitValue | GroupMetadataValue | None]:
    """Decode one `__consumer_offsets` record; a None value is a tombstone."""
    if key is None:
        raise OffsetsRecordError("__consumer_offsets record without a key")
    decoded_key = decode_key(key)
    if value is None:
        return decoded_key, None
    if isinstance(decoded_key, OffsetCommitKey):
        return decoded_key, decode_offset_commit_value(value)
    return decoded_key, decode_group_metadata_value(value)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units) as a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The `__consumer_offsets` partition that owns a group, as Kafka computes it.

    Kafka takes Utils.abs(groupId.hashCode) % offsets.topic.num.partitions,
    where Utils.abs masks the sign bit; matching it keeps a group on the same
    partition number as on a Kafka cluster with the same partition count.
    """
    return (java_string_hash(group_id) & 0x7FFFFFFF) % num_partitions

"""Kafka's wire framing of metadata records, as they sit in `__cluster_metadata`.

Theory of operation
-------------------
Each metadata record is the value of one record in a batch of the
metadata log, framed as Kafka's metadata record serde frames it: an
unsigned varint frame version (1), an unsigned varint record type (the
record's apiKey: RegisterBrokerRecord 0, TopicRecord 2, PartitionRecord 3,
ConfigRecord 4, PartitionChangeRecord 5, FenceBrokerRecord 7,
UnfenceBrokerRecord 8, RemoveTopicRecord 9, FeatureLevelRecord 12,
UnregisterBrokerRecord 1, ProducerIdsRecord 15, BrokerRegistrationChangeRecord 17), an
unsigned varint record version, then the record in its schema's flexible
encoding: compact strings and arrays, 16-byte uuids, and a tagged-field
section at the end (PartitionChangeRecord carries its optional isr,
leader and replicas as tagged fields).

One table (`SCHEMAS`) says, per record class of kref/metadata/records.py,
its apiKey, version and fields in wire order; `encode` and `decode` walk
it, so a field is described once. Decoding is bounded: a value whose
lengths run past its end, an unknown record type or frame version, or
trailing bytes raise MetadataRecordError (a corrupt metadata log is a bug
or a disk fault, never silently skipped).
"""

from __future__ import annotations

import struct
import uuid

from kref.metadata import records as r

FRAME_VERSION = 1
MAX_ARRAY_LENGTH = 1 << 20


class MetadataRecordError(ValueError):
    pass


# (field, type, tag): tag None = a regular field; types below.
ENDPOINT = ("name", "string", None), ("host", "string", None), ("port", "uint16", None), ("security_protocol", "int16", None)
FEATURE = (
    ("name", "string", None), ("min_supported_version", "int16", None), ("max_supported_version", "int16", None)
)

SCHEMAS: dict[type, tuple[int, int, tuple]] = {
    # Version 1: the first with Fenced.
    r.RegisterBrokerRecord: (0, 1, (
        ("broker_id", "int32", None),
        ("incarnation_id", "uuid", None),
        ("broker_epoch", "int64", None),
        ("end_points", ("structs", r.BrokerEndpoint, ENDPOINT), None),
        ("features", ("structs", r.BrokerFeature, FEATURE), None),
        ("rack", "nullable_string", None),
        ("fenced", "bool", None),
    )),
    r.UnregisterBrokerRecord: (1, 0, (("broker_id", "int32", None), ("broker_epoch", "int64", None))),
    r.TopicRecord: (2, 0, (("name", "string", None), ("topic_id", "uuid", None))),
    r.PartitionRecord: (3, 0, (
        ("partition_id", "int32", None),
        ("topic_id", "uuid", None),
        ("replicas", "int32s", None),
        ("isr", "int32s", None),
        ("removing_replicas", "int32s", None),
        ("adding_replicas", "int32s", None),
        ("leader", "int32", None),
        ("leader_epoch", "int32", None),
        ("partition_epoch", "int32", None),
    )),
    r.ConfigRecord: (4, 0, (
        ("resource_type", "int8", None),
        ("resource_name", "string", None),
        ("name", "string", None),
        ("value", "nullable_string", None),
    )),
    r.PartitionChangeRecord: (5, 0, (
        ("partition_id", "int32", None),
        ("topic_id", "uuid", None),
        ("isr", "int32s", 0),
        ("leader", "int32", 1),
        ("replicas", "int32s", 2),
        ("removing_replicas", "int32s", 3),
        ("adding_replicas", "int32s", 4),
    )),
    r.FenceBrokerRecord: (7, 0, (("id", "int32", None), ("epoch", "int64", None))),
    r.UnfenceBrokerRecord: (8, 0, (("id", "int32", None), ("epoch", "int64", None))),
    # Version 1: the first with InControlledShutdown; both changes are tagged (0 = no change).
    r.BrokerRegistrationChangeRecord: (17, 1, (
        ("broker_id", "int32", None),
        ("broker_epoch", "int64", None),
        ("fenced", "int8", 0),
        ("in_controlled_shutdown", "int8", 1),
    )),
    r.RemoveTopicRecord: (9, 0, (("topic_id", "uuid", None),)),
    r.FeatureLevelRecord: (12, 0, (("name", "string", None), ("feature_level", "int16", None))),
    r.ProducerIdsRecord: (15, 0, (
        ("broker_id", "int32", None), ("broker_epoch", "int64", None), ("next_producer_id", "int64", None),
    )),
}
BY_API_KEY = {api_key: cls for cls, (api_key, _, _) in SCHEMAS.items()}
# Tagged fields' values when absent (PartitionChangeRecord: "no change").
TAG_DEFAULTS = {"fenced": 0, "in_controlled_shutdown": 0, "isr": None, "leader": r.NO_LEADER_CHANGE, "replicas": None, "removing_replicas": None, "adding_replicas": None}

_FIXED = {"int8": ">b", "int16": ">h", "uint16": ">H", "int32": ">i", "int64": ">q"}


def _uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _write(out: bytearray, kind, value) -> None:
    if kind in _FIXED:
        out += struct.pack(_FIXED[kind], value)
    elif kind == "bool":
        out.append(1 if value else 0)
    elif kind == "uuid":
        out += value.bytes
    elif kind in ("string", "nullable_string"):
        if value is None:
            if kind == "string":
                raise MetadataRecordError("a non-nullable string is None")
            _uvarint(out, 0)
        else:
            data = value.encode()
            _uvarint(out, len(data) + 1)
            out += data
    elif kind == "int32s":
        if value is None:
            _uvarint(out, 0)
        else:
            _uvarint(out, len(value) + 1)
            for v in value:
                out += struct.pack(">i", v)
    elif isinstance(kind, tuple) and kind[0] == "structs":
        items = value or ()
        _uvarint(out, len(items) + 1)
        for item in items:
            for name, sub_kind, _ in kind[2]:
                _write(out, sub_kind, getattr(item, name))
            out.append(0)  # no tagged fields
    else:
        raise AssertionError(kind)


def encode(record) -> bytes:
    """The record as Kafka frames a metadata record value."""
    try:
        api_key, version, schema = SCHEMAS[type(record)]
    except KeyError:
        raise MetadataRecordError(f"no framing for {type(record).__name__}") from None
    out = bytearray()
    _uvarint(out, FRAME_VERSION)
    _uvarint(out, api_key)
    _uvarint(out, version)
    tagged = []
    for name, kind, tag in schema:
        value = getattr(record, name)
        if tag is None:
            _write(out, kind, value)
        elif value != TAG_DEFAULTS.get(name):
            body = bytearray()
            _write(body, kind, value)
            tagged.append((tag, bytes(body)))
    _uvarint(out, len(tagged))
    for tag, body in tagged:
        _uvarint(out, tag)
        _uvarint(out, len(body))
        out += body
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise MetadataRecordError(f"record ends at {len(self.data)}, needs {self.pos + n}")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise MetadataRecordError("varint too long")

    def read(self, kind):
        if kind in _FIXED:
            fmt = _FIXED[kind]
            return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
        if kind == "bool":
            return self.take(1)[0] != 0
        if kind == "uuid":
            return uuid.UUID(bytes=self.take(16))
        if kind in ("string", "nullable_string"):
            n = self.uvarint()
            if n == 0:
                if kind == "string":
                    raise MetadataRecordError("null for a non-nullable string")
                return None
            return self.take(n - 1).decode()
        if kind == "int32s":
            n = self.uvarint()
            if n == 0:
                return None
            if n - 1 > MAX_ARRAY_LENGTH:
                raise MetadataRecordError(f"array of {n - 1} entries")
            return tuple(struct.unpack(f">{n - 1}i", self.take(4 * (n - 1))))
        if isinstance(kind, tuple) and kind[0] == "structs":
            n = self.uvarint()
            if n - 1 > MAX_ARRAY_LENGTH:
                raise MetadataRecordError(f"array of {n - 1} entries")
            items = []
            for _ in range(max(0, n - 1)):
                values = {name: self.read(sub_kind) for name, sub_kind, _ in kind[2]}
                self.skip_tagged()
                items.append(kind[1](**values))
            return tuple(items)
        raise AssertionError(kind)

    def skip_tagged(self) -> dict[int, bytes]:
        found = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            found[tag] = self.take(self.uvarint())
        return found


def decode(data: bytes):
    """The metadata record a framed value holds."""
    reader = _Reader(bytes(data))
    frame_version = reader.uvarint()
    if frame_version != FRAME_VERSION:
        raise MetadataRecordError(f"frame version {frame_version}")
    api_key = reader.uvarint()
    cls = BY_API_KEY.get(api_key)
    if cls is None:
        raise MetadataRecordError(f"unknown metadata record type {api_key}")
    _, version, schema = SCHEMAS[cls]
    record_version = reader.uvarint()
    if record_version != version:
        raise MetadataRecordError(f"{cls.__name__} version {record_version}; kref reads {version}")
    values = {}
    for name, kind, tag in schema:
        if tag is None:
            values[name] = reader.read(kind)
    tagged = reader.skip_tagged()
    for name, kind, tag in schema:
        if tag is not None:
            if tag in tagged:
                sub = _Reader(tagged[tag])
                values[name] = sub.read(kind)
            else:
                values[name] = TAG_DEFAULTS.get(name)
    if reader.pos != len(reader.data):
        raise MetadataRecordError(f"{len(reader.data) - reader.pos} bytes after the record")
    return cls(**values)

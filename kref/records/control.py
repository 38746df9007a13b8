"""Control batches and control records (KIP-98 transaction markers).

A control batch has the isControlBatch attribute bit set and carries records
that are not application data. Each control record's key says what it is:

    key   = version int16 (0), type int16
            (ABORT=0, COMMIT=1; KRaft adds LEADER_CHANGE=2, SNAPSHOT_HEADER=3,
             SNAPSHOT_FOOTER=4, KRAFT_VERSION=5, KRAFT_VOTERS=6)
    value = for COMMIT/ABORT (the EndTransactionMarker):
            version int16 (0), coordinatorEpoch int32

A transaction coordinator writes one marker batch per partition to end a
transaction: transactional, with the producer's id and epoch, no sequence,
one record. Readers under read_committed use the ABORT markers to drop
aborted data; the last stable offset (LSO) moves past COMMIT/ABORT markers.
As Kafka does, a key or value shorter than its fixed fields is rejected, a
newer version is read by its known prefix, and an unknown type is reported
as UNKNOWN rather than failing.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from kref.records.batch import Record, RecordBatch, build_batch
from kref.records.errors import InvalidRecordError

_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")

CURRENT_CONTROL_RECORD_KEY_VERSION = 0
CURRENT_END_TXN_MARKER_VERSION = 0


class ControlRecordType(enum.IntEnum):
    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    control_type: ControlRecordType  # COMMIT or ABORT
    coordinator_epoch: int


def control_record_key(control_type: int, version: int = CURRENT_CONTROL_RECORD_KEY_VERSION) -> bytes:
    return _KEY.pack(version, control_type)


def parse_control_record_type(key: bytes | None) -> ControlRecordType:
    if key is None or len(key) < _KEY.size:
        raise InvalidRecordError(f"control record key of {0 if key is None else len(key)} bytes; need {_KEY.size}")
    version, control_type = _KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(f"control record key version {version} is negative")
    try:
        return ControlRecordType(control_type)
    except ValueError:
        return ControlRecordType.UNKNOWN


def end_transaction_marker_value(coordinator_epoch: int, version: int = CURRENT_END_TXN_MARKER_VERSION) -> bytes:
    return _END_TXN_VALUE.pack(version, coordinator_epoch)


def parse_end_transaction_marker(record: Record) -> EndTransactionMarker:
    control_type = parse_control_record_type(record.key)
    if control_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        raise InvalidRecordError(f"control record of type {control_type.name} is not a transaction marker")
    value = record.value
    if value is None or len(value) < _END_TXN_VALUE.size:
        raise InvalidRecordError(
            f"end transaction marker value of {0 if value is None else len(value)} bytes; need {_END_TXN_VALUE.size}"
        )
    version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
    if version < 0:
        raise InvalidRecordError(f"end transaction marker version {version} is negative")
    return EndTransactionMarker(control_type, coordinator_epoch)


def build_end_transaction_marker(
    control_type: int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """The one-record control batch a transaction coordinator has a leader append."""
    if control_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        raise ValueError(f"{control_type!r} is not COMMIT or ABORT")
    record = Record(
        offset=base_offset,
        timestamp=timestamp,
        key=control_record_key(control_type),
        value=end_transaction_marker_value(coordinator_epoch),
    )
    return build_batch(
        [record],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control_batch=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def control_markers(batch: RecordBatch) -> list[EndTransactionMarker]:
    """The transaction markers of a decoded control batch (others are skipped)."""
    if not batch.header.is_control_batch:
        return []
    markers = []
    for record in batch.records:
        if parse_control_record_type(record.key) in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            markers.append(parse_end_transaction_marker(record))
    return markers

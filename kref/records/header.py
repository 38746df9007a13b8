"""The fixed 61-byte header of a v2 record batch, read in place.

Storage, replication and the broker mostly need the header of a batch, not
its records: where it starts and ends, its offsets, its leader epoch, its
largest timestamp, whether its CRC holds. This module reads exactly that from
a buffer without copying or decoding the records, so that scanning a segment
during recovery or index rebuild costs one struct unpack per batch.

Layout (all big-endian), Kafka's DefaultRecordBatch:

    0  baseOffset            int64
    8  batchLength           int32   bytes after this field (total = 12 + batchLength)
   12  partitionLeaderEpoch  int32
   16  magic                 int8    2
   17  crc                   uint32  CRC-32C of bytes [21, end)
   21  attributes            int16
   23  lastOffsetDelta       int32
   27  baseTimestamp         int64
   35  maxTimestamp          int64
   43  producerId            int64
   51  producerEpoch         int16
   53  baseSequence          int32
   57  recordsCount          int32
   61  records ...

partitionLeaderEpoch sits outside the CRC on purpose: a leader stamps it on
append without recomputing the checksum. Legacy v0/v1 messages share the
first 12 bytes (offset, size) and keep their magic at byte 16 too, so
`magic_at` tells the two formats apart before anything else is parsed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator

import crc32c

from kref.records.errors import (
    BatchLengthError,
    InvalidCrcError,
    InvalidMagicError,
    TruncatedBatchError,
)

LOG_OVERHEAD = 12  # baseOffset + batchLength: the part not counted by batchLength
HEADER_SIZE = 61
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
PARTITION_LEADER_EPOCH_OFFSET = 12
MAX_TIMESTAMP_OFFSET = 35

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # 0 = CreateTime, 1 = LogAppendTime
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

NO_PARTITION_LEADER_EPOCH = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_SIZE = struct.Struct(">qi")


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The decoded fixed header of one v2 batch located at `position`."""

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def next_position(self) -> int:
        return self.position + self.size_in_bytes

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression_type(self) -> int:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control_batch(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon_ms(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        # Sequences wrap at 2^31 - 1 just as Kafka's DefaultRecordBatch does.
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


def magic_at(buf: bytes | bytearray | memoryview, position: int = 0) -> int:
    """The magic byte of the batch or legacy message starting at `position`."""
    if len(buf) - position < MAGIC_OFFSET + 1:
        raise TruncatedBatchError("buffer too short for a magic byte", position)
    return buf[position + MAGIC_OFFSET]


def read_header(
    buf: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    max_batch_size: int = 1 << 30,
) -> BatchHeader:
    """Decode the v2 header at `position`; check lengths, not the CRC.

    Raises TruncatedBatchError if `buf` ends before the header or before the
    batch the header announces, BatchLengthError for an impossible length and
    InvalidMagicError if the bytes are not a v2 batch.
    """
    available = len(buf) - position
    if available < LOG_OVERHEAD:
        raise TruncatedBatchError(f"{available} bytes left, need {LOG_OVERHEAD} for offset and size", position)
    _, batch_length = _OFFSET_AND_SIZE.unpack_from(buf, position)
    if batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise BatchLengthError(f"batchLength {batch_length} is below the v2 header size", position)
    if LOG_OVERHEAD + batch_length > max_batch_size:
        raise BatchLengthError(
            f"batch of {LOG_OVERHEAD + batch_length} bytes exceeds the limit of {max_batch_size}", position
        )
    if available < HEADER_SIZE:
        raise TruncatedBatchError(f"{available} bytes left, need {HEADER_SIZE} for a v2 header", position)
    fields = _HEADER.unpack_from(buf, position)
    if fields[3] != 2:
        raise InvalidMagicError(f"magic {fields[3]} where a v2 batch (magic 2) was expected", position)
    if available < LOG_OVERHEAD + batch_length:
        raise TruncatedBatchError(
            f"batch announces {LOG_OVERHEAD + batch_length} bytes but only {available} remain", position
        )
    return BatchHeader(position, *fields)


def compute_crc(buf: bytes | bytearray | memoryview, header: BatchHeader) -> int:
    view = memoryview(buf)[header.position + ATTRIBUTES_OFFSET : header.next_position]
    return crc32c.crc32c(view)


def verify_crc(buf: bytes | bytearray | memoryview, header: BatchHeader) -> None:
    actual = compute_crc(buf, header)
    if actual != header.crc:
        raise InvalidCrcError(
            f"CRC-32C mismatch for batch at offset {header.base_offset}: stored {header.crc:#010x}, computed {actual:#010x}",
            header.position,
        )


def iter_headers(
    buf: bytes | bytearray | memoryview,
    position: int = 0,
    end: int | None = None,
    *,
    verify: bool = False,
    max_batch_size: int = 1 << 30,
) -> Iterator[BatchHeader]:
    """Yield each v2 batch header in `buf[position:end]`, in order.

    Stops with the typed error of the first bad batch; the caller decides
    whether that means "truncate here" (recovery) or "reject" (produce).
    """
    view = memoryview(buf)
    if end is not None:
        view = view[:end]
    while position < len(view):
        header = read_header(view, position, max_batch_size=max_batch_size)
        if verify:
            verify_crc(view, header)
        yield header
        position = header.next_position


def set_partition_leader_epoch(buf: bytearray | memoryview, header: BatchHeader, epoch: int) -> None:
    """Stamp the leader epoch in place; the CRC does not cover it."""
    struct.pack_into(">i", buf, header.position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_base_offset(buf: bytearray | memoryview, header: BatchHeader, base_offset: int) -> None:
    """Assign the batch's offsets in place (leader append); not covered by the CRC."""
    struct.pack_into(">q", buf, header.position, base_offset)


def set_log_append_time(buf: bytearray | memoryview, header: BatchHeader, now_ms: int) -> int:
    """Stamp LogAppendTime on a batch in place (topic message.timestamp.type=LogAppendTime).

    The broker sets the timestamp-type bit and maxTimestamp; both lie inside
    the CRC-covered range, so the CRC is recomputed. The records keep their
    own timestamp deltas: readers of a LogAppendTime batch take maxTimestamp
    as every record's timestamp, as Kafka's format defines. Returns the new CRC.
    """
    p = header.position
    struct.pack_into(">h", buf, p + ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_MASK)
    struct.pack_into(">q", buf, p + MAX_TIMESTAMP_OFFSET, now_ms)
    crc = crc32c.crc32c(memoryview(buf)[p + ATTRIBUTES_OFFSET : header.next_position])
    struct.pack_into(">I", buf, p + CRC_OFFSET, crc)
    return crc

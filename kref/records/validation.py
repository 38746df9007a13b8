"""Full validation of a produce request's records before they reach the log.

The broker must not append bytes it cannot read back: Kafka's LogValidator
checks every batch a client sends. validate_records does the part that
depends only on the bytes (the topic-config checks such as timestamp
difference or compaction keys stay with the broker):

- every batch is a v2 record batch (produce v3+ carries only magic 2),
  inside max_batch_size, not torn, and its CRC-32C holds;
- clients do not write control batches (those are the coordinator's);
- a batch with a producer id has a base sequence >= 0;
- recordsCount > 0 and equals lastOffsetDelta + 1, and the records carry
  the offset deltas 0..count-1 in order: a producer's batch has no gaps;
- the records section decompresses within the limit and every record parses
  to the last byte.

Each failure raises a typed CorruptRecordError subclass naming the problem;
the broker answers CORRUPT_MESSAGE (InvalidCrcError, TruncatedBatchError,
BatchLengthError, compression errors) or INVALID_RECORD (InvalidRecordError).
"""

from __future__ import annotations

from collections.abc import Callable

from kref.records import header as h
from kref.records.batch import decode_records
from kref.records.errors import InvalidMagicError, InvalidRecordError, UnsupportedCompressionError

Buffer = bytes | bytearray | memoryview


def validate_records(
    buf: Buffer,
    *,
    max_batch_size: int,
    max_uncompressed_bytes: int | None = None,
    require_single_batch: bool = False,
    check_records: Callable[[memoryview, h.BatchHeader, int], None] | None = None,
) -> list[h.BatchHeader]:
    """Validate a produce payload; return the headers of its batches.

    `max_uncompressed_bytes` defaults to max(max_batch_size, 64 MiB) so a
    well-compressed batch still validates while a bomb does not.
    `require_single_batch` enforces Kafka's rule for produce v3+ (exactly
    one batch per partition). `check_records(view, header,
    max_uncompressed_bytes)` replaces the full decode of each batch's
    records (the broker's produce path passes a cheaper framing walk,
    kref/records/framing_validation.py).
    """
    if check_records is None:
        check_records = decode_and_check_records
    if max_uncompressed_bytes is None:
        max_uncompressed_bytes = max(max_batch_size, 64 * 1024 * 1024)
    view = memoryview(buf)
    if len(view) == 0:
        raise InvalidRecordError("produce payload holds no record batch")
    headers = []
    position = 0
    while position < len(view):
        if len(view) - position > h.MAGIC_OFFSET and view[position + h.MAGIC_OFFSET] != 2:
            raise InvalidMagicError(
                f"magic {view[position + h.MAGIC_OFFSET]}: produce requests carry only v2 record batches", position
            )
        header = h.read_header(view, position, max_batch_size=max_batch_size)
        h.verify_crc(view, header)
        _validate_header(header)
        check_records(view, header, max_uncompressed_bytes)
        headers.append(header)
        position = header.next_position
    if require_single_batch and len(headers) != 1:
        raise InvalidRecordError(f"produce payload holds {len(headers)} record batches; exactly one is allowed")
    return headers


def decode_and_check_records(view: memoryview, header: h.BatchHeader, max_uncompressed_bytes: int) -> None:
    """Every record parses, and their offset deltas run 0..count-1."""
    records = decode_records(view, header, max_uncompressed_bytes=max_uncompressed_bytes)
    for expected_delta, record in enumerate(records):
        if record.offset - header.base_offset != expected_delta:
            raise InvalidRecordError(
                f"record offset delta {record.offset - header.base_offset} where {expected_delta} was expected",
                header.position,
            )


def _validate_header(header: h.BatchHeader) -> None:
    where = header.position
    if header.is_control_batch:
        raise InvalidRecordError("clients are not allowed to write control batches", where)
    if header.has_producer_id and header.base_sequence < 0:
        raise InvalidRecordError(f"batch with producerId {header.producer_id} has invalid baseSequence "
                                 f"{header.base_sequence}", where)  # fmt: skip
    if header.records_count <= 0:
        raise InvalidRecordError(f"recordsCount {header.records_count} is not positive", where)
    if header.last_offset_delta < 0 or header.last_offset_delta + 1 != header.records_count:
        raise InvalidRecordError(
            f"lastOffsetDelta {header.last_offset_delta} does not match recordsCount {header.records_count}", where
        )
    if header.compression_type > 4:
        raise UnsupportedCompressionError(f"unknown compression codec {header.compression_type}", where)

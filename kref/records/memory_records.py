"""Iterate the batches of a buffer that may mix message formats v0, v1 and v2.

A partition log written across upgrades holds legacy messages (v0/v1) and
record batches (v2) side by side; a fetch response returns them as one
buffer. All three formats start with offset int64 + size int32 and keep the
magic byte at position 16, so one loop can dispatch on it: v2 goes to
batch.decode_batch, v0/v1 (one outer message = one batch) to
legacy.decode_legacy_batch. Like Kafka's MemoryRecords, this walks the
buffer by each batch's own size, never copying it; a torn or corrupt batch
stops the walk with its typed error.
"""

from __future__ import annotations

import struct
from typing import Iterator

from kref.records import header as h
from kref.records.batch import Record, RecordBatch, decode_batch
from kref.records.compression import DEFAULT_MAX_UNCOMPRESSED_BYTES
from kref.records.errors import InvalidMagicError, TruncatedBatchError
from kref.records.legacy import LegacyBatch, decode_legacy_batch

Buffer = bytes | bytearray | memoryview
_SIZE = struct.Struct(">i")


def iter_batches(
    buf: Buffer,
    position: int = 0,
    *,
    max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
    verify_crc: bool = True,
    max_batch_size: int = 1 << 30,
    allow_partial_tail: bool = False,
) -> Iterator[RecordBatch | LegacyBatch]:
    """Yield each decoded batch (v2 RecordBatch or legacy LegacyBatch) in order.

    With allow_partial_tail, a batch cut off by the end of the buffer ends
    the walk silently, as Kafka's consumers treat the last batch of a fetch
    response that max_bytes cut short; otherwise it raises TruncatedBatchError.
    """
    view = memoryview(buf)
    while position < len(view):
        if allow_partial_tail and _is_partial(view, position):
            return
        magic = h.magic_at(view, position) if len(view) - position > h.MAGIC_OFFSET else None
        if magic is None:
            raise TruncatedBatchError(f"{len(view) - position} trailing bytes, too few for a batch", position)
        if magic == 2:
            batch = decode_batch(
                view, position, max_uncompressed_bytes=max_uncompressed_bytes,
                verify_crc=verify_crc, max_batch_size=max_batch_size,
            )  # fmt: skip
            position = batch.header.next_position
        elif magic in (0, 1):
            batch = decode_legacy_batch(
                view, position, max_uncompressed_bytes=max_uncompressed_bytes,
                verify_crc=verify_crc, max_message_size=max_batch_size,
            )  # fmt: skip
            position = batch.next_position
        else:
            raise InvalidMagicError(f"unknown magic {magic}", position)
        yield batch


def _is_partial(view: memoryview, position: int) -> bool:
    left = len(view) - position
    if left < h.LOG_OVERHEAD:
        return True
    (size,) = _SIZE.unpack_from(view, position + 8)
    return size >= 0 and left < h.LOG_OVERHEAD + size


def iter_records(buf: Buffer, **kwargs) -> Iterator[Record]:
    """Every record of every batch, with absolute offsets and effective timestamps."""
    for batch in iter_batches(buf, **kwargs):
        yield from batch.records

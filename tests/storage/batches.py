"""Test batches built by an independent encoder (kafka-python's DefaultRecordBatchBuilder)
and a tiny real producer-state implementation for the storage hook."""

from __future__ import annotations

import struct

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from kref.records.header import BatchHeader


def make_batch(
    values: list[bytes],
    *,
    base_offset: int = 0,
    timestamp: int = 1_000,
    timestamps: list[int] | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int | None = None,
    compression_type: int = 0,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression_type,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 30,
    )
    for i, value in enumerate(values):
        ts = timestamps[i] if timestamps is not None else timestamp
        builder.append(i, timestamp=ts, key=None, value=value, headers=[])
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, base_offset)
    if partition_leader_epoch is not None:
        struct.pack_into(">i", buf, 12, partition_leader_epoch)
    return bytes(buf)


def decode_values(records: bytes) -> list[tuple[int, bytes]]:
    """(offset, value) of every record, decoded by kafka-python (an independent reader)."""
    out = []
    pos = 0
    while pos < len(records):
        (length,) = struct.unpack_from(">i", records, pos + 8)
        batch = DefaultRecordBatch(bytes(records[pos : pos + 12 + length]))
        assert batch.validate_crc()
        for record in batch:
            out.append((record.offset, record.value))
        pos += 12 + length
    return out


class SimpleProducerState:
    """A minimal, real idempotent-producer table: last sequence and offsets per producer.

    It implements the storage hook contract (check_batch, on_batch_appended,
    truncate_to, take_snapshot) well enough to detect a retried batch.
    """

    def __init__(self) -> None:
        self.batches: list[BatchHeader] = []
        self.snapshots: list[int] = []

    def check_batch(self, header: BatchHeader) -> tuple[int, int] | None:
        for b in reversed(self.batches):
            if b.producer_id == header.producer_id and b.producer_epoch == header.producer_epoch:
                if b.base_sequence == header.base_sequence:
                    return b.base_offset, b.last_offset
                from kref.storage.errors import OutOfOrderSequenceError

                if header.base_sequence != b.last_sequence + 1:
                    raise OutOfOrderSequenceError(f"expected {b.last_sequence + 1}, got {header.base_sequence}")
                return None
        return None

    def on_batch_appended(self, header: BatchHeader) -> None:
        if header.producer_id != -1:
            self.batches.append(header)

    def truncate_to(self, offset: int) -> None:
        self.batches = [b for b in self.batches if b.last_offset < offset]

    def take_snapshot(self, offset: int) -> None:
        self.snapshots.append(offset)

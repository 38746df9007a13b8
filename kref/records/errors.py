"""Typed errors for bad record bytes.

Every way a batch can be wrong gets its own class, so that a caller can tell a
torn write at the tail of a segment (TruncatedBatchError: recovery truncates
there) from bytes that are complete but damaged (InvalidCrcError) or were
never a batch at all (InvalidMagicError, BatchLengthError). The broker maps
them to Kafka's CORRUPT_MESSAGE / INVALID_RECORD error codes.
"""

from __future__ import annotations


class CorruptRecordError(ValueError):
    """Bytes that do not form a valid record batch or legacy message set."""

    def __init__(self, message: str, position: int | None = None) -> None:
        where = f" at byte {position}" if position is not None else ""
        super().__init__(f"{message}{where}")
        self.position = position


class TruncatedBatchError(CorruptRecordError):
    """The buffer ends before the batch its header announces."""


class InvalidMagicError(CorruptRecordError):
    """The magic byte is not 0, 1 or 2 (or not the one the caller requires)."""


class BatchLengthError(CorruptRecordError):
    """A length field is negative, below the header size or above the limit."""


class InvalidCrcError(CorruptRecordError):
    """The stored checksum does not match the bytes it covers."""


class InvalidRecordError(CorruptRecordError):
    """A record inside a batch is malformed (bad varint, count mismatch, ...)."""


class CompressionError(CorruptRecordError):
    """Compressed bytes of a batch or wrapper message cannot be decompressed."""


class UnsupportedCompressionError(CompressionError):
    """The attributes name a codec Kafka does not define (5..7) or a feature of
    a codec that Kafka rejects (dependent lz4 blocks, ...)."""


class DecompressionLimitError(CompressionError):
    """Decompressing would exceed the caller's max_uncompressed_bytes: a
    decompression bomb or simply a batch larger than the limit."""

"""Typed errors of the storage engine, each carrying its Kafka error code.

The broker turns these into the error code of a response (Produce, Fetch,
ListOffsets, DeleteRecords, CreateTopics); the numeric codes are Kafka's
(org.apache.kafka.common.protocol.Errors), so the mapping is a lookup of
`error.error_code` and no handler has to know storage internals. Corrupt
bytes in a produce payload raise the kref.records.errors family
(CORRUPT_MESSAGE) instead, re-exported here for convenience.
"""

from __future__ import annotations

from kref.protocol.errors import ErrorCode
from kref.records.errors import CorruptRecordError, InvalidCrcError, InvalidMagicError  # noqa: F401


class StorageError(Exception):
    error_code = ErrorCode.UNKNOWN_SERVER_ERROR


class ConfigError(StorageError, ValueError):
    """An unknown topic config name or a value outside its valid range."""

    error_code = ErrorCode.INVALID_CONFIG


class OffsetOutOfRangeError(StorageError):
    """A fetch, DeleteRecords or truncation offset outside [log_start_offset, log_end_offset]."""

    error_code = ErrorCode.OFFSET_OUT_OF_RANGE


class RecordTooLargeError(StorageError):
    """A batch larger than the topic's max.message.bytes."""

    error_code = ErrorCode.MESSAGE_TOO_LARGE


class RecordBatchTooLargeError(StorageError):
    """A produce payload larger than a whole segment (segment.bytes)."""

    error_code = ErrorCode.RECORD_LIST_TOO_LARGE


class InvalidRecordError(StorageError):
    """A batch whose header contradicts itself (offset range vs record count)."""

    error_code = ErrorCode.INVALID_RECORD


class InvalidTimestampError(StorageError):
    """A CreateTime timestamp outside message.timestamp.before/after.max.ms of the broker's clock."""

    error_code = ErrorCode.INVALID_TIMESTAMP


class UnexpectedAppendOffsetError(StorageError):
    """A follower append whose first offset lies below the log end offset."""

    error_code = ErrorCode.UNKNOWN_SERVER_ERROR


class OutOfOrderSequenceError(StorageError):
    """Raised by the producer-state hook: a gap in an idempotent producer's sequence."""

    error_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    """Raised by the producer-state hook: a fenced (older) producer epoch."""

    error_code = ErrorCode.INVALID_PRODUCER_EPOCH


class KafkaStorageError(StorageError):
    """The disk failed us (I/O error); the partition goes offline."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class CorruptIndexError(StorageError):
    """An index file failed its sanity check; it is rebuilt from the log."""

"""A storage error answered to clients is logged for the operator, once per interval.

Produce and fetch answer KAFKA_STORAGE_ERROR when the disk fails them (out
of descriptors, disk full, an I/O error); the client learns only the code,
so the broker logs the cause, and a lasting shortage met by every request
gives one line (with a count of the ones held back), not one per request.
"""

from __future__ import annotations

import errno
import logging

from kref.broker import resources
from kref.broker.partition import error_code_for
from kref.protocol.errors import ErrorCode
from kref.storage.errors import KafkaStorageError, OffsetOutOfRangeError


def test_storage_errors_are_logged_once_per_interval(caplog, monkeypatch):
    monkeypatch.setattr(resources, "_last", {})
    clock = [1000.0]
    monkeypatch.setattr(resources.time, "monotonic", lambda: clock[0])
    emfile = KafkaStorageError(f"I/O error on /data/t-0: {OSError(errno.EMFILE, 'Too many open files')}")
    with caplog.at_level(logging.WARNING, logger="kref.broker.partition"):
        for _ in range(50):
            assert error_code_for(emfile) == ErrorCode.KAFKA_STORAGE_ERROR
        clock[0] += resources.INTERVAL_S + 1
        assert error_code_for(emfile) == ErrorCode.KAFKA_STORAGE_ERROR
        # other typed errors are the client's business, not the operator's
        assert error_code_for(OffsetOutOfRangeError("x")) == ErrorCode.OFFSET_OUT_OF_RANGE
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "Too many open files" in lines[0] and "KAFKA_STORAGE_ERROR" in lines[0]
    assert "49 more like it" in lines[1]

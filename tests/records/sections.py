"""Test helpers shared by the record walker tests (tests/records/test_walker.py, test_cwalker.py).

`record_starts` is a deliberately naive oracle: it follows each record's
length prefix and nothing else, so it can locate records in a section to
doctor them without relying on the walkers under test."""

from __future__ import annotations

from kref.records.varint import read_varint


def record_starts(section: bytes) -> list[int]:
    """The offset of every record's length prefix in a records section."""
    starts, pos = [], 0
    while pos < len(section):
        starts.append(pos)
        length, body = read_varint(section, pos, len(section))
        pos = body + length
    return starts

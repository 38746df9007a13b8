"""header.new_batch_header builds a BatchHeader through a plain class with
the same slots (a frozen dataclass's __init__ cost a single-record produce
about 3 us for its two headers). What it returns must be a BatchHeader in
every respect: type, fields, equality, hash, frozenness, dataclasses.replace."""

from __future__ import annotations

import dataclasses
import random

import pytest

from kref.records import header as h


def test_the_twin_has_batch_header_fields_in_order():
    # A field added to BatchHeader must be added to the twin (the __class__
    # switch would fail on a layout change; a reorder would not).
    assert h._BatchHeaderSlots.__slots__ == tuple(f.name for f in dataclasses.fields(h.BatchHeader))


def test_new_batch_header_is_a_batch_header():
    rng = random.Random(1414)
    print("seed 1414")
    for _ in range(200):
        fields = [rng.randrange(-(1 << 40), 1 << 40) for _ in range(14)]
        fast, slow = h.new_batch_header(*fields), h.BatchHeader(*fields)
        assert type(fast) is h.BatchHeader
        assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
        assert dataclasses.astuple(fast) == tuple(fields)
        assert fast.last_offset == slow.last_offset and fast.next_position == slow.next_position
        with pytest.raises(dataclasses.FrozenInstanceError):
            fast.base_offset = 1
        assert dataclasses.replace(fast, base_offset=5) == dataclasses.replace(slow, base_offset=5)

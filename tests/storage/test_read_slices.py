"""Log.read's one-pread path cuts at indexed positions (Kafka's LogSegment.read
slices the file at the offset index's position instead of walking every batch):
whatever the fetch size, offset, high watermark bound and segment layout, it must
return exactly the whole batches the careful path (translate_offset + a walk over
every batch) returns, and it must not walk every header of a large fetch."""

from __future__ import annotations

import random

from kref.storage import log as log_module
from kref.storage.config import LogConfig
from kref.storage.log import Log

from .batches import make_batch

SEED = 4812


def _careful(log: Log, *args, **kwargs):
    """The same read with the one-pread path switched off."""
    fast = log._read_in_one_go
    log._read_in_one_go = lambda *a, **k: None
    try:
        return log.read(*args, **kwargs)
    finally:
        log._read_in_one_go = fast


def test_one_pread_reads_equal_the_careful_path(tmp_path):
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    config = LogConfig.from_properties({"segment.bytes": "20000", "index.interval.bytes": "300"})
    log = Log.open(str(tmp_path / "slices-0"), config, 0)
    for i in range(400):
        count = rng.choice([1, 1, 1, 2, 5, 20])
        values = [bytes(rng.randrange(1, 200)) for _ in range(count)]
        log.append_as_leader(make_batch(values, timestamp=1_000 + i), 0, 1_000 + i)
    leo = log.log_end_offset
    assert len(log.segments) > 3
    compared = 0
    for _ in range(800):
        target = rng.randrange(0, leo)
        budget = rng.choice([1, 50, 200, 1000, 5000, 30000, 1 << 20])
        limit = rng.choice([leo, rng.randrange(target, leo + 1)])
        min_one = rng.random() < 0.5
        log._read_hint = None if rng.random() < 0.5 else log._read_hint
        got = log.read(target, budget, max_offset=limit, min_one_message=min_one)
        want = _careful(log, target, budget, max_offset=limit, min_one_message=min_one)
        assert (got.records, got.first_offset, got.next_offset) == (want.records, want.first_offset, want.next_offset), (
            target, budget, limit, min_one)
        compared += 1
    # Sequential consumers (the read hint path) too.
    offset = 0
    while offset < leo:
        got = log.read(offset, 3000)
        want = _careful(log, offset, 3000)
        assert (got.records, got.next_offset) == (want.records, want.next_offset)
        offset = got.next_offset
    log.close()
    assert compared == 800


def test_a_large_fetch_of_small_batches_walks_about_one_index_interval(tmp_path, monkeypatch):
    log = Log.open(str(tmp_path / "small-0"), LogConfig.from_properties({}), 0)
    for i in range(2500):
        log.append_as_leader(make_batch([b"v" * 100]), 0, 1_000 + i)
    walked = 0
    frames = log_module._frames

    def counting(view, position):
        nonlocal walked
        for frame in frames(view, position):
            walked += 1
            yield frame

    monkeypatch.setattr(log_module, "_frames", counting)
    log._read_hint = None
    got = log.read(10, 1 << 20, max_offset=2400)
    batches = got.next_offset - 10
    assert batches > 2000  # the answer holds thousands of batches ...
    assert walked < 200, walked  # ... found by walking a few dozen headers
    log.close()

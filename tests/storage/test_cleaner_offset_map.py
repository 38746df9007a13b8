"""The cleaner's numpy offset map against a dict, and the buffer-at-once cleaning
against a per-record model on batches of every shape.

The map: keys of every kind (empty, short with trailing zero bytes, exactly
15 and 16 bytes, long), repeated within one call, fed in batches as the
cleaner feeds them, the table growing from its smallest size; after each
call, len, every lookup and the survivor offsets equal a dict's, and
Kafka's room rule (a batch is mapped only if all its records fit) holds
batch by batch.

The cleaning: a compacted log whose batches hold many records each (so one
read buffer holds several batches, and batches are rewritten from slices of
their kept records), with records of one size and of mixed sizes, with
record headers, gzip and plain, tombstones; cleaned twice, with a map too
small for the whole dirty part the first time. Every record that stays is
the model's, and each key's last record stays.
"""

from __future__ import annotations

import os
import random
import tempfile

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kref.records.batch import Header, Record, build_batch, decode_batch
from kref.records.compression import CompressionType
from kref.storage.cleaner import DOUBLE_MAX, Cleaner, Throttler, clean_log_now, summarize
from kref.storage.cleaner_offset_map import OffsetMap, key_hash, key_hashes
from kref.storage.cleaner_planner import cleanable_offsets
from kref.storage.config import LogConfig
from kref.storage.log import Log

KEYS = st.one_of(
    st.binary(min_size=0, max_size=3),
    st.sampled_from([b"", b"\x00", b"a\x00", b"a", b"x" * 15, b"x" * 16, b"x" * 15 + b"\x00", b"y" * 40]),
    st.binary(min_size=14, max_size=20),
)


def hashes_of(keys: list[bytes]) -> np.ndarray:
    data = b"".join(keys) + bytes(16)
    starts, at = [], 0
    for k in keys:
        starts.append(at)
        at += len(k)
    return key_hashes(np.frombuffer(data, dtype=np.uint8), np.array(starts, dtype=np.int64), np.array([len(k) for k in keys], dtype=np.int64))


def test_key_forms_never_collide():
    keys = [b"", b"\x00", b"\x00\x00", b"a", b"a\x00", b"x" * 15, b"x" * 16, b"x" * 17, bytes(16)]
    forms = {bytes(hashes_of([k])) for k in keys}
    assert len(forms) == len(keys)
    assert all(bytes(hashes_of([k])) == bytes(key_hash(k)) for k in keys)


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.lists(KEYS, min_size=0, max_size=40), min_size=1, max_size=30),
    capacity=st.sampled_from([1, 3, 20, 200, 5000]),
)
def test_offset_map_is_a_bounded_dict(batches, capacity):
    om = OffsetMap(capacity)
    model: dict[bytes, int] = {}
    offset = 0
    for chunk_start in range(0, len(batches), 3):  # three batches per call, as from one read buffer
        chunk = batches[chunk_start : chunk_start + 3]
        keys = [k for b in chunk for k in b]
        offsets = np.arange(offset, offset + len(keys), dtype=np.int64)
        bounds = [0]
        for b in chunk:
            bounds.append(bounds[-1] + len(b))
        fitted = om.put_batches(hashes_of(keys) if keys else np.zeros((0, 2), dtype=np.uint64), offsets, bounds, [len(b) for b in chunk])
        expected_fitted = 0
        for i, b in enumerate(chunk):
            if len(b) > capacity - len(model):
                break
            for j, k in enumerate(b):
                model[k] = offset + bounds[i] + j
            expected_fitted += 1
        assert fitted == expected_fitted
        offset += len(keys)
        assert len(om) == len(model)
        for k, o in model.items():
            assert om.get(k) == o
        assert om.survivor_offsets().tolist() == sorted(model.values())
        if fitted < len(chunk):
            break
    for k in (b"never-put-key", b"zz"):
        if k not in model:
            assert om.get(k) == -1


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.lists(KEYS, min_size=0, max_size=40), min_size=1, max_size=30),
    capacity=st.sampled_from([1, 3, 20, 60, 200, 5000]),
    looks=st.lists(st.booleans(), min_size=30, max_size=30),
)
def test_staged_puts_decide_as_immediate_ones(batches, capacity, looks):
    """Puts are staged while they fit even if every staged key were new; the map is
    read only now and then (`looks`), so several staged calls meet a call that
    no longer fits: each call's answer and the final map are the model's."""
    om = OffsetMap(capacity)
    model: dict[bytes, int] = {}
    offset = 0
    for n, b in enumerate(batches):
        offsets = np.arange(offset, offset + len(b), dtype=np.int64)
        fitted = om.put_batches(hashes_of(b) if b else np.zeros((0, 2), dtype=np.uint64), offsets, [0, len(b)], [len(b)])
        fits = len(b) <= capacity - len(model)
        if fits:
            for j, k in enumerate(b):
                model[k] = offset + j
        assert fitted == (1 if fits else 0)
        offset += len(b)
        if looks[n]:
            assert len(om) == len(model)
        if not fits:
            break
    assert len(om) == len(model)
    for k, o in model.items():
        assert om.get(k) == o
    assert om.survivor_offsets().tolist() == sorted(model.values())


def _build_log(directory: str, rng: random.Random) -> tuple[Log, list[tuple[int, bytes, bytes | None]]]:
    config = LogConfig.from_properties(
        {"cleanup.policy": "compact", "segment.bytes": str(256 * 1024), "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000000"}
    )
    log = Log.open(directory, config, 0)
    model = []
    keys = [b"k%d" % i for i in range(150)] + [b"long-key-%030d" % i for i in range(50)]
    now = 1_000
    for b in range(120):
        shape = b % 4
        n = rng.randrange(20, 90)
        records = []
        for _ in range(n):
            key = rng.choice(keys)
            if shape == 0:  # one size: what producers write, tiled in one step
                value = b"v" * 50
            elif shape == 1:  # mixed sizes
                value = b"w" * rng.randrange(0, 300)
            else:
                value = b"h" * rng.randrange(10, 40)
            if rng.random() < 0.03:
                value = None
            headers = (Header("h", b"x" * rng.randrange(0, 5)),) if shape == 2 and rng.random() < 0.5 else ()
            records.append(Record(timestamp=now, key=key, value=value, headers=headers))
        compression = CompressionType.GZIP if shape == 3 else CompressionType.NONE
        info = log.append_as_leader(build_batch(records, compression=compression), 0, now)
        model.extend((info.first_offset + i, r.key, r.value) for i, r in enumerate(records))
        now += 1
    log.roll(now)
    return log, model


def _read(log: Log) -> list[tuple[int, bytes, bytes | None]]:
    data = bytes(log.read(log.log_start_offset, 1 << 30).records)
    out, pos = [], 0
    while pos < len(data):
        batch = decode_batch(data, pos)
        out.extend((r.offset, r.key, r.value) for r in batch.records)
        pos = batch.header.next_position
    return out


def test_cleaning_batches_of_every_shape_matches_the_model():
    rng = random.Random(11)
    with tempfile.TemporaryDirectory() as tmp:
        log, model = _build_log(os.path.join(tmp, "t-0"), rng)
        checkpoint = None
        # The first map holds only part of the dirty records; the second run reads the
        # clean head (keys looked up in the map) and maps the rest.
        for capacity, expect_end in ((150, False), (100_000, True)):
            to_clean = cleanable_offsets(summarize(log), checkpoint, 2_000)
            cleaner = Cleaner(OffsetMap(capacity), Throttler(DOUBLE_MAX), io_buffer_size=16 * 1024)
            checkpoint, _ = clean_log_now(log, cleaner, to_clean, 2_000)
            assert cleaner.stats.records_kept < cleaner.stats.records_read
            assert (checkpoint == log.active_segment.base_offset) == expect_end
        seen = _read(log)
        by_offset = {o: (o, k, v) for o, k, v in model}
        assert [r[0] for r in seen] == sorted({r[0] for r in seen})
        assert all(by_offset[r[0]] == r for r in seen), "a record changed"
        last = {}
        for o, k, v in model:
            last[k] = o
        present = {r[0] for r in seen}
        assert set(last.values()) <= present, "a key's last record is gone"
        cleaned_below = checkpoint
        dropped_wrongly = [o for o, k, v in model if o < cleaned_below and o in present and last[k] != o]
        assert not dropped_wrongly, f"records that should have gone are still there: {dropped_wrongly[:5]}"
        log.close()

"""Hypothesis state machine: log compaction against a plain model (Kafka's design,
"Log Compaction", the guarantees section).

Model: every record ever appended (offset, key, value or None for a
tombstone, timestamp), in order. Rules: keyed appends (some batches from an
idempotent producer, some gzip-compressed; batches of several values, some
with record headers, that cleaning rewrites from the bytes of the records
they keep), time passing, cleaning runs
chosen by the pure CleanerManagerCore with an offset map of random (often
too small) capacity, clean and unclean restarts, and crashes at every step
of the `.cleaned`/`.swap` protocol followed by recovery.

Guarantees checked after every step, the log read back by kafka-python's
record reader (an independent parser, CRCs checked):
- every record in the log is the model's record at that offset (offsets,
  order, keys, values and timestamps never change; nothing is invented);
- a consumer that keeps up (reads to the log end before each cleaning)
  saw every record;
- the last record of every key is present, unless it is a tombstone older
  than delete.retention.ms;
- a tombstone is present for at least delete.retention.ms after it was written;
- replaying the log from the start gives the model's final key -> value map;
- records in the active segment, and records newer than
  min.compaction.lag.ms, are all present;
- the idempotent producer's last batch is present (its header, even if emptied).
"""

from __future__ import annotations

import os
import struct
import tempfile

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kafka.record.default_records import DefaultRecordBatch

from kref.records.batch import Header, Record, build_batch
from kref.records.compression import CompressionType
from kref.storage.cleaner import (
    Cleaner,
    CleaningAbortedError,
    Throttler,
    DOUBLE_MAX,
    clean_log_now,
    summarize,
)
import kref.storage.cleaner as cleaner_module
from kref.storage.cleaner_planner import (
    CleanerManagerCore,
    CleaningAborted,
    CleaningDone,
    OffsetMap,
    PlanCleaning,
    StartCleaning,
)
from kref.storage.config import LogConfig
from kref.storage.log_manager import LogManager

DELETE_RETENTION_MS = 500
MIN_COMPACTION_LAG_MS = 200
KEYS = [b"a", b"b", b"c", b"d", b"e", b"longer-than-sixteen-bytes-key-1", b"longer-than-sixteen-bytes-key-2"]
SWAP_STEPS = ["cleaned-written", "log-swap-renamed", "swap-renamed", "old-deleted", "index-renamed", "done"]
PRODUCER_ID = 7


class Crash(Exception):
    pass


def read_all(log) -> list[tuple[int, bytes | None, bytes | None, int, int]]:
    """(offset, key, value, timestamp, producer_id) of every record, by kafka-python's reader;
    plus (base, -1, ...) markers for empty batches."""
    data = log.read(log.log_start_offset, 1 << 30).records
    out = []
    pos = 0
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        raw = bytes(data[pos : pos + 12 + length])
        batch = DefaultRecordBatch(raw)
        assert batch.validate_crc()
        records = list(batch)
        if not records:
            out.append((batch.base_offset, b"<empty>", None, -1, batch.producer_id))
        for r in records:
            out.append((r.offset, r.key, r.value, r.timestamp, batch.producer_id))
        pos += 12 + length
    return out


class CleanerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self._tmp = tempfile.TemporaryDirectory(dir=base, prefix="kref-cleaner-")
        self.dir = self._tmp.name
        self.config = LogConfig.from_properties(
            {
                "cleanup.policy": "compact",
                "segment.bytes": "600",
                "index.interval.bytes": "64",
                "segment.index.bytes": "4096",
                "delete.retention.ms": str(DELETE_RETENTION_MS),
                "min.compaction.lag.ms": str(MIN_COMPACTION_LAG_MS),
                "min.cleanable.dirty.ratio": "0.01",
                "file.delete.delay.ms": "0",
            }
        )
        self.now = 100_000
        self.model: list[tuple[int, bytes, bytes | None, int]] = []
        self.appended_at: dict[int, int] = {}
        self.producer_last: tuple[int, int] | None = None  # (base offset, last offset)
        self.sequence = 0
        self.counter = 0
        self.core = CleanerManagerCore()
        self.consumer_position = 0
        self._open()

    def _open(self) -> None:
        self.manager = LogManager([self.dir], self.config, self.now)
        self.manager.load_logs(self.now, {"t": self.config})
        self.log = self.manager.get_or_create_log("t", 0, self.config)

    def teardown(self) -> None:
        if not self.log.closed:
            self.log.close_uncleanly()
        self._tmp.cleanup()

    # -- rules ---------------------------------------------------------------

    @rule(
        entries=st.lists(st.tuples(st.sampled_from(KEYS), st.booleans()), min_size=1, max_size=3),
        idempotent=st.booleans(),
        gzip=st.booleans(),
    )
    def append(self, entries, idempotent, gzip):
        records = []
        for key, tombstone in entries:
            self.counter += 1
            records.append(Record(timestamp=self.now, key=key, value=None if tombstone else b"v%d" % self.counter))
        kwargs = {}
        if idempotent:
            kwargs = dict(producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=self.sequence)
            self.sequence += len(records)
        batch = build_batch(records, compression=CompressionType.GZIP if gzip else CompressionType.NONE, **kwargs)
        info = self.log.append_as_leader(batch, 0, self.now)
        for i, r in enumerate(records):
            self.model.append((info.first_offset + i, r.key, r.value, self.now))
            self.appended_at[info.first_offset + i] = self.now
        if idempotent:
            self.producer_last = (info.first_offset, info.last_offset)

    @rule(keys=st.lists(st.sampled_from(KEYS), min_size=2, max_size=8), headers=st.booleans())
    def append_values(self, keys, headers):
        """One batch of several values (no tombstone): cleaning keeps some of its
        records and rewrites it from their bytes."""
        records = []
        for key in keys:
            self.counter += 1
            value = b"v%d" % self.counter
            records.append(Record(timestamp=self.now, key=key, value=value, headers=(Header("h", value),) if headers else ()))
        info = self.log.append_as_leader(build_batch(records), 0, self.now)
        for i, r in enumerate(records):
            self.model.append((info.first_offset + i, r.key, r.value, self.now))
            self.appended_at[info.first_offset + i] = self.now

    @rule(ms=st.sampled_from([1, 150, 300, 600, 1000]))
    def advance_time(self, ms):
        self.now += ms

    @rule(keys=st.lists(st.sampled_from(KEYS), min_size=4, max_size=12), tombstone_every=st.sampled_from([0, 3, 5]))
    def append_many(self, keys, tombstone_every):
        """Several single-record batches at once: enough to roll segments."""
        for i, key in enumerate(keys):
            self.append([(key, bool(tombstone_every) and i % tombstone_every == 0)], False, False)
        self.now += 100

    def _consume_to_end(self) -> None:
        seen = [r for r in read_all(self.log) if r[0] >= self.consumer_position and r[1] != b"<empty>"]
        expected = [m for m in self.model if m[0] >= self.consumer_position]
        assert [(o, k, v, t) for o, k, v, t, _ in seen] == expected, "a consumer that keeps up missed records"
        self.consumer_position = self.log.log_end_offset

    @rule(capacity=st.sampled_from([2, 3, 5, 50, 10_000]), crash_at=st.sampled_from([None] * 4 + SWAP_STEPS))
    def clean(self, capacity, crash_at):
        self._clean(capacity, crash_at)

    @rule(capacity=st.sampled_from([4, 10_000]))
    def clean_without_crash(self, capacity):
        self._clean(capacity, None)

    def _clean(self, capacity, crash_at):
        self._consume_to_end()
        effects = self.core.step(PlanCleaning((summarize(self.log),)), self.now)
        if not isinstance(effects[0], StartCleaning):
            return
        to_clean = effects[0].log
        cleaner = Cleaner(OffsetMap(capacity), Throttler(DOUBLE_MAX), io_buffer_size=256)
        original = cleaner_module.swap_in

        def swap_in(log, group, step=None):
            def note(name):
                if name == crash_at:
                    raise Crash(name)

            return original(log, group, step=note)

        cleaner_module.swap_in = swap_in
        try:
            end, horizon = clean_log_now(self.log, cleaner, to_clean, self.now)
        except CleaningAbortedError:
            self.core.step(CleaningAborted(to_clean.key), self.now)
            return
        except Crash:
            self.core = CleanerManagerCore()  # the cleaner's memory dies with the process
            self._crash_restart()
            return
        finally:
            cleaner_module.swap_in = original
        self.core.step(CleaningDone(to_clean.key, end, horizon), self.now)

    @rule()
    def clean_restart(self):
        self.manager.shutdown()
        self._open()

    @rule()
    def crash_restart(self):
        self._crash_restart()

    def _crash_restart(self) -> None:
        self.log.close_uncleanly()
        self._open()

    @precondition(lambda self: len(self.model) > 0)
    @rule()
    def roll(self):
        self.log.roll(self.now)

    # -- invariants ------------------------------------------------------------

    @invariant()
    def guarantees_hold(self):
        records = read_all(self.log)
        by_offset = {m[0]: m for m in self.model}
        data = [r for r in records if r[1] != b"<empty>"]
        offsets = [r[0] for r in data]
        assert offsets == sorted(set(offsets)), "offsets must stay strictly increasing"
        for o, k, v, t, _ in data:
            assert by_offset[o] == (o, k, v, t), f"record at {o} changed: {(o, k, v, t)} vs {by_offset[o]}"
        present = set(offsets)
        last_of_key: dict[bytes, tuple] = {}
        for m in self.model:
            last_of_key[m[1]] = m
        for key, (o, k, v, t) in last_of_key.items():
            if v is not None or self.now < self.appended_at[o] + DELETE_RETENTION_MS:
                assert o in present, f"the last record of {key!r} (offset {o}) is gone"
        for o, k, v, t in self.model:
            if v is None and last_of_key[k][0] == o and self.now < t + DELETE_RETENTION_MS:
                assert o in present, f"tombstone {o} vanished before delete.retention.ms"
        replay: dict[bytes, bytes] = {}
        for o, k, v, t, _ in data:
            if v is None:
                replay.pop(k, None)
            else:
                replay[k] = v
        final = {k: m[2] for k, m in last_of_key.items() if m[2] is not None}
        assert replay == final, "reading from the start must yield every live key's final value"
        active_base = self.log.active_segment.base_offset
        for o, k, v, t in self.model:
            if o >= active_base or t > self.now - MIN_COMPACTION_LAG_MS:
                assert o in present, f"record {o} was cleaned too early (active segment / min.compaction.lag.ms)"
        if self.producer_last is not None:
            base, last = self.producer_last
            batch_offsets = {r[0] for r in records if r[4] == PRODUCER_ID}
            assert any(base <= o <= last for o in batch_offsets), "the producer's last batch must survive"


CleanerMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("KREF_CLEANER_EXAMPLES", "30")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestCleaner = CleanerMachine.TestCase

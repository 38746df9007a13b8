"""Hypothesis state machine: the Log against a plain list model.

Model: the batches in offset order (base offset, values, leader epoch,
timestamp), log_start_offset, and the leader-epoch entries (KIP-101). Rules:
leader and follower appends, rolls (segment.bytes is tiny, so appends roll
too), truncate_to at batch boundaries (TruncateToEpochEndOffset),
truncate_fully_and_start_at, DeleteRecords (maybe_increment_log_start_offset),
retention by size and time, clean close/reopen through LogManager, an
unclean stop with and without a torn partial batch at the tail, and index
files deleted, garbled or cut before a (clean or unclean) restart.
Invariants after every step: reading from log_start_offset returns exactly the
model's records, log_end_offset and log_start_offset agree, bounded reads are
prefixes made of whole batches, time lookups find the model's first record
at or after a timestamp, and the epoch cache equals the model's entries."""

from __future__ import annotations

import dataclasses
import os

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kref.records.header import iter_headers
from kref.storage.config import LogConfig
from kref.storage.log_manager import LogManager

from .batches import decode_values, make_batch

CONFIG = LogConfig.from_properties(
    {"segment.bytes": "700", "index.interval.bytes": "50", "segment.index.bytes": "96", "retention.ms": "-1"}
)


@dataclasses.dataclass
class ModelBatch:
    base_offset: int
    values: list[bytes]
    epoch: int
    timestamp: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.values)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        import tempfile

        base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self._tmp = tempfile.TemporaryDirectory(dir=base, prefix="kref-stateful-")
        self.log_dirs = [os.path.join(self._tmp.name, "a"), os.path.join(self._tmp.name, "b")]
        self.now = 10_000
        self.counter = 0
        self.manager = LogManager(self.log_dirs, CONFIG, self.now)
        self.manager.load_logs(self.now)
        self.log = self.manager.get_or_create_log("t", 0)
        self.batches: list[ModelBatch] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.epochs: list[tuple[int, int]] = []
        self.epoch = 0

    def teardown(self) -> None:
        if not self.log.closed:
            self.log.close_uncleanly()
        self._tmp.cleanup()

    # -- model helpers -------------------------------------------------------

    def _values(self, count: int, size: int) -> list[bytes]:
        out = []
        for _ in range(count):
            self.counter += 1
            out.append(b"%d:" % self.counter + b"v" * size)
        return out

    def _model_assign(self, epoch: int, offset: int) -> None:
        if not self.epochs or epoch > self.epochs[-1][0]:
            # an epoch left without records (start == new start) is superseded
            self.epochs = [e for e in self.epochs if e[1] < offset] + [(epoch, offset)]

    def _model_truncate_from_start(self, start: int) -> None:
        kept = [e for e in self.epochs if e[1] > start]
        below = [e for e in self.epochs if e[1] <= start]
        self.epochs = ([(below[-1][0], start)] if below else []) + kept

    def _set_log_start(self, start: int) -> None:
        if start > self.log_start_offset:
            self.log_start_offset = start
            self._model_truncate_from_start(start)

    def _records(self, start: int) -> list[tuple[int, bytes]]:
        return [
            (b.base_offset + i, v) for b in self.batches for i, v in enumerate(b.values) if b.base_offset + i >= start
        ]

    # -- rules -----------------------------------------------------------------

    @rule(count=st.integers(1, 4), size=st.integers(0, 120), bump=st.booleans())
    def append_as_leader(self, count, size, bump):
        if bump:
            self.epoch += 1
        self.now += 7
        values = self._values(count, size)
        info = self.log.append_as_leader(make_batch(values, timestamp=self.now), self.epoch, self.now)
        assert info.first_offset == self.log_end_offset
        assert info.last_offset == self.log_end_offset + count - 1
        self.batches.append(ModelBatch(self.log_end_offset, values, self.epoch, self.now))
        self._model_assign(self.epoch, self.log_end_offset)
        self.log_end_offset += count

    @rule(count=st.integers(1, 3), batches=st.integers(1, 3))
    def append_as_follower(self, count, batches):
        self.epoch += 1
        payload = b""
        offset = self.log_end_offset
        model = []
        for _ in range(batches):
            self.now += 3
            values = self._values(count, 10)
            payload += make_batch(values, base_offset=offset, timestamp=self.now, partition_leader_epoch=self.epoch)
            model.append(ModelBatch(offset, values, self.epoch, self.now))
            offset += count
        self.log.append_as_follower(payload, self.now)
        self.batches.extend(model)
        self._model_assign(self.epoch, self.log_end_offset)
        self.log_end_offset = offset

    @rule()
    def roll(self):
        self.log.roll(self.now)

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def truncate_to(self, data):
        boundaries = [b.base_offset for b in self.batches if b.base_offset >= self.log_start_offset] + [self.log_end_offset]
        target = data.draw(st.sampled_from(boundaries))
        changed = self.log.truncate_to(target)
        assert changed == (target < self.log_end_offset)
        if changed:
            self.batches = [b for b in self.batches if b.next_offset <= target]
            self.log_end_offset = target
            self.epochs = [e for e in self.epochs if e[1] < target]
        else:
            # Kafka's truncateTo at or past the log end removes nothing but still
            # drops epoch entries starting at the log end (an epoch a deposed
            # leader assigned and never wrote in), even one that DeleteRecords
            # moved there: the next append assigns its epoch again.
            self.epochs = [e for e in self.epochs if e[1] < self.log_end_offset]

    @rule(gap=st.integers(0, 5))
    def truncate_fully_and_start_at(self, gap):
        start = self.log_end_offset + gap
        self.log.truncate_fully_and_start_at(start)
        self.batches = []
        self.log_start_offset = self.log_end_offset = start
        self.epochs = []

    @rule(data=st.data())
    def delete_records(self, data):
        target = data.draw(st.integers(self.log_start_offset, self.log_end_offset))
        self.log.maybe_increment_log_start_offset(target)
        self._set_log_start(target)

    @rule(retention_bytes=st.integers(0, 1500))
    def retention_by_size(self, retention_bytes):
        old_start = self.log_start_offset
        self.log.config = dataclasses.replace(CONFIG, retention_bytes=retention_bytes)
        self.log.delete_old_segments(self.now)
        self.log.config = CONFIG
        new_start = self.log.log_start_offset
        assert new_start >= old_start
        assert self.log.size_in_bytes <= max(retention_bytes, 0) + CONFIG.segment_bytes * 2 or len(self.log.segments) == 1
        self._set_log_start(new_start)
        self.batches = [b for b in self.batches if b.next_offset > new_start or b.base_offset >= new_start]

    @rule(age=st.integers(0, 200))
    def retention_by_time(self, age):
        self.log.config = dataclasses.replace(CONFIG, retention_ms=age)
        self.log.delete_old_segments(self.now)
        self.log.config = CONFIG
        new_start = self.log.log_start_offset
        # whatever was deleted was older than the retention time
        for b in self.batches:
            if b.next_offset <= new_start and b.base_offset >= self.log_start_offset:
                assert self.now - b.timestamp > age or b.next_offset <= self.log_start_offset
        self._set_log_start(new_start)
        self.batches = [b for b in self.batches if b.next_offset > new_start]

    def _reopen(self) -> None:
        self.manager = LogManager(self.log_dirs, CONFIG, self.now)
        self.manager.load_logs(self.now)
        self.log = self.manager.get_log("t", 0)
        # Kafka's load truncates the cache to the log end: an epoch that never
        # got a record (its start offset == log end) is forgotten on restart.
        self.epochs = [e for e in self.epochs if e[1] < self.log_end_offset]

    @rule()
    def clean_restart(self):
        self.manager.shutdown()
        self._reopen()

    @rule(torn=st.integers(0, 60), flushed=st.booleans())
    def unclean_restart(self, torn, flushed):
        if flushed:
            self.log.flush()
        self.manager.checkpoint()
        if torn:
            partial = make_batch(self._values(2, 30), base_offset=self.log_end_offset)[:torn]
            with open(self.log.active_segment.log_path, "ab") as f:
                f.write(partial)
        self.log.close_uncleanly()
        self._reopen()

    @rule(data=st.data(), mode=st.sampled_from(["delete", "garble", "truncate"]), clean=st.booleans())
    def damage_index_and_restart(self, data, mode, clean):
        """Deleting or damaging an index is always safe: the restart rebuilds it."""
        if clean:
            self.manager.shutdown()
        else:
            self.manager.checkpoint()
            self.log.close_uncleanly()
        names = sorted(n for n in os.listdir(self.log.dir) if n.endswith((".index", ".timeindex")))
        if names:
            path = os.path.join(self.log.dir, data.draw(st.sampled_from(names)))
            if mode == "delete":
                os.unlink(path)
            elif mode == "garble":
                with open(path, "r+b") as f:
                    f.write(data.draw(st.binary(min_size=1, max_size=48)))
            else:
                with open(path, "r+b") as f:
                    f.truncate(data.draw(st.integers(0, max(0, os.path.getsize(path) - 1))))
        self._reopen()

    # -- invariants --------------------------------------------------------------

    @invariant()
    def offsets_agree(self):
        assert self.log.log_end_offset == self.log_end_offset
        assert self.log.log_start_offset == self.log_start_offset
        assert self.log.recovery_point <= self.log.log_end_offset

    @invariant()
    def reads_match_model(self):
        expected = self._records(self.log_start_offset)
        if self.log_start_offset == self.log_end_offset:
            assert self.log.read(self.log_start_offset, 1 << 20).records == b""
            return
        fetched = self.log.read(self.log_start_offset, 1 << 20)
        got = [r for r in decode_values(fetched.records) if r[0] >= self.log_start_offset]
        assert got == expected
        headers = list(iter_headers(fetched.records, verify=True))
        assert fetched.next_offset == headers[-1].next_offset == self.log_end_offset
        # bounded reads: whole batches holding the offset, never reaching max_offset
        all_records = set(self._records(0))
        boundaries = [b.base_offset for b in self.batches if b.base_offset > self.log_start_offset]
        for offset in sorted({self.log_start_offset, (self.log_start_offset + self.log_end_offset) // 2, self.log_end_offset - 1}):
            part = decode_values(self.log.read(offset, 150).records)
            assert part and part[0][0] <= offset <= part[-1][0] and set(part) <= all_records
            limit = next((b for b in boundaries if b > offset), None)
            if limit is not None:
                capped = decode_values(self.log.read(offset, 1 << 20, max_offset=limit).records)
                assert capped and capped[-1][0] == limit - 1

    @invariant()
    def timestamps_match_model(self):
        records = [(b.timestamp, b.base_offset + i) for b in self.batches for i in range(len(b.values)) if b.base_offset + i >= self.log_start_offset]
        if not records:
            return
        for target in (records[0][0], records[len(records) // 2][0] - 1, records[-1][0]):
            want = next(((ts, off) for ts, off in records if ts >= target), None)
            got = self.log.fetch_offset_by_timestamp(target)
            assert (got[:2] if got else None) == want, target
        assert self.log.fetch_offset_by_timestamp(records[-1][0] + 1) is None

    @invariant()
    def epochs_match_model(self):
        assert self.log.leader_epoch_cache.entries() == self.epochs


LogMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("KREF_STATEFUL_EXAMPLES", "40")),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestLogMachine = LogMachine.TestCase



def test_truncate_at_the_log_end_drops_the_epoch_entry_delete_records_moved_there():
    """The sequence hypothesis found: an epoch entry that DeleteRecords moved to
    the log end is dropped by a truncation to the log end, as Kafka's truncateTo
    does (the model follows Kafka; the next append assigns the epoch again)."""
    machine = LogMachine()
    try:
        machine.truncate_fully_and_start_at(gap=3)
        machine.log.append_as_leader(make_batch([b"a", b"b", b"c", b"d"]), 1, machine.now)
        assert machine.log.leader_epoch_cache.entries() == [(1, 3)]
        machine.log.maybe_increment_log_start_offset(7)
        assert machine.log.leader_epoch_cache.entries() == [(1, 7)]
        assert machine.log.truncate_to(7) is False
        assert machine.log.leader_epoch_cache.entries() == []
        machine.log.append_as_leader(make_batch([b"e"]), 1, machine.now)
        assert machine.log.leader_epoch_cache.entries() == [(1, 7)]
    finally:
        machine.teardown()

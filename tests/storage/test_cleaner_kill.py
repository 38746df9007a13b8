"""SIGKILL at every step of a cleaning (Kafka's `.cleaned`/`.swap` protocol), then recovery.

A child process writes a keyed log (tombstones included), flushes it, and
cleans it, killing itself with SIGKILL at one named point: in the middle
of writing the `.cleaned` files, after they are written, after the log
file's rename to `.swap` (the commit point), after the indexes' renames,
after the old segments became `.deleted`, after the new index is in
place, and after the swap finished. The parent then opens the log dir as
the next broker start would (unclean) and checks that recovery rolled the
swap back (before the commit point: every record still there) or completed
it (from the commit point: the first group compacted), that no `.cleaned`
or `.swap` file is left, and that compaction's guarantees hold against the
model: every record is the original at its offset, offsets increase, the
last record of every key is there, and replaying yields the final values.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from kref.storage.config import LogConfig
from kref.storage.log_manager import LogManager

from .test_cleaner_stateful import read_all

SEED = 11
CHILD = r"""
import os, signal, sys
from kref.records.batch import Record, build_batch
from kref.storage import cleaner as cleaner_module
from kref.storage.cleaner import Cleaner, Throttler, DOUBLE_MAX, clean_log_now
from kref.storage.cleaner_planner import LogToClean, OffsetMap
from kref.storage.config import LogConfig
from kref.storage.log_manager import LogManager
from tests.storage.test_cleaner_kill import CONFIG, records

directory, kill_at = sys.argv[1], sys.argv[2]
manager = LogManager([directory], CONFIG, 0)
manager.load_logs(0)
log = manager.get_or_create_log("k", 0, CONFIG)
for i, (key, value, ts) in enumerate(records()):
    log.append_as_leader(build_batch([Record(timestamp=ts, key=key, value=value)]), 0, ts)
log.flush()
manager.checkpoint()

def die(name):
    if name == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)

original = cleaner_module.swap_in
cleaner_module.swap_in = lambda log, group, step=None: original(log, group, step=die)
cleaner = Cleaner(OffsetMap(1000), Throttler(DOUBLE_MAX), io_buffer_size=512)
if kill_at == "building":
    written = [0]
    def account(n, _orig=cleaner._account_write):
        written[0] += n
        _orig(n)
        if written[0] > 0:
            os.kill(os.getpid(), signal.SIGKILL)
    cleaner._account_write = account
    cleaner_module._CleanedWriter.buffer_limit = 1  # write (and die) after the first batch
ltc = LogToClean(("k", 0), 0, log.active_segment.base_offset, 0, 0)
clean_log_now(log, cleaner, ltc, 10_000)
print("finished", flush=True)
"""

CONFIG = LogConfig.from_properties(
    {"cleanup.policy": "compact", "segment.bytes": "900", "index.interval.bytes": "100", "delete.retention.ms": "100"}
)
STEPS = ["building", "cleaned-written", "log-swap-renamed", "swap-renamed", "old-deleted", "index-renamed", "done"]
COMMITTED = {"log-swap-renamed", "swap-renamed", "old-deleted", "index-renamed", "done"}


def records() -> list[tuple[bytes, bytes | None, int]]:
    """The child's keyed records (deterministic from SEED)."""
    import random

    rng = random.Random(SEED)
    out = [(b"written-once", b"first", 999)]  # so the first group keeps a record
    for i in range(1, 120):
        key = b"key-%d" % rng.randrange(6)
        value = None if rng.random() < 0.15 else b"value-%d" % i
        out.append((key, value, 1000 + i))
    return out


@pytest.mark.parametrize("kill_at", STEPS)
def test_sigkill_at_every_swap_step_is_recovered(tmp_path, kill_at):
    print(f"seed {SEED}, SIGKILL at {kill_at}")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), kill_at],
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-3000:]

    manager = LogManager([str(tmp_path)], CONFIG, 20_000)
    manager.load_logs(20_000, {"k": CONFIG})
    log = manager.get_log("k", 0)
    try:
        leftovers = [n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap"))]
        assert not leftovers, f"recovery left {leftovers}"
        model = [(i, key, value, ts) for i, (key, value, ts) in enumerate(records())]
        data = [r for r in read_all(log) if r[1] != b"<empty>"]
        offsets = [r[0] for r in data]
        assert offsets == sorted(set(offsets))
        for o, k, v, t, _ in data:
            assert model[o] == (o, k, v, t), f"record {o} changed"
        if kill_at in COMMITTED:
            assert len(data) < len(model), "a committed swap must be completed by recovery"
        else:
            assert len(data) == len(model), "an uncommitted swap must be rolled back"
        last: dict[bytes, tuple] = {}
        for m in model:
            last[m[1]] = m
        present = set(offsets)
        for key, (o, k, v, t) in last.items():
            assert o in present, f"last record of {key!r} lost"
        replay: dict[bytes, bytes] = {}
        for o, k, v, t, _ in data:
            if v is None:
                replay.pop(k, None)
            else:
                replay[k] = v
        assert replay == {k: m[2] for k, m in last.items() if m[2] is not None}
    finally:
        manager.shutdown()

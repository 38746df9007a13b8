"""SIGKILL of a real process at every step of a move between log dirs, then a start.

A child process writes a partition log in log dir `a` (with an idempotent
producer's batches, in two leader epochs), starts a move to log dir `b`
with the broker's mover (kref/broker/alter_log_dirs.py: LogDirMover) and
keeps appending between copy steps, killing itself with SIGKILL at one
named point: right after the future log was created, in the middle of the
copy, after the future log was flushed and closed (swap step 1), after the
current dir was renamed `-delete` (step 2), after the future dir took the
partition's name (step 3), after the moved log was reopened (step 4), and
before the `-delete` dir was removed. The parent then opens the two log
dirs as the next broker start would (LogManager.load_logs, then the mover's
resume and copy to the end) and checks: never two `t-0` dirs; after the
start one `t-0` dir, in `b` (the future dir exists from the first kill
point on, so the start always finishes the move), no
`-future` or `-delete` dir left, every record the child appended (each
append reported on stdout before the next) is there at its offset with its
leader epoch, and the producer's state came along.

The in-memory variant with power cuts at every file operation is
test_future_log_crash.py; this one runs on the real file system, with a
real process death.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from kref.broker.alter_log_dirs import LogDirMover
from kref.storage.config import LogConfig
from kref.storage.log_manager import LogManager
from kref.storage.producer_state import ProducerStateManager

from .batches import decode_values

STEPS = ["created", "copying", "future-closed", "current-renamed", "future-renamed", "reopened", "swapped"]
PRODUCER_ID = 7
CHILD = r"""
import os, signal, sys
from kref.broker import alter_log_dirs
from kref.storage.config import LogConfig
from kref.storage.log_manager import LogManager
from kref.storage.producer_state import ProducerStateManager
from tests.storage.batches import make_batch

root, kill_at = sys.argv[1], sys.argv[2]
config = LogConfig.from_properties({"segment.bytes": "2000", "index.interval.bytes": "200"})
dirs = [os.path.join(root, "a"), os.path.join(root, "b")]
manager = LogManager(dirs, config, 0, producer_state_factory=lambda path, p, t: ProducerStateManager(path))
manager.load_logs(0)
log = manager.get_or_create_log("t", 0, config)
sequence = 0

def die(name):
    if name == kill_at:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

def append(i, epoch):
    global sequence
    values = [b"v%d-%d" % (i, j) for j in range(1 + i % 3)]
    info = manager.get_log("t", 0).append_as_leader(
        make_batch(values, producer_id=7, producer_epoch=0, base_sequence=sequence), epoch, i)
    sequence += len(values)
    for j, value in enumerate(values):
        print(info.first_offset + j, epoch, value.decode(), flush=True)

for i in range(30):
    append(i, 0 if i < 15 else 1)
original = alter_log_dirs.swap_future_log
alter_log_dirs.swap_future_log = lambda *args, **kwargs: original(*args, **kwargs, step=die)
mover = alter_log_dirs.LogDirMover(manager, now_ms=lambda: 0, copy_max_bytes=300, usable=lambda path: True,
                                   on_swapped=lambda key, moved, doomed: die("swapped"))
assert mover.alter(("t", 0), dirs[1]) == 0
die("created")
i = 30
while mover.moving:
    if i < 60:
        append(i, 2)
        i += 1
    mover.tick(("t", 0))
    if i == 40:
        die("copying")
sys.exit(3)  # every kill point lies before here
"""


def _names(root: str) -> dict[str, list[str]]:
    return {d: sorted(n for n in os.listdir(os.path.join(root, d)) if n.startswith("t-0")) for d in ("a", "b")}


@pytest.mark.parametrize("kill_at", STEPS)
def test_sigkill_at_every_step_of_a_move(tmp_path, kill_at):
    print(f"SIGKILL at {kill_at}")
    project = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), kill_at], cwd=project,
                          env={**os.environ, "PYTHONPATH": project}, capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-3000:]
    appended = {}
    for line in proc.stdout.decode().splitlines():
        offset, epoch, value = line.split()
        appended[int(offset)] = (int(epoch), value.encode())
    before = _names(str(tmp_path))
    assert sum(n == "t-0" for names in before.values() for n in names) <= 1, f"two live copies: {before}"

    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    config = LogConfig.from_properties({"segment.bytes": "2000", "index.interval.bytes": "200"})
    manager = LogManager(dirs, config, 0, producer_state_factory=lambda path, p, t: ProducerStateManager(path))
    manager.load_logs(0)
    mover = LogDirMover(manager, now_ms=lambda: 0, usable=lambda path: True)
    mover.resume()
    for _ in range(1000):
        if not mover.moving:
            break
        mover.tick(("t", 0))
    log = manager.get_log("t", 0)
    after = _names(str(tmp_path))
    # From the moment the future dir exists, a start finishes the move.
    assert after == {"a": [], "b": ["t-0"]}, f"the move did not complete: {before} -> {after}"
    got = dict(decode_values(log.read(0, 1 << 30).records))
    assert sorted(got) == list(range(len(got)))
    for offset, (epoch, value) in appended.items():
        assert got.get(offset) == value, f"offset {offset}: {got.get(offset)!r}, appended {value!r}"
        assert log.leader_epoch_cache.epoch_for_offset(offset) == epoch
    entry = log.producer_state.last_entry(PRODUCER_ID)
    assert entry is not None and entry.last_sequence == len(got) - 1, entry
    manager.shutdown()

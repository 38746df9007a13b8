"""Killing the process mid-write (SIGKILL, a real crash of a real process):
with flush.messages=1 every batch the writer reported as appended and flushed
must be there after the unclean restart, the load must not crash, and the log
must end at a batch boundary (a torn tail is truncated away)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from kref.storage.config import LogConfig
from kref.storage.log_manager import LogManager

from .batches import decode_values

WRITER = r"""
import sys
from kref.storage.config import LogConfig
from kref.storage.log_manager import LogManager
from tests.storage.batches import make_batch

config = LogConfig.from_properties({"segment.bytes": "20000", "flush.messages": "1"})
manager = LogManager([sys.argv[1]], config, 0)
manager.load_logs(0)
log = manager.get_or_create_log("crash", 0)
i = 0
while True:
    info = log.append_as_leader(make_batch([b"%d-" % i + b"x" * (i % 300)]), 0, i)
    print(info.last_offset, flush=True)
    i += 1
"""


def test_sigkill_during_appends_loses_no_flushed_batch(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for round_ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path)],
            stdout=subprocess.PIPE,
            cwd=root,
            env={**os.environ, "PYTHONPATH": root},
        )
        try:
            acknowledged = -1
            deadline = time.monotonic() + 30
            assert proc.stdout is not None
            while time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line:
                    break
                acknowledged = int(line)
                if acknowledged >= 40 * (round_ + 1):
                    break
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait(timeout=30)
        assert acknowledged >= 0
        manager = LogManager([str(tmp_path)], LogConfig.from_properties({"segment.bytes": "20000"}), 0)
        manager.load_logs(0)
        assert manager.had_clean_shutdown[str(tmp_path)] is False
        log = manager.get_log("crash", 0)
        assert log.log_end_offset >= acknowledged + 1
        offsets = [o for o, _ in decode_values(log.read(0, 1 << 30).records)]
        assert offsets == list(range(log.log_end_offset))
        manager.shutdown()

"""Start-up refuses log dirs it cannot own: in use by another broker, or unusable.

Kafka locks `<log dir>/.lock` so that two broker processes never append to
the same segments; kref does the same with an exclusive flock, which the
kernel releases when the holder dies (so a SIGKILL never leaves a stale
lock). A second `kref broker` on a log dir in use, or a log dir that cannot be
created, ends with one clear line and exit status 2 (as any invalid
configuration), not a traceback and not a running broker.
"""

from __future__ import annotations

import socket
import subprocess
import sys

START_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_broker(log_dir) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "kref.cli", "broker",
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
           "--override", f"log.dirs={log_dir}"]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=START_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:  # it started: the bug this file guards against
        raise AssertionError(f"a second broker started on {log_dir}") from exc


def test_second_broker_on_same_log_dir_is_refused(kref_broker):
    log_dir = kref_broker.log_dirs[0]
    out = run_broker(log_dir)
    assert out.returncode == 2, out.stderr
    assert "in use by another process" in out.stderr and "Traceback" not in out.stderr
    assert kref_broker.running

    # the lock dies with its holder: a SIGKILLed broker restarts on its dir
    kref_broker.restart(clean=False)
    assert kref_broker.running


def test_unusable_log_dir_is_one_clear_line(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    out = run_broker(not_a_dir)
    assert out.returncode == 2
    assert f"log.dirs: cannot use {not_a_dir}" in out.stderr and "Traceback" not in out.stderr

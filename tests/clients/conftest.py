"""Fixtures that run a real `kref broker` subprocess for client tests.

`kref_broker` (function scope) starts one broker on a free loopback port
with a tmp log dir and waits until it accepts connections;
`kref_broker_factory(overrides=..., trace_file=...)` starts more, with
extra broker properties. Handles expose .bootstrap ("127.0.0.1:PORT"),
.port, .log_dirs, .stop() (SIGTERM, clean shutdown), .kill() (SIGKILL),
.restart() (same port and dirs) and .log_text() (the broker's stderr).
Every broker started here is killed in teardown, also when a test fails.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

START_TIMEOUT_S = 60.0  # generous: CI machines here run at load 10+
STOP_TIMEOUT_S = 20.0
# Test-friendly defaults; a test's overrides win.
FIXTURE_DEFAULTS = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "4",
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KrefBroker:
    def __init__(self, base_dir: Path, overrides: dict[str, str] | None = None, trace_file: str | None = None):
        self.base_dir = base_dir
        self.port = free_port()
        self.host = "127.0.0.1"
        self.log_dirs = [base_dir / "kref-data"]
        self.trace_file = trace_file
        self.overrides = {**FIXTURE_DEFAULTS, **(overrides or {})}
        self.log_path = base_dir / "broker.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.extra_args: list[str] = []  # more `kref broker` arguments, e.g. --log-level DEBUG

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "kref.cli",
            "broker",
            "--override",
            f"listeners=PLAINTEXT://{self.host}:{self.port}",
            "--override",
            "log.dirs=" + ",".join(str(d) for d in self.log_dirs),
        ]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        if self.trace_file:
            cmd += ["--trace-file", str(self.trace_file)]
        return cmd + self.extra_args

    def start(self) -> KrefBroker:
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        self.starts += 1
        log_file = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                self.command(), stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        finally:
            log_file.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        # Ready means this start's own "listening on" line, not just an open port: free_port()
        # releases the port before the broker binds it, so a broker of a test running beside
        # this one (xdist) can take it meanwhile, and a bare connect would then reach that
        # broker (CI once saw another test's topic this way). This broker then exits with
        # "cannot listen", and the error says so.
        listening = f"listening on PLAINTEXT://{self.host}:{self.port}"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kref broker exited with {self.proc.returncode}:\n{self.log_text()}")
            if self.log_text().count(listening) >= self.starts:
                try:
                    with socket.create_connection((self.host, self.port), timeout=0.5):
                        return self
                except OSError:
                    pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"kref broker did not accept connections in {START_TIMEOUT_S}s:\n{self.log_text()}")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait: the clean-shutdown path (flush + checkpoints)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(f"kref broker ignored SIGTERM for {timeout}s:\n{self.log_text()}") from None
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: an unclean stop, recovered at the next start."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self, *, clean: bool = True) -> KrefBroker:
        if clean:
            self.stop()
        else:
            self.kill()
        return self.start()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


@pytest.fixture
def kref_broker_factory(tmp_path):
    brokers: list[KrefBroker] = []

    def make(overrides: dict[str, str] | None = None, trace_file: str | None = None, start: bool = True):
        broker = KrefBroker(tmp_path / f"broker-{len(brokers)}", overrides, trace_file)
        broker.base_dir.mkdir(parents=True, exist_ok=True)
        brokers.append(broker)
        return broker.start() if start else broker

    yield make
    for broker in brokers:
        broker.kill()
        # Shown by pytest only when the test failed.
        print(f"--- kref broker log ({broker.bootstrap}) ---\n{broker.log_text()[-20000:]}")


@pytest.fixture
def kref_broker(kref_broker_factory) -> KrefBroker:
    return kref_broker_factory()

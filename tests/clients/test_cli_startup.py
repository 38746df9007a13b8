"""What `kref` says at start and when it cannot start.

- `kref --help` lists exactly the commands that exist (each answers --help).
- A corrupt topic metadata file, a --trace-file in a missing directory and a
  log.dirs that is a file each end in one clear `kref broker: ...` line and
  exit status 2, no traceback.
- A port already in use: the listen error, and no "stopped cleanly".
- The effective configuration is logged at start, secrets masked.
- `--log-level DEBUG` logs one line per request (a real client's requests).
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys

from confluent_kafka.admin import AdminClient

from kref.cli import build_parser


def run_kref(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kref.cli", *args], capture_output=True, text=True, timeout=timeout)


def kref_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("kref broker:")]


def test_help_lists_only_existing_commands():
    out = run_kref("--help")
    assert out.returncode == 0
    listed = set(re.search(r"\{([a-z,-]+)\}", out.stdout).group(1).split(","))
    registered = set(build_parser()._subparsers._group_actions[0].choices)  # noqa: SLF001
    assert listed == registered
    for command in listed:
        assert run_kref(command, "--help").returncode == 0
    description = out.stdout.split("positional arguments")[0]
    assert "`kref" not in description  # names no command (it could promise one that does not exist)


def broker_args(tmp_path, *extra: str) -> list[str]:
    return ["broker", "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path / 'data'}", *extra]


def assert_one_clear_line(out: subprocess.CompletedProcess, *fragments: str) -> None:
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    [line] = kref_lines(out.stderr)
    for fragment in fragments:
        assert fragment in line, line


def test_corrupt_topic_metadata_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "kref-topics.json").write_text('{"version": 1, "topics": [')
    assert_one_clear_line(run_kref(*broker_args(tmp_path)), "kref-topics.json", "corrupt")


def test_unusable_trace_file_is_one_line_and_exit_2(tmp_path):
    missing = tmp_path / "no-such-dir" / "trace.ndjson"
    assert_one_clear_line(run_kref(*broker_args(tmp_path, "--trace-file", str(missing))), "trace file", "No such file")


def test_log_dirs_that_is_a_file_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "data").write_text("not a directory")
    assert_one_clear_line(run_kref(*broker_args(tmp_path)), "is a file, not a directory")


def test_listen_error_is_reported_without_stopped_cleanly(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run_kref("broker", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={tmp_path / 'data'}")
    assert out.returncode != 0
    assert "cannot listen on" in out.stderr
    assert "stopped cleanly" not in out.stderr and "Traceback" not in out.stderr


def test_effective_config_is_logged_with_secrets_masked(kref_broker_factory):
    broker = kref_broker_factory({"ssl.keystore.password": "hunter2", "message.max.bytes": "123456"})
    broker.stop()
    text = broker.log_text()
    assert "effective configuration" in text
    assert "message.max.bytes = 123456" in text
    assert "ssl.keystore.password = [hidden]" in text and "hunter2" not in text


def test_debug_log_level_logs_each_request(kref_broker_factory):
    broker = kref_broker_factory(start=False)
    broker.extra_args = ["--log-level", "DEBUG"]
    broker.start()
    AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3}).list_topics(timeout=15)
    broker.stop()
    lines = [line for line in broker.log_text().splitlines() if "kref.request" in line]
    assert any("api_key=18" in line for line in lines)  # ApiVersions
    assert any("api_key=3 " in line for line in lines)  # Metadata

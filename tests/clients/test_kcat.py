"""kcat 1.7.1 on Debian's librdkafka 2.0.2 — a client that mis-parses
non-empty tagged fields in ApiVersions v3 responses — connects, lists
metadata and triggers auto topic creation against kref. Skipped when kcat
is not installed (apt package `kcat`)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")


def test_kcat_metadata_listing(kref_broker):
    out = subprocess.run(
        ["kcat", "-b", kref_broker.bootstrap, "-L", "-t", "kcat-topic", "-m", "15"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert f"broker 1 at 127.0.0.1:{kref_broker.port} (controller)" in out.stdout
    assert 'topic "kcat-topic" with 1 partitions' in out.stdout
    assert "partition 0, leader 1, replicas: 1, isrs: 1" in out.stdout

"""kafkajs, a client with its own protocol code (pure JavaScript), uses kref.

tests/clients/js/kafkajs_client.js, run with node against a real broker:
CreateTopics, an idempotent acks=all producer sending gzip batches with
headers, a two-member consumer group reading every record once and
committing, OffsetFetch equal to the end offsets, and a transactional
producer that does not get to commit. kafkajs is installed by
scripts/setup.sh (into .venv/node); the test skips only when node or that
install is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "js" / "kafkajs_client.js"
NODE_MODULES = Path(sys.prefix) / "node" / "node_modules"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_MODULES / "kafkajs").is_dir(),
    reason="node or kafkajs is not installed (scripts/setup.sh installs kafkajs when npm exists)",
)


def test_kafkajs_produce_group_consume_commit(kref_broker):
    out = subprocess.run(
        ["node", str(SCRIPT), kref_broker.bootstrap],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "NODE_PATH": str(NODE_MODULES)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert sum(seen["high"]) == 300
    assert seen["consumed"] == 300 and seen["headersOk"]
    assert seen["committed"] == seen["high"]
    assert seen["transaction"] != "committed"

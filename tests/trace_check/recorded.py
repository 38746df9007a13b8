"""Recorded runs kept under tests/trace_check/testdata (gzipped per-node NDJSON traces).

The recorded-trace tests load a run, doctor one event where they need to,
write the nodes' files back (as a run directory: one trace.ndjson per node)
and check one partition with the converter and TLC. These three steps are
the same in every such test, so they live here once.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from trace_check.replication import load_events, normalise
from trace_check.tlc import check_and_explain_batch

TESTDATA = Path(__file__).parent / "testdata"


def events_by_node(run: Path) -> dict[str, list[dict]]:
    """node name ("node-1", ...) -> its events, from run/node-N.ndjson.gz."""
    return {f.name.split(".")[0]: [json.loads(line) for line in gzip.open(f, "rt") if line.strip()]
            for f in sorted(run.glob("node-*.ndjson.gz"))}


def write_run(tmp_path: Path, nodes: dict[str, list[dict]]) -> list[Path]:
    """Each node's (possibly doctored) events as tmp_path/<node>/trace.ndjson."""
    files = []
    for node, events in nodes.items():
        (tmp_path / node).mkdir()
        path = tmp_path / node / "trace.ndjson"
        path.write_text("".join(json.dumps(e) + "\n" for e in events))
        files.append(path)
    return files


def partition_verdict(tmp_path: Path, nodes: dict[str, list[dict]], topic: str, partition: int,
                      min_insync_replicas: int = 1):
    """(the converted steps, TLC's verdict) for one partition of the run."""
    steps = normalise(load_events(write_run(tmp_path, nodes)), topic, partition)
    verdict, = check_and_explain_batch([steps], min_insync_replicas=min_insync_replicas, timeout_s=300)
    return steps, verdict

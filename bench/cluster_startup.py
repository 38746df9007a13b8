"""Cluster start-up: how soon an unmodified client's CreateTopics succeeds (issue 9's start-up gap).

Per round: `kref cluster`'s layout (3 combined nodes) is formatted and
started as real processes, and a confluent-kafka AdminClient sends
CreateTopics (3 partitions, replication factor 1) at one of three moments:
`start` (as soon as the processes are spawned), `registered` (every node
logged its broker epoch) or `unfenced` (every node logged "unfenced", what
tests wait for). Printed: seconds from process start to that moment, from
that moment to the successful answer (or the bound, with the error), and
the median over rounds. Not a test: figures for the report; the old code
(before the start-up gate) hung at `start` and `registered` every time.

    .venv/bin/python bench/cluster_startup.py [--rounds 3] [--at start,registered,unfenced] [--bound 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kref.node.local_cluster import bootstrap_servers  # noqa: E402
from tests.clusterkit import running_cluster, wait_until  # noqa: E402

SETTINGS = {
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "broker.heartbeat.interval.ms": "400",
    "broker.session.timeout.ms": "4000",
}
MARKS = {"start": None, "registered": "registered with broker epoch", "unfenced": "unfenced"}


def one_round(moment: str, bound: float) -> tuple[float, float, str]:
    from confluent_kafka.admin import AdminClient, NewTopic

    with tempfile.TemporaryDirectory() as d, running_cluster(Path(d), 3, 3, SETTINGS) as (specs, _, __):
        t_start = time.monotonic()
        mark = MARKS[moment]
        if mark is not None:
            wait_until(lambda: all(mark in s.log_file.read_text(errors="replace") for s in specs), mark)
        t_sent = time.monotonic()
        admin = AdminClient({"bootstrap.servers": bootstrap_servers(specs), "log_level": 0})
        try:
            admin.create_topics([NewTopic("t", 3, 1)])["t"].result(bound)
            outcome = "ok"
        except Exception as exc:  # noqa: BLE001 - the outcome is the figure
            outcome = type(exc).__name__ + (f" {exc}" if str(exc) else "")
        return t_sent - t_start, time.monotonic() - t_sent, outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--at", default="start,registered,unfenced")
    parser.add_argument("--bound", type=float, default=40.0)
    args = parser.parse_args()
    print(f"timeouts: {SETTINGS}; CreateTopics bound {args.bound:g} s")
    for moment in args.at.split(","):
        answers = []
        for i in range(args.rounds):
            waited, took, outcome = one_round(moment, args.bound)
            answers.append(took)
            print(f"  {moment:10s} round {i + 1}: sent {waited:5.2f} s after start, answered in {took:5.2f} s ({outcome})",
                  flush=True)
        print(f"{moment}: median answer {statistics.median(answers):.2f} s over {args.rounds} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Controller failover: from kill -9 of the active controller to the next successful CreateTopics.

Runs `kref cluster`'s layout (3 combined nodes) as real processes, waits
until the three brokers are unfenced, then, per round: kill -9 the active
controller (found with DescribeQuorum), and time how long until a
CreateTopics (replication factor 1, sent to a surviving broker, which
forwards it to the controller) succeeds; restart the killed node and wait
until it is back before the next round. Prints each round and the median,
with the timeouts used. Not a test: figures for the report.

With --partitions N, a topic of N partitions (replication factor 3) is
created first, so every controller replays and holds N partitions, and each
kill also moves the leadership of about a third of them: issue 9's
"controller failover time with 10,000 partitions". The creation time is
printed too.

    .venv/bin/python bench/kraft_failover.py [--rounds 5] [--election-ms 1000] [--fetch-ms 2000] [--partitions 10000]
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kref.controller import local_cluster, meta_properties  # noqa: E402
from kref.protocol.client import WireClient  # noqa: E402
from kref.protocol.codec import request_class  # noqa: E402
from tests.controller.test_quorum_processes import describe_quorum, wait_until  # noqa: E402


def create_topic(port: int, name: str, partitions: int = 1, replication_factor: int = 1, timeout_s: float = 5) -> bool:
    cls = request_class(19, 7)
    m = sys.modules[cls.__module__]
    import datetime

    request = cls(
        topics=(m.CreatableTopic(name=name, num_partitions=partitions, replication_factor=replication_factor,
                                   assignments=(), configs=()),),
        timeout=datetime.timedelta(seconds=timeout_s),
        validate_only=False,
    )
    try:
        with WireClient("127.0.0.1", port, timeout=timeout_s + 5) as client:
            response = client.request(request)
    except OSError:
        return False
    return response.topics[0].error_code == 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--election-ms", type=int, default=1000)
    parser.add_argument("--fetch-ms", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=0, help="first create a topic of this many partitions (RF 3)")
    args = parser.parse_args()
    settings = {
        "controller.quorum.election.timeout.ms": str(args.election_ms),
        "controller.quorum.fetch.timeout.ms": str(args.fetch_ms),
        "broker.heartbeat.interval.ms": "500",
        "broker.session.timeout.ms": "9000",
    }
    with tempfile.TemporaryDirectory() as tmp:
        specs = local_cluster.plan(tmp, 3, 3, overrides=settings)
        local_cluster.format_nodes(specs, meta_properties.random_uuid())
        processes = {s.node_id: local_cluster.start_node(s) for s in specs}
        by_id = {s.node_id: s for s in specs}
        times = []
        try:
            wait_until(lambda: all("unfenced" in s.log_file.read_text() for s in specs), "unfenced brokers")
            wait_until(lambda: local_cluster.brokers_listed(specs), "every broker listing all brokers")
            if args.partitions:
                start = time.monotonic()
                if not create_topic(specs[0].client_port, "scale", args.partitions, 3, timeout_s=300):
                    raise SystemExit(f"CreateTopics of {args.partitions} partitions failed")
                print(f"created {args.partitions} partitions (RF 3) in {time.monotonic() - start:.1f} s", flush=True)
            for round_ in range(args.rounds):
                leader = wait_until(
                    lambda: next((s.node_id for s in specs if describe_quorum(s.controller_port)), None), "a leader"
                )
                survivor = next(s for s in specs if s.node_id != leader)
                assert create_topic(survivor.client_port, f"warm-{round_}")
                processes[leader].send_signal(signal.SIGKILL)
                processes[leader].wait()
                start = time.monotonic()
                deadline = start + 60
                while not create_topic(survivor.client_port, f"after-{round_}"):
                    if time.monotonic() > deadline:
                        for s in specs:
                            print(f"== node {s.node_id}", "\n".join(s.log_file.read_text().splitlines()[-25:]))
                        raise SystemExit("no CreateTopics success within 60 s")
                    time.sleep(0.02)
                elapsed = time.monotonic() - start
                times.append(elapsed)
                print(f"round {round_ + 1}: killed node {leader}, CreateTopics ok after {elapsed * 1000:.0f} ms", flush=True)
                before = by_id[leader].log_file.read_text().count("unfenced")
                processes[leader] = local_cluster.start_node(by_id[leader])
                wait_until(lambda: by_id[leader].log_file.read_text().count("unfenced") > before, "rejoin")
        finally:
            for p in processes.values():
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in processes.values():
                p.wait()
    print(
        f"controller failover (kill -9 -> next CreateTopics), election timeout {args.election_ms} ms, "
        f"fetch timeout {args.fetch_ms} ms, {args.partitions} extra partitions: median {statistics.median(times) * 1000:.0f} ms, "
        f"min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f} over {len(times)} rounds"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Replication benchmark: acks=all on three kref processes against kref's own single broker, one run.

What it measures (issue 10's "Measured"; figures are printed, nothing is asserted):

- throughput: `--messages` records of `--value-bytes` through one
  confluent-kafka producer (linger.ms=5, no compression) to a one-partition
  topic, until the last delivery report: the single broker `kref broker`
  with acks=1 and replication factor 1, then `kref cluster`'s three combined
  nodes with acks=all and replication factor 3 (min.insync.replicas=2);
  the ratio cluster/single (anchor: Kafka kept 0.51x with acks=all);
- latency at a moderate rate: `--rate` records per second for `--seconds`
  (linger.ms=0), the time from produce() to the delivery report, p50/p99 in
  ms, for both setups (anchor: p99 5 ms at much higher rates on real
  hardware);
- the same with acks=1 on the RF=3 partition (followers replicate
  asynchronously; anchor: Kafka kept 0.96x), to separate the cost of
  waiting for followers from the cost of three processes;
- follower catch-up: a follower of the RF=3 partition is killed (-9), the
  leader takes `--catchup-mb` MB with acks=1, the follower restarts; from
  the moment its log starts to grow until it holds as many bytes as the
  leader's: MB/s, against raw reads of the same bytes on the same machine
  (the leader's segment files read from the page cache, and a consumer
  fetching them from the leader).

All processes share this machine (2 cores here), so ratios, not absolute
numbers, are the result. Every phase has a deadline.

    .venv/bin/python bench/cluster.py [--messages 20000] [--rate 300] [--catchup-mb 20]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.broker import start_kref  # noqa: E402
from kref.controller import local_cluster, meta_properties  # noqa: E402

PHASE_DEADLINE_S = 120
CLUSTER_SETTINGS = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "broker.heartbeat.interval.ms": "300",
    "broker.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "5000",
    "replica.fetch.wait.max.ms": "500",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "1",
}


@contextlib.contextmanager
def start_cluster(base: Path):
    specs = local_cluster.plan(base, 3, 3, overrides=CLUSTER_SETTINGS)
    local_cluster.format_nodes(specs, meta_properties.random_uuid())
    processes = {s.node_id: local_cluster.start_node(s) for s in specs}

    def restart(node_id):
        processes[node_id] = local_cluster.start_node(next(s for s in specs if s.node_id == node_id))

    try:
        deadline = time.monotonic() + 60
        while not all("unfenced" in s.log_file.read_text(errors="replace") for s in specs):
            if time.monotonic() > deadline:
                raise RuntimeError("the three brokers did not register within 60 s")
            time.sleep(0.2)
        yield specs, processes, restart
    finally:
        for p in processes.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in processes.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def create_topic(bootstrap: str, name: str, rf: int) -> dict:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, rf)])[name].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=5).topics.get(name)
        if md is not None and md.error is None and 0 in md.partitions and md.partitions[0].leader >= 0:
            p = md.partitions[0]
            return {"leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isrs)}
        time.sleep(0.1)
    raise RuntimeError(f"topic {name} has no leader after 30 s")


def throughput(bootstrap: str, topic: str, acks: str, messages: int, value: bytes) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                         "enable.idempotence": acks == "all", "queue.buffering.max.messages": 200000})
    done = [0]

    def on_delivery(err, _msg):
        if err is None:
            done[0] += 1

    start = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(PHASE_DEADLINE_S)
    elapsed = time.perf_counter() - start
    if done[0] < messages:
        print(f"  ({messages - done[0]} of {messages} not acknowledged)")
    return done[0] / elapsed


def latency(bootstrap: str, topic: str, acks: str, rate: float, seconds: float, value: bytes) -> tuple[float, float, int]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0,
                         "enable.idempotence": acks == "all"})
    samples: list[float] = []

    def callback(sent):
        def on_delivery(err, _msg):
            if err is None:
                samples.append((time.perf_counter() - sent) * 1000)
        return on_delivery

    for _ in range(50):  # warm the connections
        producer.produce(topic, value)
    producer.flush(30)
    interval, next_at, end = 1.0 / rate, time.perf_counter(), time.perf_counter() + seconds
    while time.perf_counter() < end:
        producer.produce(topic, value, on_delivery=callback(time.perf_counter()))
        producer.poll(0)
        next_at += interval
        while (delay := next_at - time.perf_counter()) > 0:
            producer.poll(min(delay, 0.001))
    producer.flush(30)
    samples.sort()
    if not samples:
        return float("nan"), float("nan"), 0
    return samples[len(samples) // 2], samples[min(len(samples) - 1, int(len(samples) * 0.99))], len(samples)


def log_bytes(data_dir: Path, topic: str) -> int:
    return sum(f.stat().st_size for f in (data_dir / f"{topic}-0").glob("*.log")) if (data_dir / f"{topic}-0").exists() else 0


def catch_up(specs, processes, restart, bootstrap: str, topic: str, megabytes: int, value: bytes) -> dict:
    placement = create_topic(bootstrap, topic, 3)
    by_id = {s.node_id: s for s in specs}
    leader = placement["leader"]
    follower = next(n for n in placement["replicas"] if n != leader)
    processes[follower].send_signal(signal.SIGKILL)
    processes[follower].wait(10)
    before = log_bytes(by_id[follower].data_dir, topic)
    messages = megabytes * 1024 * 1024 // len(value)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
                         "queue.buffering.max.messages": 200000})
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(PHASE_DEADLINE_S)
    target = log_bytes(by_id[leader].data_dir, topic)
    restart(follower)
    started = grown = None
    deadline = time.monotonic() + PHASE_DEADLINE_S
    restarted_at = time.perf_counter()
    while time.monotonic() < deadline:
        size = log_bytes(by_id[follower].data_dir, topic)
        now = time.perf_counter()
        if grown is None and size > before:
            grown = now
        if size >= target:
            started = grown or now
            break
        time.sleep(0.01)
    result = {"bytes": target - before, "leader": leader, "follower": follower}
    if started is None:
        result["catchup_mb_s"] = None
        result["reached"] = log_bytes(by_id[follower].data_dir, topic)
    else:
        result["catchup_mb_s"] = (target - before) / 1e6 / max(1e-6, time.perf_counter() - started)
        result["restart_to_caught_up_s"] = time.perf_counter() - restarted_at
    # Raw reads of the same bytes: the leader's segment files (page cache), and a consumer.
    files = list((by_id[leader].data_dir / f"{topic}-0").glob("*.log"))
    t = time.perf_counter()
    total = 0
    for f in files:
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 20):
                total += len(chunk)
    result["file_read_mb_s"] = total / 1e6 / (time.perf_counter() - t)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-read", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got, t, end = 0, time.perf_counter(), time.monotonic() + PHASE_DEADLINE_S
    while got < messages and time.monotonic() < end:
        batch = consumer.consume(10000, 1.0)
        got += sum(1 for m in batch if m.error() is None)
    elapsed = time.perf_counter() - t
    consumer.close()
    result["consumer_read_mb_s"] = got * len(value) / 1e6 / elapsed
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--value-bytes", type=int, default=512)
    parser.add_argument("--rate", type=float, default=300.0, help="records/s for the latency phase")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of the latency phase")
    parser.add_argument("--catchup-mb", type=int, default=20)
    parser.add_argument("--cluster-override", action="append", default=[], metavar="KEY=VALUE",
                        help="a property for every cluster node (repeatable), e.g. replica.fetch.wait.max.ms=50")
    args = parser.parse_args()
    for item in args.cluster_override:
        key, _, val = item.partition("=")
        CLUSTER_SETTINGS[key.strip()] = val
    print(f"cluster settings: {CLUSTER_SETTINGS}")
    value = b"x" * args.value_bytes
    replicating = (Path(__file__).resolve().parents[1] / "kref/broker/replica_fetcher.py").exists()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (other work on the machine skews every figure)")
    print(f"bench/cluster.py: {args.messages} x {args.value_bytes} B; latency at {args.rate:g}/s for {args.seconds:g}s;"
          f" followers replicate: {'yes' if replicating else 'NO (no replica fetcher: acks=all is the leader alone)'}")

    with start_kref() as single:
        create_topic(single, "bench", 1)
        single_tput = throughput(single, "bench", "1", args.messages, value)
        create_topic(single, "bench-lat", 1)
        single_lat = latency(single, "bench-lat", "1", args.rate, args.seconds, value)
    print(f"single broker, acks=1, RF=1: {single_tput:,.0f} msg/s ({single_tput * len(value) / 1e6:.1f} MB/s); "
          f"p50 {single_lat[0]:.2f} ms, p99 {single_lat[1]:.2f} ms ({single_lat[2]} samples)")

    base = Path(tempfile.mkdtemp(prefix="kref-bench-cluster-"))
    try:
        with start_cluster(base) as (specs, processes, restart):
            bootstrap = local_cluster.bootstrap_servers(specs)
            placement = create_topic(bootstrap, "bench", 3)
            cluster_tput = throughput(bootstrap, "bench", "all", args.messages, value)
            create_topic(bootstrap, "bench-lat", 3)
            cluster_lat = latency(bootstrap, "bench-lat", "all", args.rate, args.seconds, value)
            print(f"3 nodes, acks=all, RF=3 (placement {placement}): {cluster_tput:,.0f} msg/s "
                  f"({cluster_tput * len(value) / 1e6:.1f} MB/s); p50 {cluster_lat[0]:.2f} ms, p99 {cluster_lat[1]:.2f} ms "
                  f"({cluster_lat[2]} samples)")
            print(f"ratio acks=all RF=3 / single acks=1: throughput {cluster_tput / single_tput:.2f}x; "
                  f"p50 {cluster_lat[0] / single_lat[0]:.2f}x, p99 {cluster_lat[1] / single_lat[1]:.2f}x")
            # The same RF=3 partition with acks=1 (replication asynchronous): what the
            # cluster costs without waiting for followers (Kreps' 0.96x row).
            create_topic(bootstrap, "bench-async", 3)
            async_tput = throughput(bootstrap, "bench-async", "1", args.messages, value)
            create_topic(bootstrap, "bench-async-lat", 3)
            async_lat = latency(bootstrap, "bench-async-lat", "1", args.rate, args.seconds, value)
            print(f"3 nodes, acks=1, RF=3: {async_tput:,.0f} msg/s ({async_tput / single_tput:.2f}x single); "
                  f"p50 {async_lat[0]:.2f} ms, p99 {async_lat[1]:.2f} ms")
            c = catch_up(specs, processes, restart, bootstrap, "catchup", args.catchup_mb, value)
            if c["catchup_mb_s"] is None:
                print(f"follower catch-up: node {c['follower']} did not catch up with node {c['leader']} within "
                      f"{PHASE_DEADLINE_S}s ({c['reached']:,} of {c['bytes']:,} bytes)")
            else:
                print(f"follower catch-up: {c['bytes'] / 1e6:.1f} MB at {c['catchup_mb_s']:.1f} MB/s "
                      f"(restart to caught up {c['restart_to_caught_up_s']:.1f}s)")
            print(f"raw read of the same bytes: segment files {c['file_read_mb_s']:.0f} MB/s, consumer from the leader "
                  f"{c['consumer_read_mb_s']:.1f} MB/s; catch-up / consumer read "
                  f"{(c['catchup_mb_s'] or 0) / c['consumer_read_mb_s']:.2f}x")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

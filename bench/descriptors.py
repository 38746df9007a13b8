"""Descriptors of a broker with many partitions.

Starts a real `kref broker` under a descriptor limit (--nofile, default the
common 1024), creates --partitions partitions (default 10,000, in topics of
--per-topic), writes one record to every partition with confluent-kafka,
reads them back, and prints the broker's open descriptors from
/proc/<pid>/fd, by kind, before and after. The peer figure is what one
descriptor per file would cost (three per segment: .log, .index,
.timeindex), which is how kref held its segments before.

Bounded: one broker, --partitions partitions, one record each; the data
dir is removed at the end and the broker is stopped (by pid).
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descriptors(pid: int) -> collections.Counter:
    kinds: collections.Counter = collections.Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            kinds["socket"] += 1
        else:
            kinds[os.path.splitext(target)[1] or "other"] += 1
    return kinds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--per-topic", type=int, default=500)
    ap.add_argument("--nofile", type=int, default=1024, help="the broker's RLIMIT_NOFILE soft limit")
    args = ap.parse_args()

    data = tempfile.mkdtemp(prefix="kref-fd-bench-")
    port = free_port()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, hard))

    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [
        sys.executable, "-m", "kref.cli", "broker",
        "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
        "--override", f"log.dirs={data}/logs",
        "--override", "offsets.topic.num.partitions=1",
        "--override", "group.initial.rebalance.delay.ms=0",
    ]
    log_path = os.path.join(data, "broker.log")
    with open(log_path, "wb") as out:
        broker = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=limit, env=env)
    bootstrap = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or broker.poll() is not None:
                    raise SystemExit("broker did not start:\n" + open(log_path).read()[-2000:])
                time.sleep(0.2)
        before = descriptors(broker.pid)

        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = []
        remaining = args.partitions
        t0 = time.monotonic()
        while remaining > 0:
            n = min(args.per_topic, remaining)
            topics.append((f"fd-bench-{len(topics)}", n))
            remaining -= n
        for name, n in topics:
            for f in admin.create_topics([NewTopic(name, n, 1)], request_timeout=300).values():
                f.result(timeout=300)
        created_s = time.monotonic() - t0

        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "queue.buffering.max.messages": 200000})
        for name, n in topics:
            for p in range(n):
                producer.produce(name, value=b"x", partition=p)
            producer.poll(0)
        left = producer.flush(300)
        if left:
            raise SystemExit(f"{left} record(s) not delivered")
        after_produce = descriptors(broker.pid)
        del producer

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fd-bench", "enable.auto.commit": False})
        name, n = topics[0]
        consumer.assign([TopicPartition(name, p, 0) for p in range(n)])
        got = 0
        deadline = time.monotonic() + 120
        while got < n and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and not msg.error():
                got += 1
        consumer.close()
        after_read = descriptors(broker.pid)

        def show(label: str, kinds: collections.Counter) -> None:
            detail = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
            print(f"{label:<28} {sum(kinds.values()):>6} descriptors ({detail})")

        print(f"partitions {args.partitions} in {len(topics)} topics, broker RLIMIT_NOFILE {args.nofile}, created in {created_s:.1f}s")
        show("broker started", before)
        show("after one record each", after_produce)
        show(f"after reading {got} of {n}", after_read)
        total = sum(after_produce.values())
        print(f"descriptors for {args.partitions} partitions: {total} "
              f"({total / args.partitions:.3f} per partition); "
              f"three per segment would be {3 * args.partitions + sum(before.values())} "
              f"(ratio {total / (3 * args.partitions + sum(before.values())):.3f})")
        broker.send_signal(signal.SIGTERM)
        broker.wait(120)
        print(f"broker exit status {broker.returncode}")
        return 0
    except BaseException:
        print("broker log tail:\n" + open(log_path, errors="replace").read()[-3000:], file=sys.stderr)
        raise
    finally:
        if broker.poll() is None:
            broker.kill()
            broker.wait()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

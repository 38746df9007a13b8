"""Latency smoke check: does a single broker stall a lone request?

Why: session 9 rewrote the connection's read/write path (kref/broker/
server.py) and saved much CPU per request, but it also brought 1-2 s
stalls that no test caught and the throughput figures hid (a rate stays
high when one request in a thousand waits a second). This check runs the
case that showed them, cheaply enough to run after every change: one
broker, confluent-kafka producing single records at a modest rate (--rate
100 requests/s, acks=1, linger.ms=0, one flush per record, 8 s), paced by
the clock so a stall is not hidden by the next request waiting for it.
A consumer tails the same topic meanwhile (a second connection with
long-polled fetches, so the broker is not only ever answering one lone
request; --no-consumer drops it).

Printed per broker: p50, p99 and max of the produce round trip, the number
of requests over 100 ms, the client's error callbacks (a disconnect shows
there: a broker that closes or corrupts a connection makes librdkafka
reconnect after a backoff, which looks like a stall) and kref's WARNING or
worse log lines. Tansu runs the same workload in the same run (--only kref
skips it) for a side-by-side figure. Stalls show even on a loaded machine,
as a max in the hundreds of milliseconds; but so does the load itself (a
run of other work holding both cores): --realtime runs kref's timed phase
(broker and client threads) at SCHED_FIFO priority (bench/cluster.py's
set_realtime; root or CAP_SYS_NICE), so that what is left is the broker's
own. --fail-max-ms makes the exit status say so.

    .venv/bin/python bench/latency_smoke.py [--rate 100] [--seconds 8] [--only kref] [--realtime] [--fail-max-ms 100]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker import create_topic, start_kref_process, start_tansu  # noqa: E402
from cluster import set_realtime  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

STALL_MS = 100.0
MAX_RATE = 2_000
MAX_SECONDS = 120


@dataclass
class Result:
    latencies_ms: list[float]
    client_errors: list[str]
    broker_warnings: list[str]
    consumed: int

    def line(self, name: str) -> str:
        lat = sorted(self.latencies_ms)
        q = statistics.quantiles(lat, n=100)
        over = sum(1 for x in lat if x > STALL_MS)
        return (f"{name:6} requests {len(lat):5}  p50 {q[49]:7.2f} ms  p99 {q[98]:7.2f} ms  max {lat[-1]:8.2f} ms  "
                f"over {STALL_MS:.0f} ms: {over:3}  client errors {len(self.client_errors)}  "
                f"broker warnings {len(self.broker_warnings)}  consumed {self.consumed}")


@contextlib.contextmanager
def start_kref_logged():
    """bench/broker.py's `kref broker` with its log kept: (bootstrap, log path, pid)."""
    log_dir = tempfile.mkdtemp(prefix="kref-smoke-")
    log_path = Path(log_dir) / "broker.log"
    try:
        with open(log_path, "w") as log_file, start_kref_process(log_file=log_file) as (bootstrap, proc):
            yield bootstrap, log_path, proc.pid
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)


def tail(bootstrap: str, topic: str, stop: threading.Event, counter: list[int], errors: list[str]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"smoke-{uuid.uuid4()}",
                         "enable.auto.commit": False, "error_cb": lambda e: errors.append(f"consumer: {e}")})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        while not stop.is_set():
            for msg in consumer.consume(1000, timeout=0.2):
                if msg.error() is None:
                    counter[0] += 1
    finally:
        consumer.close()


def run(bootstrap: str, rate: float, seconds: float, with_consumer: bool,
        realtime_pid: int | None = None) -> tuple[list[float], list[str], int]:
    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1,
                         "max.in.flight.requests.per.connection": 1,
                         "error_cb": lambda e: errors.append(f"producer: {e}")})
    value = os.urandom(100)
    for _ in range(50):  # connect, learn metadata, warm up outside the timing
        producer.produce(topic, value, partition=0)
        if producer.flush(10) != 0:
            raise RuntimeError("warm-up produce not acknowledged within 10 s")
    stop, counter = threading.Event(), [0]
    consumer = threading.Thread(target=tail, args=(bootstrap, topic, stop, counter, errors), daemon=True)
    if with_consumer:
        consumer.start()
        time.sleep(1.0)  # let it join and start long-polling
    latencies: list[float] = []
    n = int(rate * seconds)
    if realtime_pid is not None and not set_realtime([os.getpid(), realtime_pid], True):
        print("--realtime: not permitted here (needs CAP_SYS_NICE); measuring at normal priority")
        realtime_pid = None
    start = time.perf_counter()
    try:
        for k in range(n):
            # Paced by the clock: request k leaves at start + k/rate (or at
            # once when late), so a stall delays only itself in the figures.
            delay = start + k / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            t0 = time.perf_counter()
            producer.produce(topic, value, partition=0)
            if producer.flush(10) != 0:
                raise RuntimeError(f"request {k} not acknowledged within 10 s")
            latencies.append((time.perf_counter() - t0) * 1000)
    finally:
        if realtime_pid is not None:
            set_realtime([os.getpid(), realtime_pid], False)
        stop.set()
        if with_consumer:
            consumer.join(10)
    return latencies, errors, counter[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0, help="requests per second (1-2000)")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of the timed run (1-120)")
    parser.add_argument("--only", choices=["kref", "tansu"], default=None)
    parser.add_argument("--no-consumer", action="store_true", help="no tailing consumer on a second connection")
    parser.add_argument("--realtime", action="store_true",
                        help="kref's timed phase at SCHED_FIFO priority (broker and client), so load does not stall it")
    parser.add_argument("--fail-max-ms", type=float, default=None,
                        help="exit 1 when kref's max latency is above this (or any client error / broker warning)")
    args = parser.parse_args()
    if not 1 <= args.rate <= MAX_RATE or not 1 <= args.seconds <= MAX_SECONDS:
        parser.error(f"--rate must be within 1..{MAX_RATE} and --seconds within 1..{MAX_SECONDS}")
    if args.rate * args.seconds < 100:
        parser.error("fewer than 100 requests: rate x seconds must be at least 100")

    results: dict[str, Result] = {}
    load0 = os.getloadavg()[0]
    if args.only in (None, "kref"):
        with start_kref_logged() as (bootstrap, log_path, pid):
            lat, errors, consumed = run(bootstrap, args.rate, args.seconds, not args.no_consumer,
                                        pid if args.realtime else None)
            warnings = [line.rstrip() for line in open(log_path)
                        if " WARNING " in line or " ERROR " in line or "Traceback" in line]
        results["kref"] = Result(lat, errors, warnings, consumed)
    if args.only in (None, "tansu"):
        with start_tansu() as bootstrap:
            lat, errors, consumed = run(bootstrap, args.rate, args.seconds, not args.no_consumer)
        results["tansu"] = Result(lat, errors, [], consumed)
    load = max(load0, os.getloadavg()[0])
    print(f"latency smoke: {args.rate:.0f} req/s for {args.seconds:.0f} s, acks=1, 100-byte values, "
          f"{'no consumer' if args.no_consumer else 'a consumer tailing'}"
          f"{'; kref at real-time priority' if args.realtime else ''}; load {load:.1f}")
    for name, result in results.items():
        print(result.line(name))
        for line in (result.client_errors + result.broker_warnings)[:5]:
            print(f"    {line}")
    if "kref" in results and "tansu" in results:
        k, t = sorted(results["kref"].latencies_ms), sorted(results["tansu"].latencies_ms)
        qk, qt = statistics.quantiles(k, n=100), statistics.quantiles(t, n=100)
        print(f"Tansu/kref (> 1: kref faster): p50 {qt[49] / qk[49]:.2f}  p99 {qt[98] / qk[98]:.2f}  "
              f"max {t[-1] / k[-1]:.2f}")
    if args.fail_max_ms is not None and "kref" in results:
        r = results["kref"]
        if max(r.latencies_ms) > args.fail_max_ms or r.client_errors or r.broker_warnings:
            print(f"FAIL: kref's max {max(r.latencies_ms):.1f} ms (limit {args.fail_max_ms:.0f}), "
                  f"{len(r.client_errors)} client errors, {len(r.broker_warnings)} broker warnings")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

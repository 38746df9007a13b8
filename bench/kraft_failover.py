"""Controller failover, and a 3-node cluster at scale (issue 9's measured items).

Runs `kref cluster`'s layout (3 combined nodes) as real processes and waits
until the three brokers are unfenced. Then:

1. With --partitions N: CreateTopics of one topic of N partitions,
   replication factor 3, sent to a broker (forwarded to the controller).
   Prints the time until the CreateTopics answer, and until every broker has
   created its N logs (partition directories on disk; each broker applies the
   delta in bounded slices, kref/broker/replica_manager.py) and every
   partition has a leader in a Metadata answer.
2. Metadata for every topic (all N partitions), --metadata-requests times
   against one broker: wall time per request, the answering process's CPU per
   request, and the response size.
3. Per round: kill -9 the active controller (found with DescribeQuorum) and
   time, from the kill, (a) the next successful CreateTopics (replication
   factor 1, sent to a surviving broker) and (b) the next acknowledged
   acks=all produce (confluent-kafka) to a partition the killed node led,
   both measured at once from two threads; restart the killed node and wait
   until it is back before the next round.

Every wait is bounded; Ctrl-C (SIGINT) stops the run and every node cleanly.
CPU seconds (from /proc/PID/stat) and the load average are printed with each
phase: wall-clock figures on a shared 2-core box are noise otherwise.

    .venv/bin/python bench/kraft_failover.py [--rounds 5] [--election-ms 1000] [--fetch-ms 2000]
        [--partitions 10000] [--metadata-requests 5]

Issue 9's scale figures in one bounded command (a fresh cluster per size, in
turn; --budget-s bounds the whole run, each size gets an equal share of what
is left; a size that runs out of time says so and the next one starts):

    .venv/bin/python bench/kraft_failover.py --sizes 1000,3000,10000 --rounds 2 --idle-s 30 --budget-s 3600

The summary at the end repeats every figure with the load average at the
moment it was taken.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kref.node import local_cluster  # noqa: E402
from kref.storage import meta_properties  # noqa: E402
from kref.protocol.client import WireClient  # noqa: E402
from kref.protocol.codec import request_class  # noqa: E402
from kref.node.cluster_waits import describe_quorum, stop_processes  # noqa: E402

TOPIC = "scale"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def load() -> str:
    return "load %.1f/%.1f/%.1f" % os.getloadavg()


# The monotonic time by which the current cluster's run must end (--budget-s).
DEADLINE = [float("inf")]
# Every figure printed, with the cluster size it belongs to (repeated at the end).
SUMMARY: list[str] = []
SIZE = [0]


class OutOfTime(Exception):
    """A wait did not end in time: this size's run stops here."""


def remaining_s(timeout_s: float) -> float:
    return max(0.0, min(timeout_s, DEADLINE[0] - time.monotonic()))


def figure(text: str) -> None:
    print(text, flush=True)
    SUMMARY.append(f"[{SIZE[0]} partitions] {text}")


def wait_until(predicate, what: str, timeout_s: float, poll_s: float = 0.2):
    timeout_s = remaining_s(timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    raise OutOfTime(f"timed out after {timeout_s:.0f} s waiting for {what}; {load()}")


def create_topic(port: int, name: str, partitions: int = 1, replication_factor: int = 1, timeout_s: float = 5,
                 why: list | None = None) -> bool:
    cls = request_class(19, 7)
    m = sys.modules[cls.__module__]
    request = cls(
        topics=(m.CreatableTopic(name=name, num_partitions=partitions, replication_factor=replication_factor,
                                   assignments=(), configs=()),),
        timeout=datetime.timedelta(seconds=timeout_s),
        validate_only=False,
    )
    try:
        with WireClient("127.0.0.1", port, timeout=timeout_s + 5) as client:
            response = client.request(request)
    except OSError as exc:
        if why is not None:
            why.append(repr(exc))
        return False
    if why is not None:
        why.append((response.topics[0].error_code, response.topics[0].error_message))
    return response.topics[0].error_code == 0


def metadata(port: int, topics: list[str] | None, timeout_s: float = 30):
    """A Metadata v12 answer (topics None = every topic), or None."""
    cls = request_class(3, 12)
    m = sys.modules[cls.__module__]
    wanted = None if topics is None else tuple(m.MetadataRequestTopic(name=t, topic_id=None) for t in topics)
    request = cls(topics=wanted, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    try:
        with WireClient("127.0.0.1", port, timeout=timeout_s) as client:
            return client.request(request)
    except OSError:
        return None


def leaders(port: int, topic: str) -> dict[int, int] | None:
    """partition -> leader of `topic` as `port`'s broker answers (None: not all led or unknown)."""
    response = metadata(port, [topic])
    if response is None or not response.topics or response.topics[0].error_code != 0:
        return None
    out = {p.partition_index: p.leader_id for p in response.topics[0].partitions if p.error_code == 0}
    return out if out and all(leader >= 0 for leader in out.values()) else None


LOOP_LINE = re.compile(r"loop steps in [0-9.]+ s: (\d+), longest ([0-9.]+) ms \((.*); CPU ([0-9.]+) ms\); "
                       r">50 ms: (\d+), "
                       r">100 ms: (\d+), >500 ms: (\d+), >1000 ms: (\d+)")


def log_offsets(specs) -> dict[int, int]:
    return {s.node_id: s.log_file.stat().st_size if s.log_file.exists() else 0 for s in specs}


def loop_steps(specs, since: dict[int, int]) -> str:
    """The nodes' KREF_LOOP_STEPS reports since `since` (log offsets): the longest event-loop step per node,
    its task, and how many steps ran over 100 / 500 / 1000 ms."""
    out = []
    for s in specs:
        with open(s.log_file, "rb") as f:
            f.seek(since.get(s.node_id, 0))
            text = f.read().decode(errors="replace")
        longest, task, cpu, over = 0.0, "", 0.0, [0, 0, 0]
        for m in LOOP_LINE.finditer(text):
            if float(m.group(2)) > longest:
                longest, task, cpu = float(m.group(2)), m.group(3), float(m.group(4))
            for i in range(3):
                over[i] += int(m.group(6 + i))
        out.append(f"node {s.node_id} longest {longest:.0f} ms ({task.rsplit('.', 1)[-1]}, CPU {cpu:.0f} ms), "
                   f">100/500/1000 ms: {over[0]}/{over[1]}/{over[2]}")
    return "; ".join(out)


def quorum_epoch(specs) -> int:
    """The highest leader epoch any node's DescribeQuorum reports (-1: none answers)."""
    epochs = [p.leader_epoch for p in (describe_quorum(s.controller_port) for s in specs) if p is not None]
    return max(epochs, default=-1)


def idle_phase(specs, processes, idle_s: float) -> None:
    """A quiet cluster holding the partitions: does the quorum stay put (no election), what does idling cost?"""
    since = log_offsets(specs)
    cpu0 = {s.node_id: cpu_s(processes[s.node_id].pid) for s in specs}
    epoch0 = quorum_epoch(specs)
    time.sleep(remaining_s(idle_s))
    epoch1 = quorum_epoch(specs)
    cpu = {s.node_id: round((cpu_s(processes[s.node_id].pid) - cpu0[s.node_id]) / idle_s, 2) for s in specs}
    figure(f"idle {idle_s:.0f} s: quorum epoch {epoch0} -> {epoch1} ({'stable' if epoch0 == epoch1 else 'RE-ELECTED'}); "
           f"CPU s per s per node {cpu}; loop steps: {loop_steps(specs, since)}; {load()}")


def logs_created(spec, prefix: str) -> int:
    """Partition directories of the bench's topics (`prefix`, `prefix`000, ...) on a broker."""
    plain = re.compile(re.escape(prefix) + r"\d*-\d+")
    try:
        return sum(1 for e in os.scandir(spec.data_dir) if plain.fullmatch(e.name) and e.is_dir())
    except OSError:
        return 0


def all_leaders(port: int, topics: list[str]) -> dict[tuple[str, int], int] | None:
    out = {}
    for topic in topics:
        led = leaders(port, topic)
        if led is None:
            return None
        out.update({(topic, p): leader for p, leader in led.items()})
    return out


def produce_acks_all(bootstrap: str, topic: str, partition: int, timeout_s: float) -> bool:
    from confluent_kafka import Producer

    delivered: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": int(timeout_s * 1000),
                         "enable.idempotence": False, "linger.ms": 0})
    producer.produce(topic, b"after-failover", partition=partition, on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(timeout_s + 5)
    return bool(delivered) and delivered[0] is None


def topic_names(topics: int) -> list[str]:
    return [TOPIC] if topics <= 1 else [f"{TOPIC}{i:03d}" for i in range(topics)]


def scale_phase(specs, processes, partitions: int, timeout_s: float, topics: int = 1) -> None:
    cpu0 = {s.node_id: cpu_s(processes[s.node_id].pid) for s in specs}
    since = log_offsets(specs)
    epoch0 = quorum_epoch(specs)
    names = topic_names(topics)
    each = partitions // len(names)
    print(f"creating {partitions} partitions (RF 3) as {len(names)} topic(s) of {each}, one CreateTopics each in "
          f"turn; quorum epoch {epoch0}; {load()}", flush=True)
    start = time.monotonic()
    for name in names:
        why: list = []
        if not create_topic(specs[0].client_port, name, each, 3, timeout_s=min(timeout_s, 300), why=why):
            # The broker forwards with a bounded wait (15 s): a big topic may be
            # committed after the answer gave up. TOPIC_ALREADY_EXISTS (36) says it was.
            print(f"  CreateTopics {name} answered {why[-1]} after {time.monotonic() - start:.1f} s; asking again",
                  flush=True)
            if not wait_until(lambda: create_topic(specs[0].client_port, name, each, 3, 60, why) or why[-1][0] == 36,
                              "the topic", timeout_s, poll_s=2):
                raise OutOfTime(f"CreateTopics of {each} partitions failed: {why}")
    answered = time.monotonic() - start
    figure(f"CreateTopics ({len(names)} x {each} partitions, RF 3) answered after {answered:.1f} s; "
           f"quorum epoch {epoch0} -> {quorum_epoch(specs)}; {load()}")
    last = [-1.0]
    partitions = each * len(names)

    def progress() -> bool:
        counts = [logs_created(s, TOPIC) for s in specs]
        if time.monotonic() - last[0] > 10:
            last[0] = time.monotonic()
            print(f"  logs created per node: {counts} ({time.monotonic() - start:.0f} s; quorum epoch "
                  f"{quorum_epoch(specs)}; {load()})", flush=True)
        return all(c >= partitions for c in counts)

    wait_until(progress, f"every broker creating its {partitions} logs", timeout_s, poll_s=0.5)
    created = time.monotonic() - start
    led = wait_until(lambda: all_leaders(specs[0].client_port, names), "every partition led", timeout_s)
    done = time.monotonic() - start
    cpu = {s.node_id: cpu_s(processes[s.node_id].pid) - cpu0[s.node_id] for s in specs}
    per_node = {n: sum(1 for leader in led.values() if leader == n) for n in sorted(cpu)}
    figure(
        f"created {partitions} partitions (RF 3): answered {answered:.1f} s, every broker's logs {created:.1f} s, "
        f"every partition led {done:.1f} s; leaders per node {per_node}; CPU s per node "
        f"{ {n: round(c, 1) for n, c in cpu.items()} } ({sum(cpu.values()) / (3 * partitions) * 1000:.2f} ms CPU "
        f"per partition replica); quorum epoch {epoch0} -> {quorum_epoch(specs)}; {load()}"
    )
    figure(f"loop steps during creation: {loop_steps(specs, since)}")


def metadata_phase(specs, processes, requests: int) -> None:
    spec = specs[1]
    pid = processes[spec.node_id].pid
    times, cpus, sizes = [], [], []
    for _ in range(requests):
        c0, t0 = cpu_s(pid), time.monotonic()
        response = metadata(spec.client_port, None, timeout_s=60)
        times.append(time.monotonic() - t0)
        cpus.append(cpu_s(pid) - c0)
        if response is None:
            raise OutOfTime("Metadata for every topic failed")
        sizes.append(sum(len(t.partitions) for t in response.topics))
    figure(
        f"Metadata (v12, every topic: {max(sizes)} partitions) from node {spec.node_id}: wall median "
        f"{statistics.median(times) * 1000:.0f} ms (min {min(times) * 1000:.0f}, first {times[0] * 1000:.0f}); "
        f"broker CPU per request median {statistics.median(cpus) * 1000:.0f} ms (clock tick "
        f"{1000 // CLOCK_TICKS} ms) over {requests} requests; {load()}"
    )


def failover_round(round_, specs, processes, by_id, partitions: int, timeout_s: float,
                   topic: str = TOPIC, heal: bool = True) -> tuple[float, float | None]:
    epoch0 = quorum_epoch(specs)
    leader = wait_until(
        lambda: next((s.node_id for s in specs if describe_quorum(s.controller_port)), None), "a leader", timeout_s
    )
    survivor = next(s for s in specs if s.node_id != leader)
    bootstrap = ",".join(f"127.0.0.1:{s.client_port}" for s in specs if s.node_id != leader)
    # A node just restarted may still be catching up: the warm-up may need a retry.
    warm: list = []
    wait_until(lambda: create_topic(survivor.client_port, f"warm-{round_}", why=warm) or warm[-1][0] == 36,
               "a warm-up CreateTopics", timeout_s, 1)
    victim_partition = None
    if partitions:
        led = leaders(survivor.client_port, topic) or {}
        victim_partition = next((p for p, n in sorted(led.items()) if n == leader), None)
        if victim_partition is not None and not produce_acks_all(bootstrap, topic, victim_partition, 30):
            raise OutOfTime(f"produce before the kill failed (partition {victim_partition})")
    results: dict[str, float] = {}
    timeout_s = remaining_s(timeout_s)

    def timed_create() -> None:
        deadline = start + timeout_s
        while not create_topic(survivor.client_port, f"after-{round_}"):
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        results["create"] = time.monotonic() - start

    def timed_produce() -> None:
        deadline = start + timeout_s
        while time.monotonic() < deadline:
            if produce_acks_all(bootstrap, topic, victim_partition, max(1.0, deadline - time.monotonic())):
                results["produce"] = time.monotonic() - start
                return

    processes[leader].send_signal(signal.SIGKILL)
    processes[leader].wait()
    start = time.monotonic()
    threads = [threading.Thread(target=timed_create, daemon=True)]
    if victim_partition is not None:
        threads.append(threading.Thread(target=timed_produce, daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s + 10)
    if "create" not in results:
        for s in specs:
            print(f"== node {s.node_id}", "\n".join(s.log_file.read_text().splitlines()[-25:]))
        raise OutOfTime(f"no CreateTopics success within {timeout_s:.0f} s")
    produce = results.get("produce")
    produced = (f", acks=all produce to partition {victim_partition} (led by it) ok after {produce * 1000:.0f} ms"
                if produce is not None else (", no acks=all produce within the bound" if victim_partition is not None else ""))
    figure(f"round {round_ + 1}: killed node {leader} (active controller), CreateTopics ok after "
           f"{results['create'] * 1000:.0f} ms{produced}; quorum epoch {epoch0} -> {quorum_epoch(specs)}; {load()}")
    before = by_id[leader].log_file.read_text().count("unfenced")
    restarted = time.monotonic()
    since = local_cluster.log_size(by_id[leader])
    processes[leader] = local_cluster.start_node(by_id[leader])
    local_cluster.wait_listening(by_id[leader], processes[leader], since)
    wait_until(lambda: by_id[leader].log_file.read_text().count("unfenced") > before, "rejoin", timeout_s, poll_s=0.5)
    figure(f"node {leader} restarted and unfenced after {time.monotonic() - restarted:.1f} s; {load()}")
    if partitions and heal:
        # The round is over only when the cluster is whole again: every partition
        # led and every isr full (session 10 found 8,653 of 10,000 partitions left
        # with the dead node as their whole isr after a second round).
        health: list = []

        def whole() -> bool:
            response = metadata(survivor.client_port, [topic])
            if response is None or not response.topics:
                return False
            ps = response.topics[0].partitions
            health[:] = [sum(p.leader_id < 0 for p in ps), sum(len(p.isr_nodes) < 3 for p in ps), len(ps)]
            return health[2] > 0 and health[0] == health[1] == 0

        try:
            wait_until(whole, "every partition led with a full isr", timeout_s, poll_s=1)
        except OutOfTime:
            raise OutOfTime(f"after round {round_ + 1}: {health[0]} of {health[2]} partitions without a leader, "
                            f"{health[1]} with an isr below 3") from None
        fenced_live = {s.node_id: s.log_file.read_text().count(f"broker {s.node_id}: fenced")
                       for s in specs if s.node_id != leader}
        figure(f"round {round_ + 1}: every partition led with a full isr {time.monotonic() - restarted:.1f} s after "
               f"the restart; fencings logged by live nodes so far {fenced_live}; {load()}")
    return results["create"], produce


def run_cluster(args, partitions: int) -> None:
    """One fresh 3-node cluster: create `partitions`, idle, Metadata, failover rounds."""
    SIZE[0] = partitions
    settings = {
        "controller.quorum.election.timeout.ms": str(args.election_ms),
        "controller.quorum.fetch.timeout.ms": str(args.fetch_ms),
        "broker.heartbeat.interval.ms": "500",
        "broker.session.timeout.ms": "9000",
    }
    creates, produces = [], []
    with tempfile.TemporaryDirectory() as tmp:
        specs = local_cluster.plan(tmp, 3, 3, overrides=settings)
        local_cluster.format_nodes(specs, meta_properties.random_uuid())
        processes = {s.node_id: local_cluster.start_node(s) for s in specs}
        by_id = {s.node_id: s for s in specs}
        try:
            for s in specs:  # its own "listening" lines (a fresh dir: its log starts at byte 0)
                local_cluster.wait_listening(s, processes[s.node_id], 0)
            wait_until(lambda: all("unfenced" in s.log_file.read_text() for s in specs), "unfenced brokers", 120)
            wait_until(lambda: local_cluster.brokers_listed(specs), "every broker listing all brokers", 120)
            if partitions:
                scale_phase(specs, processes, partitions, args.timeout_s, args.topics)
                if args.idle_s > 0:
                    idle_phase(specs, processes, args.idle_s)
                metadata_phase(specs, processes, args.metadata_requests)
            for round_ in range(args.rounds):
                create_s, produce_s = failover_round(
                    round_, specs, processes, by_id, partitions, args.timeout_s, topic_names(args.topics)[0],
                    heal=not args.kill_while_healing or round_ == args.rounds - 1)
                creates.append(create_s)
                if produce_s is not None:
                    produces.append(produce_s)
        except OutOfTime as exc:
            figure(f"NOT FINISHED: {exc}")
        except KeyboardInterrupt:
            print("interrupted: stopping the nodes", flush=True)
            raise
        finally:
            stop_processes(processes, grace_s=60)
    if creates:
        line = (f"controller failover (kill -9 -> next CreateTopics), election timeout {args.election_ms} ms, "
                f"fetch timeout {args.fetch_ms} ms, session timeout 9000 ms, {partitions} extra partitions: "
                f"median {statistics.median(creates) * 1000:.0f} ms, min {min(creates) * 1000:.0f}, "
                f"max {max(creates) * 1000:.0f} over {len(creates)} rounds")
        if produces:
            line += (f"; next acks=all produce to a partition the killed node led: median "
                     f"{statistics.median(produces) * 1000:.0f} ms, max {max(produces) * 1000:.0f}")
        figure(line)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kill-while-healing", action="store_true",
                        help="start the next round as soon as the restarted node is unfenced, while the leaders "
                             "are still adding it back to the isrs (the wait for a whole cluster comes only "
                             "after the last round)")
    parser.add_argument("--election-ms", type=int, default=1000)
    parser.add_argument("--fetch-ms", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=0, help="first create a topic of this many partitions (RF 3)")
    parser.add_argument("--sizes", default="", help="comma-separated partition counts, a fresh cluster each "
                        "(overrides --partitions)")
    parser.add_argument("--budget-s", type=float, default=3600, help="bound on the whole run")
    parser.add_argument("--metadata-requests", type=int, default=5)
    parser.add_argument("--topics", type=int, default=1,
                        help="spread --partitions over this many topics (one CreateTopics each, in turn)")
    parser.add_argument("--timeout-s", type=float, default=600, help="bound on each wait")
    parser.add_argument("--idle-s", type=float, default=60, help="with --partitions: a quiet spell after creation")
    parser.add_argument("--loop-steps-s", type=float, default=10,
                        help="nodes report their longest event-loop step this often (KREF_LOOP_STEPS; 0: off)")
    args = parser.parse_args()
    if args.loop_steps_s > 0:
        os.environ["KREF_LOOP_STEPS"] = str(args.loop_steps_s)
    sizes = [int(n) for n in args.sizes.split(",") if n] or [args.partitions]
    end = time.monotonic() + args.budget_s
    print(f"sizes {sizes}, budget {args.budget_s:.0f} s, election {args.election_ms} ms, "
          f"fetch {args.fetch_ms} ms; {load()}", flush=True)
    try:
        for i, partitions in enumerate(sizes):
            # An equal share of what is left for each size still to run.
            DEADLINE[0] = time.monotonic() + (end - time.monotonic()) / (len(sizes) - i)
            run_cluster(args, partitions)
    except KeyboardInterrupt:
        pass
    print("\nsummary:", flush=True)
    for line in SUMMARY:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the process tests of a kref cluster share: settings, bounded waits, a running cluster.

Theory of operation
-------------------
Every test that starts real `kref broker` processes needs the same few
things: short timeouts so that elections, fencing and isr changes happen in
seconds (FAST_CLUSTER_SETTINGS; a test adds or overrides keys with
`{**FAST_CLUSTER_SETTINGS, ...}`), a bounded poll (`wait_until`), a cluster
laid out as `kref cluster` lays it out and stopped by the pids it started
(`running_cluster`), and the quorum as DescribeQuorum shows it.

Waiting for a cluster to come up is the one wait that depends on how busy
the machine is: on a quiet box three nodes unfence in 2-4 s, on a 2-core box
at load 20+ start-up alone has taken 30 s. A fixed deadline either hides a
hang (too long) or fails on load (too short). `wait_unfenced` therefore
waits while the nodes make progress (another node unfenced, or a node's log
grew) and gives up after `stall_s` without progress or `cap_s` in all; on
failure it names each node that is missing, whether its process is still
alive, and the tail of its log, so a failure says what happened.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time

from kref.node import local_cluster
from kref.storage import meta_properties
from kref.protocol.client import WireClient
from kref.protocol.codec import request_class
from kref.protocol.errors import ErrorCode

# Election and quorum fetch timeouts of every cluster test (Kafka's defaults: 1 s and 2 s).
QUORUM_TIMEOUTS = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
}
# Brokers heartbeat often and are fenced after 3 s (Kafka: 2 s and 9 s).
FAST_CLUSTER_SETTINGS = {
    **QUORUM_TIMEOUTS,
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "3000",
}
WAIT_S = 30


class WaitTimeout(TimeoutError, AssertionError):
    """A bounded wait ran out: a test failure (AssertionError) that fault runs can also catch as TimeoutError."""


def wait_until(predicate, what: str, timeout: float = WAIT_S, interval: float = 0.1):
    """Poll `predicate` until it returns a true value (returned) or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what}")


def log_text(spec) -> str:
    try:
        return spec.log_file.read_text(errors="replace")
    except OSError:
        return ""


def _log_size(spec) -> int:
    try:
        return spec.log_file.stat().st_size
    except OSError:
        return 0


def wait_unfenced(specs, processes=None, *, stall_s: float = 45.0, cap_s: float = 180.0) -> None:
    """Wait until every broker node of `specs` has logged its own unfencing.

    Bounded by progress, not by a fixed time (see the module doc): fails after
    `stall_s` seconds in which no node unfenced and no log grew, or after
    `cap_s` in all. `processes` (node id -> Popen) lets the failure say which
    node died."""
    brokers = [s for s in specs if "broker" in s.roles]
    started = last_progress = time.monotonic()
    seen: tuple[int, int] = (-1, -1)
    while True:
        done = [s for s in brokers if "unfenced" in log_text(s)]
        if len(done) == len(brokers):
            return
        now = time.monotonic()
        progress = (len(done), sum(_log_size(s) for s in brokers))
        if progress[0] > seen[0] or progress[1] > seen[1]:
            seen = (max(seen[0], progress[0]), max(seen[1], progress[1]))
            last_progress = now
        if now - last_progress > stall_s or now - started > cap_s:
            break
        time.sleep(0.1)
    lines = [f"{len(done)} of {len(brokers)} brokers unfenced after {time.monotonic() - started:.0f}s "
             f"({'no progress for %gs' % stall_s if now - last_progress > stall_s else 'cap %gs' % cap_s})"]
    for s in brokers:
        if s in done:
            continue
        alive = ""
        if processes is not None and s.node_id in processes:
            rc = processes[s.node_id].poll()
            alive = " (process alive)" if rc is None else f" (process exited {rc})"
        tail = log_text(s).splitlines()[-12:]
        lines.append(f"node {s.node_id} not unfenced{alive}; last log lines:")
        lines.extend("    " + t for t in tail)
    raise WaitTimeout("\n".join(lines))


def wait_listed(specs, processes=None, timeout: float = 60.0) -> None:
    """Every broker unfenced (progress-bounded, as `wait_unfenced`), then every broker node answering
    Metadata with every broker of the layout (what a client sees; see local_cluster's doc)."""
    wait_unfenced(specs, processes)
    wait_until(lambda: local_cluster.brokers_listed(specs), "every broker listing every broker", timeout)


def describe_quorum(port: int):
    """DescribeQuorum's partition of __cluster_metadata-0 from the node at `port`, or None."""
    cls = request_class(55, 0)
    m = sys.modules[cls.__module__]
    request = cls(topics=(m.TopicData(topic_name="__cluster_metadata", partitions=(m.PartitionData(partition_index=0),)),))
    try:
        with WireClient("127.0.0.1", port, timeout=2) as client:
            response = client.request(request)
    except OSError:
        return None
    if response.error_code != ErrorCode.NONE:
        return None
    return response.topics[0].partitions[0]


def wait_for_leader(specs, *, exclude=(), above_epoch=-1, timeout: float = WAIT_S):
    """(node id, DescribeQuorum partition) of the first voter that reports a leader above `above_epoch`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for s in specs:
            if s.node_id in exclude:
                continue
            p = describe_quorum(s.controller_port)
            if p is not None and p.leader_epoch > above_epoch:
                return s.node_id, p
        time.sleep(0.1)
    raise AssertionError(f"no leader above epoch {above_epoch} within {timeout:g}s")


@contextlib.contextmanager
def running_cluster(tmp_path, controllers: int, brokers: int, overrides: dict[str, str]):
    """Formatted nodes started as real processes with a printed jitter seed;
    yields (specs, processes, start) and stops every process it started."""
    seed = int(os.environ.get("KREF_TEST_SEED", random.randrange(1 << 30)))
    print(f"seed={seed} (KREF_TEST_SEED; the election jitter of every node)")
    specs = local_cluster.plan(tmp_path, controllers=controllers, brokers=brokers, overrides=overrides)
    local_cluster.format_nodes(specs, meta_properties.random_uuid())
    processes = {}

    def start(spec):
        processes[spec.node_id] = local_cluster.start_node(
            spec, "--trace-file", str(spec.dir / "trace.ndjson"), env={"KREF_QUORUM_JITTER_SEED": str(seed)}
        )

    try:
        for s in specs:
            start(s)
        yield specs, processes, start
    finally:
        stop_processes(processes)


def stop_processes(processes) -> None:
    """SIGCONT (a test may have paused one) and SIGTERM to every process still running, then wait
    up to 20 s each (a graceful shutdown) and SIGKILL what is left; only these pids are signalled."""
    for p in processes.values():
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.send_signal(signal.SIGTERM)
    for p in processes.values():
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

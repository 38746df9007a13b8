"""Bounded waits on a running cluster of `kref broker` processes, and stopping them.

Theory of operation
-------------------
The process tests (tests/clusterkit.py re-exports all of this) and the
cluster benchmarks (bench/kraft_failover.py) watch the same real processes
the same way: poll a predicate until it holds or a deadline passes
(`wait_until`), read what a node logged (`log_text`), ask a voter for the
quorum (`describe_quorum`, `wait_for_leader`), and stop exactly the
processes they started (`stop_processes`). One copy here, on the Clock
port (SYSTEM_CLOCK by default; ManualClock runs a wait's whole course at
once in a unit test), instead of one per caller.

Waiting for a cluster to come up is the one wait that depends on how busy
the machine is: on a quiet box three nodes unfence in 2-4 s, on a 2-core box
at load 20+ start-up alone has taken 30 s. A fixed deadline either hides a
hang (too long) or fails on load (too short). `wait_unfenced` therefore
waits while the nodes make progress (another node unfenced, or a node's log
grew) and gives up after `stall_s` without progress or `cap_s` in all; on
failure it names each node that is missing, whether its process is still
alive, and the tail of its log, so a failure says what happened.

A wait that runs out raises `WaitTimeout`: an AssertionError for a test,
a TimeoutError for a fault run or a benchmark that reports it.
"""

from __future__ import annotations

import signal
import subprocess
import sys

from kref.node import local_cluster
from kref.ports.clock import SYSTEM_CLOCK
from kref.protocol.client import WireClient
from kref.protocol.codec import request_class
from kref.protocol.errors import ErrorCode

WAIT_S = 30
DESCRIBE_QUORUM = 55


class WaitTimeout(TimeoutError, AssertionError):
    """A bounded wait ran out: a test failure (AssertionError) that fault runs can also catch as TimeoutError."""


def wait_until(predicate, what: str, timeout: float = WAIT_S, interval: float = 0.1, *, clock=SYSTEM_CLOCK):
    """Poll `predicate` until it returns a true value (returned) or `timeout` seconds pass."""
    deadline_ms = clock.monotonic_ms() + int(timeout * 1000)
    while clock.monotonic_ms() < deadline_ms:
        value = predicate()
        if value:
            return value
        clock.sleep_ms(int(interval * 1000))
    raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what}")


def log_text(spec) -> str:
    """What node `spec` has logged so far ("" before its log file exists)."""
    try:
        return spec.log_file.read_text(errors="replace")
    except OSError:
        return ""


def _log_size(spec) -> int:
    try:
        return spec.log_file.stat().st_size
    except OSError:
        return 0


def wait_unfenced(specs, processes=None, *, stall_s: float = 45.0, cap_s: float = 180.0, clock=SYSTEM_CLOCK) -> None:
    """Wait until every broker node of `specs` has logged its own unfencing.

    Bounded by progress, not by a fixed time (see the module doc): fails after
    `stall_s` seconds in which no node unfenced and no log grew, or after
    `cap_s` in all. `processes` (node id -> Popen) lets the failure say which
    node died."""
    brokers = [s for s in specs if "broker" in s.roles]
    started = last_progress = clock.monotonic_ms() / 1000
    seen: tuple[int, int] = (-1, -1)
    while True:
        done = [s for s in brokers if "unfenced" in log_text(s)]
        if len(done) == len(brokers):
            return
        now = clock.monotonic_ms() / 1000
        progress = (len(done), sum(_log_size(s) for s in brokers))
        if progress[0] > seen[0] or progress[1] > seen[1]:
            seen = (max(seen[0], progress[0]), max(seen[1], progress[1]))
            last_progress = now
        if now - last_progress > stall_s or now - started > cap_s:
            break
        clock.sleep_ms(100)
    lines = [f"{len(done)} of {len(brokers)} brokers unfenced after {now - started:.0f}s "
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
    cls = request_class(DESCRIBE_QUORUM, 0)
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

    def leader():
        for s in specs:
            if s.node_id not in exclude:
                p = describe_quorum(s.controller_port)
                if p is not None and p.leader_epoch > above_epoch:
                    return s.node_id, p
        return None

    return wait_until(leader, f"a quorum leader above epoch {above_epoch}", timeout)


def stop_processes(processes, grace_s: float = 20.0) -> None:
    """SIGCONT (one may have been paused) and SIGTERM to every process still running, then wait
    up to `grace_s` each (a graceful shutdown) and SIGKILL what is left, saying so; only these
    pids are signalled."""
    for p in processes.values():
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.send_signal(signal.SIGTERM)
    for node_id, p in processes.items():
        try:
            p.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            print(f"node {node_id} did not stop within {grace_s:g} s of SIGTERM: killed", flush=True)
            p.kill()
            p.wait()

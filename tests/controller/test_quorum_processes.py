"""A KRaft quorum of three real `kref broker` processes (process.roles=controller).

Started as `kref cluster` lays them out (kref/node/local_cluster.py),
formatted with one cluster id, with short timeouts (election 300 ms, fetch
600 ms), each writing its quorum trace (spec/KRaft.tla's action names).
Over real sockets with Kafka's RPCs (Vote, BeginQuorumEpoch,
EndQuorumEpoch, Fetch of __cluster_metadata-0, DescribeQuorum via kio):

- a leader is elected and the voters replicate its LeaderChange record;
- kill -9 of the leader: a new leader in a higher epoch; the killed node
  restarts from its quorum-state and log and rejoins as a follower;
- SIGSTOP of the leader past the election timeout: the others elect a new
  leader; after SIGCONT the old leader never advances its high watermark
  in its old epoch (trace), learns the new epoch and follows;
- at the end every node's metadata log agrees on the committed prefix;
- KIP-996 pre-vote: a follower stopped (SIGSTOP) past its fetch and
  election timeouts, then resumed, does not depose the leader: it asks
  for pre-votes (refused: the others follow a live leader), never stands,
  and the epoch stays;
- each run's traces are then checked by TLC (tests/controller/trace_validation.py).

Every wait is bounded; the seed of the nodes' election jitter is printed
(KREF_TEST_SEED=N reruns with it; the victims are fixed: the first leader
is killed, the second stopped).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from kref.storage.metadata_log import MetadataLog
from kref.trace import read_ndjson_trace
from tests.clusterkit import QUORUM_TIMEOUTS, describe_quorum, running_cluster, wait_for_leader, wait_until
from tests.controller.trace_validation import check_cluster_traces

TIMEOUTS = QUORUM_TIMEOUTS


@pytest.fixture
def quorum(tmp_path):
    with running_cluster(tmp_path, 3, 0, TIMEOUTS) as running:
        yield running


def test_election_failover_and_zombie(quorum):
    specs, processes, start = quorum
    by_id = {s.node_id: s for s in specs}

    # 1. A leader, and every voter holding its LeaderChange record.
    leader, p = wait_for_leader(specs)
    wait_until(
        lambda: (q := describe_quorum(by_id[leader].controller_port)) is not None
        and all(v.log_end_offset >= q.high_watermark > 0 for v in q.current_voters),
        "the voters to replicate the LeaderChange record",
    )

    # 2. kill -9 of the leader: a new leader in a higher epoch.
    processes[leader].send_signal(signal.SIGKILL)
    processes[leader].wait(timeout=10)
    second, p2 = wait_for_leader(specs, exclude={leader}, above_epoch=p.leader_epoch)
    assert second != leader
    # The killed node restarts from its quorum-state and log, and follows.
    start(by_id[leader])
    wait_until(
        lambda: (q := describe_quorum(by_id[second].controller_port)) is not None
        and q.leader_epoch == p2.leader_epoch
        and all(v.log_end_offset == q.high_watermark for v in q.current_voters),
        "the restarted node to catch up with the new leader",
    )

    # 3. SIGSTOP the new leader past the election timeout.
    zombie, zombie_epoch = second, p2.leader_epoch
    processes[zombie].send_signal(signal.SIGSTOP)
    third, p3 = wait_for_leader(specs, exclude={zombie}, above_epoch=zombie_epoch)
    assert third != zombie
    resumed_ms = time.monotonic_ns() // 1_000_000
    processes[zombie].send_signal(signal.SIGCONT)
    # The resumed node learns the new epoch and follows the leader (which
    # may have changed again meanwhile: any leader above the zombie's epoch).
    def caught_up():
        leader_id, q = wait_for_leader(specs, above_epoch=zombie_epoch)
        done = leader_id != zombie and all(v.log_end_offset == q.high_watermark for v in q.current_voters)
        return q.high_watermark if done else None

    committed = wait_until(caught_up, "the resumed old leader to follow")
    assert describe_quorum(by_id[zombie].controller_port) is None  # it no longer answers as leader

    for s in specs:
        processes[s.node_id].send_signal(signal.SIGTERM)
        processes[s.node_id].wait(timeout=15)

    trace = read_ndjson_trace(by_id[zombie].dir / "trace.ndjson")
    after = [e for e in trace if e["time_ms"] >= resumed_ms]
    assert after, "the resumed node traced nothing"
    assert not [e for e in after if e["type"] == "AdvanceHighWatermark" and e["leader_epoch"] == zombie_epoch]
    assert any(e["leader_epoch"] > zombie_epoch for e in after)

    # 4. Every node's metadata log agrees on the prefix committed before the
    # shutdown (stopping the nodes one by one makes more elections).
    logs = {}
    for s in specs:
        metadata_log = MetadataLog(str(s.data_dir), 0)
        logs[s.node_id] = metadata_log.epochs(), metadata_log.log_end_offset
        metadata_log.close()
    assert committed >= 3  # one LeaderChange per epoch that committed
    epochs = {node: [(e, o) for e, o in entries if o < committed] for node, (entries, _) in logs.items()}
    assert len({tuple(v) for v in epochs.values()}) == 1, logs
    assert all(end >= committed for _, end in logs.values()), logs
    assert os.path.exists(by_id[zombie].data_dir / "__cluster_metadata-0" / "quorum-state")
    check_cluster_traces(specs, strict=True)


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def test_a_resumed_follower_does_not_depose_the_leader(quorum):
    """KIP-996: without pre-vote the follower's timer fires on SIGCONT, it bumps the epoch and
    its Vote requests depose the leader; with it, it stays in the leader's epoch."""
    specs, processes, _ = quorum
    by_id = {s.node_id: s for s in specs}
    leader, p = wait_for_leader(specs)
    wait_until(
        lambda: (q := describe_quorum(by_id[leader].controller_port)) is not None
        and q.leader_epoch == p.leader_epoch and q.high_watermark > 0
        and all(v.log_end_offset >= q.high_watermark for v in q.current_voters),
        "the voters to replicate the LeaderChange record",
    )
    follower = min(n for n in by_id if n != leader)
    pause_s = 3 * (int(TIMEOUTS["controller.quorum.fetch.timeout.ms"])
                   + int(TIMEOUTS["controller.quorum.election.timeout.ms"])) / 1000
    start_ms = _now_ms()
    # On SIGCONT the answer to the Fetch it had in flight may reach it before its timer is looked
    # at; a few pauses (bounded) make the timer fire at least once.
    for _ in range(4):
        processes[follower].send_signal(signal.SIGSTOP)
        time.sleep(pause_s)
        processes[follower].send_signal(signal.SIGCONT)
        wait_until(
            lambda: (q := describe_quorum(by_id[leader].controller_port)) is not None
            and q.leader_epoch == p.leader_epoch
            and all(v.log_end_offset >= q.high_watermark for v in q.current_voters),
            "the resumed follower to fetch from the same leader again",
        )
        trace = read_ndjson_trace(by_id[follower].dir / "trace.ndjson")
        if any(e["type"] == "PreVote" and e["time_ms"] >= start_ms for e in trace):
            break
    end_ms = _now_ms()
    q = describe_quorum(by_id[leader].controller_port)
    for s in specs:
        processes[s.node_id].send_signal(signal.SIGTERM)
        processes[s.node_id].wait(timeout=15)

    traces = {s.node_id: read_ndjson_trace(s.dir / "trace.ndjson") for s in specs}
    window = {n: [e for e in t if start_ms <= e["time_ms"] <= end_ms] for n, t in traces.items()}
    assert any(e["type"] == "PreVote" for e in window[follower]), "the follower's timer never fired"
    assert not [e for e in window[follower] if e["type"] == "RequestVote"], window[follower]
    stood = [e for t in window.values() for e in t if e["type"] == "RequestVote"]
    if not stood:  # (under heavy load another node may time out on its own: not this test's point)
        assert q is not None and q.leader_epoch == p.leader_epoch and q.leader_id == leader
    check_cluster_traces(specs, strict=True)

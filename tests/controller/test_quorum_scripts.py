"""Interaction tests of the pure KRaft quorum core (kref/controller/quorum.py).

Scripts in testdata/quorum/ drive several cores against each other through
tests/controller/quorum_harness.py (etcd raft's interaction style): who
stands, which messages arrive, are dropped or cut, and check the trace
events (spec/KRaft.tla's actions RequestVote, GrantVote, BecomeUnattached,
BecomeActiveController, BeginQuorumEpoch, FetchFromLeader,
TruncateToEpochEndOffset, AdvanceHighWatermark) and the nodes' state. The
harness checks ElectionSafety, LogMatching and the committed prefix after
every step. The seeded random schedules below do the same under drops,
reorders, partitions, crashes and shutdowns; the must-fail variant
(votes without the log check, the spec's CheckLogUpToDate = FALSE) shows
that these checks catch a lost commit.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from kref.controller import quorum as q
from tests.controller.quorum_harness import QuorumCluster, SafetyViolation, random_schedule
from tests.replication.datadriven import Block, run_script

TESTDATA = Path(__file__).parent / "testdata" / "quorum"
CONTEXT = {"time_ms", "topic", "partition", "replica", "voters", "pre_vote"}  # voters, pre_vote: the configuration, not a step


def _ints(value: str) -> list[int]:
    return [int(v) for v in value.split(",") if v]


def _fmt(value) -> str:
    if isinstance(value, (frozenset, set)):
        return "{" + ",".join(str(v) for v in sorted(value)) + "}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{v}" for k, v in sorted(value.items())) + "}"
    return str(value)


# Snapshot effects are always shown: they are what the snapshot scripts check.
SNAPSHOT_EFFECTS = (q.StartSnapshotFetch, q.AppendSnapshotChunk, q.InstallSnapshot, q.LogStartAdvanced, q.DeleteSnapshot)


def isinstance_line(line: str) -> bool:
    return any(f": {cls.__name__}(" in line for cls in SNAPSHOT_EFFECTS)


def render(node_id: int, effect: q.Effect) -> str:
    if isinstance(effect, q.AppendSnapshotChunk):
        return f"{node_id}: AppendSnapshotChunk(end_offset={effect.end_offset}, epoch={effect.epoch}, bytes={len(effect.data)})"
    if isinstance(effect, q.Emit):
        ev = effect.event
        body = " ".join(f"{f.name}={_fmt(getattr(ev, f.name))}" for f in fields(ev) if f.name not in CONTEXT)
        return f"{node_id}: trace {type(ev).__name__} {body}"
    if isinstance(effect, q.Send):
        return f"{node_id}: Send to={effect.destination} {effect.message}"
    return f"{node_id}: {effect}"


class Harness:
    def __init__(self) -> None:
        self.cluster: QuorumCluster | None = None
        self.verbose = False

    def _run(self, node_id: int, event: q.Event, out: list[str]) -> None:
        effects = self.cluster.step(node_id, event)
        for e in effects:
            if self.verbose or isinstance(e, (q.Emit, *SNAPSHOT_EFFECTS)):
                out.append(render(node_id, e))

    def _deliver(self, index: int, out: list[str]) -> None:
        source, destination, message = self.cluster.network.pop(index)
        if frozenset((source, destination)) in self.cluster.cut:
            out.append(f"cut {source}->{destination}: {type(message).__name__}")
            return
        self._run(destination, q.Received(source, message), out)

    def handle(self, b: Block) -> str:
        a = b.args
        out: list[str] = []
        self.verbose = "verbose" in a
        c = self.cluster
        if b.command == "cluster":
            self.cluster = QuorumCluster(
                _ints(a["voters"]), _ints(a.get("observers", "")),
                election_timeout_ms=int(a.get("election_ms", 1000)), fetch_timeout_ms=int(a.get("fetch_ms", 2000)),
                max_fetch_batches=int(a.get("max_batches", 64)),
                max_snapshot_chunk_bytes=int(a.get("chunk", 1024 * 1024)),
                fetch_max_wait_ms=int(a.get("max_wait", 0)),
                pre_vote=a.get("pre_vote", "false") == "true",
            )
            return "ok"
        if b.command == "timeout":
            # The election (or fetch) timer of one node fires now.
            node = int(a["node"])
            c.nodes[node].core.election_deadline_ms = c.now_ms
            self._run(node, q.Tick(), out)
        elif b.command == "advance":
            c.now_ms += int(a["ms"])
            for node in sorted(c.nodes):
                self._run(node, q.Tick(), out)
        elif b.command == "deliver":
            # Deliver what is queued now (messages these deliveries send wait
            # for the next deliver), optionally only one link's.
            queued = len(c.network)
            matching = [
                i for i, (s, d, _) in enumerate(c.network[:queued])
                if ("from" not in a or s == int(a["from"])) and ("to" not in a or d == int(a["to"]))
            ]
            for shift, i in enumerate(matching):
                self._deliver(i - shift, out)
        elif b.command == "settle":
            # Deliver until the network is quiet.
            for _ in range(10_000):
                if not c.network:
                    break
                self._deliver(0, out)
            out = [line for line in out if "all" in a or "Fetch" not in line or "FetchFromLeader" in line
                   or isinstance_line(line)]
        elif b.command == "drop":
            c.network = [
                m for m in c.network
                if not (("from" not in a or m[0] == int(a["from"])) and ("to" not in a or m[1] == int(a["to"])))
            ]
        elif b.command == "cut":
            c.cut.add(frozenset((int(a["a"]), int(a["b"]))))
        elif b.command == "heal":
            c.cut.clear()
        elif b.command == "propose":
            self._run(int(a["node"]), q.Propose(a["data"]), out)
        elif b.command == "shutdown":
            self._run(int(a["node"]), q.Shutdown(), out)
        elif b.command == "crash":
            c.crash(int(a["node"]))
        elif b.command == "restart":
            c.restart(int(a["node"]))
        elif b.command == "vote":
            # A raw Vote request, e.g. from a node that is not a voter.
            request = q.VoteRequest(int(a["epoch"]), int(a["from"]), int(a["last_epoch"]), int(a["last_offset"]),
                                    pre_vote=a.get("pre_vote") == "true")
            self.verbose = True
            self._run(int(a["to"]), q.Received(int(a["from"]), request), out)
        elif b.command == "snapshot":
            # The node writes a snapshot at its high watermark (SnapshotCreated).
            ref = c.snapshot(int(a["node"]))
            out.append(f"{a['node']}: snapshot {ref}")
        elif b.command == "log-start":
            # Retention asks to start the log at `offset` (AdvanceLogStart).
            self.verbose = True
            self._run(int(a["node"]), q.AdvanceLogStart(int(a["offset"])), out)
        elif b.command == "corrupt-install":
            # The next fetched snapshot fails validation in the driver.
            c.nodes[int(a["node"])].corrupt_next_install = True
        elif b.command == "status":
            pass
        else:
            raise ValueError(f"unknown command {b.command}")
        if b.command == "status" or "status" in a:
            out.extend(c.status())
        return "\n".join(out) if out else "ok"


@pytest.mark.parametrize("script", sorted(p.name for p in TESTDATA.glob("*.txt")))
def test_quorum_script(script):
    run_script(TESTDATA / script, Harness().handle)


@pytest.mark.parametrize("seed", range(40))
def test_random_schedule_keeps_safety(seed):
    """ElectionSafety, LogMatching and the committed prefix hold under a
    seeded schedule of drops, reorders, partitions, crashes and shutdowns."""
    print(f"seed={seed}")
    cluster = random_schedule(seed, 1500, voters=3 if seed % 2 else 5, observers=1)
    # Not vacuous: the schedule elected leaders (commits are counted over
    # many seeds below: a hostile 5-voter schedule may commit nothing).
    assert cluster.elections


@pytest.mark.parametrize("seed", range(30))
def test_random_schedule_with_pre_vote_keeps_safety(seed):
    """The same with KIP-996 pre-vote: a prospective stands only after a
    majority of pre-votes, and nothing a pre-vote does is persisted."""
    print(f"seed={seed}")
    cluster = random_schedule(seed, 1500, voters=3 if seed % 2 else 5, observers=1, pre_vote=True,
                              snapshots=seed % 3 == 0)
    assert cluster.elections


@pytest.mark.parametrize("seed", range(30))
def test_random_schedule_with_snapshots_keeps_safety(seed):
    """The same, with nodes snapshotting and moving their log start at random
    (laggards and restarted nodes catch up through FetchSnapshot): no read below
    a log start, installed snapshots are committed prefixes, logs still match."""
    print(f"seed={seed}")
    cluster = random_schedule(seed, 1500, voters=3 if seed % 2 else 5, observers=1, snapshots=True)
    assert cluster.elections


@pytest.mark.parametrize("seed", range(30))
def test_random_schedule_with_long_polled_fetch_keeps_safety(seed):
    """The same with parked Fetches (followers ask for a 100 ms max wait; the
    fetch timeout is 600 ms): held answers arriving late, after a leader
    change, or beside a retried Fetch break no invariant, and leaders are still elected."""
    print(f"seed={seed}")
    cluster = random_schedule(seed, 1500, voters=3 if seed % 2 else 5, observers=1, snapshots=seed % 3 == 0,
                              fetch_max_wait_ms=100)
    assert cluster.elections


def test_random_schedules_with_long_polled_fetch_commit():
    """Not vacuous: with parked Fetches the schedules still commit records."""
    committed = sum(len(random_schedule(seed, 1500, fetch_max_wait_ms=100).committed) for seed in range(10))
    assert committed >= 50, committed


def test_random_schedules_with_snapshots_install_some():
    """Not vacuous: the schedules do send laggards through FetchSnapshot."""
    installs = sum(random_schedule(seed, 1500, snapshots=True).installs for seed in range(10))
    assert installs >= 5, installs


def test_random_schedules_commit_and_elect_many_epochs():
    epochs = committed = 0
    for seed in range(10):
        cluster = random_schedule(seed, 1500)
        epochs += len(cluster.elections)
        committed += len(cluster.committed)
    assert epochs >= 30 and committed >= 50, (epochs, committed)


def test_votes_without_log_check_lose_commits():
    """The must-fail variant (spec/KRaft.tla with CheckLogUpToDate = FALSE):
    the same schedules find a committed record lost or overwritten."""
    failures = 0
    for seed in range(100):
        try:
            random_schedule(seed, 800, check_log_up_to_date=False)
        except (SafetyViolation, q.InvariantViolation):
            failures += 1
    assert failures > 0

"""Several pure KRaft quorum cores wired together through a scripted network.

The harness is the third driver of kref/controller/quorum.py (etcd raft's
"interaction" style): it carries out the cores' effects on in-memory logs
and quorum-state, queues their messages on a network that the test (or a
seeded random schedule) delivers, drops, or reorders, and checks
spec/KRaft.tla's safety properties after every step:

- ElectionSafety: at most one leader per epoch over the whole history;
- LogMatching: two logs with an entry of the same epoch at the same offset
  agree on every entry up to it;
- committed prefix: every high watermark any node reports covers a prefix
  of one single committed history (nothing committed is ever lost or
  replaced: the spec's LeaderCompleteness and NoCommittedRecordLost, seen
  from the outside);
- quorum-state is persisted before the vote leaves the node (the harness
  checks that every VoteResponse granted matches what is on "disk").

Logs hold one entry per batch: (leader_epoch, payload). A snapshot is the
committed prefix of the log, its bytes the prefix's repr; a node's log below
its log start offset is gone (reading it is a SafetyViolation), and a node
that installs a fetched snapshot has exactly that prefix as its log.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass, field

from kref.controller import quorum as q


class SafetyViolation(AssertionError):
    pass


@dataclass
class Node:
    config: q.QuorumConfig
    core: q.QuorumCore | None
    log: list[tuple[int, object]] = field(default_factory=list)
    quorum_state: tuple[int, int, int] = (0, q.NO_ID, q.NO_ID)
    log_start: int = 0
    snapshots: dict[tuple[int, int], bytes] = field(default_factory=dict)  # (end, epoch) -> bytes
    partial: bytes = b""
    corrupt_next_install: bool = False


class QuorumCluster:
    def __init__(
        self,
        voters: list[int],
        observers: list[int] = (),
        *,
        election_timeout_ms: int = 1000,
        fetch_timeout_ms: int = 2000,
        seed: int = 0,
        check_log_up_to_date: bool = True,
        max_fetch_batches: int = 64,
        max_snapshot_chunk_bytes: int = 1024 * 1024,
        fetch_max_wait_ms: int = 0,
        pre_vote: bool = False,
    ) -> None:
        self.now_ms = 0
        self.network: list[tuple[int, int, q.Message]] = []
        self.nodes: dict[int, Node] = {}
        self.elections: dict[int, int] = {}
        self.committed: list[tuple[int, object]] = []
        self.trace: list[str] = []
        self.cut: set[frozenset[int]] = set()  # links that drop everything
        self.installs = 0  # snapshots fetched and installed (InstallSnapshot carried out)
        for node_id in list(voters) + list(observers):
            config = q.QuorumConfig(
                node_id,
                frozenset(voters),
                election_timeout_ms=election_timeout_ms,
                fetch_timeout_ms=fetch_timeout_ms,
                jitter_seed=seed,
                check_log_up_to_date=check_log_up_to_date,
                max_fetch_batches=max_fetch_batches,
                max_snapshot_chunk_bytes=max_snapshot_chunk_bytes,
                fetch_max_wait_ms=fetch_max_wait_ms,
                pre_vote=pre_vote,
            )
            self.nodes[node_id] = Node(config, q.QuorumCore.new(config, self.now_ms))

    # ------------------------------------------------------------ driving

    def step(self, node_id: int, event: q.Event) -> list[q.Effect]:
        node = self.nodes[node_id]
        if node.core is None:
            return []
        effects = node.core.step(event, self.now_ms)
        followups = self._apply(node, effects)
        self.check()
        for followup in followups:
            effects = effects + self.step(node_id, followup)
        return effects

    def snapshot(self, node_id: int) -> q.SnapshotRef | None:
        """The node writes a snapshot at its high watermark (what a driver does on its policy)."""
        node = self.nodes[node_id]
        core = node.core
        if core is None:
            return None
        end = core.high_watermark
        if end <= max((e for e, _ in node.snapshots), default=0) or end <= node.log_start:
            return None
        epoch = node.log[end - 1][0]
        data = repr(node.log[:end]).encode()
        node.snapshots[(end, epoch)] = data
        self.step(node_id, q.SnapshotCreated(end, epoch, len(data)))
        return q.SnapshotRef(end, epoch, len(data))

    def tick_all(self) -> None:
        for node_id in sorted(self.nodes):
            self.step(node_id, q.Tick())

    def advance(self, ms: int) -> None:
        self.now_ms += ms
        self.tick_all()

    def deliver_one(self, index: int = 0) -> None:
        source, destination, message = self.network.pop(index)
        if frozenset((source, destination)) in self.cut:
            return
        self.step(destination, q.Received(source, message))

    def deliver_all(self, limit: int = 10_000) -> None:
        for _ in range(limit):
            if not self.network:
                return
            self.deliver_one()
        raise AssertionError("network did not go quiet")

    def crash(self, node_id: int) -> None:
        self.nodes[node_id].core = None
        self.network = [m for m in self.network if node_id not in m[:2]]

    def restart(self, node_id: int) -> None:
        node = self.nodes[node_id]
        epochs: list[tuple[int, int]] = []
        for offset, (epoch, _) in enumerate(node.log):
            if not epochs or epochs[-1][0] != epoch:
                epochs.append((epoch, offset))
        epoch, voted_for, leader_id = node.quorum_state
        # As the driver: the epochs of the log kept (the start's entry moved to it).
        kept = [(e, max(o, node.log_start)) for i, (e, o) in enumerate(epochs)
                if i + 1 >= len(epochs) or epochs[i + 1][1] > node.log_start]
        if len(node.log) == node.log_start:
            kept = []
        node.core = q.QuorumCore.restore(
            node.config,
            leader_epoch=epoch,
            voted_for=voted_for,
            leader_id=leader_id,
            epochs=kept,
            log_end_offset=len(node.log),
            now_ms=self.now_ms,
            log_start_offset=node.log_start,
            snapshots=[q.SnapshotRef(e, ep, len(d)) for (e, ep), d in sorted(node.snapshots.items())],
        )

    def leader(self) -> int | None:
        leaders = [n for n, node in self.nodes.items() if node.core and node.core.state is q.State.LEADER]
        if not leaders:
            return None
        return max(leaders, key=lambda n: self.nodes[n].core.leader_epoch)

    # ------------------------------------------------------------ effects

    def _apply(self, node: Node, effects: list[q.Effect]) -> list[q.Event]:
        node_id = node.config.node_id
        followups: list[q.Event] = []
        for effect in effects:
            match effect:
                case q.PersistQuorumState():
                    node.quorum_state = (effect.leader_epoch, effect.voted_for, effect.leader_id)
                case q.AppendAsLeader():
                    if effect.base_offset != len(node.log):
                        raise SafetyViolation(f"{node_id}: leader append at {effect.base_offset}, log end {len(node.log)}")
                    node.log.extend([(effect.leader_epoch, effect.payload)] * effect.records_count)
                case q.AppendAsFollower():
                    for b in effect.batches:
                        if b.base_offset != len(node.log):
                            raise SafetyViolation(f"{node_id}: follower append at {b.base_offset}, log end {len(node.log)}")
                        node.log.append((b.leader_epoch, b.payload))
                case q.TruncateTo():
                    if effect.log_end_offset < node.log_start:
                        raise SafetyViolation(f"{node_id}: truncation to {effect.log_end_offset} below log start {node.log_start}")
                    del node.log[effect.log_end_offset :]
                case q.Send():
                    # A granted pre-vote (KIP-996) is no vote: nothing is persisted for it.
                    if isinstance(effect.message, q.VoteResponse) and effect.message.vote_granted and not effect.message.pre_vote:
                        if node.quorum_state[:2] != (effect.message.leader_epoch, effect.destination):
                            raise SafetyViolation(f"{node_id}: vote for {effect.destination} sent before it was persisted")
                    self.network.append((node_id, effect.destination, effect.message))
                case q.SendFetchResponse():
                    response = effect.response
                    if 0 <= effect.from_offset < node.log_start:
                        raise SafetyViolation(f"{node_id}: read at {effect.from_offset} below log start {node.log_start}")
                    if effect.from_offset >= 0:
                        entries = node.log[effect.from_offset : effect.from_offset + effect.max_batches]
                        batches = tuple(
                            q.Batch(effect.from_offset + i, effect.from_offset + i, epoch, payload)
                            for i, (epoch, payload) in enumerate(entries)
                        )
                        response = q.FetchResponse(
                            response.error_code, response.leader_id, response.leader_epoch, response.high_watermark,
                            response.diverging_epoch, response.diverging_end_offset, batches, response.fetch_offset,
                        )
                    self.network.append((node_id, effect.destination, response))
                case q.SendFetchSnapshotResponse():
                    response = effect.response
                    if effect.length > 0:
                        data = node.snapshots[(response.snapshot_end_offset, response.snapshot_epoch)]
                        chunk = data[effect.position : effect.position + effect.length]
                        response = q.FetchSnapshotResponse(
                            response.error_code, response.leader_id, response.leader_epoch,
                            response.snapshot_end_offset, response.snapshot_epoch, response.size, response.position, chunk,
                        )
                    self.network.append((node_id, effect.destination, response))
                case q.StartSnapshotFetch():
                    node.partial = b""
                case q.AppendSnapshotChunk():
                    node.partial += effect.data
                case q.InstallSnapshot():
                    if node.corrupt_next_install:
                        node.corrupt_next_install = False
                        node.partial = b""
                        followups.append(q.SnapshotFetchFailed(effect.end_offset, effect.epoch))
                        continue
                    prefix = [tuple(e) for e in ast.literal_eval(node.partial.decode())]
                    if len(prefix) != effect.end_offset or prefix[-1][0] != effect.epoch:
                        raise SafetyViolation(f"{node_id}: snapshot {effect} holds {len(prefix)} entries")
                    node.snapshots[(effect.end_offset, effect.epoch)] = node.partial
                    node.log = prefix
                    node.log_start = effect.end_offset
                    self.installs += 1
                    self._commit(node, effect.end_offset)
                    followups.append(q.SnapshotInstalled(effect.end_offset, effect.epoch))
                case q.LogStartAdvanced():
                    node.log_start = effect.log_start_offset
                case q.DeleteSnapshot():
                    del node.snapshots[(effect.end_offset, effect.epoch)]
                case q.HighWatermarkAdvanced():
                    self._commit(node, effect.high_watermark)
                case q.LeaderChanged():
                    if effect.state is q.State.LEADER:
                        previous = self.elections.setdefault(effect.leader_epoch, node_id)
                        if previous != node_id:
                            raise SafetyViolation(f"ElectionSafety: epoch {effect.leader_epoch} led by {previous} and {node_id}")
                case q.Emit():
                    ev = effect.event
                    self.trace.append(f"{ev.replica}: {type(ev).__name__} epoch={ev.leader_epoch} state={ev.state} leo={ev.log_end_offset} hw={ev.high_watermark}")
                case q.ProposeRejected():
                    pass
                case _:
                    raise AssertionError(f"unknown effect {effect!r}")
        return followups

    def _commit(self, node: Node, high_watermark: int) -> None:
        prefix = node.log[:high_watermark]
        common = min(len(prefix), len(self.committed))
        if prefix[:common] != self.committed[:common]:
            raise SafetyViolation(
                f"node {node.config.node_id} commits {prefix} against committed {self.committed}"
            )
        if len(prefix) > len(self.committed):
            self.committed = list(prefix)

    # ------------------------------------------------------------ invariants

    def check(self) -> None:
        logs = [(n, node.log) for n, node in sorted(self.nodes.items())]
        for i, (a, log_a) in enumerate(logs):
            for b, log_b in logs[i + 1 :]:
                # LogMatching: the last offset where the epochs agree fixes the prefix.
                last_same = -1
                for k in range(min(len(log_a), len(log_b))):
                    if log_a[k][0] == log_b[k][0]:
                        last_same = k
                if last_same >= 0 and log_a[: last_same + 1] != log_b[: last_same + 1]:
                    raise SafetyViolation(f"LogMatching: {a}={log_a} {b}={log_b}")

    # ------------------------------------------------------------ reports

    def status(self) -> list[str]:
        lines = []
        for n, node in sorted(self.nodes.items()):
            c = node.core
            log = ",".join(f"{e}:{p}" for e, p in node.log)
            if c is None:
                lines.append(f"{n}: down log=[{log}]")
                continue
            extra = ""
            if node.log_start or node.snapshots:
                snaps = ",".join(f"{e}-{ep}" for e, ep in sorted(node.snapshots))
                extra = f" start={node.log_start} snapshots=[{snaps}]"
            if c.parked_fetches:
                held = ",".join(f"{src}@{p.request.fetch_offset}" for src, p in sorted(c.parked_fetches.items()))
                extra += f" parked=[{held}]"
            lines.append(
                f"{n}: {c.state.value} epoch={c.leader_epoch} voted_for={c.voted_for} leader={c.leader_id}"
                f" leo={c.log_end_offset} hw={c.high_watermark}{extra} log=[{log}]"
            )
        return lines


def random_schedule(
    seed: int, steps: int, voters: int = 3, observers: int = 1, check_log_up_to_date: bool = True,
    snapshots: bool = False, fetch_max_wait_ms: int = 0, pre_vote: bool = False,
) -> QuorumCluster:
    """Drive a cluster with a seeded schedule of time, deliveries, drops,
    reorders, proposals, partitions, crashes, restarts and graceful shutdowns,
    checking the invariants after every step (the cluster raises on a violation)."""
    rng = random.Random(seed)
    voter_ids = list(range(1, voters + 1))
    cluster = QuorumCluster(voter_ids, list(range(100, 100 + observers)), seed=seed, election_timeout_ms=300, fetch_timeout_ms=600,
        check_log_up_to_date=check_log_up_to_date, fetch_max_wait_ms=fetch_max_wait_ms, pre_vote=pre_vote,
    )
    payload = 0
    # Snapshots draw from their own stream: the schedules without them stay as they were.
    snapshot_rng = random.Random(seed * 7919 + 1)
    for _ in range(steps):
        if snapshots and snapshot_rng.random() < 0.03:
            # A node snapshots at its high watermark and retention starts its
            # log there: laggards must come back through FetchSnapshot.
            node_id = snapshot_rng.choice(sorted(cluster.nodes))
            if cluster.nodes[node_id].core is not None:
                cluster.snapshot(node_id)
                cluster.step(node_id, q.AdvanceLogStart(1 << 60))
        roll = rng.random()
        if roll < 0.58 and cluster.network:
            # deliver, mostly in order, sometimes out of order (reorder)
            index = 0 if rng.random() < 0.7 else rng.randrange(len(cluster.network))
            cluster.deliver_one(index)
        elif roll < 0.61 and cluster.network:
            cluster.network.pop(rng.randrange(len(cluster.network)))  # drop
        elif roll < 0.70:
            cluster.advance(rng.choice((1, 5, 10, 20, 50, 100, 200)))
        elif roll < 0.82:
            leader = cluster.leader()
            target = leader if leader is not None and rng.random() < 0.8 else rng.choice(voter_ids)
            payload += 1
            cluster.step(target, q.Propose(f"r{payload}"))
        elif roll < 0.84:
            a, b = rng.sample(voter_ids, 2)
            cluster.cut.add(frozenset((a, b)))
        elif roll < 0.86:
            cluster.cut.clear()
        elif roll < 0.90:
            victim = rng.choice(voter_ids)
            if cluster.nodes[victim].core is not None and sum(1 for v in voter_ids if cluster.nodes[v].core is None) == 0:
                cluster.crash(victim)
        elif roll < 0.96:
            for v in voter_ids:
                if cluster.nodes[v].core is None:
                    cluster.restart(v)
                    break
        else:
            leader = cluster.leader()
            if leader is not None:
                cluster.step(leader, q.Shutdown())
    return cluster

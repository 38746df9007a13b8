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

Logs hold one entry per batch: (leader_epoch, payload).
"""

from __future__ import annotations

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
    ) -> None:
        self.now_ms = 0
        self.network: list[tuple[int, int, q.Message]] = []
        self.nodes: dict[int, Node] = {}
        self.elections: dict[int, int] = {}
        self.committed: list[tuple[int, object]] = []
        self.trace: list[str] = []
        self.cut: set[frozenset[int]] = set()  # links that drop everything
        for node_id in list(voters) + list(observers):
            config = q.QuorumConfig(
                node_id,
                frozenset(voters),
                election_timeout_ms=election_timeout_ms,
                fetch_timeout_ms=fetch_timeout_ms,
                jitter_seed=seed,
                check_log_up_to_date=check_log_up_to_date,
                max_fetch_batches=max_fetch_batches,
            )
            self.nodes[node_id] = Node(config, q.QuorumCore.new(config, self.now_ms))

    # ------------------------------------------------------------ driving

    def step(self, node_id: int, event: q.Event) -> list[q.Effect]:
        node = self.nodes[node_id]
        if node.core is None:
            return []
        effects = node.core.step(event, self.now_ms)
        self._apply(node, effects)
        self.check()
        return effects

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
        node.core = q.QuorumCore.restore(
            node.config,
            leader_epoch=epoch,
            voted_for=voted_for,
            leader_id=leader_id,
            epochs=epochs,
            log_end_offset=len(node.log),
            now_ms=self.now_ms,
        )

    def leader(self) -> int | None:
        leaders = [n for n, node in self.nodes.items() if node.core and node.core.state is q.State.LEADER]
        if not leaders:
            return None
        return max(leaders, key=lambda n: self.nodes[n].core.leader_epoch)

    # ------------------------------------------------------------ effects

    def _apply(self, node: Node, effects: list[q.Effect]) -> None:
        node_id = node.config.node_id
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
                    del node.log[effect.log_end_offset :]
                case q.Send():
                    if isinstance(effect.message, q.VoteResponse) and effect.message.vote_granted:
                        if node.quorum_state[:2] != (effect.message.leader_epoch, effect.destination):
                            raise SafetyViolation(f"{node_id}: vote for {effect.destination} sent before it was persisted")
                    self.network.append((node_id, effect.destination, effect.message))
                case q.SendFetchResponse():
                    response = effect.response
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
            lines.append(
                f"{n}: {c.state.value} epoch={c.leader_epoch} voted_for={c.voted_for} leader={c.leader_id}"
                f" leo={c.log_end_offset} hw={c.high_watermark} log=[{log}]"
            )
        return lines


def random_schedule(
    seed: int, steps: int, voters: int = 3, observers: int = 1, check_log_up_to_date: bool = True
) -> QuorumCluster:
    """Drive a cluster with a seeded schedule of time, deliveries, drops,
    reorders, proposals, partitions, crashes, restarts and graceful shutdowns,
    checking the invariants after every step (the cluster raises on a violation)."""
    rng = random.Random(seed)
    voter_ids = list(range(1, voters + 1))
    cluster = QuorumCluster(voter_ids, list(range(100, 100 + observers)), seed=seed, election_timeout_ms=300, fetch_timeout_ms=600,
        check_log_up_to_date=check_log_up_to_date,
    )
    payload = 0
    for _ in range(steps):
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

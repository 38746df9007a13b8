"""A simulated KRaft controller quorum: the quorum cores on a faulty network.

Theory of operation
-------------------
`voters` nodes run kref/controller/quorum.py's `QuorumCore` (the same core
kref/node/raft_driver.py drives over trio) on a `World`. The
simulator carries out effects: PersistQuorumState and the log appends are
durable when carried out (the core puts them before any Send of the same
step, and the driver fsyncs), Send and SendFetchResponse go through the
network (dropped, duplicated, delayed, cut), HighWatermarkAdvanced marks a
prefix committed. A client proposes records to whoever it believes leads.
Faults: crash + restart from the durable quorum-state and log (Kafka's
QuorumState.initialize via `QuorumCore.restore`), pause (a zombie leader
that wakes up after the others elected a new one), isolation of one node.

Invariants after every event (spec/KRaft.tla's names): ElectionSafety (one
leader per epoch over the whole history), LogMatching, LeaderCompleteness
(a new leader's log holds every committed entry), NoCommittedRecordLost
(every high watermark any node reports covers a prefix of one committed
history), VoteDurableBeforeSent (a granted vote leaves the node only once
quorum-state records it: the spec counts durable votes only).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kref.controller import quorum as q
from kref.sim.world import Violation, World, check_log_matching

CLIENT = 1000


@dataclass
class QuorumSettings:
    voters: int = 0  # 0: 3 or 5, drawn from the seed
    election_timeout_ms: int = 300
    fetch_timeout_ms: int = 600
    tick_ms: int = 10
    propose_interval_ms: int = 25
    nemesis_interval_ms: tuple[int, int] = (150, 700)
    duration_ms: int = 6_000
    quiet_ms: int = 2_000
    faults: bool = True


@dataclass
class QuorumNode:
    config: q.QuorumConfig
    core: q.QuorumCore | None
    log: list[tuple[int, object]] = field(default_factory=list)  # durable: (leader_epoch, payload)
    quorum_state: tuple[int, int, int] = (0, q.NO_ID, q.NO_ID)  # durable: epoch, voted_for, leader_id
    paused: bool = False
    generation: int = 0


class QuorumSim:
    def __init__(self, seed: int, settings: QuorumSettings | None = None, *, trace: bool = False) -> None:
        self.s = settings or QuorumSettings()
        self.world = World(seed, trace=trace)
        w = self.world
        w.net.drop = w.rng.choice((0.0, 0.02, 0.05))
        w.net.duplicate = w.rng.choice((0.0, 0.02))
        w.net.max_delay_ms = w.rng.choice((5, 15, 40))
        self.voters = self.s.voters or w.rng.choice((3, 5))
        voters = frozenset(range(1, self.voters + 1))
        self.nodes: dict[int, QuorumNode] = {}
        for n in sorted(voters):
            config = q.QuorumConfig(n, voters, election_timeout_ms=self.s.election_timeout_ms,
                                    fetch_timeout_ms=self.s.fetch_timeout_ms, jitter_seed=seed)
            self.nodes[n] = QuorumNode(config, q.QuorumCore.new(config, 0, tracing=trace))
            w.after(w.rng.randint(1, self.s.tick_ms), self._tick, n, 0)
        self.elections: dict[int, int] = {}
        self.committed: list[tuple[int, object]] = []
        self.proposed = 0
        self.down: list[int] = []  # crashed or paused: at most a minority at a time
        w.after(self.s.propose_interval_ms, self._propose)
        if self.s.faults:
            w.after(w.rng.randint(*self.s.nemesis_interval_ms), self._nemesis)

    def run(self) -> None:
        self.world.run_until(self.s.duration_ms, self._check_logs)
        self.world.cut, self.world.net.drop, self.world.net.duplicate = set(), 0.0, 0.0
        for n in list(self.down):
            self._recover_down(n)
        self.world.run_until(self.s.duration_ms + self.s.quiet_ms, self._check_logs)

    # ------------------------------------------------------------ driving

    def _usable(self, n: int) -> QuorumNode | None:
        node = self.nodes[n]
        return node if node.core is not None and not node.paused else None

    def _tick(self, n: int, generation: int) -> None:
        node = self.nodes[n]
        if node.generation != generation:
            return
        if self._usable(n):
            self._step(n, q.Tick())
        self.world.after(self.s.tick_ms, self._tick, n, generation)

    def _deliver(self, source: int, destination: int, message) -> None:
        if self._usable(destination):
            self._step(destination, q.Received(source, message))

    def _step(self, n: int, event) -> None:
        node = self.nodes[n]
        w = self.world
        for e in node.core.step(event, w.now_ms):
            match e:
                case q.PersistQuorumState():
                    node.quorum_state = (e.leader_epoch, e.voted_for, e.leader_id)
                case q.AppendAsLeader():
                    if e.base_offset != len(node.log):
                        raise Violation("LogMatching", f"node {n} leader append at {e.base_offset}, log end {len(node.log)}")
                    node.log.extend([(e.leader_epoch, e.payload)] * e.records_count)
                case q.AppendAsFollower():
                    for batch in e.batches:
                        if batch.base_offset != len(node.log):
                            raise Violation("LogMatching", f"node {n} follower append at {batch.base_offset}, "
                                            f"log end {len(node.log)}")
                        node.log.append((batch.leader_epoch, batch.payload))
                case q.TruncateTo():
                    if e.log_end_offset < len(self.committed) and node.log[: len(self.committed)] == self.committed:
                        raise Violation("NoCommittedRecordLost", f"node {n} truncates to {e.log_end_offset} below "
                                        f"the committed {len(self.committed)}")
                    del node.log[e.log_end_offset:]
                case q.Send():
                    m = e.message
                    if (isinstance(m, q.VoteResponse) and m.vote_granted and not m.pre_vote  # a pre-vote is no vote
                            and node.quorum_state[:2] != (m.leader_epoch, e.destination)):
                        raise Violation("VoteDurableBeforeSent", f"node {n} grants epoch {m.leader_epoch} to "
                                        f"{e.destination} with quorum-state {node.quorum_state}")
                    w.send(n, e.destination, self._deliver, n, e.destination, m)
                case q.SendFetchResponse():
                    r = e.response
                    if e.from_offset >= 0:
                        entries = node.log[e.from_offset: e.from_offset + e.max_batches]
                        batches = tuple(q.Batch(e.from_offset + i, e.from_offset + i, epoch, payload)
                                        for i, (epoch, payload) in enumerate(entries))
                        r = q.FetchResponse(r.error_code, r.leader_id, r.leader_epoch, r.high_watermark,
                                            r.diverging_epoch, r.diverging_end_offset, batches, r.fetch_offset)
                    w.send(n, e.destination, self._deliver, n, e.destination, r)
                case q.HighWatermarkAdvanced():
                    self._commit(n, e.high_watermark)
                case q.LeaderChanged():
                    if e.state is q.State.LEADER:
                        previous = self.elections.setdefault(e.leader_epoch, n)
                        if previous != n:
                            raise Violation("ElectionSafety", f"epoch {e.leader_epoch} led by {previous} and {n}")
                        if node.log[: len(self.committed)] != self.committed:
                            raise Violation("LeaderCompleteness", f"node {n} leads epoch {e.leader_epoch} without "
                                            f"the {len(self.committed)} committed entries")
                case q.Emit():
                    if w.trace:
                        w.record(e.event.to_dict())
                case _:
                    pass

    def _commit(self, n: int, high_watermark: int) -> None:
        prefix = self.nodes[n].log[:high_watermark]
        common = min(len(prefix), len(self.committed))
        if prefix[:common] != self.committed[:common]:
            first = next(i for i in range(common) if prefix[i] != self.committed[i])
            raise Violation("NoCommittedRecordLost", f"node {n} commits {prefix[first]} at offset {first}, "
                            f"committed earlier: {self.committed[first]}")
        if len(prefix) > len(self.committed):
            self.committed = list(prefix)

    def _propose(self) -> None:
        w = self.world
        leaders = [n for n, node in self.nodes.items() if node.core is not None and node.core.is_leader]
        target = w.rng.choice(leaders) if leaders and w.rng.random() < 0.9 else w.rng.randint(1, self.voters)
        if w.now_ms < self.s.duration_ms + self.s.quiet_ms // 2:
            self.proposed += 1
            w.send(CLIENT, target, self._on_propose, target, f"r{self.proposed}")
        w.after(self.s.propose_interval_ms, self._propose)

    def _on_propose(self, n: int, payload: str) -> None:
        if self._usable(n):
            self._step(n, q.Propose(payload))

    # ------------------------------------------------------------ nemesis

    def _nemesis(self) -> None:
        w, rng = self.world, self.world.rng
        if w.now_ms >= self.s.duration_ms:
            return
        roll = rng.random()
        if len(self.down) < (self.voters - 1) // 2:
            leaders = [n for n, node in self.nodes.items() if node.core is not None and node.core.is_leader]
            victim = rng.choice(leaders) if leaders and rng.random() < 0.6 else rng.randint(1, self.voters)
            node = self.nodes[victim]
            if victim in self.down:
                pass
            elif roll < 0.35:
                node.core = None
                node.generation += 1
                self.down.append(victim)
                w.fault("Crash", replica=victim)
                w.after(rng.randint(50, 1200), self._recover_down, victim)
            elif roll < 0.55:
                node.paused = True
                self.down.append(victim)
                w.fault("Pause", replica=victim)
                w.after(rng.randint(100, 2000), self._recover_down, victim)
            elif roll < 0.75:
                w.cut = {frozenset((victim, o)) for o in (*self.nodes, CLIENT) if o != victim}
                w.fault("Partition", isolated=victim)
            else:
                w.cut = set()
        w.after(rng.randint(*self.s.nemesis_interval_ms), self._nemesis)

    def _recover_down(self, n: int) -> None:
        if n not in self.down:
            return
        self.down.remove(n)
        node = self.nodes[n]
        if node.core is None:
            epochs: list[tuple[int, int]] = []
            for offset, (epoch, _) in enumerate(node.log):
                if not epochs or epochs[-1][0] != epoch:
                    epochs.append((epoch, offset))
            epoch, voted_for, leader_id = node.quorum_state
            node.core = q.QuorumCore.restore(node.config, leader_epoch=epoch, voted_for=voted_for, leader_id=leader_id,
                                             epochs=epochs, log_end_offset=len(node.log), now_ms=self.world.now_ms,
                                             tracing=self.world.trace)
            self.world.after(self.s.tick_ms, self._tick, n, node.generation)
            self.world.fault("Restart", replica=n)
        else:
            node.paused = False
            self.world.fault("Resume", replica=n)

    # ------------------------------------------------------------ invariants

    def _check_logs(self) -> None:
        nodes = list(self.nodes.items())
        for i, (a, na) in enumerate(nodes):
            for b, nb in nodes[i + 1:]:
                check_log_matching(a, na.log, b, nb.log)

    def summary(self) -> dict:
        return {"events": self.world.events, "faults": self.world.faults, "committed": len(self.committed),
                "leader_epochs": len(self.elections)}

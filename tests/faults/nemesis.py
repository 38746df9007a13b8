"""The seeded nemesis: a fault schedule from a seed, and its executor.

Theory of operation
-------------------
`schedule(seed, seconds)` is pure: the same seed gives the same list of
`Fault`s (when, what, whom by role, how long). Roles are resolved only when
a fault fires, against what the cluster says then: `leader` is the leader
of partition 0 in the latest Metadata, `follower` another replica of it,
`controller` the active controller (DescribeQuorum), `any` a node picked
by the seeded generator. So a seed fixes the schedule; the node ids it hits
depend on elections and are printed as the faults run.

Kinds (one fault at a time, each undone before the next starts, so a
majority of the three nodes stays reachable and available):
- kill: kill -9, restart from the same dirs after `duration`;
- pause: SIGSTOP for `duration`, then SIGCONT;
- isolate: cut the node from the other nodes on every listener (clients
  still reach it: the old leader keeps taking requests it cannot commit);
- isolate-data: cut only the broker (PLAINTEXT) links between the node and
  the others: replication stops, the controller stays reachable (a leader
  in this state shrinks its isr; a follower falls out of it);
- cut-pair: cut the node from one other node on every listener.

`unclean_schedule` is the fixed schedule of the unclean variant: cut the
leader's replication long enough for its isr to shrink to itself (acks=all
is then acknowledged by the leader alone), kill -9 it while isolated, heal;
the controller must then elect an out-of-sync follower (allowed only by
unclean.leader.election.enable) and the records acknowledged by the old
leader alone are gone; the old leader restarts later and truncates.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

ISR_SHRINK_WAIT_S = 10.0
KINDS = ("kill", "pause", "isolate", "isolate-data", "cut-pair")
ROLES = ("leader", "follower", "controller", "any")


@dataclass(frozen=True)
class Fault:
    at_s: float
    kind: str
    role: str
    duration_s: float
    pick: int  # seeded choice among candidates (any / follower / the other side of cut-pair)

    def __str__(self) -> str:
        return f"t+{self.at_s:.1f}s {self.kind} {self.role} for {self.duration_s:.1f}s"


def schedule(seed: int, seconds: float, *, min_gap: float = 0.5, max_gap: float = 2.0,
             min_fault: float = 1.0, max_fault: float = 4.0, kinds=KINDS) -> list[Fault]:
    rng = random.Random(seed)
    faults, t = [], rng.uniform(min_gap, max_gap)
    while True:
        duration = rng.uniform(min_fault, max_fault)
        if t + duration > seconds:
            return faults
        faults.append(Fault(round(t, 2), rng.choice(kinds), rng.choice(ROLES), round(duration, 2), rng.randrange(1 << 16)))
        t += duration + rng.uniform(min_gap, max_gap)


def unclean_schedule(isr_shrink_s: float, fence_s: float, after_s: float) -> list[Fault]:
    """Isolate the leader's replication, then kill it while its isr is only itself."""
    return [
        Fault(1.0, "isolate-data-hold", "leader", isr_shrink_s, 0),
        Fault(1.0 + isr_shrink_s, "kill-hold", "same", fence_s + after_s, 0),
    ]


class Nemesis:
    """Runs a schedule against a FaultCluster; `view` answers leader/controller queries."""

    def __init__(self, cluster, view, log=print) -> None:
        self.cluster = cluster
        self.view = view
        self.log = log
        self.events: list[str] = []
        self.last_target: int | None = None

    def _say(self, text: str) -> None:
        self.events.append(text)
        self.log(f"nemesis: {text}")

    def resolve(self, fault: Fault) -> int | None:
        nodes = sorted(self.cluster.by_id)
        if fault.role == "same":
            return self.last_target
        if fault.role == "leader":
            return self.view.leader(0)
        if fault.role == "follower":
            leader = self.view.leader(0)
            others = [n for n in self.view.replicas(0) if n != leader] or [n for n in nodes if n != leader]
            return others[fault.pick % len(others)] if others else None
        if fault.role == "controller":
            return self.view.active_controller()
        return nodes[fault.pick % len(nodes)]

    def run(self, faults: list[Fault], deadline_s: float) -> None:
        start = time.monotonic()
        for fault in faults:
            for crash in self.cluster.note_crashes():
                self._say(f"CRASH: {crash}")
            now = time.monotonic() - start
            if fault.at_s > now:
                time.sleep(min(fault.at_s - now, max(0.0, deadline_s - now)))
            if time.monotonic() - start >= deadline_s:
                self._say(f"{fault}: past the {deadline_s:g}s deadline, not run")
                break
            target = self.resolve(fault)
            retry_until = time.monotonic() + 3.0  # the cluster may be between leaders: ask again, bounded
            while target is None and time.monotonic() < retry_until:
                time.sleep(0.2)
                target = self.resolve(fault)
            if target is None:
                self._say(f"{fault}: no target known, skipped")
                continue
            self.last_target = target
            self._say(f"{fault} -> node {target} (at t+{time.monotonic() - start:.1f}s)")
            self.apply(fault, target, start, deadline_s)
        for crash in self.cluster.note_crashes():
            self._say(f"CRASH: {crash}")
        self.cluster.restore()
        self._say("restored: network healed, every node running")

    def apply(self, fault: Fault, target: int, start: float, deadline_s: float) -> None:
        c = self.cluster
        others = [n for n in sorted(c.by_id) if n != target]
        hold = min(fault.duration_s, max(0.0, deadline_s - (time.monotonic() - start)))
        if fault.kind == "kill":
            c.kill(target)
            time.sleep(hold)
            c.start(target)
        elif fault.kind == "kill-hold":
            self.view.refresh()
            self._say(f"before the kill: partition 0 (leader, replicas, isr) = {self.view.partitions.get(0)}")
            c.kill(target)
            c.heal()
            self._say(f"node {target} killed, network healed; it stays down {hold:.1f}s")
            time.sleep(hold)
            self.view.refresh()
            self._say(f"before the restart: partition 0 (leader, replicas, isr) = {self.view.partitions.get(0)}")
            c.start(target)
        elif fault.kind == "pause":
            c.pause(target)
            time.sleep(hold)
            c.resume(target)
        elif fault.kind in ("isolate", "isolate-data", "cut-pair"):
            listener = "PLAINTEXT" if fault.kind == "isolate-data" else "*"
            peers = [others[fault.pick % len(others)]] if fault.kind == "cut-pair" else others
            rules = [(a, b, listener) for p in peers for a, b in ((target, p), (p, target))]
            c.block(rules)
            time.sleep(hold)
            c.heal()
        elif fault.kind == "isolate-data-hold":
            # The unclean schedule: stays cut until the kill-hold that follows heals it.
            c.block([(a, b, "PLAINTEXT") for p in others for a, b in ((target, p), (p, target))])
            time.sleep(hold)
            # On a loaded machine the shrink can lag replica.lag.time.max.ms: wait (bounded)
            # until the isr is the isolated leader alone, so the kill that follows is the
            # unclean case and not an ordinary failover.
            until = time.monotonic() + ISR_SHRINK_WAIT_S
            while time.monotonic() < until:
                self.view.refresh()
                if list(self.view.partitions.get(0, (None, [], []))[2]) == [target]:
                    break
                time.sleep(0.25)
            self._say(f"isr after the isolation: {self.view.partitions.get(0)}")
        else:
            raise ValueError(f"unknown fault kind {fault.kind}")

"""KIP-903 in the simulated cluster: a broker restarts quickly (a new broker epoch)
while a Fetch its old incarnation sent is still on its way to the leader.

The simulator runs the real cores (controller, replica, lifecycle); the scenario
is scripted on top of a fault-free seed: the follower's Fetch in flight is kept
(the network delays a copy of it: kref/sim/world.py delays and duplicates
messages too), the follower is killed and restarted at once, and the delayed
copy reaches the leader after the controller registered the new incarnation.

- The leader has applied the new registration: it refuses the fetch
  (NOT_LEADER_OR_FOLLOWER), nothing of the old incarnation is recorded.
- The leader lags the metadata (it checks the follower against the image it
  had before the crash): it takes the fetch and proposes the follower back into
  the isr, naming the old broker epoch; the controller refuses it
  (INELIGIBLE_REPLICA, spec/Replication.tla AlterPartitionError).

In both, the follower rejoins the isr only through its new incarnation's own
fetches, and every invariant holds to the end. Seed fixed and printed.
"""

from __future__ import annotations

import copy
import json

from kref.protocol.errors import ErrorCode
from kref.replication import follower as fc
from kref.sim.replication import PARTITION, TOPIC, ClusterSim, Settings

SEED = 11
BOUND_MS = 6_000  # every wait below is bounded in simulated time


def run_until(sim: ClusterSim, predicate, what: str) -> None:
    w = sim.world
    deadline = w.now_ms + BOUND_MS
    while not predicate():
        assert w.now_ms < deadline, f"seed {SEED}: no {what} within {BOUND_MS} simulated ms"
        w.run_until(w.now_ms + 5, sim._check)


def controller_isr(sim: ClusterSim) -> tuple[int, ...]:
    return sim.controller.topics[TOPIC].partitions[PARTITION].isr


def traced(sim: ClusterSim, kind: str, since: int) -> list[dict]:
    return [e for e in map(json.loads, sim.world.lines[since:]) if e["type"] == kind]


def test_a_delayed_fetch_of_a_restarted_broker_does_not_bring_it_back_into_the_isr():
    # Records only in the first 1.5 s: afterwards the high watermark stays put, so the old
    # incarnation's fetch offset reaches it and would justify an expansion without KIP-903.
    sim = ClusterSim(SEED, Settings(faults=False, crashes_only=True, duration_ms=1_500, quiet_ms=0,
                                    replica_lag_time_max_ms=1_500), trace=True)
    w = sim.world
    w.run_until(2_500, sim._check)
    leader = sim._current_leader()
    assert leader is not None and len(controller_isr(sim)) == 3, f"seed {SEED}: not converged"
    follower = next(b for b in sim.brokers.values() if b is not leader)
    assert sim.acked > 0, f"seed {SEED}: nothing produced"

    run_until(sim, lambda: isinstance(follower.fetch_request, fc.SendFetch), "fetch in flight")
    delayed, old_generation, old_epoch = follower.fetch_request, follower.generation, follower.broker_epoch
    assert delayed.broker_epoch == old_epoch > 0
    stale_image = copy.deepcopy(leader.image)  # the leader's view before the crash

    sim._crash(follower)
    sim._restart(follower)
    f = follower.node_id
    run_until(sim, lambda: sim.controller.brokers[f].broker_epoch != old_epoch and not sim.controller.brokers[f].fenced,
              "the new incarnation registered and unfenced")
    run_until(sim, lambda: f not in leader.core.isr and leader.core.pending_isr is None,
              "the fencing applied by the leader")
    assert f not in controller_isr(sim)

    # A leader lagging the metadata takes the fetch and asks for the follower, naming the old epoch.
    mark = len(w.lines)
    sim._on_fetch(leader.node_id, f, delayed, old_generation, stale_image)
    [expand] = traced(sim, "ExpandIsr", mark)
    assert (expand["added"], expand["broker_epoch"]) == (f, old_epoch), expand
    run_until(sim, lambda: traced(sim, "HandleAlterPartitionResponse", mark), "the controller's answer")
    [answer] = traced(sim, "HandleAlterPartitionResponse", mark)
    assert answer["error_code"] == ErrorCode.INELIGIBLE_REPLICA, answer
    assert f not in controller_isr(sim) and f not in answer["isr"]

    # A leader that applied the new registration refuses the fetch outright.
    run_until(sim, lambda: leader.image.isr_registration(f) == (sim.controller.brokers[f].broker_epoch, True),
              "the new incarnation unfenced in the leader's metadata")
    mark = len(w.lines)
    sim._on_fetch(leader.node_id, f, delayed, old_generation)
    assert not [e for e in traced(sim, "LeaderHandleFetch", mark) if e["broker_epoch"] == old_epoch]
    assert leader.core.followers[f].broker_epoch != old_epoch or leader.core.followers[f].last_fetch_time_ms < w.now_ms

    # The new incarnation rejoins through its own fetches; nothing acknowledged is lost.
    run_until(sim, lambda: f in controller_isr(sim), "the new incarnation back in the isr")
    assert leader.core.followers[f].broker_epoch == sim.controller.brokers[f].broker_epoch
    w.run_until(w.now_ms + 1_000, sim._check)
    sim.converged()

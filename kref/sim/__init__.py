"""kref.sim: the deterministic simulator (virtual clock, seeded scheduler,
faulty network and disk) driving the same cores as the broker; see
docs/simulator.md.

Only names the command line needs at parse time live here: `kref broker`
builds the same parser, and importing the simulator there would pull in
every core (and kio's optional hypothesis strategies) for nothing.
"""

SCENARIOS = ("replication", "quorum")
# Not in a campaign's default set: the replication scenario with only the faults spec/Replication.tla
# models (crashes, restarts), short enough that its whole trace is validated by TLC (trace_check.seeds).
TRACED_SCENARIO = "replication-crashes"
ALL_SCENARIOS = SCENARIOS + (TRACED_SCENARIO,)

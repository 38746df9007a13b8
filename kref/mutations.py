"""Mutation switches: known bugs that can be switched into the pure cores.

Theory of operation
-------------------
The simulator (kref/sim) and trace validation exist to catch protocol bugs.
To measure how well they do (the mutation score of `make mutation`), each
bug of the catalogue below can be switched on in the core that would carry
it, at the one line where it would live:

    from kref import mutations
    if mutations.ACTIVE and mutations.on("hw_max"): ...

Switches come from the environment variable KREF_MUTATIONS (comma separated
names) read once at import, or from `activate()` (the simulator's
`--mutation`). With none active `ACTIVE` is an empty frozenset, so the cost
in a core is one falsy global test.
"""

from __future__ import annotations

import os

# name -> (the core that carries it, what the bug does)
CATALOGUE: dict[str, tuple[str, str]] = {
    "hw_max": ("replica", "high watermark = max instead of min log_end_offset over the isr"),
    "expand_isr_early": ("replica", "ExpandIsr before the follower reached the high watermark"),
    "skip_fetch_epoch_check": ("replica", "leader answers a follower Fetch without the leader-epoch check"),
    "skip_diverging_check": ("replica", "leader never reports a diverging epoch (KIP-320 off)"),
    "hw_committed_isr_only": ("replica", "high watermark over the committed isr, not the maximal isr (KIP-497)"),
    "acks_all_ignores_min_isr": ("replica", "acks=all accepted with fewer than min.insync.replicas in the isr"),
    "hw_ignores_min_isr": ("replica", "the high watermark advances while the isr is below min.insync.replicas (KAFKA-15583)"),
    "truncate_to_hw": ("follower", "truncate to the high watermark on becoming follower (pre-KIP-101)"),
    "truncate_ignores_local_epoch": ("follower", "a follower trusts the leader's epoch end offset although its own epoch differs"),
    "follower_hw_from_leader": ("replica", "follower takes the leader's high watermark past its own log end"),
    "elect_outside_isr": ("controller", "a new leader is chosen among all replicas, not the isr"),
    "fence_keeps_isr": ("controller", "a fenced broker stays in the isr of its partitions"),
    "alter_partition_stale_epoch": ("controller", "AlterPartition accepted with a stale partition_epoch"),
    "reassign_no_epoch_bump": ("controller", "a reassignment that removes a replica keeps the leader epoch (KIP-455)"),
    "reassign_complete_early": ("controller", "a reassignment completes before every adding replica is in the isr"),
    "reassign_elect_removed": ("controller", "a reassignment elects its new leader from the isr before the change (a removed replica)"),
    "shutdown_keeps_isr": ("controller", "a broker in controlled shutdown stays in the isr of its partitions"),
    "shutdown_leader_outside_isr": ("controller", "controlled shutdown moves leadership to a replica outside the isr"),
    "shutdown_empties_isr": ("controller", "controlled shutdown takes the last isr member out too (an empty isr)"),
    "vote_without_log_check": ("quorum", "a vote is granted without the log up-to-date check"),
    "vote_before_durable": ("quorum", "a vote is sent before quorum-state is made durable"),
    "commit_earlier_epoch": ("quorum", "the quorum high watermark advances on an entry of an earlier epoch"),
    "vote_twice": ("quorum", "a voter grants a second candidate in the same epoch"),
}


def _from_env() -> frozenset[str]:
    names = frozenset(n.strip() for n in os.environ.get("KREF_MUTATIONS", "").split(",") if n.strip())
    unknown = names - CATALOGUE.keys()
    if unknown:
        raise SystemExit(f"KREF_MUTATIONS: unknown mutation(s) {', '.join(sorted(unknown))}")
    return names


ACTIVE: frozenset[str] = _from_env()


def on(name: str) -> bool:
    return name in ACTIVE


def activate(names) -> None:
    """Switch exactly `names` on (process wide; the simulator runs one per process or resets it)."""
    global ACTIVE
    names = frozenset(names)
    unknown = names - CATALOGUE.keys()
    if unknown:
        raise ValueError(f"unknown mutation(s) {', '.join(sorted(unknown))}")
    ACTIVE = names

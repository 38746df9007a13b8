"""Spec mutation score: does the default model set catch each plausible bug?

Theory of operation
-------------------
A property that no model can violate proves nothing, and a model set that
passes on a broken spec is not checking what we think. So we break the
specs on purpose, one rule at a time, and count how many of those bugs the
default set (`make tlc`) catches.

- CATALOGUE lists single-rule mutations of spec/Replication.tla and
  spec/KRaft.tla: a name, the file, an exact text that must occur once and
  its replacement, and, for a mutation the set cannot catch, the argument
  why (an equivalent mutant, or the property or model still missing).
- Each mutation is applied to a copy of spec/ in a temporary directory,
  never to the real files. The default models of the mutated spec (every
  manifest row whose wrapper module extends it; plus MUTATION_MODELS, full-set
  rows that reach a rule no default model does) run one after the other
  with one TLC worker, passing models first, in manifest order (the
  manifest puts the models that catch most, soonest, first: not the
  cheapest to pass, since a caught mutation stops early); the first
  verdict that is not
  the manifest's expectation (a passing model violated, or a must-fail
  model no longer failing for its reason) catches the mutation, and the
  remaining models are skipped.
- A mutation is only valid if its text occurs exactly once in the real
  spec: a catalogue that no longer matches the spec fails loudly (exit 2)
  instead of silently testing nothing.

Output: one line per mutation as it finishes, naming each model run and
its CPU seconds; then one row per mutation (mutation, caught or not, by
which model and property, states, seconds) and a last line `caught C of N
spec mutations`. `--jobs` runs that many mutations at once (each still
one TLC worker), `--spec` keeps the mutations of one spec, and
`--skip-argued` leaves out the rows argued uncatchable (each of which
otherwise runs its spec's whole default set).
Exit status 0 when every mutation is caught or argued uncatchable in its
row, 1 otherwise, 2 for a catalogue that does not apply.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import pathlib
import re
import shutil
import sys
import tempfile
import time

SPEC_DIR = pathlib.Path(__file__).resolve().parent
if str(SPEC_DIR) not in sys.path:
    sys.path.insert(0, str(SPEC_DIR))
import run_tlc  # noqa: E402  (a script beside this one, not a package module)


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    file: str  # "Replication.tla" or "KRaft.tla"
    old: str
    new: str
    # Why the default set cannot catch it, when it cannot: the row then says
    # so instead of counting a miss.
    uncatchable: str = ""
    # Further (old, new) replacements in the same file, for a rule whose
    # text lies in two places (each old text must occur once, as `old`).
    also: tuple[tuple[str, str], ...] = ()

    def replacements(self) -> list[tuple[str, str]]:
        return [(self.old, self.new), *self.also]


R, K = "Replication.tla", "KRaft.tla"

# ControlledShutdown's change of the registration (the shutdown rows replace it).
SHUTDOWN_LEAVES = ("    /\\ role[r] # \"Offline\"\n    /\\ BrokerLeaves(r)\n"
                   "    /\\ faults' = [faults EXCEPT !.shutdown = @ + 1]\n")


def _shutdown(change: str) -> str:
    """ControlledShutdown with `change` in place of BrokerLeaves(r)."""
    return SHUTDOWN_LEAVES.replace("    /\\ BrokerLeaves(r)\n", change)


CATALOGUE: list[Mutation] = [
    # ---- Replication.tla ----
    Mutation("HW = max LEO over the ISR", R,
             "/\\ LET new_hw == Min({Len(log[l])} \\cup",
             "/\\ LET new_hw == Max({Len(log[l])} \\cup"),
    Mutation("HW over the committed ISR, not the maximal ISR (KIP-497)", R,
             "{remote_log_end_offset[l][f] : f \\in MaximalIsr(l) \\ {l}})",
             "{remote_log_end_offset[l][f] : f \\in isr[l] \\ {l}})"),
    Mutation("HW counts unknown follower offsets as caught up", R,
             "{remote_log_end_offset[l][f] : f \\in MaximalIsr(l) \\ {l}})",
             "{remote_log_end_offset[l][f] : f \\in {x \\in MaximalIsr(l) \\ {l} :"
             " remote_log_end_offset[l][x] >= 0}})"),
    Mutation("HW advances while the ISR is below min.insync.replicas (KAFKA-15583)", R,
             "    /\\ Cardinality(isr[l]) >= MinInsyncReplicas\n    /\\ LET new_hw",
             "    /\\ LET new_hw"),
    Mutation("no min.insync.replicas check on acks=all appends", R,
             "/\\ acks = \"all\" => Cardinality(isr[l]) >= MinInsyncReplicas",
             "/\\ TRUE",
             uncatchable="equivalent for safety: such a record is never acknowledged "
                         "while the ISR is below min.insync.replicas (the HW does not "
                         "advance, KAFKA-15583), so the producer times out instead of "
                         "getting NOT_ENOUGH_REPLICAS; only a liveness or latency "
                         "property could tell"),
    Mutation("ExpandIsr before the follower reached the HW", R,
             "/\\ remote_log_end_offset[l][f] >= high_watermark[l]\n",
             "/\\ remote_log_end_offset[l][f] >= 0\n"),
    Mutation("ExpandIsr before the follower reached the epoch start", R,
             "/\\ remote_log_end_offset[l][f] >= EpochStartOffset(l)\n",
             "/\\ TRUE\n"),
    Mutation("no last-fetched-epoch check on fetch", R,
             "               ELSE /\\ req.last_fetched_epoch # -1\n",
             "               ELSE /\\ FALSE\n"),
    Mutation("the leader ignores the fetch's current_leader_epoch", R,
             "    /\\ fetch[f].current_leader_epoch = leader_epoch[l]\n    /\\ LET req",
             "    /\\ LET req"),
    Mutation("AlterPartition ignores the leader and its epoch", R,
             "    IF controller.leader # l \\/ controller.leader_epoch # req.leader_epoch",
             "    IF FALSE",
             uncatchable="equivalent while the partition-epoch check stays: every "
                         "election bumps the partition epoch, so a request from a "
                         "deposed leader or another epoch always carries an older "
                         "one (INVALID_UPDATE_VERSION instead of FENCED_LEADER_EPOCH)"),
    Mutation("AlterPartition ignores the partition epoch", R,
             "    ELSE IF controller.partition_epoch # req.partition_epoch",
             "    ELSE IF FALSE"),
    Mutation("AlterPartition adds a replica of an older incarnation (KIP-903)", R,
             "               \\/ req.broker_epochs[r] # controller.broker_epoch[r]",
             "               \\/ FALSE"),
    Mutation("the leader applies a stale AlterPartition response", R,
             "              /\\ resp.partition_epoch > partition_epoch[l]",
             "              /\\ TRUE",
             uncatchable="equivalent in the spec: applying newer metadata drops the "
                         "pending AlterPartition (BecomeLeader), so a response still "
                         "pending is always newer than what the leader applied; in "
                         "the code a late response can arrive after the metadata, "
                         "which is why the check is there"),
    Mutation("KIP-279: a follower lacking the epoch keeps its log", R,
             "             ELSE mine.end_offset",
             "             ELSE Len(log[f])"),
    Mutation("the leader keeps follower offsets across epochs", R,
             "       ELSE /\\ remote_log_end_offset' = [remote_log_end_offset EXCEPT ![r] = Unknown]\n"
             "            /\\ remote_broker_epoch' = [remote_broker_epoch EXCEPT ![r] = Unknown]",
             "       ELSE UNCHANGED <<remote_log_end_offset, remote_broker_epoch>>"),
    Mutation("ExpandIsr sends the broker's current epoch, not the one its fetch carried (KIP-903)", R,
             "                                                remote_broker_epoch[l][r]]]]",
             "                                                controller.broker_epoch[r]]]]"),
    Mutation("the last live ISR member loses its unflushed suffix", R,
             "          /\\ \\E keep \\in (IF last THEN {Len(log[r])} ELSE 0..Len(log[r])) :",
             "          /\\ \\E keep \\in 0..Len(log[r]) :"),
    Mutation("a follower's HW is not bounded by its log end offset", R,
             "Min2(fetch[f].high_watermark, Len(new_log))]",
             "fetch[f].high_watermark]"),
    Mutation("acknowledge an entry without waiting for the HW", R,
             "                         {j \\in high_watermark[l] + 1 .. new_hw :",
             "                         {j \\in high_watermark[l] + 1 .. Len(log[l]) :"),
    Mutation("elect a leader outside the ISR", R,
             "    /\\ r \\in controller.isr \\/ ElectableFromElr(r)\n",
             "    /\\ TRUE\n"),
    Mutation("KIP-966: a replica stays in the ELR after an unclean shutdown", R,
             "    /\\ LET drop == r \\in faults.unclean /\\ r \\in controller.elr\n",
             "    /\\ LET drop == FALSE\n"),
    Mutation("KIP-966: the last ISR member stays in the ISR when fenced", R,
             "    /\\ LET new_isr == IF controller.isr = {r} /\\ ~EligibleLeaderReplicasEnable\n",
             "    /\\ LET new_isr == IF controller.isr = {r}\n"),
    Mutation("KIP-966: a replica leaving an ISR below min ISR does not join the ELR", R,
             "    ELSE (controller.elr \\cup (controller.isr \\ new_isr)) \\ new_isr\n",
             "    ELSE controller.elr \\ new_isr\n"),
    Mutation("fencing leaves the crashed leader in place", R,
             "                         !.leader = IF @ = r THEN NoLeader ELSE @,\n"
             "                         !.isr = new_isr,\n",
             "                         !.isr = new_isr,\n"),
    # Session 9's AlterPartition rules (issue 10), caught by
    # MCReplicationAlterPartitionLost (the only model with lost answers).
    Mutation("a lost AlterPartition answer drops the proposal instead of resending", R,
             "    /\\ alter_partition' = [alter_partition EXCEPT ![l] = alter_partition[l].request]",
             "    /\\ alter_partition' = [alter_partition EXCEPT ![l] = NoAlterPartition]"),
    Mutation("a stale-epoch AlterPartition error drops the proposal (issue 10)", R,
             "          IF @.error \\in {\"FENCED_LEADER_EPOCH\", \"INVALID_UPDATE_VERSION\"}",
             "          IF FALSE"),
    # KIP-903 and live fencing: a fenced broker that is up keeps fetching.
    Mutation("AlterPartition adds a fenced replica", R,
             "               \\/ r \\in controller.fenced\n",
             "               \\/ FALSE\n"),
    # Reassignment (KIP-455, session 13): caught by MCReplicationReassign.
    Mutation("reassignment: no new leader epoch when a replica is removed", R,
             "!.leader_epoch = IF l # old.leader \\/ (shrunk /\\ l # NoLeader)",
             "!.leader_epoch = IF l # old.leader"),
    Mutation("reassignment completes before every adding replica is in the ISR", R,
             "       \\/ /\\ c.adding \\subseteq c.isr\n",
             "       \\/ /\\ TRUE\n",
             uncatchable="equivalent for safety: the completion still needs a target replica "
                         "in the ISR (it holds every committed record) and keeps only ISR "
                         "members; the adding replicas join later through ExpandIsr. What it "
                         "loses is redundancy (fewer copies in the ISR than the operator asked "
                         "for), which no safety property under Crash's fault assumption (the "
                         "last live ISR member keeps its log) can tell; a property on the ISR "
                         "size at completion would only restate the rule"),
    Mutation("reassignment elects a removed replica (the successor from the ISR before the change)", R,
             "                   ELSE c.isr \\ c.fenced\n",
             "                   ELSE old.isr \\ c.fenced\n"),
    # Controlled shutdown (session 13): ControlledShutdown's change of the
    # registration is BrokerLeaves, shared with fencing (as Kafka's controller
    # shares it); each row replaces it in ControlledShutdown alone by a buggy
    # copy, so that only a shutdown carries the bug. Caught by
    # MCReplicationControlledShutdownShrink (session 13: the default set's one
    # model with a controlled shutdown, 2 replicas, 7,167 states).
    Mutation("controlled shutdown leaves the broker in the ISR", R,
             SHUTDOWN_LEAVES,
             _shutdown(
             "    /\\ r \\notin controller.fenced\n"
             "    /\\ LET moved == [controller EXCEPT !.leader = IF @ = r THEN NoLeader ELSE @,\n"
             "                                         !.fenced = @ \\cup {r}]\n"
             "       IN  controller' = Committed([moved EXCEPT\n"
             "               !.leader_epoch = IF controller.leader = r /\\ ~CanElect(moved) THEN @ + 1 ELSE @,\n"
             "               !.partition_epoch = IF controller.leader = r THEN @ + 1 ELSE @])\n")),
    Mutation("controlled shutdown moves leadership to a replica out of the ISR", R,
             SHUTDOWN_LEAVES,
             _shutdown(
             "    /\\ r \\notin controller.fenced\n"
             "    /\\ IF controller.leader # r THEN BrokerLeaves(r)\n"
             "       ELSE \\E s \\in controller.replicas \\ (controller.fenced \\cup {r}) :\n"
             "              controller' = Committed([controller EXCEPT\n"
             "                  !.leader = s, !.isr = IF @ = {r} THEN @ ELSE @ \\ {r},\n"
             "                  !.fenced = @ \\cup {r}, !.leader_epoch = @ + 1, !.partition_epoch = @ + 1])\n")),
    Mutation("controlled shutdown empties the ISR (the last member leaves it too)", R,
             SHUTDOWN_LEAVES,
             _shutdown(
             "    /\\ r \\notin controller.fenced\n"
             "    /\\ LET moved == [controller EXCEPT !.leader = IF @ = r THEN NoLeader ELSE @,\n"
             "                                         !.isr = @ \\ {r}, !.fenced = @ \\cup {r}]\n"
             "       IN  controller' = Committed([moved EXCEPT\n"
             "               !.leader_epoch = IF controller.leader = r /\\ ~CanElect(moved) THEN @ + 1 ELSE @,\n"
             "               !.partition_epoch = @ + 1])\n")),
    # ---- KRaft.tla ----
    Mutation("KRaft: a candidate wins with any votes", K,
             "    /\\ votes_granted[c] \\in Quorums\n",
             "    /\\ votes_granted[c] # {}\n"),
    Mutation("KRaft: two votes per epoch", K,
             "MayVoteFor(vf, v, c) == vf[v] \\in {Nil, c}\n",
             "MayVoteFor(vf, v, c) == TRUE\n"),
    Mutation("KRaft: votes ignore the log (no KIP-595 up-to-date check)", K,
             "    /\\ CheckLogUpToDate => RequestUpToDate(m, v)\n",
             "    /\\ TRUE\n"),
    Mutation("KRaft: the vote is lost on a crash", K,
             "    /\\ UNCHANGED <<leader_epoch, voted_for, leader_id, log, broker_metadata_offset>>\n"
             "    /\\ crash_count' = crash_count + 1",
             "    /\\ voted_for' = [voted_for EXCEPT ![v] = Nil]\n"
             "    /\\ UNCHANGED <<leader_epoch, leader_id, log, broker_metadata_offset>>\n"
             "    /\\ crash_count' = crash_count + 1"),
    Mutation("KRaft: fetch from a leader of another epoch", K,
             "    /\\ state[l] = Leader /\\ leader_epoch[l] = leader_epoch[f]\n"
             "    /\\ ~NeedsSnapshot(f, l)\n"
             "    /\\ ~Diverging(f, l)\n",
             "    /\\ state[l] = Leader\n    /\\ ~NeedsSnapshot(f, l)\n    /\\ ~Diverging(f, l)\n"),
    Mutation("KRaft: brokers read the metadata log to the LEO", K,
             "    /\\ broker_metadata_offset' = [broker_metadata_offset EXCEPT ![b] = high_watermark[l]]",
             "    /\\ broker_metadata_offset' = [broker_metadata_offset EXCEPT ![b] = LogEndOffset(l)]"),
    # Caught by MCKRaftFigure8Control (4 epochs under Figure8Bounds; the safety models
    # above stop at 2; MCKRaftEpoch4, every behaviour up to epoch 4, is in the full set).
    Mutation("KRaft: commit an older epoch's entry by counting replicas (Figure 8)", K,
             "           /\\ CommitOnlyOwnEpoch => log[l][n].epoch = leader_epoch[l]\n",
             "           /\\ TRUE\n"),
    # Invisible to safety (a truncation that cuts nothing is a stuttering step);
    # caught by liveness: MCKRaftTruncationLivenessFast (two crashes of a leader
    # whose epoch no one else holds yet, TruncationEnds; the full set has every crash).
    Mutation("KRaft: truncation ignores the node's own epoch end", K,
             "       IN  log' = [log EXCEPT ![f] = SubSeq(@, 1, Min(O, EndOffsetForEpoch(f, E)))]",
             "       IN  log' = [log EXCEPT ![f] = SubSeq(@, 1, Min(O, LogEndOffset(f)))]"),
    Mutation("KRaft: a follower's HW is not bounded by what it fetched", K,
             "Max(@, Min(high_watermark[l], upto))]",
             "Max(@, high_watermark[l])]"),
    # Snapshots (KIP-630): caught by MCKRaftSnapshot.
    Mutation("KRaft: a snapshot of entries not yet committed", K,
             "    /\\ \\E n \\in (snapshot_end_offset[v] + 1)..high_watermark[v] :\n",
             "    /\\ \\E n \\in (snapshot_end_offset[v] + 1)..LogEndOffset(v) :\n"),
    Mutation("KRaft: a follower installs the leader's snapshot without needing it", K,
             "    /\\ NeedsSnapshot(f, l)\n    /\\ LET S == snapshot_end_offset[l] IN\n",
             "    /\\ LET S == snapshot_end_offset[l] IN\n"),
    # Both conjuncts of MajorityOffset: with only the first one changed,
    # TLC's CHOOSE still picks the smallest candidate, the majority offset.
    # KIP-996 pre-vote (session 9): caught by MCKRaftPreVote's PreVoteStability.
    # Since requests travel (session 11) the request carries the epoch too:
    # bumping only the state would leave the prospective's own request stale
    # (pruned at once), so no leader could ever be elected: another bug, one
    # only a liveness model with pre-vote would see (session 12).
    Mutation("KRaft: a prospective bumps the epoch (a pre-vote changes durable state)", K,
             "    /\\ UNCHANGED <<leader_epoch, voted_for, leader_id, log, high_watermark, end_offsets>>\n",
             "    /\\ leader_epoch' = [leader_epoch EXCEPT ![c] = @ + 1]\n"
             "    /\\ UNCHANGED <<voted_for, leader_id, log, high_watermark, end_offsets>>\n",
             also=(("LET new == VoteRequestMsg(c, leader_epoch[c], TRUE)",
                    "LET new == VoteRequestMsg(c, leader_epoch[c] + 1, TRUE)"),)),
    Mutation("KRaft: a prospective stands without a majority of pre-votes", K,
             "    /\\ PreVoteEnabled => state[c] = Prospective /\\ votes_granted[c] \\in Quorums\n",
             "    /\\ PreVoteEnabled => state[c] = Prospective\n"),
    Mutation("KRaft: a follower of a live leader grants a pre-vote", K,
             "    /\\ state[v] \\notin {Leader, Follower}\n",
             "    /\\ state[v] # Leader\n"),
    Mutation("KRaft: a pre-vote granted without the log check", K,
             "    /\\ CheckLogUpToDate => RequestUpToDate(m, v)  \\* as for a vote\n",
             "    /\\ TRUE\n",
             uncatchable="equivalent for safety: the vote itself still checks the log, "
                         "so a prospective with an older log that stands cannot win; it "
                         "only raises the epoch for nothing. Not PreVoteStability either: "
                         "under a live leader every voter refuses whatever the logs. A "
                         "property that sees it needs the log each grant compared (a "
                         "prospective counts grants across rounds, and a granter's log "
                         "may grow after its grant), i.e. a ghost of the grants"),
    Mutation("KRaft: the HW counts a minority", K,
             "        /\\ {v \\in Voters : ReplicatedOffset(l, v) >= n} \\in Quorums\n"
             "        /\\ \\A m \\in (n + 1)..LogEndOffset(l) :\n"
             "              {v \\in Voters : ReplicatedOffset(l, v) >= m} \\notin Quorums\n",
             "        /\\ {v \\in Voters : ReplicatedOffset(l, v) >= n} # {}\n"
             "        /\\ \\A m \\in (n + 1)..LogEndOffset(l) :\n"
             "              {v \\in Voters : ReplicatedOffset(l, v) >= m} = {}\n"),
]


@dataclasses.dataclass
class Result:
    mutation: Mutation
    caught: bool
    by: str  # "model: property" or ""
    states: int | None
    seconds: float
    # (model, verdict word, states, CPU seconds) of each TLC run, in order
    runs: list[tuple[str, str, int | None, float | None]] = dataclasses.field(default_factory=list)


# Full-set rows the mutation run checks too (after the default ones of their
# spec, in manifest order): a model that reaches a rule no default model
# reaches, too costly for `make tlc` on every change. MCReplicationKip279: the
# one branch of TruncationOffset that row 14 mutates (session 11).
MUTATION_MODELS = frozenset({"MCReplicationKip279"})


def default_models(manifest: pathlib.Path, spec_file: str) -> list[run_tlc.Model]:
    """Default-set rows whose wrapper module extends spec_file, passing
    first, in manifest order (which puts the quick catchers first), then
    its MUTATION_MODELS: a mutation the default set catches is reported
    with the default model that catches it (session 12: MCReplicationKip279,
    listed among the default rows, caught row 19 before
    MCReplicationTwoRecords could)."""
    module = pathlib.Path(spec_file).stem
    models = []
    for m in run_tlc.load_manifest(manifest):
        if m.set != "default" and m.name not in MUTATION_MODELS:
            continue
        text = (manifest.parent / m.spec).read_text()
        if re.search(rf"^EXTENDS\b[^\n]*\b{module}\b", text, re.M):
            models.append(m)
    return sorted(models, key=lambda m: (m.name in MUTATION_MODELS, m.expect != "pass"))


def check_catalogue(catalogue: list[Mutation], spec_dir: pathlib.Path) -> list[str]:
    problems = []
    names = set()
    for m in catalogue:
        if m.name in names:
            problems.append(f"duplicate mutation name: {m.name}")
        names.add(m.name)
        text = (spec_dir / m.file).read_text()
        for old, _ in m.replacements():
            count = text.count(old)
            if count != 1:
                problems.append(f"{m.name}: its text occurs {count} times in {m.file}, not once")
    return problems


def run_mutation(mutation: Mutation, *, spec_dir: pathlib.Path = SPEC_DIR,
                 manifest: pathlib.Path | None = None, heap_mb: int = 1536,
                 timeout_factor: float = 1.0) -> Result:
    manifest = manifest or spec_dir / "models.toml"
    started = time.monotonic()
    states = 0
    runs = []
    with tempfile.TemporaryDirectory(prefix="spec-mutation-") as tmp:
        work = pathlib.Path(tmp)
        for f in spec_dir.iterdir():
            if f.suffix in (".tla", ".cfg", ".toml"):
                shutil.copy(f, work / f.name)
        target = work / mutation.file
        text = target.read_text()
        for old, new in mutation.replacements():
            text = text.replace(old, new, 1)
        target.write_text(text)
        for model in default_models(work / manifest.name, mutation.file):
            # The manifest's timeouts are wall clock for `make tlc`; a loaded
            # machine may need more, and a run cut short catches nothing.
            model = dataclasses.replace(model, timeout=float(model.timeout) * timeout_factor)
            outcome = run_tlc.run_model(model, spec_dir=work, workers=1, heap_mb=heap_mb,
                                        log_dir=None)
            found = outcome.distinct_states or outcome.states_generated or 0
            states += found
            verdict = run_tlc.judge(model, outcome)
            runs.append((model.name, verdict.result, found, outcome.cpu_seconds))
            if verdict.ok:
                continue
            # Only a verdict TLC reached catches: a violation, or a must-fail
            # model that now passes. A mutant TLC cannot check (a parse
            # error: the replacement text is broken) or a run out of time
            # catches nothing, and must not count as caught.
            caught = outcome.violation is not None or (
                model.expect == "fail" and outcome.completed)
            by = outcome.violation or verdict.result
            if outcome.error and not outcome.violation:
                by = f"error ({outcome.error[:60]})"
            return Result(mutation, caught, f"{model.name}: {by}", states,
                          time.monotonic() - started, runs)
    return Result(mutation, False, "", states, time.monotonic() - started, runs)


def format_rows(results: list[Result]) -> str:
    header = ("mutation", "caught", "by", "states", "seconds")
    rows = []
    for r in results:
        caught = "yes" if r.caught else ("no (argued)" if r.mutation.uncatchable else "NO")
        by = r.by or (r.mutation.uncatchable and f"-- {r.mutation.uncatchable}") or "-"
        rows.append((r.mutation.name, caught, by, run_tlc._fmt(r.states), f"{r.seconds:.1f}"))
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    widths[2] = min(widths[2], 60)

    def fmt(cells):
        return "  ".join(c.rjust(w) if i in (3, 4) else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", default=[], metavar="TEXT",
                        help="run only mutations whose name contains TEXT")
    parser.add_argument("--spec", choices=(R, K), help="only the mutations of this spec")
    parser.add_argument("--skip-argued", action="store_true",
                        help="leave out the mutations argued uncatchable")
    parser.add_argument("--jobs", type=int, default=1,
                        help="mutations checked at once (each with one TLC worker)")
    parser.add_argument("--timeout-factor", type=float, default=1.0,
                        help="multiply each model's timeout (a loaded machine)")
    parser.add_argument("--list", action="store_true", help="list the catalogue")
    args = parser.parse_args(argv)
    problems = check_catalogue(CATALOGUE, SPEC_DIR)
    if problems:
        for p in problems:
            print(f"spec_mutation: {p}", file=sys.stderr)
        return 2
    selected = [m for m in CATALOGUE
                if (not args.only or any(s.lower() in m.name.lower() for s in args.only))
                and (args.spec is None or m.file == args.spec)
                and not (args.skip_argued and m.uncatchable)]
    # The argued ones run the whole set (nothing catches them): last.
    selected.sort(key=lambda m: bool(m.uncatchable))
    if args.list:
        for m in selected:
            print(f"{m.file:16} {m.name}" + (" [argued uncatchable]" if m.uncatchable else ""))
        return 0
    started = time.monotonic()

    def one(m: Mutation) -> Result:
        r = run_mutation(m, timeout_factor=args.timeout_factor)
        models = ", ".join(f"{name} {word} {run_tlc._fmt(n)} states "
                           f"{'-' if cpu is None else f'{cpu:.0f}'} CPU-s"
                           for name, word, n, cpu in r.runs)
        print(f"  {m.name}: {'caught by ' + r.by if r.caught else 'not caught ' + r.by}"
              f" ({r.states:,} states, {r.seconds:.0f}s) [{models}]", flush=True)
        return r

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        try:
            results = list(pool.map(one, selected))
        except BaseException:
            run_tlc.kill_live_runs()
            raise
    print()
    print(format_rows(results))
    caught = sum(r.caught for r in results)
    missed = [r for r in results if not r.caught and not r.mutation.uncatchable]
    print(f"\n{time.monotonic() - started:.0f}s; {len(missed)} not caught without an argument")
    print(f"caught {caught} of {len(results)} spec mutations")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

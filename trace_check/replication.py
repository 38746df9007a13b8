"""From NDJSON trace events to the steps of spec/TraceReplication.tla.

Theory of operation. The replica cores, the controller core and the
simulator's fault injector log events named after spec actions. This module
turns the events of one partition into the list of steps the trace spec
walks, each a flat record of the fields the spec's matchers read, and
renders that list as TLA+.

What is not one-to-one, and why (docs/trace-validation.md has the table):

- Broker registration and heartbeats (RegisterBroker, BrokerHeartbeat),
  produce acknowledgements (ProduceAcknowledged) and the group
  coordinator's events (GroupStateChange, GroupWriteCommitted) have no
  action in the replication spec: they are left out. Fencing and unfencing before the
  partition exists are left out too: the spec starts with every broker
  registered and unfenced (its Init).
- A partition's creation (the controller's PartitionRecord event, leader
  epoch 0) is the spec's first ElectLeader. Traces written before the
  controller logged it get a synthetic ElectLeader before the partition's
  first event.
- A follower fetch that failed (FollowerFetch followed by FetchError for the
  same follower, nothing answered in between) changes nothing the spec
  tracks; both events are dropped. kref's fetcher may send a fetch before
  the broker it names has applied its leadership, which the spec's
  FollowerFetch does not allow. A fetch no leader answered, took or
  failed before its sender reset its fetching, restarted or the trace
  ended changed nothing either (a lost message): left out.
- A leader that applied its leadership after its follower's fetch to it
  (a lagging broker in the final SIGTERMs) and then took that request:
  its BecomeLeader goes before the fetch (no causal link between the two;
  _late_leadership_first, session 13).
- Network faults of the simulator (messages dropped, duplicated, links cut,
  pauses) are not in the replication spec: a trace holding them is refused
  with that reason, not checked with holes in it.
- A controlled shutdown (the controller's ControlledShutdown event) is the
  spec's ControlledShutdown (session 12; until then the check stopped
  there); the fencing that ends it is a repeat of that step, left out
  (_shutdown_fencing).
- A kill -9 writes no event: the runs of one node's file are its lives, and
  a Crash (and, when a next run follows, a Restart) is inferred between
  them (load_events, _infer_crashes). The Restart is the new life's
  registration: taken at the controller's RegisterBroker of it when there is
  one, else before the broker's first step (session 13: a restarted broker
  applies every registration from the one committed when it registered).
  The steps of other partitions and of
  the metadata quorum (spec/KRaft.tla) in the same files are left out.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from kref.trace.group_events import GROUP_EVENT_TYPES
from kref.trace.sink import RUN_HEADER_TYPE

# ---- reassignment (KIP-455; spec/Replication.tla's "Partition reassignment" section) ----
# The controller's reassignment records: controller steps on the partition, taken like its elections
# (replica = the controller's node id, never a step of that broker's replica). A broker's StopReplica
# ends its fetching as BecomeFollower does (the spec's FetchAfterMetadata).
REASSIGNMENT_WRITES = frozenset({"AlterPartitionReassignments", "CancelPartitionReassignment", "CompleteReassignment"})
REASSIGNMENT_ACTIONS = REASSIGNMENT_WRITES | {"StopReplica"}
# ---- end of the reassignment constants ----

# ---- unclean.leader.election.enable at runtime (spec/Replication.tla's ConfigRecord) ----
# The controller logs a ConfigRecord per partition whose unclean.leader.election.enable a config
# write switched: a controller step on the partition (replica = the controller's node id), never a
# step of that broker's replica.
CONFIG_WRITES = frozenset({"ConfigRecord"})
# ---- end of the unclean constants ----

# Event types the trace spec has a matcher for (PartitionRecord: the controller's creation of the
# partition, taken as the spec's first ElectLeader).
SPEC_ACTIONS = REASSIGNMENT_ACTIONS | CONFIG_WRITES | frozenset({
    "LeaderAppend", "AdvanceHighWatermark", "LeaderHandleFetch", "FollowerFetch", "FetchError",
    "FollowerAppend", "TruncateToEpochEndOffset", "ShrinkIsr", "ExpandIsr", "HandleAlterPartitionResponse",
    "BecomeLeader", "BecomeFollower", "ElectLeader", "ElectPreferredLeader", "UncleanElectLeader",
    "FenceBroker", "UnfenceBroker", "ControlledShutdown", "Crash", "Restart", "PartitionRecord",
})
# Events with no replication-spec action, left out on purpose (see above); the group coordinator's
# (kref/trace/group_events.py: no spec of the group protocol yet) share a node's file with them.
NOT_IN_SPEC = frozenset({"RegisterBroker", "BrokerHeartbeat", "ProduceAcknowledged", "TraceRun"}) | GROUP_EVENT_TYPES
# Faults the spec does not model: a trace holding one is refused.
UNMODELLED_FAULTS = frozenset({"MessageDropped", "MessageDuplicated", "Partition", "Heal", "Pause", "Resume"})
# Steps neither spec models, of a broker hosting the partition: the check ends before the first.
# (None since session 12: a controlled shutdown was one until spec/Replication.tla modelled it.)
STOPS: frozenset[str] = frozenset()
BROKER_EVENTS = frozenset({"FenceBroker", "UnfenceBroker", "ControlledShutdown"})
NODE_EVENTS = frozenset({"Crash", "Restart"})
# (with the reassignment writes: every controller step that commits a partition registration)
ELECTIONS = frozenset({"ElectLeader", "ElectPreferredLeader", "UncleanElectLeader"}) | REASSIGNMENT_WRITES
# Steps a broker takes on a partition it hosts (not as the controller, not a fault).
REPLICA_ACTIONS = SPEC_ACTIONS - BROKER_EVENTS - NODE_EVENTS - ELECTIONS - CONFIG_WRITES - {"PartitionRecord"}
# Fields read as sets by the spec (everything else list-valued is a sequence).
SET_FIELDS = frozenset({"isr", "removed"})

METADATA_TOPIC = "__cluster_metadata"
MAX_STEPS = 20_000  # beyond this a single TLC run takes too long: refuse, do not run for hours


class TraceError(Exception):
    """The trace cannot be checked (unreadable, unsupported, ambiguous, too long)."""


@dataclass
class Steps:
    topic: str
    partition: int
    replicas: list[int]
    values: int  # records appended in the trace: the spec's Values are 1..values
    unclean: bool  # an unclean election is in the trace
    steps: list[dict[str, Any]] = field(default_factory=list)
    origin: list[str] = field(default_factory=list)  # per step: "file:line" of its event, or "synthetic"
    skipped: dict[str, int] = field(default_factory=dict)
    stopped: str = ""  # the step the check stopped before (an unmodelled STOPS event), "" = the whole trace


def _read_runs(path) -> list[tuple[dict[str, Any], list[tuple[int, dict[str, Any]]]]]:
    """Every run of one file: (header, [(line number, event), ...]); a torn last line is left out.

    A process killed in the middle of writing a line leaves it torn (no
    newline): only the file's very last line may be, and it is not an event
    (its step was cut short by the crash the checker infers anyway)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from None
    lines = raw.decode("utf-8", errors="replace").split("\n")
    torn = lines[-1]  # "" when the file ends with a newline
    runs: list[tuple[dict[str, Any], list[tuple[int, dict[str, Any]]]]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines) and torn:
                break
            raise TraceError(f"{path}: not NDJSON (line {number}: {exc.msg})") from None
        if not isinstance(obj, dict) or "type" not in obj:
            raise TraceError(f"{path}:{number}: an event with no type")
        if obj["type"] == RUN_HEADER_TYPE:
            runs.append((obj, []))
        else:
            if not runs:
                runs.append(({}, []))
            runs[-1][1].append((number, obj))
    return runs


def load_events(paths: Iterable[str | os.PathLike[str]]) -> list[tuple[dict[str, Any], str]]:
    """Every event of every run of every file, merged in one order, with its origin ("file:line").

    A file of one node holds one run per start of the process. Where a run
    ended and the node's process was killed (kill -9 writes no event), a
    Crash is inferred, and where the next run starts, a Restart (see
    _infer_crashes)."""
    merged: list[tuple[tuple, dict[str, Any], str]] = []
    lives: list[tuple[int, int, list[tuple[tuple | None, tuple | None, str]]]] = []  # (node, file, its runs)
    for file_no, path in enumerate(paths):
        runs = _read_runs(path)
        spans = []
        for header, events in runs:
            first = last = None
            for number, e in events:
                clock = e.get("mono_ns")
                key = (0, clock, file_no, number) if clock is not None else (1, e.get("time_ms", 0), file_no, number)
                merged.append((key, e, f"{os.fspath(path)}:{number}"))
                first = first or key
                last = key
            spans.append((first, last, f"{os.fspath(path)}:{events[-1][0] if events else '?'}"))
        node = runs[0][0].get("node") if runs else None
        if node is not None:  # a broker's file (a run header names it): its runs are its lives
            lives.append((node, file_no, spans))
    if any(k[0] == 0 for k, _, _ in merged) and any(k[0] == 1 for k, _, _ in merged):
        raise TraceError("some events carry mono_ns and some do not: cannot merge them into one order")
    merged.sort(key=lambda t: t[0])
    merged = _infer_crashes(merged, lives)
    return [(e, origin) for _, e, origin in merged]


def _infer_crashes(merged, lives):
    """Put a Crash where a node's run ended without a successor taking over, and a Restart where it came back.

    A kill -9 logs nothing; what the trace shows is that a node's run ends
    and, if it was restarted, a new run of the same file begins. The spec
    lets a crashed node be slow first, so each inferred step is put as late
    as the trace allows, right before the first event that needs it:
    - the Crash before the controller's first FenceBroker of that node after
      the run's last event (fencing needs it Offline), else before the Restart;
    - the Restart before the first event of the next run in which the
      broker acts on a partition (REPLICA_ACTIONS; its controller role is
      the spec's separate controller, not this replica), or the
      controller's UnfenceBroker of that node, whichever comes first.
    Or, earlier still, before the controller's RegisterBroker of the node's
    new life (a registration while its old life was fenced): the registration
    committed then is where the restarted broker's replay of the metadata log
    starts (the spec's restarted_at), see _restart_when_it_counts.
    A run that is the file's last and is followed by no FenceBroker of its
    node simply ends (the trace is a prefix of a behaviour). A node never
    fenced before it acts again makes the trace rejected at the Restart:
    the spec restarts only a fenced broker.
    """
    inserted: list[tuple[tuple, dict[str, Any], str]] = []
    counter = 0

    def before(key, kind, node, why):
        nonlocal counter
        counter += 1
        inserted.append(((key[0], key[1], -1, counter), {"type": kind, "replica": node}, f"inferred: {why}"))

    for node, file_no, spans in lives:
        for i, (first, last, where) in enumerate(spans):
            if last is None:
                continue  # a run that traced nothing: nothing to end
            restart_at = None
            if i + 1 < len(spans):
                nxt = spans[i + 1]
                acting = [k for k, e, _ in merged if k[2] == file_no and nxt[0] is not None
                          and nxt[0] <= k <= nxt[1] and e["type"] in REPLICA_ACTIONS]
                unfenced = [k for k, e, _ in merged if k > last and e["type"] == "UnfenceBroker"
                            and e.get("broker") == node]
                registered = [k for k in _registrations_when_fenced(merged, node) if k > last]
                bounds = [k for k in (acting[:1] + unfenced[:1] + registered[:1])]
                restart_at = min(bounds) if bounds else None
            fenced = [k for k, e, _ in merged if k > last and e["type"] == "FenceBroker" and e.get("broker") == node
                      and (restart_at is None or k < restart_at)]
            crash_at = fenced[0] if fenced else restart_at
            if crash_at is None:
                continue
            before(crash_at, "Crash", node, f"node {node}'s run ended at {where} (killed)")
            if restart_at is not None:
                before(restart_at, "Restart", node, f"node {node} started again (a new run in its file)")
    return sorted(merged + inserted, key=lambda t: t[0])


def _registrations_when_fenced(merged, node) -> list[tuple]:
    """The keys of the controller's RegisterBroker events of `node` made while it was fenced (or never
    registered): registrations of a new life. (One made while its old life was unfenced fences that
    life in the same write, normalise's FenceBroker reading: not a new life's start here.)"""
    keys, fenced = [], True
    for k, e, _ in merged:
        if e.get("broker") != node:
            continue
        kind = e["type"]
        if kind == "RegisterBroker":
            if fenced:
                keys.append(k)
            fenced = True  # (a registration starts fenced; the old life's, if unfenced, is fenced by it)
        elif kind in ("FenceBroker", "ControlledShutdown"):
            fenced = True
        elif kind == "UnfenceBroker":
            fenced = False
    return keys


# A controller's events about its own writes (emitted when it writes them, before they commit).
CONTROLLER_WRITES = BROKER_EVENTS | ELECTIONS | CONFIG_WRITES | {"RegisterBroker", "PartitionRecord"}


def _uncommitted_controller_writes(events) -> set[str]:
    """The origins of controller events whose records the metadata log lost.

    The active controller logs FenceBroker, an election, ... when it writes
    the record, not when the quorum commits it. A controller cut off from
    the quorum (a proxy partition, SIGSTOP) goes on writing in its epoch
    until it resigns; a new controller never sees those records, and the
    deposed one truncates them when it follows (KRaft's
    TruncateToEpochEndOffset, its metadata log's end offset after). Neither
    spec step happened. A write is lost when the first truncation of that
    node's metadata log after it goes to the write's offset or below
    (committed records are never truncated); a write no truncation reached
    is kept. The offset is the event's `record_offset` (logged since session
    10); in older traces, the metadata log end offset its node logged last
    before it, a lower bound: a zombie controller that appended records no
    quorum event of its own shows (session 10's fault seed 501: a paused
    controller fenced and unfenced every broker on resuming, and its
    follower fetched part of it) then has its later, truncated writes taken.
    """
    log_end: dict[int, int] = {}  # node -> its metadata log end offset, as its last quorum event said
    pending: dict[int, list[tuple[int, str]]] = {}  # node -> (offset, or a lower bound; origin) of writes not yet judged
    lost: set[str] = set()
    for e, origin in events:
        node = e.get("replica")
        if e.get("topic") == METADATA_TOPIC and "state" in e and "log_end_offset" in e:
            if e["type"] == "TruncateToEpochEndOffset":
                lost.update(o for offset, o in pending.pop(node, ()) if offset >= e["log_end_offset"])
            log_end[node] = e["log_end_offset"]
        elif e["type"] in CONTROLLER_WRITES and (e.get("record_offset", -1) >= 0 or node in log_end):
            offset = e["record_offset"] if e.get("record_offset", -1) >= 0 else log_end[node]
            pending.setdefault(node, []).append((offset, origin))
    return lost


def _partitions(events) -> set[tuple[str, int]]:
    return {(e["topic"], e["partition"]) for e, _ in events
            if e["type"] in SPEC_ACTIONS - BROKER_EVENTS - NODE_EVENTS and "topic" in e
            and not str(e["topic"]).startswith("__")}


def normalise(events: list[tuple[dict[str, Any], str]], topic: str | None = None,
              partition: int | None = None) -> Steps:
    """The steps of one partition, in order (see the module's theory of operation)."""
    found = _partitions(events)
    if topic is not None:
        found = {tp for tp in found if tp[0] == topic and (partition is None or tp[1] == partition)}
    if not found:
        raise TraceError("no replication events of a user partition in the trace"
                         + (f" for {topic}" if topic else ""))
    if len(found) > 1:
        names = ", ".join(f"{t}-{p}" for t, p in sorted(found))
        raise TraceError(f"the trace holds several partitions ({names}): choose one with --topic/--partition")
    (topic, partition), = found

    faults = sorted({e["type"] for e, _ in events if e["type"] in UNMODELLED_FAULTS})
    if faults:
        raise TraceError("the trace holds faults spec/Replication.tla does not model ("
                         + ", ".join(faults) + "): it cannot be checked against it")

    mine: list[tuple[dict[str, Any], str]] = []
    skipped: dict[str, int] = {}
    never_committed = _uncommitted_controller_writes(events)
    started = False
    fenced: dict[int, bool] = {}  # broker -> fenced, as the controller's events since the partition began say
    down_at_start: dict[int, list[tuple[dict[str, Any], str]]] = {}  # broker -> its Crash (and fencing) before
    for e, origin in events:
        kind = e["type"]
        if origin in never_committed:
            key = f"{kind} of a controller write never committed (truncated from the metadata log)"
            skipped[key] = skipped.get(key, 0) + 1
            continue
        if kind == "RegisterBroker" and started and fenced.get(e["broker"]) is False:
            # A new incarnation registers while the old one was never fenced (its session ran out
            # but no tick had fenced it yet): the registration fences the old one, in the same
            # write that moves its partitions away. The spec's FenceBroker is that step.
            # (its broker_epoch is the new incarnation's, not the fenced one's: not compared)
            e = {k: v for k, v in e.items() if k != "broker_epoch"} | {"type": "FenceBroker"}
            origin = f"{origin} (RegisterBroker of a new incarnation: fences the old one)"
            kind = "FenceBroker"
        if kind == "PartitionRecord" and (e.get("topic"), e.get("partition")) == (topic, partition):
            # The partition's creation: its first registration, the spec's first ElectLeader.
            e = {**e, "type": "ElectLeader"}
            origin = f"{origin} (PartitionRecord: the partition's creation)"
            kind = "ElectLeader"
        if kind in BROKER_EVENTS:
            # (a broker in controlled shutdown may neither lead nor join an isr: the spec's fenced)
            fenced[e["broker"]] = kind != "UnfenceBroker"
        elif kind in ("Crash", "Restart") and e.get("replica") not in fenced:
            fenced[e["replica"]] = False  # registered and unfenced: the spec's Init
        if kind in STOPS:
            if started:
                mine.append((e, origin))
            continue
        if kind in NOT_IN_SPEC:
            skipped[kind] = skipped.get(kind, 0) + 1
            if kind == "RegisterBroker" and started:
                # Kept as a marker until _restart_when_it_counts has placed the Restart of that
                # broker's new life at its registration; then dropped (not a spec step).
                mine.append((e, origin))
            continue
        if kind not in NODE_EVENTS | BROKER_EVENTS and "topic" in e and (e["topic"], e.get("partition")) != (
                topic, partition):
            # Another partition's step, or the metadata quorum's (spec/KRaft.tla): not this check's.
            other = "quorum events" if e["topic"] == METADATA_TOPIC else "other partitions' events"
            skipped[other] = skipped.get(other, 0) + 1
            continue
        if kind not in SPEC_ACTIONS:
            raise TraceError(f"{origin}: unknown event type {kind!r}")
        if kind in NODE_EVENTS or kind in BROKER_EVENTS:
            if started:
                mine.append((e, origin))
            else:
                skipped[kind] = skipped.get(kind, 0) + 1
                node = e.get("broker", e.get("replica"))
                if kind == "Crash":
                    down_at_start[node] = [(e, origin)]
                elif kind == "Restart":
                    down_at_start.pop(node, None)
                elif node in down_at_start:
                    down_at_start[node].append((e, origin))
            continue
        if (e.get("topic"), e.get("partition")) != (topic, partition):
            continue
        if not started:
            # A broker that crashed before the partition's first event and is still down: the spec's
            # Init has it up, so its Crash (and fencing) are taken right after the creation.
            for kept in down_at_start.values():
                for k, _ in kept:
                    skipped[k["type"]] -= 1
                    if not skipped[k["type"]]:
                        del skipped[k["type"]]
                mine.extend(kept)
        started = True
        mine.append((e, origin))

    replicas: set[int] = set()
    for e, _ in mine:
        replicas.update(e.get("replicas") or ())
    if not replicas:
        replicas = {e["replica"] for e, _ in mine if e["type"] not in ELECTIONS | BROKER_EVENTS | CONFIG_WRITES}
    # Brokers that do not host the partition are not in the spec's Replicas: their crashes and fencing do not
    # touch it.
    mine = [(e, o) for e, o in mine
            if e["type"] not in NODE_EVENTS | BROKER_EVENTS | STOPS or e.get("broker", e.get("replica")) in replicas]
    mine = _shutdown_fencing(mine, skipped)
    stopped = ""
    for i, (e, origin) in enumerate(mine):
        if e["type"] in STOPS:
            stopped = f"{e['type']} of broker {e['broker']} at {origin}"
            skipped[f"everything from the {e['type']} on"] = len(mine) - i
            mine = mine[:i]
            break
    mine = _restart_when_it_counts(mine)
    mine = [(e, o) for e, o in mine if e["type"] != "RegisterBroker"]  # (markers only, see above)
    mine = _lives_never_registered(mine, skipped)
    mine = _same_leader_updates(mine)
    mine = _alter_partition_answers(mine, skipped)
    mine = _taken_after_the_error(mine, skipped)
    mine = _completions_after_moving_on(mine, skipped)
    mine = _drop_failed_fetches(mine, skipped)
    mine = _late_takes_first(mine)
    mine = _fetch_when_taken(mine)
    mine = _delayed_fetch_completions(mine, skipped)
    mine = _lost_answers(mine, skipped)
    mine = _late_leadership_first(mine, skipped)  # (after the lost answers: a FetchError of l's they leave out is no step)
    mine = _answer_sizes(mine)
    mine = _what_crashes_kept(mine)
    mine = _creation_as_election(mine, sorted(replicas))
    mine = _spec_broker_epochs(events, mine, (topic, partition), skipped)

    out = Steps(topic=topic, partition=partition, replicas=sorted(replicas), values=0,
                unclean=_unclean_at_start(mine), skipped=skipped,
                stopped=stopped)
    fence: dict[str, Any] = {}  # the last FenceBroker/ControlledShutdown step, until an election follows it
    shifted_at: list[int] = []  # kref partition epochs of the after_fence elections so far (TraceReplication's pe_shift)
    for e, origin in mine:
        step = {k: v for k, v in e.items() if k not in ("time_ms", "mono_ns", "seq", "topic", "partition")}
        if (e["type"] in ("ElectLeader", "UncleanElectLeader") and fence
                and (fence.get("replica"), fence.get("time_ms")) == (e.get("replica"), e.get("time_ms"))):
            # One controller write fenced the leader and elected its successor: one partition epoch in
            # kref (and Kafka), two steps in the spec (TraceReplication's pe_shift). Other nodes' steps
            # may lie between the two events (session 12: a controlled shutdown's batch of 240
            # elections took long enough to emit for a zombie leader's fetches to interleave).
            step["after_fence"] = True
            shifted_at.append(e["partition_epoch"])
        elif "partition_epoch" in step and e["type"] not in ELECTIONS:
            # A registration older than a shift (a fenced leader still up acting on its old one) gets the
            # shift of its own partition epoch, not the running one.
            own = sum(1 for p in shifted_at if p <= step["partition_epoch"])
            if own != len(shifted_at):
                step["pe_shift"] = own
        if e["type"] in ("FenceBroker", "ControlledShutdown"):
            fence = e
        elif e["type"] in ELECTIONS:
            fence = {}
        if e["type"] == "LeaderAppend":
            out.values += e["last_offset"] - e["first_offset"] + 1
            if "acks" in step:
                # kref logs the produce's acks as Kafka numbers it (-1 = all); the spec's AcksModes are
                # "all" and "1" (acks=0 is admitted like acks=1 and promises even less).
                step["acks"] = "all" if step["acks"] == -1 else "1"
        out.steps.append(step)
        out.origin.append(origin)
    if len(out.steps) > MAX_STEPS:
        raise TraceError(f"{len(out.steps)} steps for {topic}-{partition}: more than {MAX_STEPS} "
                         "(split the run, or check a shorter one)")
    return out


def _shutdown_fencing(mine, skipped):
    """Leave out the FenceBroker that ends a broker's controlled shutdown: a repeat of its ControlledShutdown.

    kref's controller, like Kafka's, takes a broker that asked to shut down
    off every leadership and isr in one batch (ControlledShutdown), and
    fences it once it leads nothing (or its session runs out after it
    exited): that record changes nothing of a partition (the broker is in
    no isr but as its last member, which stays). The spec's ControlledShutdown
    already made it ineligible (its `fenced`), so the fencing is no step of
    it. Only a FenceBroker of the same incarnation (broker epoch) after that
    broker's ControlledShutdown and before its next UnfenceBroker is left
    out; any other double fencing is kept and rejected where it is.
    """
    out = []
    shut: dict[int, Any] = {}  # broker -> the broker epoch of its ControlledShutdown taken, not unfenced since
    repeats = 0
    for e, origin in mine:
        kind = e["type"]
        if kind == "ControlledShutdown":
            shut[e["broker"]] = e.get("broker_epoch")
        elif kind == "UnfenceBroker":
            shut.pop(e["broker"], None)
        elif kind == "FenceBroker" and e["broker"] in shut and shut[e["broker"]] == e.get("broker_epoch"):
            repeats += 1
            continue
        out.append((e, origin))
    if repeats:
        skipped["FenceBroker ending a controlled shutdown (a repeat of its ControlledShutdown)"] = repeats
    return out


def _unclean_at_start(mine) -> bool:
    """unclean.leader.election.enable when the trace starts (the spec's UncleanLeaderElectionEnable).

    A config write that switches it logs a ConfigRecord step (spec/Replication.tla's
    ConfigRecord, which sets the controller's value from then on). It was on from the
    start (a static config, or a switch before the partition existed) when an unclean
    election comes before the first ConfigRecord step; else it starts off, and an unclean
    election before a ConfigRecord turns it on is rejected at that election.
    """
    for e, _ in mine:
        if e["type"] in CONFIG_WRITES:
            return False
        if e["type"] == "UncleanElectLeader":
            return True
    return False


def _restart_when_it_counts(mine):
    """Move each Restart to just before the replica's first step after it (or its UnfenceBroker).

    A process starts before the controller has fenced its previous life when
    it comes back within broker.session.timeout.ms; its registration is then
    refused until that session expires and the controller fences it. The
    spec's Restart is the registration of the new life (it needs the replica
    fenced), so a Restart logged at the process start (the simulator's) is
    taken where the restarted replica first matters: it is Online but silent
    until then, which the spec allows.

    When the controller logged the new life's registration (RegisterBroker,
    kept as a marker by normalise) before that first step, the Restart goes
    there instead: the registration committed then is where the restarted
    broker's replay of the metadata log starts (the spec's restarted_at;
    Kafka's broker publishes nothing before it caught up with the high
    watermark it found at start). Taken later, after the controller moved
    the partition on (session 13: the final controlled shutdowns while a
    restarted broker was still catching up), the Restart would forbid the
    registration that broker did apply. A life whose next step is a Crash
    keeps the old placement (_lives_never_registered reads it).
    """
    out = list(mine)
    placed: set[int] = set()  # id() of the Restarts moved already (met again at their new place)
    i = 0
    while i < len(out):
        e, origin = out[i]
        if e["type"] == "Restart" and id(e) not in placed:
            placed.add(id(e))
            r = e["replica"]
            j = i + 1
            registered = None  # index of the new life's RegisterBroker before its first step
            while j < len(out):
                later = out[j][0]
                if ((later["type"] in REPLICA_ACTIONS or later["type"] == "Crash") and later.get("replica") == r) or (
                        later["type"] == "UnfenceBroker" and later.get("broker") == r):
                    break
                if later["type"] == "RegisterBroker" and later.get("broker") == r and registered is None:
                    registered = j
                j += 1
            if registered is not None and j < len(out) and out[j][0]["type"] != "Crash":
                j = registered + 1  # (the Restart lands right after the marker, which is dropped next)
            if j > i + 1:
                out.insert(j - 1, out.pop(i))  # j - 1: the pop shifted the target left
                continue  # out[i] is now the event after the old position
        i += 1
    return out


def _lives_never_registered(mine, skipped):
    """Drop a Restart whose life ends in a Crash before the replica took any step, and that Crash.

    A broker restarted within broker.session.timeout.ms has its registration
    refused until the controller fences its previous life; crashing again
    before that, the new life never registered, fetched or was seen by the
    controller. The spec's Restart is that registration, so such a life is
    no step of the spec: the two crashes are one (the first keeps what the
    replica shows after the second; _what_crashes_kept). Runs after
    _restart_when_it_counts, which puts each Restart right before the
    replica's next own event.
    """
    drop: set[int] = set()
    for i, (e, _) in enumerate(mine):
        if e["type"] != "Restart" or i + 1 >= len(mine):
            continue
        nxt = mine[i + 1][0]
        if nxt["type"] == "Crash" and nxt.get("replica") == e["replica"]:
            drop.update((i, i + 1))
    if drop:
        skipped["Restart+Crash of a life that never registered"] = len(drop) // 2
    return [x for i, x in enumerate(mine) if i not in drop]


def _spec_broker_epochs(events, mine, tp, skipped):
    """Number the KIP-903 broker epochs of the steps as the spec does.

    kref's broker epoch is the offset of the broker's RegisterBrokerRecord
    in the metadata log; the spec's is 0 for the incarnation registered
    when the partition began (its Init) and one more per registration since
    (its Restart). Each epoch a step logs becomes the count of that broker's
    RegisterBroker events between the partition's start and the one that
    gave it, so TraceReplication compares what the spec tracks: a fetch of
    an old incarnation, or an expansion justified by one, carries a smaller
    number than the controller's. An epoch whose registration the trace
    does not hold is left out of the step (not compared) and counted.
    """
    order: dict[int, list[int]] = {}  # broker -> its registered epochs, in order
    base: dict[int, int] = {}  # broker -> index in order of the incarnation at the partition's start
    begun = False
    for e, _ in events:
        if not begun and (e.get("topic"), e.get("partition")) == tp and (
                e["type"] in REPLICA_ACTIONS or e["type"] == "PartitionRecord"):
            begun = True  # (the creation, or the first replica step of a trace without one)
        if e["type"] == "RegisterBroker" and "broker_epoch" in e:
            seen = order.setdefault(e["broker"], [])
            if e["broker_epoch"] not in seen:
                seen.append(e["broker_epoch"])
            if not begun:
                base[e["broker"]] = len(seen) - 1
    out = []
    for e, origin in mine:
        if "broker_epoch" in e:
            broker = {"LeaderHandleFetch": e.get("follower"), "ExpandIsr": e.get("added")}.get(
                e["type"], e.get("broker", e.get("replica")))
            seen = order.get(broker, [])
            if e["broker_epoch"] in seen:
                e = {**e, "broker_epoch": seen.index(e["broker_epoch"]) - base.get(broker, 0)}
            else:
                e = {k: v for k, v in e.items() if k != "broker_epoch"}
                skipped["broker epochs not compared (registration not in the trace)"] = skipped.get(
                    "broker epochs not compared (registration not in the trace)", 0) + 1
        out.append((e, origin))
    return out


def _same_leader_updates(mine):
    """Mark a BecomeFollower that keeps the leader and leader epoch (`same_leader`: an isr change only).

    It is no step of the spec (TraceReplication's TFollowerMetadata) and does
    not touch the follower's fetch in flight, which the passes below respect.
    """
    out = []
    following: dict[int, tuple[int, int]] = {}  # replica -> (leader, leader epoch) of its BecomeFollower
    for e, origin in mine:
        if e["type"] == "BecomeFollower":
            if following.get(e["replica"]) == (e["leader"], e["leader_epoch"]):
                e = {**e, "same_leader": True}
            following[e["replica"]] = (e["leader"], e["leader_epoch"])
        elif e["type"] in ("BecomeLeader", "Crash", "Restart", "StopReplica"):
            following.pop(e.get("replica"), None)
        out.append((e, origin))
    return out


# AlterPartition answers the controller itself gives (spec/Replication.tla's AlterPartitionError, and NONE);
# any other error code means the request never got a decision (NOT_CONTROLLER, REQUEST_TIMED_OUT, a
# broken connection): the spec's AlterPartitionLost.
# (and NEW_LEADER_ELECTED: the commit completed a reassignment that started a new leader epoch)
CONTROLLER_ANSWERS = frozenset({0, 74, 95, 107, 108})  # NONE, FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, INELIGIBLE_REPLICA, NEW_LEADER_ELECTED


def _alter_partition_answers(mine, skipped):
    """Match each leader's logged AlterPartition answer to the spec's step for it.

    - An answer with an error the controller does not give (NOT_CONTROLLER
      while the quorum moves, REQUEST_TIMED_OUT behind a cut link) is a
      request that got no decision: marked `lost`, the spec's
      AlterPartitionLost (the leader keeps the isr it applied).
    - An answer to a request that a BecomeLeader of the same leader
      superseded, and that changed nothing (an error, or the isr the leader
      had already applied): left out. The spec's BecomeLeader drops a
      pending AlterPartition (the committed state is known, a late answer
      is stale); kref's leader before session 8 applied such a registration
      silently, kept waiting for the answer and then ignored it (traces
      recorded then). An answer that did change the leader's isr is kept,
      and rejected where it is.
    """
    out = []
    pending: dict[int, bool] = {}  # leader -> a request of it is in flight (as the spec sees it)
    applied: dict[int, frozenset] = {}  # leader -> the isr its last BecomeLeader applied
    superseded: dict[int, bool] = {}  # leader -> its request in flight was dropped by a BecomeLeader
    stale = 0
    for e, origin in mine:
        kind, r = e["type"], e.get("replica")
        if kind in ("ShrinkIsr", "ExpandIsr"):
            pending[r], superseded[r] = True, False
        elif kind == "BecomeLeader":
            if pending.pop(r, False):
                superseded[r] = True
            applied[r] = frozenset(e["isr"])
        elif kind in ("BecomeFollower", "Crash", "Restart", "StopReplica"):
            pending.pop(r, None)
            superseded.pop(r, None)
        elif kind == "HandleAlterPartitionResponse":
            if superseded.pop(r, False) and not pending.get(r) and (
                    e.get("error_code", 0) != 0 or frozenset(e["isr"]) == applied.get(r)):
                stale += 1
                continue
            pending.pop(r, None)
            if e.get("error_code", 0) not in CONTROLLER_ANSWERS:
                e = {**e, "lost": True}
        out.append((e, origin))
    if stale:
        skipped["HandleAlterPartitionResponse of a request a BecomeLeader superseded (changed nothing)"] = stale
    return out


def _resets_fetch(e) -> bool:
    """The replica's fetch in flight is gone after this event (spec: fetch' = NoFetch).

    Not a Crash: a request the replica sent is on the wire and the leader may
    still take it (spec/Replication.tla's Crash keeps it) until the Restart.
    """
    if e["type"] == "BecomeFollower":
        return not e.get("same_leader")
    return e["type"] in ("Restart", "BecomeLeader", "TruncateToEpochEndOffset", "StopReplica")


def _taken_after_the_error(mine, skipped):
    """A FetchError the leader's LeaderHandleFetch of that very request follows: the error goes after it.

    The follower gave up on the request (a cut link, a timeout) while it was
    still on its way or being served; the leader took it later (its state
    shows the follower's offset from then on). Before the follower sends its
    next fetch, that is the spec's FollowerFetch, LeaderHandleFetch and an
    answer that never arrived (_lost_answers): the same steps, the error
    taken as the answer's loss. A late take after the follower's next fetch
    or a reset of its fetching is left as it is (the spec has one request
    in flight per follower).
    """
    out = list(mine)
    moved = 0
    i = 0
    while i < len(out):
        e = out[i][0]
        if e["type"] == "FetchError":
            f = e["replica"]
            sent = next((x for x, _ in reversed(out[:i]) if x["type"] == "FollowerFetch" and x["replica"] == f), None)
            for k in range(i + 1, len(out)):
                later = out[k][0]
                if later.get("replica") == f and (later["type"] == "FollowerFetch" or _resets_fetch(later)):
                    break
                if (sent is not None and later["type"] == "LeaderHandleFetch" and later["follower"] == f
                        and (later["fetch_offset"], later["last_fetched_epoch"], later["leader_epoch"])
                        == (sent["fetch_offset"], sent["last_fetched_epoch"], sent["leader_epoch"])):
                    out.insert(k, out.pop(i))  # k: the pop shifted the take left, the error goes after it
                    moved += 1
                    i -= 1
                    break
        i += 1
    if moved:
        skipped["FetchError moved after the leader's late take of that request"] = moved
    return out


def _late_takes_first(mine):
    """A leader's late take of a request its follower left on the wire goes before the follower's next fetch.

    A follower that applied new metadata (BecomeLeader, BecomeFollower) with a
    request unanswered leaves it on the wire; a paused leader may take it after
    the follower has sent its next fetch, to its new leader (session 11's fault
    seed 508). The two are steps of different nodes with no causal link (the
    take reads only the old request), so they are the same behaviour in
    either order; spec/Replication.tla keeps one request per follower
    (LateFetchRequests: the next fetch replaces the one on the wire), so the
    take is moved before that fetch, when no step of the taking leader lies
    between them.
    """
    out = list(mine)
    i = 0
    while i < len(out):
        e = out[i][0]
        if e["type"] == "FollowerFetch":
            f, left, reset = e["replica"], None, False
            for x, _ in reversed(out[:i]):  # f's previous request, unanswered when f reset its fetching
                if x.get("replica") == f and x["type"] in ("Restart", "Crash"):
                    break  # a restart drops what the old process sent (spec: Restart)
                if x.get("replica") == f and _resets_fetch(x):
                    reset = True
                elif x["type"] == "FollowerFetch" and x["replica"] == f:
                    left = x
                    break
                elif (x["type"] == "LeaderHandleFetch" and x["follower"] == f) or (
                        x.get("replica") == f and x["type"] in ("FetchError", "FollowerAppend", "TruncateToEpochEndOffset")):
                    break
            same = left is not None and (left.get("leader"), left["leader_epoch"], left["fetch_offset"],
                                         left["last_fetched_epoch"]) == (e.get("leader"), e["leader_epoch"],
                                                                         e["fetch_offset"], e["last_fetched_epoch"])
            if left is not None and reset and left.get("leader") is not None and not same:  # (same: the take is this one's)
                l, key = left["leader"], (left["leader_epoch"], left["fetch_offset"], left["last_fetched_epoch"])
                for k in range(i + 1, len(out)):
                    later = out[k][0]
                    if (later["type"] == "LeaderHandleFetch" and later["replica"] == l and later["follower"] == f
                            and (later["leader_epoch"], later["fetch_offset"], later["last_fetched_epoch"]) == key):
                        out.insert(i, out.pop(k))
                        i += 1
                        break
                    if later.get("replica") == l and later["type"] not in BROKER_EVENTS | ELECTIONS:
                        break  # a step of the taking leader: the take cannot move before it
        i += 1
    return out


def _completions_after_moving_on(mine, skipped):
    """A parked fetch the leader completes after its follower moved on: the same request read again.

    kref's leader, like Kafka's, logs a parked fetch when it takes it and
    again when it completes (_delayed_fetch_completions). When the follower
    applied new metadata in between (session 10's rerun of fault seed 501: it
    became leader itself while a paused leader held its request; seed 505 of
    session 11: it followed the new leader and fetched from it), the
    completion reads the request the leader already took: it learns the
    offset it already knew, and its answer reaches no fetcher (the spec's
    BecomeLeader/BecomeFollower dropped the follower's fetch, answer
    included). No spec step: left out and counted. Only a take matching that
    request (leader, epoch, offsets) before the follower sends to the same
    leader again is one.
    """
    out = []
    sent: dict[int, tuple] = {}  # follower -> (leader, epoch, offsets) of its last FollowerFetch
    taken: dict[int, bool] = {}  # follower -> a leader took that request
    moved_on: dict[int, tuple] = {}  # follower -> the taken request its reset left behind
    left: dict[int, tuple] = {}  # follower -> the request its reset left behind untaken (a late take may come)
    late = 0
    for e, origin in mine:
        kind = e["type"]
        if kind == "FollowerFetch":
            f = e["replica"]
            sent[f] = (e.get("leader"), e["leader_epoch"], e["fetch_offset"], e["last_fetched_epoch"])
            taken[f] = False
            for behind in (moved_on, left):
                if behind.get(f, (None, None))[:2] == sent[f][:2]:
                    behind.pop(f)  # the same leader and epoch again: a later take may be this one's
        elif kind == "LeaderHandleFetch":
            f = e["follower"]
            request = (e["replica"], e["leader_epoch"], e["fetch_offset"], e["last_fetched_epoch"])
            if moved_on.get(f) == request:
                late += 1
                continue
            if sent.get(f) == request:
                taken[f] = True
            elif left.get(f) == request:
                moved_on[f] = left.pop(f)  # its first take, late (LateFetchRequests): kept; a completion is not
        elif _resets_fetch(e) and e["replica"] in sent:
            # (a second reset with no fetch between keeps what the first left behind: session 12's
            # scale-creation run, a follower that became leader, then followed again, before its old
            # leader completed its parked request)
            f = e["replica"]
            moved_on.pop(f, None)
            left.pop(f, None)
            if taken.pop(f, False):
                moved_on[f] = sent[f]
            else:
                left[f] = sent[f]
            sent.pop(f)
        out.append((e, origin))
    if late:
        skipped["LeaderHandleFetch completing a parked fetch after its follower moved on"] = late
    return out


def _drop_failed_fetches(mine, skipped):
    """Drop each FollowerFetch whose next fetch event for that follower is a FetchError, and the error;
    and each FollowerFetch never answered before the follower's fetch was reset (BecomeFollower with a new
    leader, BecomeLeader; a crashed replica's, by its Restart): kref's fetcher tries the old leader until it applies the new one, which
    the spec's FollowerFetch (a live leader of the follower's epoch) does not allow, and neither changes
    anything the spec tracks (one a leader takes after the reset is kept: _taken_late). A FollowerFetch the follower sent again, with the same offsets and epoch,
    before anything answered the first is the same: the first failed unlogged (session 11: fault seed
    503's follower fetched again and again from a killed leader with no FetchError between), and only the
    last try may be taken. A FollowerFetch still unanswered when the trace ends is left out too (no step
    reads it)."""
    drop: set[int] = set()
    at_reset: list[tuple[int, int]] = []  # (unanswered FollowerFetch, the reset after it)
    abandoned = resent = 0
    pending: dict[int, int] = {}  # follower -> index of its unanswered FollowerFetch
    for i, (e, _) in enumerate(mine):
        kind = e["type"]
        if kind == "FollowerFetch":
            j = pending.get(e["replica"])
            if j is not None and all(mine[j][0].get(k) == e.get(k) for k in
                                     ("leader", "leader_epoch", "fetch_offset", "last_fetched_epoch")):
                resent += 1
                drop.add(j)
            pending[e["replica"]] = i
        elif kind == "LeaderHandleFetch":
            j = pending.get(e["follower"])
            if j is not None and mine[j][0].get("leader", e["replica"]) == e["replica"] and (
                    mine[j][0]["leader_epoch"] == e["leader_epoch"]):
                del pending[e["follower"]]  # (a late take of an older request answers not this one)
        elif kind == "FetchError":
            j = pending.pop(e["replica"], None)
            if j is not None:
                drop.update((i, j))
        elif _resets_fetch(e):
            j = pending.pop(e["replica"], None)
            if j is not None:  # never answered before the reset: judged below
                at_reset.append((j, i))
    # A request nothing answered, took, failed or reset before the trace ends (session 12: the final
    # SIGTERMs stop a leader before it applied its leadership, and its followers' requests to it die
    # with the processes) changed nothing the spec tracks: no later step reads it. The spec's
    # FollowerFetch needs a leader of its epoch, which such a request may not have had.
    unfinished = len(pending)
    drop.update(pending.values())
    # A request left unanswered at a reset changed nothing, unless its old leader takes it later (read
    # on the steps without the failed fetches: a fetch that failed is no step of the spec).
    remaining = [k for k in range(len(mine)) if k not in drop]
    position = {k: n for n, k in enumerate(remaining)}
    steps = [mine[k] for k in remaining]
    for j, i in at_reset:
        # (a Restart drops what the old process sent, as the spec's does: a take after it answers
        # the new process's request with the same offsets, session 12's victim restarting)
        if mine[i][0]["type"] == "Restart" or not _taken_late(steps, position[i], mine[j][0]):
            abandoned += 1
            drop.add(j)
    if len(drop) - abandoned - resent - unfinished:
        skipped["FollowerFetch+FetchError (failed fetch)"] = (len(drop) - abandoned - resent - unfinished) // 2
    if unfinished:
        skipped["FollowerFetch never answered before the trace ends"] = unfinished
    if resent:
        skipped["FollowerFetch sent again before any answer (the first failed, unlogged)"] = resent
    if abandoned:
        skipped["FollowerFetch never answered (dropped by a metadata change or crash)"] = abandoned
    return [x for i, x in enumerate(mine) if i not in drop]


def _taken_late(mine, reset_at: int, request) -> bool:
    """Whether the old leader takes `request` after its follower's reset (at index reset_at): the
    request was on the wire across the follower's BecomeLeader/BecomeFollower (session 11's fault
    seed 501: a paused leader took it), which spec/Replication.tla's LateFetchRequests keeps; the
    answer reaches no fetcher. A take after the follower's next fetch counts only when no step of
    that leader lies between the two (_late_takes_first then puts the take first)."""
    f, l = request["replica"], request.get("leader")
    key = (request["leader_epoch"], request["fetch_offset"], request["last_fetched_epoch"])
    fetched_again = False
    for e, _ in mine[reset_at + 1:]:
        if e.get("replica") == f and e["type"] in ("Restart", "Crash"):
            return False
        if e["type"] == "FollowerFetch" and e["replica"] == f:
            fetched_again = True
        elif (e["type"] == "LeaderHandleFetch" and e["replica"] == l and e["follower"] == f
                and (e["leader_epoch"], e["fetch_offset"], e["last_fetched_epoch"]) == key):
            return True
        elif fetched_again and e.get("replica") == l and e["type"] not in BROKER_EVENTS | ELECTIONS:
            return False
    return False


def _fetch_when_taken(mine):
    """Move each FollowerFetch to just before the LeaderHandleFetch that takes it.

    A follower may send its fetch as soon as it applied a registration naming
    the new leader, before that leader applied it; the request waits in the
    network (or the leader's queue) until the leader takes it. The spec's
    FollowerFetch needs a leader of the follower's epoch already, so the
    step is taken where it first matters: right before the leader's answer.
    Nothing else reads a follower's request in flight, so only the
    follower's own events bound the move (none may lie in between).
    """
    out = list(mine)
    i = 0
    while i < len(out):
        e = out[i][0]
        if e["type"] == "FollowerFetch":
            f = e["replica"]
            j = i + 1
            while j < len(out):
                later = out[j][0]
                # (a controller's step names the controller as `replica`: it is no step of broker f, and
                # neither fencing, unfencing nor an election touches a follower's request in flight; nor
                # does f's own isr-only BecomeFollower, `same_leader`, no step of the spec: session 12's
                # controlled shutdowns made many)
                if later["type"] not in BROKER_EVENTS | ELECTIONS and not later.get("same_leader") and (
                        later.get("replica") == f or later.get("follower") == f):
                    break
                j += 1
            # The take, or (session 12) f's own reset of its fetching when the take comes after it (a
            # late take: a leader that applied its leadership after f sent and f moved on, as the
            # final SIGTERMs make them): the request went out as late as f's next own step allows.
            if j < len(out) and j > i + 1 and (out[j][0]["type"] == "LeaderHandleFetch" or (
                    _resets_fetch(out[j][0]) and out[j][0].get("replica") == f)):
                out.insert(j - 1, out.pop(i))  # j - 1: the pop shifted the answer left
                continue
        i += 1
    return out


# ---- a fetch sent to a broker that had not applied its leadership yet (session 13, issue 15) ----
def _late_leadership_first(mine, skipped):
    """A leader's BecomeLeader that its follower's fetch overtook in the merged order goes before that fetch.

    The final SIGTERMs of a test move leaderships in a burst: a follower f
    applies the registration naming l leader of epoch e and fetches from l
    while l, lagging on the metadata log, has not applied it yet; f may move
    on to a newer epoch before l does; l then applies its leadership and
    takes f's request late (session 12's scale-creation run). The fetch and
    l's BecomeLeader are steps of different nodes with no causal link (l
    reads the metadata log, not f's request; f read the registration, not
    l's state), so the behaviour in which l applied its leadership first is
    the same run; only the take needs both. spec/Replication.tla's
    FollowerFetch needs a leader of f's epoch, so l's BecomeLeader is moved
    up to just before the fetch, and only when l took that very request
    (same epoch and offsets) in that epoch and no step of l lies between the
    fetch and its BecomeLeader (a step of l there may have caused or
    followed something in between: left as it is, and rejected). A fetch no
    leader of its epoch ever takes is not helped: a take is required.
    """
    out = list(mine)
    moved = 0
    i = 0
    while i < len(out):
        e = out[i][0]
        if e["type"] == "FollowerFetch" and e.get("leader") is not None:
            f, l, epoch = e["replica"], e["leader"], e["leader_epoch"]
            key = (epoch, e["fetch_offset"], e["last_fetched_epoch"])
            became = None
            for k in range(i + 1, len(out)):
                later = out[k][0]
                if later.get("replica") != l or later["type"] in BROKER_EVENTS | ELECTIONS:
                    continue  # another node's step, or l's controller steps (no step of l's replica)
                if became is None:
                    if later["type"] == "BecomeLeader" and later["leader_epoch"] == epoch:
                        became = k
                        continue
                    break  # l acted before it led epoch e: nothing is moved
                if later["type"] == "LeaderHandleFetch" and later["follower"] == f and (
                        later["leader_epoch"], later["fetch_offset"], later["last_fetched_epoch"]) == key:
                    out.insert(i, out.pop(became))
                    moved += 1
                    i += 1
                    break
                if later["type"] != "LeaderHandleFetch":
                    break  # l left epoch e (or crashed) before taking the request: nothing is moved
        i += 1
    if moved:
        skipped["BecomeLeader moved before a fetch it took late (sent before that leader applied it)"] = moved
    return out
# ---- end of the fetch sent to a broker that had not applied its leadership yet ----


def _delayed_fetch_completions(mine, skipped):
    """A fetch the leader parked (nothing to send yet) is logged twice: when it came and when it completed.

    Like Kafka, kref's leader takes a follower's fetch (LeaderHandleFetch:
    the follower's log end offset is known from then on, which may advance
    the high watermark or expand the isr) and, with nothing to send, parks
    it for up to replica.fetch.wait.max.ms; when it completes (new records,
    or the wait ran out) the leader reads again and logs a second
    LeaderHandleFetch for the same request, whose answer is what the
    follower receives. The spec answers a request once. The pair is the
    spec behaviour in which the first answer was empty, the follower took it
    (a silent step of TraceReplication) and fetched again at once with the
    same offsets: that FollowerFetch, which kref does not send, is put before
    the second LeaderHandleFetch and named "inferred" in the report.

    A diverging-epoch answer logged twice for one request (session 10's fault
    seeds 502 and 602: the leader parked the fetch and answered it again at
    completion, the same diverging epoch and end offset) is one answer: the
    second changes nothing the spec tracks (the leader learns no offset from a
    follower it sends to truncate) and is left out; the follower truncates
    once, on whichever arrived.
    """
    out = []
    pending: dict[int, tuple[dict[str, Any], bool]] = {}  # follower -> (its last FollowerFetch, answered)
    diverged: dict[int, tuple] = {}  # follower -> the diverging answer its pending request got
    inferred = repeated = 0
    for e, origin in mine:
        kind = e["type"]
        if kind == "FollowerFetch":
            pending[e["replica"]] = (e, False)
            diverged.pop(e["replica"], None)
        elif kind == "LeaderHandleFetch" and e["follower"] in pending:
            request, answered = pending[e["follower"]]
            answer = (e["replica"], e["leader_epoch"], e["fetch_offset"], e["diverging_epoch"], e["diverging_end_offset"])
            if answered and diverged.get(e["follower"]) == answer:
                repeated += 1
                continue
            if e["diverging_epoch"] != -1 or e["diverging_end_offset"] != -1:
                diverged[e["follower"]] = answer
            if answered:
                again = {k: v for k, v in request.items() if k not in ("seq", "mono_ns", "time_ms")}
                out.append((again, f"inferred: {origin} completes a parked fetch (the follower asks again)"))
                inferred += 1
            pending[e["follower"]] = (request, True)
        elif kind == "FollowerAppend" or _resets_fetch(e):
            pending.pop(e["replica"], None)
            diverged.pop(e["replica"], None)
        out.append((e, origin))
    if inferred:
        skipped["LeaderHandleFetch completing a parked fetch (a FollowerFetch inferred before it)"] = inferred
    if repeated:
        skipped["LeaderHandleFetch repeating a diverging-epoch answer (a parked fetch's completion)"] = repeated
    return out


def _lost_answers(mine, skipped):
    """A FetchError after the leader took the fetch: the answer was lost (the connection broke).

    The leader's step happened (it knows the follower's offset); the follower
    never got the answer and dropped its request. In the spec that is the
    follower taking an empty answer (a silent step of TraceReplication; the
    spec's LeaderHandleFetch may answer with no records), so the FetchError
    is left out. (The spec's FetchError takes an unanswered request only.)
    """
    out = []
    answered: dict[int, bool] = {}  # follower -> its last FollowerFetch was taken by the leader
    lost = 0
    for e, origin in mine:
        kind = e["type"]
        if kind == "FollowerFetch":
            answered[e["replica"]] = False
        elif kind == "LeaderHandleFetch":
            answered[e["follower"]] = True
        elif kind == "FetchError" and answered.get(e["replica"]):
            answered[e["replica"]] = False
            lost += 1
            continue
        elif _resets_fetch(e):
            answered.pop(e["replica"], None)
        out.append((e, origin))
    if lost:
        skipped["FetchError after the leader's answer (the answer was lost)"] = lost
    return out


def _answer_sizes(mine):
    """Give each LeaderHandleFetch the number of records its answer carried, when the trace shows it.

    The answer is what the follower appends next (FollowerAppend, first to
    last offset) or nothing when it fetches again without appending. Without
    this the spec's LeaderHandleFetch may answer with any prefix of what the
    leader has past the fetch offset, and TLC carries every choice until the
    follower's append rules all but one out: with batches of 200 records,
    200 states per fetch (a 150-step trace took minutes instead of seconds).
    """
    out = [(dict(e), origin) for e, origin in mine]
    waiting: dict[int, dict] = {}  # follower -> the step of the LeaderHandleFetch whose answer it has not taken
    for e, _ in out:
        kind = e["type"]
        if kind == "LeaderHandleFetch":
            if e["diverging_epoch"] == -1 and e["diverging_end_offset"] == -1:
                waiting[e["follower"]] = e
            else:
                waiting.pop(e["follower"], None)
        elif kind == "FollowerAppend" and e["replica"] in waiting:
            waiting.pop(e["replica"])["records"] = e["last_offset"] - e["first_offset"] + 1
        elif kind == "FollowerFetch" and e["replica"] in waiting:
            waiting.pop(e["replica"])["records"] = 0
        elif kind == "FetchError" or _resets_fetch(e):
            waiting.pop(e["replica"], None)
    return out


def _what_crashes_kept(mine):
    """Give each Crash what the replica's log and high watermark were after it, when the trace shows it.

    The spec's Crash keeps any prefix of the log and any high watermark
    checkpoint below: with a log of n records, about n*n/2 states, carried
    by TLC until something rules them out (a killed leader with 200 records:
    20,000 states per later step). The trace shows what the crash kept: the
    Restart's log end offset when logged, and the replica's first
    BecomeLeader/BecomeFollower after it (neither changes the log or the
    high watermark in the spec). A replica that never comes back keeps
    everything (keep_all): nothing later reads its log, so every choice is
    equivalent and one is enough. (The simulator's own Crash events carry
    the log end offset before the crash; the kept one is `kept_log_end_offset`.)
    """
    out = [(dict(e), origin) for e, origin in mine]
    for i, (e, _) in enumerate(out):
        if e["type"] != "Crash":
            continue
        r = e["replica"]
        restarted = False
        for later, _ in out[i + 1:]:
            if later.get("replica") != r:
                continue
            if later["type"] == "Crash":
                break
            if later["type"] == "Restart":
                restarted = True
                if "log_end_offset" in later:
                    e["kept_log_end_offset"] = later["log_end_offset"]
            elif restarted and later["type"] in ("BecomeLeader", "BecomeFollower"):
                e["kept_log_end_offset"] = later["log_end_offset"]
                e["kept_high_watermark"] = later["high_watermark"]
                break
        if not restarted:
            e["keep_all"] = True
    return out


def _creation_as_election(mine, replicas):
    """A partition created in epoch 0 has no election event: the spec's first ElectLeader stands for it."""
    for e, _ in mine:
        if e["type"] in ELECTIONS:
            if e["leader_epoch"] != 0:
                # No replica applied the partition's creation (its leader was down or shutting down) and
                # the trace holds no PartitionRecord (written before the controller logged one, or the
                # controller's file is missing): the first step is a later election.
                raise TraceError(f"the trace starts in leader epoch {e['leader_epoch']} of the partition (an "
                                 "election; no replica applied its creation and the trace holds no "
                                 "PartitionRecord): a check must start at its creation (epoch 0)")
            return mine
        if e["type"] in ("BecomeLeader", "BecomeFollower"):
            if e["leader_epoch"] != 0:
                raise TraceError(f"the trace starts in leader epoch {e['leader_epoch']} of the partition: "
                                 "a check must start at its creation (epoch 0)")
            if e["partition_epoch"] != 0:
                # An isr change (a broker fenced or shut down under control while the partition was being
                # created) before any replica applied the creation: its registration is not in the trace.
                raise TraceError(f"the trace starts at partition epoch {e['partition_epoch']} of the partition "
                                 "(no replica applied its creation and the trace holds no PartitionRecord): a "
                                 "check must start at its creation (epoch 0)")
            leader = e["replica"] if e["type"] == "BecomeLeader" else e["leader"]
            # (the replicas it was created on, which a reassignment may change later: the spec's Init
            # takes them, TraceReplication's TraceInit)
            created = {"type": "ElectLeader", "replica": 0, "leader": leader, "leader_epoch": 0,
                       "partition_epoch": e["partition_epoch"], "isr": list(e["isr"]),
                       "replicas": list(e.get("replicas") or replicas)}
            return [(created, "synthetic: the partition's creation")] + mine
    return mine


def tla_value(key: str | None, v: Any) -> str:
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)  # TLA+ strings: double quotes, backslash escapes
    if isinstance(v, (list, tuple)):
        inner = ", ".join(tla_value(None, x) for x in v)
        return "{" + inner + "}" if key in SET_FIELDS else "<<" + inner + ">>"
    if isinstance(v, dict):
        return "[" + ", ".join(f"{k} |-> {tla_value(k, x)}" for k, x in sorted(v.items())) + "]"
    if v is None:
        return "-1"
    raise TraceError(f"cannot write {v!r} as TLA+")


def tla_record(step: dict[str, Any]) -> str:
    # Fields that hold a single replica id as a set in the spec (ShrinkIsr's out) stay sets.
    return tla_value(None, {k: v for k, v in step.items()})

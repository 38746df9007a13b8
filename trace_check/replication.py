"""From NDJSON trace events to the steps of spec/TraceReplication.tla.

Theory of operation. The replica cores, the controller core and the
simulator's fault injector log events named after spec actions. This module
turns the events of one partition into the list of steps the trace spec
walks, each a flat record of the fields the spec's matchers read, and
renders that list as TLA+.

What is not one-to-one, and why (docs/trace-validation.md has the table):

- Broker registration and heartbeats (RegisterBroker, BrokerHeartbeat) and
  produce acknowledgements (ProduceAcknowledged) have no action in the
  replication spec: they are left out. Fencing and unfencing before the
  partition exists are left out too: the spec starts with every broker
  registered and unfenced (its Init).
- A partition is created with leader epoch 0 without an election event; the
  spec's first ElectLeader is that creation, so a synthetic ElectLeader is
  put before the partition's first event.
- A follower fetch that failed (FollowerFetch followed by FetchError for the
  same follower, nothing answered in between) changes nothing the spec
  tracks; both events are dropped. kref's fetcher may send a fetch before
  the broker it names has applied its leadership, which the spec's
  FollowerFetch does not allow.
- Network faults of the simulator (messages dropped, duplicated, links cut,
  pauses) are not in the replication spec: a trace holding them is refused
  with that reason, not checked with holes in it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from kref.trace.sink import read_ndjson_runs

# Event types the trace spec has a matcher for.
SPEC_ACTIONS = frozenset({
    "LeaderAppend", "AdvanceHighWatermark", "LeaderHandleFetch", "FollowerFetch", "FetchError",
    "FollowerAppend", "TruncateToEpochEndOffset", "ShrinkIsr", "ExpandIsr", "HandleAlterPartitionResponse",
    "BecomeLeader", "BecomeFollower", "ElectLeader", "ElectPreferredLeader", "UncleanElectLeader",
    "FenceBroker", "UnfenceBroker", "Crash", "Restart",
})
# Events with no replication-spec action, left out on purpose (see above).
NOT_IN_SPEC = frozenset({"RegisterBroker", "BrokerHeartbeat", "ProduceAcknowledged", "TraceRun"})
# Faults the spec does not model: a trace holding one is refused.
UNMODELLED_FAULTS = frozenset({"MessageDropped", "MessageDuplicated", "Partition", "Heal", "Pause", "Resume"})
BROKER_EVENTS = frozenset({"FenceBroker", "UnfenceBroker"})
NODE_EVENTS = frozenset({"Crash", "Restart"})
ELECTIONS = frozenset({"ElectLeader", "ElectPreferredLeader", "UncleanElectLeader"})
# Fields read as sets by the spec (everything else list-valued is a sequence).
SET_FIELDS = frozenset({"isr", "removed"})

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


def load_events(paths: Iterable[str | os.PathLike[str]]) -> list[tuple[dict[str, Any], str]]:
    """Every event of every file (the last run of each), merged in one order, with its origin."""
    merged: list[tuple[tuple, dict[str, Any], str]] = []
    for file_no, path in enumerate(paths):
        try:
            runs = read_ndjson_runs(path)
        except OSError as exc:
            raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}: not NDJSON (line {exc.lineno}: {exc.msg})") from None
        events = runs[-1].events if runs else []
        # The last run ends the file: its events are the file's last lines, so
        # origins name real line numbers (after run headers and earlier runs).
        with open(path, "rb") as fh:
            first_line = sum(1 for ln in fh if ln.strip()) - len(events)
        for n, e in enumerate(events):
            if not isinstance(e, dict) or "type" not in e:
                raise TraceError(f"{path}: event {n + 1} has no type")
            clock = e.get("mono_ns")
            key = (0, clock, file_no, n) if clock is not None else (1, e.get("time_ms", 0), file_no, n)
            merged.append((key, e, f"{os.fspath(path)}:{first_line + n + 1}"))
    if any(k[0] == 0 for k, _, _ in merged) and any(k[0] == 1 for k, _, _ in merged):
        raise TraceError("some events carry mono_ns and some do not: cannot merge them into one order")
    merged.sort(key=lambda t: t[0])
    return [(e, origin) for _, e, origin in merged]


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
    started = False
    for e, origin in events:
        kind = e["type"]
        if kind in NOT_IN_SPEC:
            skipped[kind] = skipped.get(kind, 0) + 1
            continue
        if kind not in SPEC_ACTIONS:
            raise TraceError(f"{origin}: unknown event type {kind!r}")
        if kind in NODE_EVENTS or kind in BROKER_EVENTS:
            if started:
                mine.append((e, origin))
            else:
                skipped[kind] = skipped.get(kind, 0) + 1
            continue
        if (e.get("topic"), e.get("partition")) != (topic, partition):
            continue
        started = True
        mine.append((e, origin))

    replicas: set[int] = set()
    for e, _ in mine:
        replicas.update(e.get("replicas") or ())
    if not replicas:
        replicas = {e["replica"] for e, _ in mine if e["type"] not in ELECTIONS | BROKER_EVENTS}
    mine = _drop_failed_fetches(mine, skipped)
    mine = _creation_as_election(mine, sorted(replicas))

    out = Steps(topic=topic, partition=partition, replicas=sorted(replicas), values=0,
                unclean=any(e["type"] == "UncleanElectLeader" for e, _ in mine), skipped=skipped)
    for e, origin in mine:
        step = {k: v for k, v in e.items() if k not in ("time_ms", "mono_ns", "seq", "topic", "partition")}
        if e["type"] == "LeaderAppend":
            out.values += e["last_offset"] - e["first_offset"] + 1
        out.steps.append(step)
        out.origin.append(origin)
    if len(out.steps) > MAX_STEPS:
        raise TraceError(f"{len(out.steps)} steps for {topic}-{partition}: more than {MAX_STEPS} "
                         "(split the run, or check a shorter one)")
    return out


def _drop_failed_fetches(mine, skipped):
    """Drop each FollowerFetch whose next fetch event for that follower is a FetchError, and the error."""
    drop: set[int] = set()
    pending: dict[int, int] = {}  # follower -> index of its unanswered FollowerFetch
    for i, (e, _) in enumerate(mine):
        kind = e["type"]
        if kind == "FollowerFetch":
            pending[e["replica"]] = i
        elif kind == "LeaderHandleFetch":
            pending.pop(e["follower"], None)
        elif kind == "FetchError":
            j = pending.pop(e["replica"], None)
            if j is not None:
                drop.update((i, j))
        elif kind in ("Crash", "BecomeLeader", "BecomeFollower"):
            pending.pop(e["replica"], None)
    if drop:
        skipped["FollowerFetch+FetchError (failed fetch)"] = len(drop) // 2
    return [x for i, x in enumerate(mine) if i not in drop]


def _creation_as_election(mine, replicas):
    """A partition created in epoch 0 has no election event: the spec's first ElectLeader stands for it."""
    for e, _ in mine:
        if e["type"] in ELECTIONS:
            return mine
        if e["type"] in ("BecomeLeader", "BecomeFollower"):
            if e["leader_epoch"] != 0:
                raise TraceError(f"the trace starts in leader epoch {e['leader_epoch']} of the partition: "
                                 "a check must start at its creation (epoch 0)")
            leader = e["replica"] if e["type"] == "BecomeLeader" else e["leader"]
            created = {"type": "ElectLeader", "replica": 0, "leader": leader, "leader_epoch": 0,
                       "partition_epoch": e["partition_epoch"], "isr": list(e["isr"]), "replicas": replicas}
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

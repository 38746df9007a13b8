"""From the KRaft quorum's NDJSON trace events to the steps of spec/TraceKRaft.tla.

Theory of operation. The quorum core (kref/controller/quorum.py) logs one
event per spec/KRaft.tla action it takes (kref/trace/kraft.py), carrying the
node's post-state under the spec's names. Each voter writes its own file
(`kref broker --trace-file`); this module merges the files by their shared
clock (replication.load_events: CLOCK_MONOTONIC on one machine), keeps the
voters' quorum events, and makes three adjustments, each a re-reading of
what was logged, never a change of it (docs/trace-validation.md, KRaft):

- Lives. A kill -9 logs nothing; a node's file holds one run per start of
  its process. Where a run of a voter is followed by another, a Crash and a
  Restart are put just before the new run's first event (as late as the
  trace allows: until then the spec may keep the dead node alive and silent).
- Late deliveries. Votes are messages in the spec (a voter's GrantVote or
  GrantPreVote handles the candidate's VoteRequest whenever it arrives, and
  the candidate's receipt of the grant is a silent step), so they are taken
  where they were logged. So is a fetch answer with records (the spec's
  FetchResponsesInFlight, on in trace validation): the leader logs nothing
  when it answers, so a SendFetchResponse step of the take's leader is put
  in at the latest point before the take where that leader still led the
  epoch and the follower's log ended at the fetch offset (_place_fetch_sends);
  the take stays where it was logged, even after the leader resigned.
  Every other RPC is one atomic step in the spec,
  but a node logs the response when it applies it, which may be after the
  sender moved on (records appended after their leader resigned, an epoch
  learnt from a node that has since moved further). The timestamps give one
  linearisation of the run; any other that keeps each node's own order and
  puts each step after what it needed is the same run. So an event whose
  peer is no longer in the state the event needs (the leader a Leader of
  that epoch whose log, for a
  fetch of records, did not yet start past the fetch offset, the node
  whose higher epoch was learnt in that epoch) is moved, with the other events of its
  node's same core step, back to the latest point where the peer still was,
  provided no event of its own node lies in between. Otherwise it stays
  where it is, and TLC rejects it.
- Broker membership. The controller's RegisterBroker (a broker's first
  registration or a new incarnation's), FenceBroker, UnfenceBroker,
  BrokerHeartbeat and ControlledShutdown events are the spec's actions of
  those names; what they rest on is not logged, so the converter puts an
  ExpireBrokerSession before each FenceBroker and a BrokerFetchMetadata
  before each UnfenceBroker (each may also change nothing, see
  spec/TraceKRaft.tla).
- Metadata records. Topic, partition, config and partition-change records
  are written by the active controller without a quorum event. Where a
  leader's logged log end offset (or a RegisterBroker's broker epoch, the
  record's offset), or a follower's fetch from it, shows more records than
  its logged steps appended, one AppendMetadata step per record is put
  right after that leader's previous step (the earliest it can have written
  them, so that a follower's fetch of them finds them). A node that was not a leader at its previous step
  gets none: its event is then rejected at its own line.
- Snapshots. CreateSnapshot, AdvanceLogStart and InstallSnapshot are
  logged by the core under the spec's names and taken as they are; an
  install is a follower's step with its leader as the peer (a late
  delivery like a fetch, above), and a leader's records it shows are
  inferred like a fetch's.
- Epochs through observers. A voter that learns a higher epoch from an
  observer's Fetch (observers are not nodes of the spec) is taken to have
  learnt it from the voter that last logged that epoch, from whom the
  observer had it.
- What the spec does not model is left out and counted: observers' quorum
  events (brokers fetch the metadata log but do not vote) and every other
  partition's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from kref.trace.kraft import KRAFT_EVENT_TYPES, METADATA_TOPIC
from trace_check.replication import TraceError, _read_runs, load_events

# The broker-membership events of the controller (kref/controller/controller.py), spec/KRaft.tla's
# actions of the same names; `replica` is the controller, `broker` the broker.
MEMBERSHIP = frozenset({"RegisterBroker", "FenceBroker", "UnfenceBroker", "BrokerHeartbeat", "ControlledShutdown"})
# Membership writes: each appends one record to the controller's log.
WRITES = frozenset({"RegisterBroker", "FenceBroker", "UnfenceBroker"})
# Steps the converter puts in (origin "inferred: ..."): a session that ran out (before a FenceBroker),
# the broker's metadata fetch (before an UnfenceBroker), a record no event names (AppendMetadata).
# SendFetchResponse: a leader's answer with records to a follower's Fetch (the take is logged, the send
# is not; spec/KRaft.tla's FetchResponsesInFlight).
INFERRED = frozenset({"ExpireBrokerSession", "BrokerFetchMetadata", "AppendMetadata", "SendFetchResponse"})
# The quorum events spec/TraceKRaft.tla has a matcher for (all of kref/trace/kraft.py's).
SPEC_ACTIONS = frozenset(KRAFT_EVENT_TYPES) | MEMBERSHIP | INFERRED | {"Crash", "Restart"}
NOT_QUORUM = MEMBERSHIP | INFERRED | {"Crash", "Restart"}  # steps that carry no quorum post-state
# A TLC run over more steps than this takes minutes: refuse, never run for hours.
MAX_STEPS = 2_000
# How many steps (core steps of any node) back a late delivery may be taken.
LOOKBACK = 64
LATE = " (taken before its timestamp: delivered late)"
NIL = -1


@dataclass
class KRaftSteps:
    """The steps of one quorum's trace; tlc.check renders them through module_text/config_text."""

    voters: list[int]
    voters_inferred: bool = False  # the voters are the ones the trace shows, not given (--voters)
    brokers: list[int] = field(default_factory=list)  # brokers named by the membership events
    stopped: str = ""  # the event the check stopped before (not in the spec), "" = the whole trace
    steps: list[dict[str, Any]] = field(default_factory=list)
    origin: list[str] = field(default_factory=list)  # per step: "file:line" of its event, or "inferred: ..."
    skipped: dict[str, int] = field(default_factory=dict)
    moved: int = 0  # events taken earlier than their timestamp (late deliveries)
    pre_vote: bool = False  # KIP-996: the cores pre-voted (spec: PreVoteEnabled)

    spec = "spec/KRaft.tla"

    def where(self) -> str:
        how = " as the trace shows them (--voters to name them)" if self.voters_inferred else ""
        return f"{METADATA_TOPIC}-0, voters {self.voters}{how}"

    # What trace_check.tlc needs to run a batch of these (its TraceLogs protocol, shared with
    # spec/TraceReplication.tla): the trace spec, the root module, the constants, the batch key.
    trace_spec = "TraceKRaft.tla"

    def batch_key(self) -> tuple:
        return "kraft", tuple(self.voters), tuple(self.brokers), self.pre_vote

    def batch_module_text(self, batch: list[KRaftSteps]) -> str:
        return "\n".join([
            "---------------------------- MODULE TraceRun ----------------------------",
            "EXTENDS TraceKRaft, TraceData",
            f"GenVoters == {{{', '.join(str(v) for v in self.voters)}}}",
            f"GenBrokers == {{{', '.join(str(b) for b in self.brokers)}}}",
            "GenNil == -1  \\* kref's NO_ID (a .cfg cannot hold a negative number)",
            "=" * 76, ""])

    def batch_config_text(self, batch: list[KRaftSteps], show_state: Iterable[int]) -> str:
        return "\n".join([
            "CONSTANTS",
            "    TraceLogs <- GenLogs",
            f"    TraceShowState = {{{', '.join(str(i + 1) for i in sorted(show_state))}}}",
            "    Voters <- GenVoters",
            "    Nil <- GenNil",
            "    Brokers <- GenBrokers",
            "    CheckLogUpToDate = TRUE",
            "    CommitOnlyOwnEpoch = TRUE",
            f"    PreVoteEnabled = {'TRUE' if self.pre_vote else 'FALSE'}",
            "    FetchResponsesInFlight <- TFetchResponsesInFlight",
            "INIT TraceInit",
            "NEXT TraceNext",
            "CONSTRAINT TraceProgress",
            "",
        ])


def has_quorum_events(events: list[tuple[dict[str, Any], str]]) -> bool:
    """True when the events hold the controller quorum's steps (spec/KRaft.tla's to check)."""
    return any(e.get("topic") == METADATA_TOPIC and e["type"] in KRAFT_EVENT_TYPES for e, _ in events)


def load(paths: Iterable[str]) -> list[tuple[dict[str, Any], str]]:
    """Every event of every file in one order, with a Crash and a Restart between a voter's runs."""
    paths = list(paths)
    run_of: dict[str, int] = {}  # "file:line" -> index of its run in the file
    for path in paths:
        for run, (_, events) in enumerate(_read_runs(path)):
            for number, _ in events:
                run_of[f"{path}:{number}"] = run
    merged = [(e, o) for e, o in load_events(paths) if not o.startswith("inferred:")]
    out: list[tuple[dict[str, Any], str]] = []
    seen_run: dict[str, int] = {}  # file -> run of its latest quorum event
    last: dict[int, dict[str, Any]] = {}  # voter -> its latest quorum event
    for e, origin in merged:
        if e.get("topic") != METADATA_TOPIC or e["type"] not in KRAFT_EVENT_TYPES:
            out.append((e, origin))
            continue
        path = origin.rsplit(":", 1)[0]
        run = run_of.get(origin, 0)
        node = e["replica"]
        if path in seen_run and run > seen_run[path] and node in last:
            before = last[node]
            out.append(({"type": "Crash", "replica": node},
                        f"inferred: node {node}'s run ended (killed) before {origin}"))
            out.append(({"type": "Restart", "replica": node, "restored": _restart_state(node, before)},
                        f"inferred: node {node} started again (a new run in its file) at {origin}"))
        seen_run[path] = run
        last[node] = e
        out.append((e, origin))
    return out


def _restart_state(node: int, e: dict[str, Any]) -> str:
    """KRaft.tla's RestartState, from the node's last logged post-state (its quorum-state file)."""
    if e["leader_id"] == node:
        return "Resigned"
    if e["leader_id"] != NIL:
        return "Follower"
    return "Candidate" if e["voted_for"] == node else "Unattached"


def _configured_voters(events) -> set[int] | None:
    """The configured voters (controller.quorum.voters) as RequestVote and BecomeActiveController
    carry them; None when no event does (traces written before they did). Events that disagree
    are refused: one quorum has one voter set (KIP-853's changes are not in the spec)."""
    sets = {frozenset(e["voters"]) for e, _ in events
            if e.get("topic") == METADATA_TOPIC and e["type"] in ("RequestVote", "PreVote", "BecomeActiveController")
            and e.get("voters")}
    if len(sets) > 1:
        raise TraceError(f"the events name different voter sets {sorted(map(sorted, sets))}: "
                         "spec/KRaft.tla has one static voter set")
    return set(next(iter(sets))) if sets else None


def _voters(events) -> set[int]:
    """The voters as the trace shows them, when no event names the configured ones: whoever stood,
    voted, led, or was counted by a leader.

    A voter that never logs a step is missing, and a majority is then counted over fewer voters
    (3 of 5 seen: 2 votes would pass): `--voters` names them all, and the report says which it used."""
    found: set[int] = set()
    for e, _ in events:
        kind = e["type"]
        if e.get("topic") != METADATA_TOPIC or kind not in KRAFT_EVENT_TYPES:
            continue
        if kind in ("RequestVote", "PreVote", "GrantVote", "GrantPreVote", "BecomeActiveController", "Resign"):
            found.add(e["replica"])
        found.update(e.get("votes_granted") or ())
        if kind in ("GrantVote", "GrantPreVote"):
            found.add(e["candidate"])
        found.update(int(v) for v in (e.get("end_offsets") or {}))
        if e.get("state") in ("Candidate", "Leader", "Resigned") or e.get("voted_for", NIL) != NIL:
            found.add(e["replica"])
    return found


def normalise(events: list[tuple[dict[str, Any], str]], voters: Iterable[int] | None = None) -> KRaftSteps:
    """The voters' quorum steps, in an order the spec can take them (see the theory of operation)."""
    configured = _configured_voters(events) if voters is None else None
    voter_set = set(voters) if voters is not None else configured or _voters(events)
    if not voter_set:
        raise TraceError("no quorum events of a voter in the trace (spec/KRaft.tla checks the controller quorum)")
    skipped: dict[str, int] = {}
    mine: list[tuple[dict[str, Any], str]] = []
    for e, origin in events:
        kind = e["type"]
        if kind in ("Crash", "Restart") and e["replica"] in voter_set:
            if kind == "Restart" and "restored" not in e:  # the simulator's own Restart
                before = next((x for x, _ in reversed(mine) if x["replica"] == e["replica"]
                               and x["type"] not in NOT_QUORUM), None)
                e = {**e, "restored": _restart_state(e["replica"], before) if before else "Unattached"}
            mine.append((e, origin))
        elif kind in MEMBERSHIP and e.get("topic") == METADATA_TOPIC and e["replica"] in voter_set:
            mine.append((e, origin))
        elif e.get("topic") != METADATA_TOPIC or kind not in KRAFT_EVENT_TYPES:
            what = "other partitions' events" if e.get("topic") not in (None, METADATA_TOPIC) else kind
            skipped[what] = skipped.get(what, 0) + 1
        elif e["replica"] not in voter_set:
            skipped["observers' quorum events"] = skipped.get("observers' quorum events", 0) + 1
        else:
            if kind == "BecomeUnattached" and e["source"] not in voter_set:
                e, origin = _learnt_through_observer(e, origin, mine)
            mine.append((e, origin))
    mine = _infer_metadata_appends(mine)
    mine = _infer_membership_steps(mine)
    ordered, moved = _linearise(mine)
    ordered = _place_fetch_sends(ordered)
    brokers = sorted({e["broker"] for e, _ in mine if e["type"] in MEMBERSHIP})
    out = KRaftSteps(voters=sorted(voter_set), voters_inferred=voters is None and configured is None, brokers=brokers,
                     skipped=skipped, moved=moved, pre_vote=uses_pre_vote(events))
    for e, origin in ordered:
        step = {k: v for k, v in e.items() if k not in ("time_ms", "mono_ns", "seq", "topic", "partition",
                                                          "end_offsets", "restored")}
        if e["type"] == "AdvanceHighWatermark":
            offsets = {int(k): v for k, v in (e.get("end_offsets") or {}).items()}
            step["fetched"] = [[v, offsets.get(v, 0)] for v in out.voters if v != e["replica"]]
        out.steps.append(step)
        out.origin.append(origin)
    if len(out.steps) > MAX_STEPS:
        raise TraceError(f"{len(out.steps)} quorum steps: more than {MAX_STEPS} for one TLC run "
                         "(check a shorter run)")
    return out


def uses_pre_vote(events) -> bool:
    """Whether the cores ran with KIP-996 pre-vote: a pre-vote round was logged, or a RequestVote says so."""
    return any(e.get("topic") == METADATA_TOPIC and (e["type"] in ("PreVote", "GrantPreVote") or e.get("pre_vote"))
               for e, _ in events)


def _learnt_through_observer(e, origin, mine):
    """A voter learnt a higher epoch from an observer's Fetch (an observer is no node of the spec):
    the observer had it from a voter in that epoch, so the step is taken as from that voter (the
    latest to have logged that epoch), as if the observer had carried the voter's message."""
    for x, _ in reversed(mine):
        if (x["replica"] != e["replica"] and x["type"] not in NOT_QUORUM
                and x["leader_epoch"] == e["leader_epoch"]):
            return ({**e, "source": x["replica"]},
                    f"{origin} (epoch learnt from observer {e['source']}: taken as from voter {x['replica']})")
    return e, origin


def _infer_metadata_appends(mine):
    """One AppendMetadata per record a leader wrote that no event names (see the theory of operation)."""
    out: list[tuple[dict[str, Any], str]] = []
    leo: dict[int, int] = {}  # node -> its log end offset as the spec will have it after its steps so far
    anchor: dict[int, int] = {}  # node -> index in out just after its latest step as a leader

    def append_at(node: int, count: int, origin: str) -> None:
        at = anchor[node]
        why = (f"inferred: AppendMetadata by leader {node} (a record no event names: "
               f"{count} shown by {origin})")
        out[at:at] = [({"type": "AppendMetadata", "replica": node, "time_ms": None}, why)] * count
        for n, i in anchor.items():
            if i >= at and n != node:
                anchor[n] = i + count
        anchor[node] = at + count

    for e, origin in mine:
        node, kind = e["replica"], e["type"]
        if kind in ("Crash", "Restart", "BrokerHeartbeat", "ControlledShutdown"):
            out.append((e, origin))
            continue
        if kind in WRITES:
            if kind == "RegisterBroker" and node in anchor and e["broker_epoch"] > leo.get(node, 0):
                append_at(node, e["broker_epoch"] - leo.get(node, 0), origin)
            leo[node] = (e["broker_epoch"] if kind == "RegisterBroker" else leo.get(node, 0)) + 1
            out.append((e, origin))
            anchor[node] = len(out)
            continue
        expected = leo.get(node, 0) + (1 if kind == "BecomeActiveController" else 0)
        if (kind not in ("FetchFromLeader", "TruncateToEpochEndOffset") and node in anchor
                and e["log_end_offset"] > expected):
            append_at(node, e["log_end_offset"] - expected, origin)
        leader = e.get("leader_id")
        if (kind in ("FetchFromLeader", "InstallSnapshot") and leader in anchor and leader != node
                and e["log_end_offset"] > leo.get(leader, 0)):
            # The follower holds records (or a snapshot of them) its leader logged no step for
            # yet (the leader may log none again: stopped or killed before its next event): the
            # leader wrote them.
            count = e["log_end_offset"] - leo[leader]
            append_at(leader, count, origin)
            leo[leader] += count
        leo[node] = e["log_end_offset"]
        out.append((e, origin))
        if e["state"] == "Leader":
            anchor[node] = len(out)
        else:
            anchor.pop(node, None)
    return out


def _infer_membership_steps(mine):
    """Put the spec's unlogged membership steps where the trace needs them: the broker's session
    expired before a FenceBroker and before a new incarnation's RegisterBroker, the broker fetched
    the metadata log before an UnfenceBroker."""
    out = []
    registered: set[int] = set()  # brokers registered so far (at any controller: the log is shared)
    for e, origin in mine:
        again = e["type"] == "RegisterBroker" and e["broker"] in registered
        if e["type"] == "RegisterBroker":
            registered.add(e["broker"])
        if e["type"] in ("FenceBroker", "UnfenceBroker") or again:
            # A new incarnation registers once the old one's session is over (or it is refused).
            kind = "BrokerFetchMetadata" if e["type"] == "UnfenceBroker" else "ExpireBrokerSession"
            out.append(({"type": kind, "replica": e["replica"], "broker": e["broker"], "time_ms": None},
                        f"inferred: {kind} of broker {e['broker']} before {origin}"))
        out.append((e, origin))
    return out


def _with_records(e: dict[str, Any]) -> bool:
    """A follower's take of a fetch answer that carried records: a message in flight (the leader's
    SendFetchResponse is put in by _place_fetch_sends), not an atomic step."""
    return e["type"] == "FetchFromLeader" and e["log_end_offset"] > e["first_offset"]


def _place_fetch_sends(flat):
    """Before each take of a fetch answer with records, the leader's send of it (logged by nobody):
    at the latest point before the take where the leader still led the take's epoch and the
    follower, following (or, as a prospective, still knowing) that leader, had its log end at the
    fetch offset. A take of an answer no such point allows gets its send just before it, where
    TLC rejects it (the leader led no more, or never sent it)."""
    out: list[tuple[dict[str, Any], str]] = []
    for e, origin in flat:
        if _with_records(e) and e["leader_id"] != e["replica"]:
            at = _send_point(out, e)
            where = "" if at == len(out) else " (the leader's last point in its leadership: answered, taken late)"
            send = {"type": "SendFetchResponse", "replica": e["leader_id"], "follower": e["replica"],
                    "leader_epoch": e["leader_epoch"], "first_offset": e["first_offset"],
                    "log_end_offset": e["log_end_offset"], "time_ms": None}
            out.insert(at, (send, f"inferred: leader {e['leader_id']}'s answer with records "
                                  f"[{e['first_offset']}, {e['log_end_offset']}) to {origin}{where}"))
        out.append((e, origin))
    return out


def _send_point(out, take) -> int:
    leader, follower, epoch = take["leader_id"], take["replica"], take["leader_epoch"]
    # The quorum events of the two nodes (and their lives), by index: the state before position k
    # is that of the last of them before k, so only k = len(out) and k = each of their indices
    # (just before that event) need trying, latest first.
    marks = [i for i, (x, _) in enumerate(out)
             if x["replica"] in (leader, follower) and x["type"] not in MEMBERSHIP | INFERRED]

    def before(node: int, k: int) -> dict[str, Any] | None:
        """The node's post-state before position k (a restarted node's: as it restored it); None: down."""
        restored = None
        for i in reversed(marks):
            if i < k and out[i][0]["replica"] == node:
                x = out[i][0]
                if x["type"] == "Crash":
                    if restored is None:
                        return None  # down
                    continue  # the crash before the restart seen already
                if x["type"] == "Restart":
                    restored = restored or x["restored"]
                    continue
                return {**x, "state": restored} if restored else x
        return None

    def start(node: int, k: int) -> int:
        for i in reversed(marks):
            x = out[i][0]
            if i < k and x["replica"] == node and x["type"] in ("AdvanceLogStart", "InstallSnapshot"):
                return x.get("log_start_offset", x.get("snapshot_end_offset", 0))
        return 0

    for k in [len(out)] + list(reversed(marks)):
        if k < len(out) and out[k][0]["replica"] == follower and out[k][0]["type"] == "Crash":
            break  # an answer on its way to the follower is lost when it crashes (KRaft.tla's Crash)
        lead, fol = before(leader, k), before(follower, k)
        if (lead is not None and fol is not None
                and lead["leader_epoch"] == epoch and lead["state"] == "Leader"
                and fol["leader_epoch"] == epoch and fol["leader_id"] == leader
                and fol["state"] in ("Follower", "Prospective")
                and fol["log_end_offset"] == take["first_offset"]
                and start(leader, k) <= take["first_offset"]):  # else it answers with its snapshot
            return k
        if fol is not None and fol["leader_epoch"] < epoch:
            break  # the follower was not in the epoch yet: no earlier point can be
    return len(out)


# What an event needs of its peer, in the spec's pre-state: (peer, epoch, states the peer may be in;
# None: any live state).  A take of an answer with records needs nothing of its leader (the answer
# is a message, _place_fetch_sends); a BeginQuorumEpoch needs its leader up and to have led the epoch
# (any state now: KRaft.tla's LedEpochs, see _ok).
def _needs(e: dict[str, Any]) -> tuple[int, int, frozenset[str] | None] | None:
    kind = e["type"]
    if _with_records(e) or kind == "BeginQuorumEpoch":
        return None
    # GrantVote and GrantPreVote need no state of their candidate: the request they handle is a
    # message the candidate sent before (spec/KRaft.tla's VoteRequest), whatever it became since
    # (_ok checks that it was sent).
    if kind == "BecomeUnattached":
        return e["source"], e["leader_epoch"], None
    if kind in ("FetchFromLeader", "TruncateToEpochEndOffset", "InstallSnapshot"):
        return e["leader_id"], e["leader_epoch"], frozenset({"Leader"})
    return None


def _status_after(e: dict[str, Any]) -> tuple[int, str] | None:
    """(leader_epoch, state) of the node after its event; None = down; Restart keeps the epoch."""
    if e["type"] == "Crash":
        return None
    if e["type"] == "Restart":
        return (-1, e["restored"])
    return e["leader_epoch"], e["state"]


def _linearise(mine):
    """Move each late-delivered event (with its core step's other events) back to where its peer still was."""
    groups: list[list[tuple[dict[str, Any], str]]] = []
    open_group: dict[int, int] = {}  # node -> index in groups of its current step's group
    for e, origin in mine:
        node = e["replica"]
        g = open_group.get(node)
        prev = groups[g][-1][0] if g is not None else None
        # One core step is one group even when another node's events were written between its
        # events: it happened at once, where its first event is.
        if g is not None and (e["type"] == "AppendMetadata" or _same_step(prev, e)):
            groups[g].append((e, origin))
        else:
            groups.append([(e, origin)])
            open_group[node] = len(groups) - 1

    out: list[list[tuple[dict[str, Any], str]]] = []
    moved = 0
    for group in groups:
        node = group[0][0]["replica"]
        if _ok(out, group, len(out)):
            out.append(group)
            continue
        for j in range(len(out) - 1, max(-1, len(out) - 1 - LOOKBACK), -1):
            # The node's own groups since j move back with it (its order kept); the other nodes'
            # groups since j follow, each still finding its peers as it needs them.
            own = [g for g in out[j:] if g[0][0]["replica"] == node]
            rest = [g for g in out[j:] if g[0][0]["replica"] != node]
            candidate = out[:j] + own + [group] + rest
            moving = range(j, j + len(own) + 1)
            fine_before = {id(g) for k, g in enumerate(out[j:], j) if _ok(out, g, k)}
            if all(_ok(candidate, candidate[k], k) for k in moving) and all(
                    _ok(candidate, g, k) for k, g in enumerate(candidate[j + len(own) + 1:], j + len(own) + 1)
                    if id(g) in fine_before):
                late = [[(e, o if o.endswith(LATE) else o + LATE) for e, o in g] for g in own + [group]]
                out = out[:j] + late + rest
                moved += 1
                break
        else:
            out.append(group)
    return [x for group in out for x in group], moved


def _same_step(prev: dict[str, Any], e: dict[str, Any]) -> bool:
    """Whether e was emitted by the same core step as prev (the node's event just before it): same
    now_ms, and a pair one step emits (a higher epoch learnt, then the vote or the following; a
    follower's BeginQuorumEpoch, then what the fetch response brought; a single voter's election).
    Two steps at one now_ms (the simulator's clock) stay apart."""
    if prev.get("time_ms") is None or prev.get("time_ms") != e.get("time_ms"):
        return False
    pair = (prev["type"], e["type"])
    if pair in (("BecomeUnattached", "GrantVote"), ("BecomeUnattached", "GrantPreVote")):
        return e["candidate"] == prev["source"]
    if pair == ("PreVote", "RequestVote"):
        return True  # a single voter's pre-vote is its own majority
    if pair in (("BecomeUnattached", "BeginQuorumEpoch"), ("BeginQuorumEpoch", "FetchFromLeader"),
                ("BeginQuorumEpoch", "TruncateToEpochEndOffset")):
        return e["leader_epoch"] == prev["leader_epoch"]
    return pair == ("RequestVote", "BecomeActiveController")


def _status(seq, node: int, k: int) -> tuple[int, str] | None:
    """(leader_epoch, state) of `node` before position k of seq (None: down)."""
    for i in range(k - 1, -1, -1):
        for e, _ in reversed(seq[i]):
            if e["replica"] == node and e["type"] not in MEMBERSHIP | INFERRED:
                s = _status_after(e)
                if s is not None and s[0] == -1:  # restarted: the epoch it had when it died
                    return _epoch_before(node, seq[:i]), s[1]
                return s
    return 0, "Unattached"


# The event that sends the vote request a grant handles.
REQUEST_OF = {"GrantVote": "RequestVote", "GrantPreVote": "PreVote"}


def _ok(seq, group, k: int) -> bool:
    """Whether every peer the group's events need is, before position k of seq, as they need it."""
    for e, _ in group:
        if e["type"] in REQUEST_OF and not _sent(seq, e["candidate"], REQUEST_OF[e["type"]], e["leader_epoch"], k):
            return False
        if e["type"] == "BeginQuorumEpoch" and e["leader_id"] != e["replica"] and (
                not _sent(seq, e["leader_id"], "BecomeActiveController", e["leader_epoch"], k)
                or _status(seq, e["leader_id"], k) is None):
            return False
        need = _needs(e)
        if need is None or need[0] == e["replica"]:
            continue
        peer, epoch, states = need
        s = _status(seq, peer, k)
        if s is None or s[0] != epoch or (states is not None and s[1] not in states):
            return False
        if e["type"] == "FetchFromLeader" and _log_start(seq, peer, k) > e["first_offset"]:
            return False  # answered with records before the leader's log start passed them
    return True


def _sent(seq, node: int, kind: str, epoch: int, k: int) -> bool:
    """Whether `node` logged `kind` in `epoch` before position k of seq (it sent that vote request)."""
    return any(e["replica"] == node and e["type"] == kind and e["leader_epoch"] == epoch
               for g in seq[:k] for e, _ in g)


def _log_start(seq, node: int, k: int) -> int:
    """The log start offset of `node` before position k of seq (0: never moved)."""
    for i in range(k - 1, -1, -1):
        for e, _ in reversed(seq[i]):
            if e["replica"] == node and e["type"] in ("AdvanceLogStart", "InstallSnapshot"):
                return e.get("log_start_offset", e.get("snapshot_end_offset", 0))
    return 0


def _epoch_before(node: int, prefix) -> int:
    for g in reversed(prefix):
        for e, _ in reversed(g):
            if e["replica"] == node and e["type"] not in NOT_QUORUM:
                return e["leader_epoch"]
    return 0


# ---------------------------------------------------------------- TLC


def check_and_explain(steps: KRaftSteps, **kwargs):
    """trace_check.tlc.check_and_explain (one TLC run; for a rejected trace a second shows the state)."""
    from trace_check import tlc

    return tlc.check_and_explain(steps, **kwargs)


def check_and_explain_batch(batch: list[KRaftSteps], **kwargs):
    """Many quorum traces, one TLC run per set of voters and brokers (trace_check.tlc)."""
    from trace_check import tlc

    return tlc.check_and_explain_batch(batch, **kwargs)

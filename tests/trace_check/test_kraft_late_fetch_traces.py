"""A KRaft fetch answer taken late: sent by a leader before it resigned, taken after a pre-vote grant.

testdata/kraft-late-fetch: run 2 of tests/controller/test_scale_creation.py in session 13 (seed
351510570, kept in /work/notes/s13/tracegap-runs/scale2, load ~20), cut to the metadata
partition's events (gzip). Voter 3, far behind (log end 701, its leader 2 at 903), fetched from 2;
2 answered with one record and then resigned (SIGTERM). Voter 3 became prospective, granted voter
1's pre-vote (whose request 1 sent after 2 resigned), and only then took 2's answer (logged as
BeginQuorumEpoch and FetchFromLeader: a prospective that hears from its leader follows it again).

When spec/KRaft.tla answered a fetch in one atomic step, the converter had to move the take, with
voter 3's pre-vote and grant, before 2's resignation, and the grant landed before the request it
granted: rejected. Now the answer is a message (FetchResponsesInFlight): the converter puts 2's
unlogged SendFetchResponse where 2 still led, and the take stays where it was logged. The
doctored copies show what that does not excuse: records the leader never had, and an answer of
an older epoch taken after the voter moved to a newer one.
"""

from __future__ import annotations

import pytest

from tests.trace_check.recorded import TESTDATA, events_by_node, write_run
from trace_check import kraft
from trace_check.tlc import check_and_explain_batch

RUN = TESTDATA / "kraft-late-fetch"


def _verdict(tmp_path, nodes):
    steps = kraft.normalise(kraft.load(write_run(tmp_path, nodes)))
    verdict, = check_and_explain_batch([steps], timeout_s=300)
    return steps, verdict


def _late_take(nodes):
    """Voter 3's take of leader 2's last answer (the one it took after granting 1's pre-vote)."""
    return next(e for e in nodes["node-3"] if e["type"] == "FetchFromLeader" and e["first_offset"] == 701)


def test_the_late_answer_is_sent_before_the_resignation_and_taken_after_the_grant(tmp_path):
    nodes = events_by_node(RUN)
    take = _late_take(nodes)
    resign = next(e for e in nodes["node-2"] if e["type"] == "Resign")
    assert take["mono_ns"] > resign["mono_ns"], "the recorded case: the take is logged after the resignation"
    steps, verdict = _verdict(tmp_path, nodes)
    assert verdict.accepted, verdict
    at = {name: i for i, s in enumerate(steps.steps) for name in [_name(s)] if name}
    assert at["send"] < at["resign"] < at["grant"] < at["take"], at
    assert steps.moved == 0  # nothing had to be taken before its timestamp


def _name(s):
    if s["type"] == "SendFetchResponse" and s["follower"] == 3 and s["first_offset"] == 701:
        return "send"
    if s["type"] == "Resign" and s["replica"] == 2:
        return "resign"
    if s["type"] == "GrantPreVote" and s["replica"] == 3 and s["candidate"] == 1 and s["leader_epoch"] == 3:
        return "grant"
    if s["type"] == "FetchFromLeader" and s["replica"] == 3 and s["first_offset"] == 701:
        return "take"
    return None


def test_without_the_sends_the_recorded_run_is_rejected(tmp_path, monkeypatch):
    """The answers with records are messages now: a take with no send before it is no step."""
    monkeypatch.setattr(kraft, "_place_fetch_sends", lambda flat: flat)
    steps, verdict = _verdict(tmp_path, events_by_node(RUN))
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert bad["type"] == "FetchFromLeader" and bad["log_end_offset"] > bad["first_offset"], bad


def test_records_the_leader_never_had_are_rejected(tmp_path):
    """Voter 3's late take doctored to end at 904, one record past leader 2's log end (903): no
    leader sent that answer (the leader's send of it, put in where 2 still led, is no step)."""
    nodes = events_by_node(RUN)
    take = _late_take(nodes)
    take["log_end_offset"] = 904
    steps, verdict = _verdict(tmp_path, nodes)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert (bad["type"], bad.get("follower", bad["replica"])) in (("SendFetchResponse", 3), ("FetchFromLeader", 3)), bad


@pytest.mark.parametrize("as_logged", [True, False])
def test_an_older_epochs_answer_taken_in_a_newer_epoch_is_rejected(tmp_path, as_logged):
    """Voter 3's late take moved after it voted for 1 in epoch 4 (its events in between doctored to
    the log end they have without it): leader 2's epoch-3 answer may no longer be appended,
    whether the event shows epoch 3 (as logged) or epoch 4 (a core that took it)."""
    nodes = events_by_node(RUN)
    take = _late_take(nodes)
    vote = next(e for e in nodes["node-3"] if e["type"] == "GrantVote" and e["leader_epoch"] == 4)
    between = nodes["node-3"][nodes["node-3"].index(take) + 1:nodes["node-3"].index(vote) + 1]
    nodes["node-3"].remove(take)
    for e in between:  # what voter 3 logs if it has not taken the answer yet
        if e.get("topic") == "__cluster_metadata" and "log_end_offset" in e:
            e["log_end_offset"] = 701
    moved = {**take, "time_ms": vote["time_ms"] + 1, "mono_ns": vote["mono_ns"] + 1}
    if not as_logged:
        moved.update(leader_epoch=4, voted_for=1)
    nodes["node-3"].insert(nodes["node-3"].index(vote) + 1, moved)
    steps, verdict = _verdict(tmp_path, nodes)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    # As logged: the send goes where 2 still led and the take is refused (voter 3 is in epoch 4).
    # Epoch 4: nobody led it as 2, so the send put just before the take is refused.
    assert bad.get("first_offset") == 701 and (bad["type"], bad.get("follower", bad["replica"])) in (
        ("FetchFromLeader", 3), ("SendFetchResponse", 3)), bad
    if as_logged:
        assert bad["type"] == "FetchFromLeader", bad

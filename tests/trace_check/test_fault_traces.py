"""A recorded run of the Jepsen-style fault test is a behaviour of spec/Replication.tla (issue 15).

testdata/faults-seed42: the three nodes' traces of `python -m tests.faults.run --seed 42
--seconds 12 --trace` (session 8; the metadata quorum's own events left out, the
ControlledShutdown events kept): a follower isolated 1.1 s, the leader cut from one peer 1.3 s,
the leader SIGSTOPped 1.3 s, a follower's data links cut 3.1 s, under acks=all producers. Every
partition is checked, in one TLC run, through the final SIGTERM's ControlledShutdowns (session
12; until then up to the first) (tests/faults/traces.py, as the live fault test does). What the faults made the nodes do:
failed fetches and lost answers, isr shrinks and re-expansions, and AlterPartition requests that
got no decision (NOT_CONTROLLER, REQUEST_TIMED_OUT: the spec's AlterPartitionLost, added for
this run's first rejections). Session 9: the run predates issue 10's fix (a leader that lost an
AlterPartition answer dropped its proposal); with the fixed spec two partitions are rejected at
that bug, which the test now asserts (tests/trace_check/test_live_fencing.py likewise).

testdata/faults-fixed: a fresh run of the fixed code (session 10, gzip: `python -m
tests.faults.run --seed 313 --seconds 12 --trace`): node 2's data links cut 3.9 s, then the
active controller (node 3) isolated 1.4 s. Every partition is accepted: the counterpart of seed
42 (the old bug is caught, the fixed code's run is not). It holds the case that made seed 313
rejected before: node 2's ExpandIsr was proposed by the isolated controller, which resigned and
answered NOT_CONTROLLER; the channel resent it unseen by the replica core and the next
controller, which had committed the first try, refused the resend (INVALID_UPDATE_VERSION):
TraceReplication's ResentUnseen.

testdata/faults-lagging-503 and testdata/faults-late-501 (session 10's runs of seeds 503 and 501,
gzip), rejected then and accepted since session 11. 503: node 3 paused 2.1 s, node 2 killed, node 1
the active controller writing fence, unfence and election records its quorum could not commit yet;
its broker applied them one at a time once they committed (spec/Replication.tla's
LaggingMetadata), and a follower's fetcher sent again and again to the killed leader without a
FetchError between (trace_check leaves the unanswered tries out). 501 (the rerun): a paused leader
completed a parked fetch after its follower had become leader (the same request read again:
left out). testdata/faults-latetake-501 (session 11's run of seed 501, gzip): the paused leader
(node 1) took a fetch broker 3 had sent before it followed the new leader, after it did
(LateFetchRequests). Each fix has its doctored copy, rejected.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from tests.faults.traces import validate_run
from trace_check.replication import load_events, normalise
from trace_check.tlc import check_and_explain_batch

RUN = Path(__file__).parent / "testdata" / "faults-seed42"
FIXED_RUN = Path(__file__).parent / "testdata" / "faults-fixed"
LAGGING_RUN = Path(__file__).parent / "testdata" / "faults-lagging-503"
LATE_RUN = Path(__file__).parent / "testdata" / "faults-late-501"
LATE_TAKE_RUN = Path(__file__).parent / "testdata" / "faults-latetake-501"


def _as_run_dir(tmp_path: Path) -> Path:
    for f in sorted(RUN.glob("node-*.ndjson")):
        (tmp_path / f.stem).mkdir()
        shutil.copy(f, tmp_path / f.stem / "trace.ndjson")
    return tmp_path


def rejected_at_a_proposal_after_a_lost_answer(steps, reached: int) -> bool:
    """Issue 10's kref bug, as a trace recorded before its fix shows it: an AlterPartition answer
    was lost (`lost`), the leader dropped that proposal and later made a new one. Since the fix
    (and alterpart's spec, session 9) the proposal stays pending and is resent, so no behaviour
    takes the new ShrinkIsr/ExpandIsr."""
    bad = steps.steps[reached - 1]
    if bad["type"] not in ("ShrinkIsr", "ExpandIsr"):
        return False
    mine = [s for s in steps.steps[:reached - 1] if s.get("replica") == bad["replica"]
            and s["type"] in ("HandleAlterPartitionResponse", "BecomeLeader", "ShrinkIsr", "ExpandIsr")]
    return bool(mine) and mine[-1]["type"] == "HandleAlterPartitionResponse" and "lost" in mine[-1]


def test_a_recorded_fault_run_is_a_behaviour_of_replication_tla_up_to_issue_10s_bug(tmp_path):
    """Recorded before issue 10's fix: partition 2 is a behaviour of the spec to the final
    SIGTERM; partitions 0 and 1 are rejected exactly where their leader, having lost an
    AlterPartition answer, proposed anew (the bug the fixed core and spec rule out).

    Since session 12 the final controlled shutdowns are spec steps (ControlledShutdown) and the
    check goes on past them: partition 2 is then rejected in the shutdown tail, at its leader's
    ExpandIsr from an isr it applied without logging it (the run predates session 8, whose
    replica core logs an isr-only registration as BecomeLeader)."""
    run = _as_run_dir(tmp_path)
    events = load_events(sorted(run.glob("node-*/trace.ndjson")))
    batch = [normalise(events, "jepsen", p) for p in range(3)]
    verdicts = check_and_explain_batch(batch, min_insync_replicas=2, timeout_s=300)
    assert [v.accepted for v in verdicts] == [False, False, False], [v.reached for v in verdicts]
    for steps, v in zip(batch[:2], verdicts[:2]):
        assert rejected_at_a_proposal_after_a_lost_answer(steps, v.reached), steps.steps[v.reached - 1]
        assert v.reached > 250  # everything before it was taken
    last, v = batch[2].steps, verdicts[2]
    shutdowns = [i for i, s in enumerate(last) if s["type"] == "ControlledShutdown"]
    assert len(shutdowns) == 3 and shutdowns[0] > 300 and not batch[2].stopped  # the whole run up to them, then them
    assert v.reached - 1 > shutdowns[-1] and last[v.reached - 1]["type"] == "ExpandIsr", last[v.reached - 1]
    # The leader's proposal starts from an isr it never logged applying (pre-session-8 trace).
    leader = last[v.reached - 1]["replica"]
    applied = [s for s in last[:v.reached - 1] if s["type"] == "BecomeLeader" and s["replica"] == leader]
    assert applied[-1]["partition_epoch"] < last[v.reached - 1]["partition_epoch"], applied[-1]


def test_the_run_exercises_lost_alter_partitions_and_failed_fetches(tmp_path):
    """Not a vacuous acceptance: the faults' traces are in the checked steps."""
    run = _as_run_dir(tmp_path)
    events = load_events(sorted(run.glob("node-*/trace.ndjson")))
    steps = [normalise(events, "jepsen", p) for p in range(3)]
    assert any(s.get("lost") for st in steps for s in st.steps), "no AlterPartition without a decision"
    kinds = {s["type"] for st in steps for s in st.steps}
    assert {"ShrinkIsr", "ExpandIsr", "HandleAlterPartitionResponse"} <= kinds, kinds
    assert any("failed fetch" in k or "answer was lost" in k for st in steps for k in st.skipped)


def _fixed_run(tmp_path: Path, doctor=None, run: Path = FIXED_RUN) -> Path:
    """A recorded run (testdata/faults-fixed unless `run` says) unpacked as a run directory
    (node-N/trace.ndjson); `doctor(line)` may rewrite each event line."""
    for f in sorted(run.glob("node-*.ndjson.gz")):
        node = tmp_path / f.name.split(".")[0]
        node.mkdir()
        with gzip.open(f, "rt") as src, open(node / "trace.ndjson", "w") as dst:
            for line in src:
                dst.write(doctor(line) if doctor else line)
    return tmp_path


def test_a_fault_run_of_the_fixed_code_is_a_behaviour_of_replication_tla(tmp_path):
    """Recorded with issue 10's fix in (session 10): every partition is accepted, by the same
    code as the live fault test (tests/faults/traces.py), and the run is no idle one: it holds
    what the faults made the nodes do, a refused resend among them."""
    _fixed_run(tmp_path)
    verdicts, _ = validate_run(tmp_path, "jepsen", 3, min_insync_replicas=2)
    assert [v.code for v in verdicts] == [0, 0, 0], "\n".join(v.text for v in verdicts)
    events = load_events(sorted(tmp_path.glob("node-*/trace.ndjson")))
    steps = [normalise(events, "jepsen", p) for p in range(3)]
    assert all(len(s.steps) > 100 for s in steps), [len(s.steps) for s in steps]
    kinds = {s["type"] for st in steps for s in st.steps}
    assert {"ShrinkIsr", "ExpandIsr", "HandleAlterPartitionResponse", "FollowerAppend"} <= kinds, kinds
    assert any(s["type"] == "HandleAlterPartitionResponse" and s["error_code"] == 95 for st in steps for s in st.steps)


def test_a_refused_resend_read_as_a_success_is_rejected(tmp_path):
    """ResentUnseen is bound to the logged refusal: the same run with node 2's INVALID_UPDATE_VERSION
    answer turned into NONE (isr and partition epoch unchanged) is rejected at that line: the
    controller committed the expansion, so an answer NONE carries the new isr."""
    def doctor(line: str) -> str:
        return line.replace('"error_code":95', '"error_code":0') if '"HandleAlterPartitionResponse"' in line else line

    _fixed_run(tmp_path, doctor)
    events = load_events(sorted(tmp_path.glob("node-*/trace.ndjson")))
    steps = normalise(events, "jepsen", 1)
    verdict, = check_and_explain_batch([steps], min_insync_replicas=2, timeout_s=300)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert bad["type"] == "HandleAlterPartitionResponse" and bad["error_code"] == 0, bad
    assert steps.origin[verdict.reached - 1].endswith("node-2/trace.ndjson:158")


def _one_partition(tmp_path: Path, partition: int):
    events = load_events(sorted(tmp_path.glob("node-*/trace.ndjson")))
    steps = normalise(events, "jepsen", partition)
    verdict, = check_and_explain_batch([steps], min_insync_replicas=2, timeout_s=300)
    return steps, verdict


def test_a_broker_applying_registrations_behind_its_controller_is_accepted(tmp_path):
    """Seed 503: node 1's broker applies the registration of partition epoch 1 (leader epoch 0)
    after its controller wrote leader epoch 2 (partition epoch 4): every partition is accepted,
    and the lagging application is among the checked steps (not a vacuous acceptance)."""
    _fixed_run(tmp_path, run=LAGGING_RUN)
    verdicts, _ = validate_run(tmp_path, "jepsen", 3, min_insync_replicas=2)
    assert [v.code for v in verdicts] == [0, 0, 0], "\n".join(v.text for v in verdicts)
    events = load_events(sorted(tmp_path.glob("node-*/trace.ndjson")))
    steps = normalise(events, "jepsen", 0)
    elected, lagging = -1, []
    for step in steps.steps:
        if step["type"] in ("ElectLeader", "ElectPreferredLeader", "UncleanElectLeader"):
            elected = max(elected, step["leader_epoch"])
        elif step["type"] in ("BecomeLeader", "BecomeFollower") and step["leader_epoch"] < elected:
            lagging.append(step)
    assert any(s["type"] == "BecomeLeader" and s["replica"] == 1 and s["partition_epoch"] == 1 for s in lagging), lagging
    assert any("sent again before any answer" in k for k in steps.skipped) or any(
        "sent again before any answer" in k for p in (1, 2) for k in normalise(events, "jepsen", p).skipped)


def test_a_lagging_registration_the_controller_never_committed_is_rejected(tmp_path):
    """LaggingMetadata lets a broker apply an older registration, only one the controller
    committed: node 1's lagging BecomeLeader with isr [1, 3] (the shrink it proposed from
    partition epoch 0, which the controller refused) instead of [1, 2] is rejected there."""
    def doctor(line: str) -> str:
        lagging = '"replica":1,"topic":"jepsen","partition":0,"leader_epoch":0,"partition_epoch":1,"isr":[1,2]'
        return line.replace(lagging, lagging.replace("[1,2]", "[1,3]")) if '"BecomeLeader"' in line else line

    _fixed_run(tmp_path, doctor, run=LAGGING_RUN)
    steps, verdict = _one_partition(tmp_path, 0)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert bad["type"] == "BecomeLeader" and bad["isr"] == [1, 3], bad
    assert steps.origin[verdict.reached - 1].endswith("node-1/trace.ndjson:213")


def test_a_parked_fetch_completed_after_its_follower_moved_on_is_accepted(tmp_path):
    """Seed 501 (rerun): node 1, paused, completes broker 2's parked fetch (partition 0, leader
    epoch 0) after broker 2 became leader of epoch 1: the same request read again, left out."""
    _fixed_run(tmp_path, run=LATE_RUN)
    verdicts, _ = validate_run(tmp_path, "jepsen", 3, min_insync_replicas=2)
    assert [v.code for v in verdicts] == [0, 0, 0], "\n".join(v.text for v in verdicts)
    steps = normalise(load_events(sorted(tmp_path.glob("node-*/trace.ndjson"))), "jepsen", 0)
    assert steps.skipped.get("LeaderHandleFetch completing a parked fetch after its follower moved on", 0) >= 1
    assert not any(o.endswith("node-1/trace.ndjson:182") for o in steps.origin)  # the completion of session 10's rejection


def _take_doctored_is_rejected(tmp_path, run: Path, seq: int, follower: int, offset: int, doctored: int,
                                line: str) -> None:
    """`run` with the leader's LeaderHandleFetch of `follower` (node 1's event `seq`) asking from
    `doctored` instead of `offset`: rejected at that take (node-1/trace.ndjson:`line`)."""
    def doctor(text: str) -> str:
        if '"LeaderHandleFetch"' in text and f'"seq":{seq},' in text and f'"follower":{follower}' in text:
            return text.replace(f'"fetch_offset":{offset}', f'"fetch_offset":{doctored}')
        return text

    _fixed_run(tmp_path, doctor, run=run)
    steps, verdict = _one_partition(tmp_path, 0)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert bad["type"] == "LeaderHandleFetch" and bad["follower"] == follower and bad["fetch_offset"] == doctored, bad
    assert steps.origin[verdict.reached - 1].endswith(f"node-1/trace.ndjson:{line}")


def test_a_late_fetch_of_another_request_is_rejected(tmp_path):
    """Only the very request the follower left behind is left out: the same late take with a fetch
    offset the follower never sent (5 instead of 0) is kept, and no behaviour takes it."""
    _take_doctored_is_rejected(tmp_path, LATE_RUN, seq=181, follower=2, offset=0, doctored=5, line=182)


def test_a_request_taken_after_its_follower_moved_on_is_accepted(tmp_path):
    """Session 11's seed 501: node 1, a zombie leader of epoch 0, takes broker 3's request at
    offset 77 after broker 3 applied the registration naming broker 2 (the spec's
    LateFetchRequests keeps it on the wire): every partition is accepted, and that take is a
    checked step."""
    _fixed_run(tmp_path, run=LATE_TAKE_RUN)
    verdicts, _ = validate_run(tmp_path, "jepsen", 3, min_insync_replicas=2)
    assert [v.code for v in verdicts] == [0, 0, 0], "\n".join(v.text for v in verdicts)
    steps = normalise(load_events(sorted(tmp_path.glob("node-*/trace.ndjson"))), "jepsen", 0)
    assert any(o.endswith("node-1/trace.ndjson:367") for o in steps.origin)


def test_a_late_take_of_a_request_never_sent_is_rejected(tmp_path):
    """The late take must be of the request the follower left on the wire: the same take with
    fetch offset 70 (broker 3 never asked from there) is rejected at it."""
    _take_doctored_is_rejected(tmp_path, LATE_TAKE_RUN, seq=366, follower=3, offset=77, doctored=70, line=367)


def test_a_fetch_sent_again_with_other_offsets_is_not_left_out(tmp_path):
    """Seed 503: node 1's fetcher began a fetch of partition 1 again and again from the killed
    leader (no FetchError between: it had no endpoint for it); only identical tries are left out.
    One of them asking from offset 40 (node 1 had 52 records) is kept and rejected there."""
    def doctor(line: str) -> str:
        if '"FollowerFetch"' in line and '"seq":223,' in line and '"partition":1,' in line:
            return line.replace('"fetch_offset":52', '"fetch_offset":40')
        return line

    _fixed_run(tmp_path, doctor, run=LAGGING_RUN)
    steps, verdict = _one_partition(tmp_path, 1)
    assert not verdict.accepted
    bad = steps.steps[verdict.reached - 1]
    assert bad["type"] == "FollowerFetch" and bad["fetch_offset"] == 40, bad
    assert steps.origin[verdict.reached - 1].endswith("node-1/trace.ndjson:224")

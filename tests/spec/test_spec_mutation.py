"""spec/spec_mutation.py: the mutation catalogue applies, and the mechanism
catches a broken rule with real TLC.

`make spec-mutation` runs the whole catalogue against the default model set
(too slow for CI: see docs/spec.md). Here CI checks that every mutation's
text still occurs exactly once in the real specs (so the catalogue tests
what it says), that the real spec files are left untouched, and runs a
sample: one Replication and one KRaft mutation that the default set must
catch, each by the property the docs name.
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC_DIR = ROOT / "spec"
if str(SPEC_DIR) not in sys.path:
    sys.path.insert(0, str(SPEC_DIR))
import spec_mutation  # noqa: E402


def _mutation(name):
    return next(m for m in spec_mutation.CATALOGUE if m.name == name)


def test_catalogue_applies_to_the_real_specs():
    assert len(spec_mutation.CATALOGUE) >= 20
    assert spec_mutation.check_catalogue(spec_mutation.CATALOGUE, SPEC_DIR) == []
    assert {m.file for m in spec_mutation.CATALOGUE} == {"Replication.tla", "KRaft.tla"}


def test_catalogue_that_does_not_apply_is_reported(tmp_path):
    (tmp_path / "KRaft.tla").write_text("---- MODULE KRaft ----\n====\n")
    bad = [spec_mutation.Mutation("gone", "KRaft.tla", "no such rule", "x")]
    assert spec_mutation.check_catalogue(bad, tmp_path) == [
        "gone: its text occurs 0 times in KRaft.tla, not once"]


def test_models_are_selected_by_the_module_they_extend():
    names = {m.name for m in spec_mutation.default_models(SPEC_DIR / "models.toml", "KRaft.tla")}
    assert "MCKRaftElection" in names and not any(n.startswith("MCReplication") for n in names)


def test_mutation_models_run_after_the_default_set():
    # A full-set row checked only for mutations (MUTATION_MODELS) must not
    # take a catch from a default model that comes later in the manifest.
    models = spec_mutation.default_models(SPEC_DIR / "models.toml", "Replication.tla")
    extra = [i for i, m in enumerate(models) if m.name in spec_mutation.MUTATION_MODELS]
    assert extra and all(m.set == "full" for m in (models[i] for i in extra))
    assert all(m.set == "default" for m in models[:min(extra)])
    assert min(extra) == len(models) - len(extra)


def test_a_mutation_in_two_places_replaces_both(tmp_path):
    (tmp_path / "KRaft.tla").write_text("A == 1\nB == 2\n")
    two = spec_mutation.Mutation("two", "KRaft.tla", "A == 1", "A == 3", also=(("B == 2", "B == 4"),))
    assert spec_mutation.check_catalogue([two], tmp_path) == []
    (tmp_path / "KRaft.tla").write_text("A == 1\n")
    assert spec_mutation.check_catalogue([two], tmp_path) == [
        "two: its text occurs 0 times in KRaft.tla, not once"]


def test_replication_sample_mutation_is_caught_and_spec_untouched():
    before = (SPEC_DIR / "Replication.tla").read_text()
    result = spec_mutation.run_mutation(_mutation("HW = max LEO over the ISR"), heap_mb=1024)
    assert (SPEC_DIR / "Replication.tla").read_text() == before
    assert result.caught, result
    assert result.by.startswith("MCReplication")


def test_kraft_sample_mutation_is_caught():
    result = spec_mutation.run_mutation(_mutation("KRaft: a candidate wins with any votes"),
                                        heap_mb=1024)
    # whichever KRaft model runs first (the manifest puts the cheapest first)
    assert result.caught and result.by.startswith("MCKRaft"), result
    assert result.by.endswith(": ElectionSafety"), result

"""The calibrated design by default (issue 53): a study whose `decide:` reads claim (a) trains a
seed per (lr, wd) sample unless it says otherwise, and is told in one line when it does not; a
study that recorded its trials under the earlier default keeps its cells and finds them."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
import yaml

from optbench.plan.trials import plan
from optbench.run.preflight import best_error_seed_note, seed_effect_note
from optbench.run.rounds import Look, Rounds
from optbench.spec.schema import load_spec, parse_spec
from optbench.store.database import Store
from optbench.store.migrations import keep_recorded_cells

ROOT = Path(__file__).resolve().parents[1]
# A study folder written by optbench at a05e811, before the default changed: tests/data/README.md
RECORDED = ROOT / "tests" / "data" / "recorded_before_seed_default"


def _decide_a(tiny_dict, **search) -> dict:
    data = copy.deepcopy(tiny_dict)
    data["search"] |= {"n_samples": 6, **search}
    data["decide"] = {"claims": ["a"], "looks": [4, 6]}
    return data


def _seeds_by_sample(spec) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for t in plan(spec):
        out.setdefault(t.sample, set()).add(t.seed)
    return out


# --- the default -------------------------------------------------------------------------------


def test_deciding_claim_a_trains_a_seed_per_sample_unless_told_otherwise(tiny_dict):
    spec = parse_spec(_decide_a(tiny_dict))
    seeds = _seeds_by_sample(spec)
    assert len(set().union(*seeds.values())) == len(seeds) == 6  # each sample its own seed
    assert seed_effect_note(spec) is None
    # written down, false keeps one seed for the study, and says what its interval misses
    told = parse_spec(_decide_a(tiny_dict, seed_per_sample=False))
    assert set().union(*_seeds_by_sample(told).values()) == {0}
    note = seed_effect_note(told)
    assert "misses its study-wide effect" in note and "9.5%" in note and "\n" not in note


def test_a_best_error_comparison_on_one_seed_per_study_is_told_what_its_interval_misses(
    tiny_dict,
):
    # the bench decided 50% of the mini's exact nulls wrongly with one seed per study
    data = _decide_a(tiny_dict)
    sides = [{"model": m, "optimizer": "adamw", "epochs": 1} for m in tiny_dict["models"][:2]]
    data["comparisons"] = [
        {"name": "mine", "kind": "best-error", "sides": sides, "expect": "first"}
    ]
    data["decide"]["claims"] = ["mine"]
    spec = parse_spec(data)
    assert spec.seed_per_sample and best_error_seed_note(spec) is None  # the default
    data["search"]["seed_per_sample"] = False
    note = best_error_seed_note(parse_spec(data))
    assert "'mine'" in note and "50%" in note and "misses" in note and "\n" not in note
    data["decide"]["claims"] = ["a"]  # declared but not decided: no note of it
    assert best_error_seed_note(parse_spec(data)) is None


def test_a_population_keeps_one_seed_by_default_and_says_why(tiny_dict):
    data = _decide_a(tiny_dict)
    data["executor"] = {"population": 2}
    spec = parse_spec(data)  # validates: the default gives way to the population's one seed
    assert set().union(*_seeds_by_sample(spec).values()) == {0}
    assert "executor.population 2 trains its members with one seed" in seed_effect_note(spec)


def test_studies_that_do_not_decide_claim_a_keep_their_cells(tiny_dict):
    # a fixed-size study and a seed design keep one seed for the study, as before
    fixed = parse_spec(tiny_dict)
    assert set().union(*_seeds_by_sample(fixed).values()) == {0}
    data = copy.deepcopy(tiny_dict)
    data["epochs"], data["seeds"] = [1, 2], [0, 1, 2, 3]
    data["decide"] = {"claims": ["b"], "looks": [3, 4]}
    assert not parse_spec(data).seed_per_sample
    # the default false and a written false are the same cells: the key is in the id only when true
    written = copy.deepcopy(tiny_dict)
    written["search"]["seed_per_sample"] = False
    assert [t.key for t in plan(parse_spec(written))] == [t.key for t in plan(fixed)]


# --- a study recorded under the earlier default ----------------------------------------------------


def _recorded_copy(tmp_path: Path) -> Path:
    """The recorded study in tmp_path (its `output: results` is read from there)."""
    shutil.copytree(RECORDED, tmp_path, dirs_exist_ok=True)
    return tmp_path / "recorded.yaml"


def test_a_study_recorded_under_the_earlier_default_keeps_its_cells(tmp_path, monkeypatch):
    path = _recorded_copy(tmp_path)
    monkeypatch.chdir(tmp_path)
    spec = load_spec(path)
    assert spec.search.seed_per_sample is None and spec.seed_per_sample  # the new default
    kept, note = keep_recorded_cells(spec)
    assert not kept.seed_per_sample and "recorded 12 trial(s) with one training seed" in note
    store = Store(kept, create=False)
    stored = store.read(plan(kept))
    assert sum(s.is_result for s in stored) == 12  # every recorded trial found ...
    assert len({s.trial.key for s in stored}) == len(stored)  # ... once
    assert store.earlier_cells(plan(kept)) == (0, 0)  # nothing left behind in other cells
    # its looks read as recorded (the design unchanged, so not refused), the study finished
    rounds = Rounds(kept, map(Look.from_record, store.looks()))
    assert [look.n for look in rounds.looks[next(iter(rounds.looks))]] == [4, 6]
    assert rounds.finished and len(rounds.asked(plan(kept))) == 12
    # a study that wrote the key down, or has recorded nothing, is left as it is
    assert keep_recorded_cells(kept) == (kept, None)
    empty = spec.model_copy(update={"output": tmp_path / "elsewhere"})
    assert keep_recorded_cells(empty) == (empty, None)


def test_status_of_a_study_recorded_under_the_earlier_default_counts_its_trials_once(tmp_path, cli):
    path = _recorded_copy(tmp_path)
    code, out, err = cli("status", str(path))
    assert code == 0, err
    assert "recorded: 12 of 12 trials done" in out
    assert "recorded 12 trial(s) with one training seed for the study" in out
    assert "earlier cell" not in out  # no trial is left in cells the study no longer plans


@pytest.mark.slow  # a dry run in this process: up to half a minute on a loaded 2-core machine
def test_a_dry_run_of_claim_a_without_a_seed_per_sample_says_why_in_one_line(
    tiny_dict, tmp_path, cli
):
    data = _decide_a(tiny_dict, seed_per_sample=False)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(data))
    code, out, err = cli("run", "study.yaml", "--dry-run")
    assert code == 0, err
    (line,) = [x for x in out.splitlines() if "seed_per_sample is false" in x]
    assert "claim (a)'s interval resamples (lr, wd) samples, not the training seed" in line

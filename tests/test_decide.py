"""Sample until decided, the study side: the `decide:` block, the rounds a study runs, the looks
recorded between them, and a driver stopped anywhere resuming to the same decision."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from driver_process import signal_at

from optbench.decision.claims import claims_table
from optbench.decision.frames import with_errors
from optbench.decision.looks import inconsistent, with_looks
from optbench.errors import SpecError
from optbench.plan.trials import jobs, plan
from optbench.run.rounds import METRIC, DesignChanged, Look, Rounds, decision_lines
from optbench.spec.schema import parse_spec
from optbench.store.database import Store

P, C, D = "vit_p_w64_16px", "vit_c_w64_16px", "dhvt_w64_16px"


def _sequential(tiny_dict, looks=(4, 6, 8), **decide) -> dict:
    data = copy.deepcopy(tiny_dict)
    data["models"] = [P, C, D]
    data["search"]["n_samples"] = looks[-1]
    data["decide"] = {"claims": ["a"], "looks": list(looks), **decide}
    return data


# --- the block ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"looks": [4, 6, 9]}, "decide.looks ends at 9 samples, but search.n_samples is 8"),
        ({"looks": [2, 8]}, "decide.looks starts at 2 samples: the first look needs at least 4"),
        ({"looks": [6, 4, 8]}, "decide.looks: looks must increase"),
        ({"claims": ["a", "b"]}, "decide one kind per study"),
        ({"claims": ["c"]}, "decide.looks ends at 8 seeds, but the number of seeds is 1"),
        ({"spending": "linear"}, "decide.spending: Input should be 'pocock' or 'obrien-fleming'"),
        ({"margin": 0}, "decide.margin: Input should be greater than 0"),
        ({"alpha": 0.5}, "decide.alpha: Input should be less than or equal to 0.2"),
        ({"alpha": 1e-12}, "decide.alpha: Input should be greater than or equal to 0.000001"),
        ({"margin": 5.0}, "decide.margin: 5 is not below 1: claim (a)'s unit is a difference"),
        ({"margin": 1e9}, "decide.margin: 1e+09 is not below 1"),
        ({"looks": [4.0, 8.0]}, "decide.looks: items 0, 1: Input should be a valid integer"),
        ({"look": [4, 8]}, "decide.look: unknown key"),
    ],
)
def test_a_bad_decide_block_is_one_line_naming_the_field(tiny_dict, change, needle):
    data = _sequential(tiny_dict)
    data["decide"] |= change
    with pytest.raises(SpecError) as err:
        parse_spec(data, "study.yaml")
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_margin_is_bounded_in_its_claims_unit(tiny_dict):
    data = _sequential(tiny_dict)
    data["epochs"], data["seeds"] = [1, 2], [0, 1, 2, 3]
    data["search"]["seed_per_sample"] = False
    data["decide"] = {"claims": ["b"], "looks": [3, 4], "margin": 5.0}  # error points: fine
    assert parse_spec(data).decide.margin == 5.0
    data["decide"]["margin"] = 100.0
    with pytest.raises(SpecError, match=r"decide.margin: 100 is not below 100: claim \(b\)'s"):
        parse_spec(data, "study.yaml")


def test_a_claim_the_grid_cannot_test_is_refused(tiny_dict):
    data = _sequential(tiny_dict)
    data["models"] = [P, D]
    with pytest.raises(SpecError, match=r"claim \(a\) needs a ViT_P / ViT_C pair"):
        parse_spec(data, "study.yaml")
    data = _sequential(tiny_dict)
    data["seeds"], data["decide"] = [0, 1, 2, 3], {"claims": ["b"], "looks": [3, 4]}
    with pytest.raises(SpecError, match=r"claim \(b\) needs a ViT_P / ViT_C pair and two or"):
        parse_spec(data, "study.yaml")


def test_the_block_changes_no_cell_and_no_trial(tiny_dict):
    # with seed_per_sample written down: left unset, decide: [a] makes it true (its own test)
    data = _sequential(tiny_dict)
    data["search"]["seed_per_sample"] = True
    fixed = {k: v for k, v in data.items() if k != "decide"}
    ours, theirs = plan(parse_spec(data)), plan(parse_spec(fixed))
    assert [(t.key, t.lr, t.wd) for t in ours] == [(t.key, t.lr, t.wd) for t in theirs]


# --- rounds on known trial tables (no training) ---------------------------------------------------


def _frame(trials, error_of) -> pd.DataFrame:
    """The store's frame of `trials`, each finished with error_of(trial)."""
    rows = [
        {
            "model": t.cell.model,
            "optimizer": t.cell.optimizer,
            "epochs": t.cell.epochs,
            "sample": t.sample,
            "seed": t.seed,
            "lr": t.lr,
            "wd": t.wd,
            "status": "finished",
            "final_error": error_of(t),
        }
        for t in trials
    ]
    return pd.DataFrame(rows)


def _errors(spread_p: float, spread_c: float, noise: float = 0.3):
    rng = np.random.default_rng(0)
    offsets = rng.uniform(0, 1, 64)

    def error_of(t):
        spread = {P: spread_p, C: spread_c}.get(t.cell.model, 5.0)
        return 10 + spread * offsets[t.sample] + noise * rng.normal()

    return error_of


def _play(rounds: Rounds, trials, error_of) -> list[int]:
    """Run the rounds on made-up errors until decided; the sizes each round asked for."""
    sizes = []
    while not rounds.finished:
        asked = rounds.asked(trials)
        sizes.append(len(asked))
        looks = rounds.look(_frame(asked, error_of))
        assert looks, "a complete round always ends with a look"
        rounds.add(looks)
    return sizes


def test_a_clear_effect_is_decided_at_the_first_look_and_nothing_more_is_asked(tiny_dict):
    # a first look at 6: at 4 samples Student's t (3 degrees of freedom) is too wide for it
    spec = parse_spec(_sequential(tiny_dict, looks=(6, 8, 10)))
    rounds, trials = Rounds(spec, []), plan(spec)
    sizes = _play(rounds, trials, _errors(spread_p=40.0, spread_c=1.0))
    ((look,),) = rounds.looks.values()
    assert (look.outcome, look.k, look.n, sizes) == ("holds", 0, 6, [18])  # 3 cells x 6
    assert len(rounds.asked(trials)) == 18  # a decided study asks for no more


def test_an_open_panel_grows_its_cells_and_a_cell_no_claim_reads_stays(tiny_dict):
    # alpha 1e-6: no look can decide before the last, so every round runs
    spec = parse_spec(_sequential(tiny_dict, alpha=1e-6))
    rounds, trials = Rounds(spec, []), plan(spec)
    sizes = _play(rounds, trials, _errors(spread_p=12.0, spread_c=8.0, noise=4.0))
    panel = next(iter(rounds.looks.values()))
    assert [look.outcome for look in panel[:-1]] == ["continue", "continue"]
    assert panel[-1].outcome in ("undecided", "holds", "opposite")  # the last look ends it
    assert sizes == [3 * 4, 2 * 6 + 4, 2 * 8 + 4]  # ViT_P and ViT_C grow, DHVT stays at 4
    targets = rounds.targets()
    assert targets[(D, "adamw", 1)] == 4 and targets[(P, "adamw", 1)] == 8


def test_a_look_waits_for_every_trial_of_its_round(tiny_dict):
    spec = parse_spec(_sequential(tiny_dict))
    rounds, trials = Rounds(spec, []), plan(spec)
    frame = _frame(rounds.asked(trials), _errors(40.0, 1.0))
    for status in ("pending", "failed"):
        held = frame.copy()
        held.loc[5, "status"] = status
        assert rounds.look(held) == []
    assert rounds.look(frame) != []


def test_a_recorded_look_is_read_not_taken_again(tiny_dict):
    spec = parse_spec(_sequential(tiny_dict, looks=(6, 8, 10)))
    first = Rounds(spec, [])
    frame = _frame(first.asked(plan(spec)), _errors(40.0, 1.0))
    (look,) = first.look(frame)
    again = Rounds(spec, [Look.from_record(look.record())])
    assert again.finished and again.look(frame) == []
    # other data at the same size changes nothing once the look is recorded
    assert again.look(_frame(again.asked(plan(spec)), _errors(1.0, 40.0))) == []


def test_looks_taken_under_another_design_are_refused(tiny_dict):
    spec = parse_spec(_sequential(tiny_dict))
    frame = _frame(Rounds(spec, []).asked(plan(spec)), _errors(40.0, 1.0))
    (look,) = Rounds(spec, []).look(frame)
    changed = parse_spec(_sequential(tiny_dict, spending="obrien-fleming"))
    with pytest.raises(DesignChanged, match="another decide: block"):
        Rounds(changed, [Look.from_record(look.record())])


def _first_looks(spec, error_of=None) -> list[dict]:
    """The records of the study's first look, taken on made-up errors."""
    rounds = Rounds(spec, [])
    frame = _frame(rounds.asked(plan(spec)), error_of or _errors(12.0, 8.0, 4.0))
    return [look.record() for look in rounds.look(frame)]


def _changed(data: dict, key: str, value) -> dict:
    data = copy.deepcopy(data)
    *path, last = key.split(".")
    node = data
    for part in path:
        node = node.setdefault(part, {})
    node[last] = value
    return data


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("seeds", [0, 1]),  # a second seed of every sample: more units per sample
        ("search.seed", 7),  # other (lr, wd) pairs
        ("recipe.label_smoothing", 0.2),  # other cells (their ids)
        ("epochs", 2),  # other cells; Rounds.targets ended in a KeyError
        ("models", [P, C]),  # a cell the first look read is gone
        # other training seeds: the study trains a seed per sample (the default of a decide:
        # on claim (a), spec/schema.py) and is changed to one seed per study
        ("search.seed_per_sample", False),
    ],
)
def test_a_change_to_what_a_look_read_is_refused_in_one_line(tiny_dict, key, value):
    # alpha 1e-6: the first look continues, so a change would mix data under the next looks
    data = _sequential(tiny_dict, alpha=1e-6)
    records = _first_looks(parse_spec(data))
    changed = parse_spec(_changed(data, key, value))
    with pytest.raises(SpecError) as err:
        Rounds(changed, [Look.from_record(r) for r in records]).targets()
    line = str(err.value)
    assert "read other trials than this study now plans" in line and "\n" not in line, line
    assert "new name or output to start its looks afresh" in line
    # the same spec (and a change that names no cell: the executor) reads the same trials
    same = _changed(data, "executor.retries", 3)
    assert Rounds(parse_spec(same), [Look.from_record(r) for r in records]).next_k() == 1


def test_a_look_recorded_before_looks_carried_what_they_read_still_counts(tiny_dict):
    data = _sequential(tiny_dict, alpha=1e-6)
    spec = parse_spec(data)
    records = _first_looks(spec)
    old = [{k: v for k, v in r.items() if k != "read"} for r in records]  # an older optbench's
    rounds = Rounds(spec, [Look.from_record(r) for r in old])
    assert rounds.next_k() == 1 and rounds.targets()[(P, "adamw", 1)] == 6
    # the next look is taken as before, and carries what it read
    (look,) = rounds.look(_frame(rounds.asked(plan(spec)), _errors(12.0, 8.0, 4.0)))
    assert look.k == 1 and look.read is not None
    # a cell of its record that the spec no longer has is refused, not a KeyError
    with pytest.raises(SpecError, match="read other trials than this study now plans"):
        Rounds(parse_spec(_changed(data, "epochs", 2)), [Look.from_record(r) for r in old])


def _damage(spec, records, how) -> None:
    """Record `records` in the study's store, then damage the first as `how` says."""
    import json
    import sqlite3

    store = Store(spec, create=True)
    for record in records:
        store.record_look(record)
    value = how(copy.deepcopy(records[0]))
    with sqlite3.connect(spec.study_dir / "study.db") as db:
        db.execute(
            "UPDATE study_user_attributes SET value_json = ? WHERE key = ?",
            (
                value if isinstance(value, str) else json.dumps(value),
                f"look/{records[0]['panel']}/000",
            ),
        )


@pytest.mark.parametrize(
    ("how", "why"),
    [
        (lambda r: "{not json", "not JSON"),
        (lambda r: {}, "missing"),
        (lambda r: [1, 2], "not a look's record"),
        (lambda r: r | {"k": "0"}, "k: not a look's index"),
        (lambda r: r | {"outcome": "holds"}, "outcome 'holds', but its interval gives 'continue'"),
        (lambda r: r | {"cells": "all"}, "cells: not a list"),
        (lambda r: r | {"k": 5}, "the record is look 5"),  # under look 1's key
        # issue 68: JSON's NaN and Infinity, which `status` printed as "+nan"
        (lambda r: r | {"estimate": float("nan")}, "estimate: not a finite number (nan)"),
        (lambda r: r | {"se": float("inf")}, "se: not a finite number of at least 0 (inf)"),
        (lambda r: r | {"low": float("nan")}, "low: not a number (nan)"),
        (lambda r: r | {"se": -0.5}, "se: not a finite number of at least 0 (-0.5)"),
        (lambda r: r | {"low": 1.0, "high": -1.0}, "low: above high"),
    ],
)
def test_a_damaged_looks_record_is_one_line_naming_the_study(tiny_dict, how, why):
    from optbench.errors import UsageError
    from optbench.run.rounds import asked_trials

    spec = parse_spec(_sequential(tiny_dict, alpha=1e-6))
    _damage(spec, _first_looks(spec), how)
    with pytest.raises(UsageError) as err:
        asked_trials(spec, Store(spec, create=False))
    line = str(err.value)
    assert line.startswith("tiny: its looks record in the study database is damaged"), line
    assert why in line and "\n" not in line and "optuna delete-study" in line, line


@pytest.mark.parametrize(("field", "value"), [("estimate", "NaN"), ("se", "Infinity")])
def test_status_and_report_refuse_a_looks_record_edited_to_nan_in_one_line(
    tmp_path, tiny_dict, cli, field, value
):
    data = _sequential(tiny_dict, alpha=1e-6)
    spec = parse_spec(data)
    record = json.dumps(_first_looks(spec)[0] | {field: float(value.replace("Infinity", "inf"))})
    assert value in record  # JSON as Python writes it, and as a hand may type it
    _damage(spec, _first_looks(spec), lambda r: record)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(data))
    before = _tree(spec.study_dir)
    for command in (["status", "study.yaml"], ["report", "study.yaml", "--out", "reports"]):
        code, out, err = cli(*command)
        assert code == 2 and len(err.strip().splitlines()) == 1, (out, err)
        assert f": {field}: not a finite number" in err and "study database" in err, err
        assert "nan" not in out.lower()
    assert _tree(spec.study_dir) == before and not (tmp_path / "reports").exists()


def test_a_look_beyond_the_design_or_after_a_decision_is_refused(tiny_dict):
    from optbench.errors import UsageError
    from optbench.run.rounds import asked_trials

    spec = parse_spec(_sequential(tiny_dict, alpha=1e-6))
    (record,) = _first_looks(spec)
    store = Store(spec, create=True)
    store.record_look(record)
    store.record_look(record | {"k": 7})  # look 8 of a design of 3
    with pytest.raises(UsageError, match="look 8 of a design of 3 looks"):
        asked_trials(spec, Store(spec, create=False))
    spec = parse_spec(_sequential(tiny_dict, alpha=1e-6) | {"name": "other"})
    (record,) = _first_looks(spec)
    store = Store(spec, create=True)
    decided = record | {"low": 0.5, "high": 1.0, "outcome": "holds"}  # consistent, then more
    store.record_look(decided)
    store.record_look(record | {"k": 1, "n": 6})
    with pytest.raises(UsageError, match="a look after its panel was decided"):
        asked_trials(spec, Store(spec, create=False))


def test_a_look_that_waits_for_failed_trials_says_what_to_do(tiny_dict):
    from types import SimpleNamespace

    from optbench.run.messages import waiting_for
    from optbench.run.rounds import decision_lines
    from optbench.store.database import StoredTrial

    spec = parse_spec(_sequential(tiny_dict))
    trials = plan(spec)
    stored = [StoredTrial(t, "failed", 1) for t in trials[:2]] + [
        StoredTrial(trials[2], "finished")
    ]
    why = waiting_for(SimpleNamespace(trials=stored), retries=0)
    (line,) = decision_lines(Rounds(spec, []), why)
    assert "waits for 2 failed trial(s) that no run retries with executor.retries: 0" in line
    assert "--set executor.retries=1" in line and "retried by the next run" not in line


def _two_rounds(tmp_path: Path, tiny_dict: dict, **executor) -> dict:
    data = _sequential(tiny_dict, looks=(4, 6), alpha=1e-6)  # two rounds, whatever the data
    data["models"], data["executor"] = [P, C], executor
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(data))
    return data


@pytest.mark.slow  # three runs of the driver, nothing trained: about 15 s, more under load
def test_a_look_waiting_for_failed_trials_says_what_a_rerun_does(
    tmp_path, tiny_dict, cli, monkeypatch
):
    import optbench.train.run_trial

    def broken(job, device):  # every trial fails in its worker, at once: nothing trains
        raise RuntimeError("a broken image")

    monkeypatch.setattr(optbench.train.run_trial, "run_job", broken)
    spec = parse_spec(_two_rounds(tmp_path, tiny_dict, retries=0))

    def attempts() -> set[int]:
        return {s.attempts for s in Store(spec, create=False).read(plan(spec)) if s.attempts}

    for _ in range(2):  # it said "failed ones are retried by the next run", which retried none
        code, out, _ = cli("run", "study.yaml", "--executor", "debug")
        out = " ".join(out.split())
        assert code == 1 and "retried by the next run" not in out, out
        assert "waits for 8 failed trial(s) that no run retries with executor.retries: 0" in out
        assert "raise it (e.g. --set executor.retries=1) and run again" in out
        assert attempts() == {1}
    code, out, _ = cli("run", "study.yaml", "--executor", "debug", "--set", "executor.retries=1")
    assert code == 1 and "no run retries with executor.retries: 1" in " ".join(out.split())
    assert attempts() == {2}  # as it said: each failed trial was tried again


def test_a_stop_at_a_round_boundary_says_how_to_resume(tmp_path, tiny_dict, cli, monkeypatch):
    from optbench.run import driver
    from optbench.run.stop_signals import StopSignal

    def sigterm(*args):  # what the driver's handler raises on SIGTERM (stop_signals_as_ctrl_c)
        raise StopSignal(signal.SIGTERM)

    monkeypatch.setattr(driver, "_take_looks", sigterm)  # the boundary before round 1
    _two_rounds(tmp_path, tiny_dict)
    code, out, err = cli("run", "study.yaml", "--executor", "debug")
    assert code == 128 + signal.SIGTERM, err
    assert (
        "stopped: tiny: every result recorded stays recorded; run the same command to resume"
        in " ".join(out.split())
    )


def _tree(folder: Path) -> dict:
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("seeds", [0, 1], "read other trials than this study now plans"),
        ("epochs", 2, "read other trials than this study now plans"),
        ("decide.alpha", 0.1, "another decide: block"),
        ("decide.looks", [4, 5, 8], "another decide: block"),
    ],
)
def test_run_and_status_refuse_a_changed_study_before_any_write(
    tmp_path, tiny_dict, cli, key, value, said
):
    from optbench.spec.schema import dump_spec

    data = _sequential(tiny_dict, alpha=1e-6)
    spec = parse_spec(data)
    store = Store(spec, create=True)  # the first look recorded, as a driver leaves it
    for record in _first_looks(spec):
        store.record_look(record)
    (spec.study_dir / "spec.yaml").write_text(dump_spec(spec))
    before = _tree(spec.study_dir)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(_changed(data, key, value)))
    run, dry = ["run", "study.yaml", "--executor", "debug"], ["run", "study.yaml", "--dry-run"]
    report = ["report", "study.yaml", "--out", str(tmp_path / "reports")]
    for command in (run, dry, ["status", "study.yaml"], report):
        code, out, err = cli(*command)
        assert code == 2 and said in err and len(err.strip().splitlines()) == 1, (out, err)
        assert "Traceback" not in out + err
    assert _tree(spec.study_dir) == before  # spec.yaml, the lock, the database: untouched
    assert not (tmp_path / "reports" / "tiny" / "index.html").exists()


def test_a_population_is_grouped_within_a_round(tiny_dict):
    data = _sequential(tiny_dict, looks=(4, 6, 8))
    data["executor"] = {"population": 4}
    spec = parse_spec(data)
    rounds, trials = Rounds(spec, []), plan(spec)
    by_key = {t.key: t for t in trials}
    groups = [
        [m.key for m in getattr(job, "members", [job])]
        for job in jobs(trials, {t.key: 1 for t in trials}, 4, rounds.round_of)
    ]
    assert sorted(k for keys in groups for k in keys) == sorted(by_key)  # each trial once
    assert max(map(len, groups)) == 4  # populations formed: the first round's 4 samples
    for keys in groups:
        assert len({rounds.round_of(by_key[k]) for k in keys}) == 1, keys


# --- real trainings: rounds, the store, a driver stopped at a look -----------------------------


def _study_file(folder: Path, data: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = copy.deepcopy(data) | {"output": str(folder / "results")}
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _run(path: Path, *extra: str, hook: str = "") -> subprocess.CompletedProcess:
    """`optbench run STUDY` in a child process, after the code `hook` (e.g. _signal_at's)."""
    code = hook + "\nfrom optbench.cli.app import main; main()"
    command = [sys.executable, "-c", code, "run", str(path), "--executor", "debug", *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=path.parent)


def _start(path: Path, log: Path) -> subprocess.Popen:
    """`optbench run STUDY` as _run runs it, started in the background, its output in `log`."""
    command = [sys.executable, "-m", "optbench", "run", str(path), "--executor", "debug"]
    with log.open("w") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=path.parent)


def _looks(path: Path) -> list[tuple]:
    spec = parse_spec(yaml.safe_load(path.read_text()))
    return [
        (r["panel"], r["k"], r["n"], r["estimate"], r["low"], r["high"], r["outcome"])
        for r in Store(spec, create=False).looks()
    ]


def _digests(path: Path) -> dict:
    spec = parse_spec(yaml.safe_load(path.read_text()))
    frame = Store(spec, create=False).frame(plan(spec))
    done = frame[frame["status"] == "finished"]
    return dict(
        zip(done["cell_id"] + "/" + done["sample"].astype(str), done["digest"], strict=True)
    )


LOOK = "optbench.store.database:Store.record_look"
ROUND = "optbench.store.database:Store.prepare"  # once per round: round 2's is the 2nd call
TRIAL = "optbench.train.run_trial:run_job"  # the debug executor's trials, in the driver


@pytest.mark.slow
@pytest.mark.timeout(1800)  # drivers killed and resumed; past 900 s at load 12 here
def test_a_driver_killed_at_a_look_resumes_to_the_same_decision(tmp_path, tiny_dict):
    # One study killed at each moment in turn, each run from the state the last left: the
    # on-disk states are those a fresh run killed there leaves (a look, a round and a trial are
    # counted from what the study holds), at a seventh of the trainings of one study per kill.
    data = _sequential(tiny_dict, looks=(4, 6), alpha=1e-6)  # two rounds, whatever the data
    data["models"] = [P, C]
    reference = _study_file(tmp_path / "reference", data)
    uninterrupted = _start(reference, tmp_path / "reference.log")
    kills = {  # where, in order: (hook, looks recorded when it stops)
        # round 1 trained, its look computed, not recorded
        "before its first look is recorded": (signal_at(LOOK, 1, signal.SIGKILL), 0),
        "SIGTERM just before a look": (signal_at(LOOK, 1, signal.SIGTERM), 0),
        "after it": (signal_at(LOOK, 1, signal.SIGKILL, after=True), 1),
        # a run from look 1 prepares round 2 first: its first call
        "SIGTERM at the round boundary": (signal_at(ROUND, 1, signal.SIGTERM), 1),
        "between the rounds": (signal_at(ROUND, 1, signal.SIGKILL), 1),
        # round 2's first trial wrote its result, which the driver had not recorded
        "in round 2": (signal_at(TRIAL, 1, signal.SIGKILL, after=True), 1),
    }
    path = _study_file(tmp_path / "killed", data)
    for where, (hook, recorded) in kills.items():
        killed = _run(path, hook=hook)
        if "SIGTERM" in where:  # it stops as on Ctrl-C, saying so (docs/faults.md)
            assert killed.returncode == 128 + signal.SIGTERM, (where, killed.stderr)
            assert "run the same command to resume" in killed.stdout, (where, killed.stdout)
        else:
            assert killed.returncode == -signal.SIGKILL, (where, killed.stderr)
        assert len(_looks(path)) == recorded, where
    assert len(_digests(path)) == 8  # round 1's; round 2's first trial trained, not recorded
    again = _run(path)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    assert uninterrupted.wait(timeout=900) == 0, (tmp_path / "reference.log").read_text()
    done = (tmp_path / "reference.log").read_text()
    assert "look 1 (4 of at most 6 samples)" in done and "after 6 of at most 6" in done, done
    expected, digests = _looks(reference), _digests(reference)
    assert [look[1:3] for look in expected] == [(0, 4), (1, 6)] and len(digests) == 12
    assert _looks(path) == expected  # the same looks, each taken once
    assert _digests(path) == digests  # every trial once, every weight the same
    assert set(_finished_attempts(path).values()) == {1}  # none recorded twice
    rerun = _run(reference)
    assert "nothing to run" in rerun.stdout and _looks(reference) == expected
    assert os.path.exists(reference.parent / "results" / "tiny" / "study.db")


@pytest.mark.slow  # trains 8 one-epoch trials, then runs status, report and run again
def test_a_study_whose_every_trial_diverges_stops_and_runs_reports_and_shows_its_status(
    tmp_path, tiny_dict
):
    # issue 67: an lr box far too high, every trial diverges; the look continued (its guard
    # worked), the reader recomputed the interval without the guard ([0, 0]: "equivalent"), and
    # every later run, status and report exited 2 calling the record damaged
    data = _sequential(tiny_dict, looks=(4, 6), margin=0.1)
    data["models"] = [P, C]
    data["search"]["ranges"]["adamw"] = {"lr": [1e3, 1e4], "wd": [0.01, 0.1]}
    path = _study_file(tmp_path / "diverged", data)
    first = _run(path)
    assert first.returncode == 0, first.stderr
    assert "nothing learned" in first.stdout and "has no finished trial" in first.stdout
    assert [look[1:3] + look[-1:] for look in _looks(path)] == [(0, 4, "nothing learned")]

    def optbench(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "optbench", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=path.parent)

    status = optbench("status", str(path))
    assert status.returncode == 0 and "nothing learned after 4 of at most 6" in status.stdout, (
        status.stdout + status.stderr
    )
    # --edf: the curves figure of a study without a finished trial is another fault (a KeyError)
    report = optbench("report", str(path), "--edf", "--out", str(tmp_path / "reports"))
    assert report.returncode == 0, report.stderr
    summary = json.loads((tmp_path / "reports" / "tiny" / "summary.json").read_text())
    (claim,) = [row for row in summary["claims"] if row["claim"] == "a"]
    assert claim["verdict"] == "nothing learned" and "no finished trial" in claim["note"]
    again = _run(path)
    assert again.returncode == 0 and "nothing to run" in again.stdout, again.stdout + again.stderr


RECORD = "optbench.store.database:Store.record"  # a trial's result, into the store
CATCH_UP = "optbench.run.driver:catch_up"  # results that ended while no driver followed
COMPUTE = "optbench.run.rounds:claims_table"  # called only while a look is computed
# Where a killed driver may stop: the hook, before or after the call, how many calls a run
# makes from a study's state (_progress: trials trained, trials recorded, looks recorded) of
# the 12-trial, 2-look study below (0: no kill can land there), and the moment's rank: those
# whose window closes first come first, so that one study has room for all the kills.
MOMENTS = {
    "before a trial trains": (TRIAL, False, lambda trained, recorded, looks: 12 - trained, 0),
    "a trial trained, not recorded": (TRIAL, True, lambda trained, recorded, looks: 12 - trained, 0),
    "while a trial is recorded": (RECORD, False, lambda trained, recorded, looks: 12 - recorded, 0),
    "while catching up": (CATCH_UP, False, lambda trained, recorded, looks: 1, 1),
    "after catching up": (CATCH_UP, True, lambda trained, recorded, looks: 1, 1),
    # a run from look 0 prepares round 1, then round 2; after look 1, round 2
    "before a round's trials are asked": (ROUND, False, lambda trained, recorded, looks: 2 - looks, 1),
    "after a round's trials are asked": (ROUND, True, lambda trained, recorded, looks: 2 - looks, 1),
    "while a look is computed": (COMPUTE, False, lambda trained, recorded, looks: 2 - looks, 2),
    "before a look is recorded": (LOOK, False, lambda trained, recorded, looks: 2 - looks, 2),
    "after a look is recorded": (LOOK, True, lambda trained, recorded, looks: 2 - looks, 3),
}  # fmt: skip
AT_RANDOM = "at a random time"  # early (rank 0): a delay of a few start-ups, while trials train


def _progress(path: Path) -> tuple[int, int, int] | None:
    """(trials with a result file, trials recorded, looks recorded) of the study at `path`;
    None while its database holds a killed driver's unfinished write (only a run reads it)."""
    from optbench.errors import UnfinishedWrite
    from optbench.trial.results import read_result

    spec = parse_spec(yaml.safe_load(path.read_text()))
    trained = sum(read_result(t.out_dir) is not None for t in plan(spec))
    try:
        return trained, len(_digests(path)), len(_looks(path))
    except UnfinishedWrite:
        return None


def _finished_attempts(path: Path) -> Counter:
    """How many finished attempts each trial has in the study database (each must have one)."""
    import optuna

    spec = parse_spec(yaml.safe_load(path.read_text()))
    counts = Counter()
    for cell_id in {t.cell_id for t in plan(spec)}:
        study = optuna.load_study(study_name=f"{spec.name}/{cell_id}", storage=spec.storage_url)
        complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        counts.update(t.user_attrs["key"] for t in complete)
    return counts


@pytest.mark.slow
@pytest.mark.timeout(1800)  # drivers killed and resumed; past 900 s at load 12 here
def test_a_driver_killed_at_random_moments_resumes_to_the_same_decision(tmp_path, tiny_dict):
    # One study killed again and again (the test above: fixed moments, in order), each run at a
    # moment drawn at random (seeded) from those its state still has ahead: 5 of MOMENTS, each
    # at a call drawn from those left, and 2 delays; SIGKILL mostly, SIGTERM a quarter of the
    # hooked ones. Where a study is complete with kills left, a fresh one takes them. The
    # reference runs uninterrupted meanwhile; a recorded look or result is never rewritten, so
    # the end shows whether any kill recorded something of its own.
    data = _sequential(tiny_dict, looks=(4, 6), alpha=1e-6)  # two rounds, whatever the data
    data["models"] = [P, C]
    reference = _study_file(tmp_path / "reference", data)
    uninterrupted = _start(reference, tmp_path / "reference.log")
    start = time.monotonic()  # a driver's start-up: `status` of a study that has not run
    not_run = _study_file(tmp_path / "not-run", data)
    subprocess.run([sys.executable, "-m", "optbench", "status", str(not_run)], capture_output=True)
    startup_s = time.monotonic() - start

    rng = random.Random(56)
    moments = [*rng.sample(sorted(MOMENTS), 5), AT_RANDOM, AT_RANDOM]
    rng.shuffle(moments)
    moments.sort(key=lambda m: MOMENTS[m][3] if m in MOMENTS else 0)
    studies, kills = [], []
    while moments:
        if not studies or (state := _progress(studies[-1])) == (12, 12, 2):
            studies.append(_study_file(tmp_path / f"study-{len(studies) + 1}", data))
            state = _progress(studies[-1])
        path = studies[-1]
        if state is None:  # a hot journal: only moments a run reaches before reading it
            ahead = {m: 1 for m in moments if m in ("while catching up", AT_RANDOM)}
        else:
            ahead = {m: MOMENTS[m][2](*state) if m in MOMENTS else 12 - state[1] for m in moments}
        moment = next((m for m in moments if ahead.get(m)), None)
        if moment is None:  # none lands in what is left: the same command completes it
            assert _run(path).returncode == 0
            continue
        if moment == AT_RANDOM:
            delay = rng.uniform(1.0, 3.0) * startup_s
            killed = _start(path, tmp_path / "killed.log")
            try:
                killed.wait(timeout=delay)
                what = f"{moment}, {delay:.1f} s: it ended first"  # not a kill: drawn again
            except subprocess.TimeoutExpired:
                killed.kill()
                killed.wait()
                moments.remove(moment)
                what = f"{moment}, {delay:.1f} s in"
        else:
            where, after, _, _ = MOMENTS[moment]
            call = rng.randint(1, ahead[moment])
            signum = signal.SIGTERM if rng.random() < 0.25 else signal.SIGKILL
            killed = _run(path, hook=signal_at(where, call, signum, after=after))
            if signum == signal.SIGTERM:  # it stops as on Ctrl-C, saying so (docs/faults.md)
                assert killed.returncode == 128 + signum, (moment, killed.stderr)
                assert "run the same command to resume" in killed.stdout, (moment, killed.stdout)
            else:
                assert killed.returncode == -signum, (moment, call, killed.stderr)
            moments.remove(moment)
            what = f"{moment}, call {call}, {signal.Signals(signum).name}"
        kills.append(f"study {len(studies)}, {state}: {what}")
    assert uninterrupted.wait(timeout=900) == 0, (tmp_path / "reference.log").read_text()
    expected, digests = _looks(reference), _digests(reference)
    assert [look[1:3] for look in expected] == [(0, 4), (1, 6)] and len(digests) == 12
    for path in studies:  # each resumed by the same command, as the reference ended
        again = _run(path)
        assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
        assert _looks(path) == expected  # the same decision at the same look, each look once
        assert _digests(path) == digests  # every trial, every weight the uninterrupted one's
        assert set(_finished_attempts(path).values()) == {1}  # none recorded twice
    print(f"{len(kills)} runs killed:", *kills, sep="\n  ")


# --- what status, the report and --dry-run say of a sequential study -----------------------------


def test_status_says_where_each_claim_stands_and_what_is_left(tiny_dict):
    from optbench.run.rounds import decision_lines

    spec = parse_spec(_sequential(tiny_dict, alpha=1e-6))
    rounds, trials = Rounds(spec, []), plan(spec)
    assert "the first look, at 4 samples per cell, comes once they are trained" in " ".join(
        decision_lines(rounds, waiting=None)
    )
    rounds.add(rounds.look(_frame(rounds.asked(trials), _errors(12.0, 8.0, 4.0))))
    (line,) = decision_lines(rounds, waiting=None)
    assert "look 1 of 3 at 4 samples" in line and "next look at 6, at most 4 more samples" in line
    (waiting,) = decision_lines(rounds, waiting="trials without a result")
    assert "waits for trials without a result" in waiting


def test_the_dry_run_gives_the_smallest_the_largest_and_the_expected_size(tiny_dict):
    from optbench.run.rounds import size_lines

    spec = parse_spec(_sequential(tiny_dict))
    trials = plan(spec)
    hours = {(c.model, c.optimizer, c.epochs): 0.5 for c in spec.cells()}
    design, first, planned, _ = size_lines(spec, trials, hours, [])
    assert "from 12 trials, 6 device-hours" in first and "to 20, 10 device-hours" in first
    assert "expected if each effect is one a fixed study of 8 samples shows 90%" in planned
    assert "alpha 0.05 for the study, 0.05 for each of its 1 panels" in design
    row = {"claim": "a", "estimate": 0.8, "se": 0.05, "n_now": 4}
    row["cells"] = [[P, "adamw", 1], [C, "adamw", 1]]
    expected = size_lines(spec, trials, hours, [row])[2]
    assert "about 12 trials, 6 device-hours expected" in expected  # z = 23: the first look
    # the dry run passes the trials of every look (rounds.most); it said "about 0 trials" when a
    # cell no claim reads (D) has fewer of them
    most = Rounds(spec, []).within(trials, Rounds(spec, []).most())
    assert size_lines(spec, most, hours, [row])[2] == expected
    row |= {"estimate": 0.0}  # no effect: most studies take every look (20 trials at most)
    none = size_lines(spec, most, hours, [row])[2]
    assert 18 <= int(re.search(r"about (\d+) trials", none)[1]) <= 20, none


@pytest.mark.slow  # renders a whole report: over half a second here
def test_a_sequential_report_shows_the_looks_not_a_fixed_size_interval(tmp_path, tiny_dict):
    from optbench.report.writer import write_report

    spec = parse_spec(_sequential(tiny_dict, alpha=1e-6))
    rounds, trials = Rounds(spec, []), plan(spec)
    error_of = _errors(12.0, 8.0, 4.0)
    while not rounds.finished:
        rounds.add(rounds.look(_frame(rounds.asked(trials), error_of)))
    frame = _frame(rounds.asked(trials), error_of).assign(study="tiny", cell_id="c")
    looks = [look.record() for panel in rounds.looks.values() for look in panel]
    summary = write_report(spec, frame, tmp_path / "r", {"edf"}, n_boot=100, looks=looks)
    (row,) = [r for r in summary["claims"] if r["claim"] == "a"]
    last = looks[-1]
    assert (row["low"], row["high"], row["verdict"]) == (last["low"], last["high"], last["outcome"])
    assert row["interval"] == "repeated" and row["looks"] == 3 and row["n_max"] == 8
    assert summary["looks"] == looks and (tmp_path / "r" / "looks.png").exists()
    page = (tmp_path / "r" / "index.html").read_text()
    assert "of at most 8 samples" in page or "undecided at the maximum, 8 samples" in page


# --- decisions right by construction (issue 53) --------------------------------------------------

S1, S2 = "vit_s1_w64_16px", "vit_s2_w64_16px"


def _chain(tiny_dict, errors, looks, noise: float, seed: int, **decide):
    """A stem-chain study S1 -> S2 -> P deciding claim (d) at `looks` seeds, and the error of
    each trial: its model's of `errors` plus normal noise of sd `noise` per seed."""
    data = copy.deepcopy(tiny_dict)
    data |= {"models": [S1, S2, P], "seeds": list(range(looks[-1]))}
    good = {m: {"adamw": {"lr": 1e-3, "wd": 0.05}} for m in (S1, S2, P)}
    data["search"] |= {"sampler": "good", "n_samples": 1, "good_values": good}
    data["decide"] = {"claims": ["d"], "looks": list(looks), **decide}
    spec = parse_spec(data)
    draws = np.random.default_rng(seed).normal(0, noise, (3, looks[-1]))
    index = {S1: 0, S2: 1, P: 2}

    def error_of(t):
        at = index[t.cell.model]
        return errors[at] + draws[at, spec.seeds.index(t.seed)]

    return spec, error_of


def test_a_stem_chain_with_one_step_down_and_one_up_is_not_decided_opposite(tiny_dict):
    # the mini_stem situation: S2 beats S1 (the first step falls) while ViT_P is far worse than
    # S2 (the second rises steeply). "Opposite" means error falls at every step: not shown here,
    # so the look continues and says why; the last look leaves it undecided.
    spec, error_of = _chain(tiny_dict, (20.0, 15.0, 48.0), (3, 4, 6), noise=0.5, seed=2)
    rounds, trials = Rounds(spec, []), plan(spec)
    sizes = _play(rounds, trials, error_of)
    (panel,) = rounds.looks.values()
    first, last = panel[0], panel[-1]
    assert [look.outcome for look in panel] == ["continue", "continue", "undecided"]
    assert sizes[-1] == 18  # every look taken: 3 cells x 6 seeds
    assert first.low < 0 < first.high or first.high < 0  # its smallest step: S1 -> S2 falls
    assert "mixed: error falls at S1 -> S2" in first.note and "grows at S2 -> P" in last.note
    (line,) = decision_lines(rounds, waiting=False)
    assert "undecided at the maximum after 6 of at most 6 seeds" in line and last.note in line
    # the smallest step alone (-5 points, well estimated) said "a last look at about N seeds
    # would likely decide it", while more seeds only show the mixed chain better
    results = with_errors(_frame(rounds.asked(trials), error_of), METRIC)
    (row,) = with_looks(claims_table(results, study="tiny"), [last.record()]).to_dict("records")
    assert "about" not in row["advice"] and "every step goes one way" in row["advice"]


def test_a_chain_that_holds_with_one_step_inside_the_margin_reads_its_own_record_back(tiny_dict):
    # a chain holds where every step lies above 0, and is negligible only where every step lies
    # inside the margin. Its record keeps [smallest low, smallest high]: here the small step's
    # (inside the margin) while the large step reaches past it. The next run read "holds"
    # against that interval's "holds, negligible" and refused the study's own record.
    spec, error_of = _chain(tiny_dict, (20.0, 20.6, 23.6), (3, 6), noise=0.15, seed=0, margin=1.0)
    rounds, trials = Rounds(spec, []), plan(spec)
    _play(rounds, trials, error_of)
    (panel,) = rounds.looks.values()
    last = panel[-1]
    assert last.outcome == "holds" and 0 < last.low < last.high < 1.0
    assert list(inconsistent(spec.decide, panel)) == []
    store = Store(spec, create=True)
    for look in panel:
        store.record_look(look.record())
    assert Rounds.of(spec, store, trials).looks == rounds.looks  # the next run's reader


def test_a_panel_without_a_note_beside_one_with_a_note_records_a_look_its_reader_takes(tiny_dict):
    # the mini_stem situation at a look: AdamW's chain is mixed (a note says why) and SGD's falls
    # at every step (no note). pandas turned SGD's missing note into NaN beside AdamW's text, the
    # look was stored with it, and the next run refused its own record as damaged.
    data = copy.deepcopy(tiny_dict)
    data |= {"models": [S1, S2, P], "optimizers": ["adamw", "sgd"], "seeds": [0, 1, 2, 3, 4, 5]}
    good = {
        m: {"adamw": {"lr": 1e-3, "wd": 0.05}, "sgd": {"lr": 0.1, "wd": 1e-5}} for m in (S1, S2, P)
    }
    data["search"] |= {"sampler": "good", "n_samples": 1, "good_values": good}
    data["search"]["ranges"]["sgd"] = {"lr": [0.1, 1.0], "wd": [1e-5, 1e-4]}
    data["decide"] = {"claims": ["d"], "looks": [3, 4, 6]}
    spec = parse_spec(data)
    rounds, trials = Rounds(spec, []), plan(spec)
    base = {"adamw": {S1: 40.0, S2: 15.0, P: 48.0}, "sgd": {S1: 10.0, S2: 25.0, P: 40.0}}
    noise = np.random.default_rng(3).normal(0, 0.5, (2, 3, 6))
    where = {"adamw": 0, "sgd": 1, S1: 0, S2: 1, P: 2}

    def error_of(t):
        at = where[t.cell.optimizer], where[t.cell.model], spec.seeds.index(t.seed)
        return base[t.cell.optimizer][t.cell.model] + noise[at]

    looks = {look.cells[0][1]: look for look in rounds.look(_frame(rounds.asked(trials), error_of))}
    assert "mixed" in looks["adamw"].note and looks["sgd"].note is None
    for look in looks.values():  # what the store keeps is what the next run reads back
        assert Look.from_record(json.loads(json.dumps(look.record()))) == look
    with pytest.raises(ValueError, match="note: not text"):  # no run writes what none reads
        dataclasses.replace(looks["sgd"], note=float("nan")).record()


def _diverged(trials) -> pd.DataFrame:
    return _frame(trials, lambda t: np.nan).assign(status="diverged")


def test_two_cells_whose_trials_all_diverged_stop_at_the_first_look_and_are_read_back(tiny_dict):
    # every trial diverged: both EDF areas are 0 in every resample, an estimate 0 with se 0 and
    # an interval [0, 0] inside any margin; nothing was measured, so nothing is decided and the
    # panel stops there (issue 67: it trained to its maximum, and the reader, recomputing the
    # interval without the look's guard, called its own record damaged)
    from optbench.decision.sequential import NOTHING_LEARNED
    from optbench.run.rounds import asked_trials

    spec = parse_spec(_sequential(tiny_dict, margin=0.1))
    rounds, trials = Rounds(spec, []), plan(spec)
    (look,) = rounds.look(_diverged(rounds.asked(trials)))
    assert look.outcome == NOTHING_LEARNED and "has no finished trial" in look.note
    rounds.add([look])
    assert rounds.finished and len(rounds.asked(trials)) == 12  # the first look: 3 cells x 4
    store = Store(spec, create=True)
    store.record_look(look.record())
    assert [t.key for t in asked_trials(spec, store)] == [t.key for t in rounds.asked(trials)]
    assert Rounds.of(spec, store).looks == rounds.looks
    (line,) = decision_lines(Rounds.of(spec, store), waiting=None)
    assert "nothing learned after 4 of at most 8 samples" in line and look.note in line


def test_a_look_that_continues_with_a_note_inside_the_margin_is_read_back(tiny_dict):
    # a chain shown both ways, each step well inside the margin: the look continues (a note
    # says why), and the reader gives its record the same outcome; it called it "equivalent"
    from optbench.run.rounds import asked_trials

    spec, error_of = _chain(tiny_dict, (20.0, 17.0, 20.0), (6, 8), noise=0.6, seed=4, margin=5.0)
    rounds, trials = Rounds(spec, []), plan(spec)
    (look,) = rounds.look(_frame(rounds.asked(trials), error_of))
    assert look.outcome == "continue" and look.note.startswith("mixed: error falls at S1 -> S2")
    assert -5.0 < look.low and look.high < 5.0  # inside the margin: "equivalent" without the note
    store = Store(spec, create=True)
    store.record_look(look.record())
    assert len(asked_trials(spec, store)) == 3 * 8  # read back, and the panel grows


def test_a_contrast_without_spread_decides_nothing_and_stops(tiny_dict):
    # every trial at the same error (50%: not near chance), finished, but se 0 and [0, 0]
    from optbench.decision.sequential import NOTHING_LEARNED

    spec = parse_spec(_sequential(tiny_dict, margin=0.1))
    rounds, trials = Rounds(spec, []), plan(spec)
    (look,) = rounds.look(_frame(rounds.asked(trials), lambda t: 50.0))
    assert look.outcome == NOTHING_LEARNED and "no spread" in look.note


def test_both_models_at_chance_decide_nothing_at_a_look_and_stop(tiny_dict):
    # digits (10 classes): both cells end at 89.7 to 90.3% error, which was "equivalent" at the
    # first look (se 0.01, an interval well inside the margin of 0.1)
    from optbench.decision.sequential import NOTHING_LEARNED

    spec = parse_spec(_sequential(tiny_dict, looks=(6, 8), margin=0.1))
    rounds, trials = Rounds(spec, []), plan(spec)
    chance = dict(zip((P, C, D), np.random.default_rng(5).uniform(89.7, 90.3, (3, 8)), strict=True))
    (look,) = rounds.look(_frame(rounds.asked(trials), lambda t: chance[t.cell.model][t.sample]))
    assert look.outcome == NOTHING_LEARNED, (look.outcome, look.low, look.high)
    assert look.note.startswith("every cell is near chance") and "10 classes" in look.note
    rounds.add([look])
    assert rounds.finished  # a broken study stops, saying why, instead of training on


def test_a_study_splits_its_alpha_over_the_panels_it_decides(tiny_dict):
    # two epochs: claim (a) has two panels, each decided at alpha / 2, so the chance that any
    # of the study's decisions is wrong stays at most alpha (Bonferroni)
    from optbench.decision import sequential

    data = _sequential(tiny_dict)
    data["epochs"] = [1, 2]
    spec = parse_spec(data)
    rounds = Rounds(spec, [])
    assert rounds.design.panels == 2
    half = sequential.boundaries(rounds.design.fractions, "pocock", 0.025)
    assert rounds.design.boundaries() == pytest.approx(half)
    looks = rounds.look(_frame(rounds.asked(plan(spec)), _errors(12.0, 8.0, 4.0)))
    assert len(looks) == 2 and all((x.alpha, x.panels) == (0.05, 2) for x in looks)
    assert looks[0].boundary == pytest.approx(half[0])
    # one panel (the quickstart's design): the whole alpha
    assert Rounds(parse_spec(_sequential(tiny_dict)), []).design.panels == 1


def _two_panels(tiny_dict, **decide):
    """Claim (a) at epochs 1 and 2 (two panels): a clear effect at 1 epoch, none at 2."""
    data = _sequential(tiny_dict, looks=(6, 8, 10), **decide)
    data["epochs"] = [1, 2]
    spec = parse_spec(data)
    clear, none = _errors(40.0, 1.0), _errors(12.0, 12.0, 4.0)
    return spec, lambda t: (clear if t.cell.epochs == 1 else none)(t)


def test_a_panel_that_holds_passes_its_alpha_on_to_the_open_one(tiny_dict):
    # Holm's step-down (Maurer and Bretz 2013): once the 1-epoch panel holds, the 2-epoch
    # panel is decided at the study's whole alpha, its boundary recomputed at that level, from
    # the same look on; Bonferroni kept it at alpha / 2 throughout
    from optbench.decision import sequential

    spec, error_of = _two_panels(tiny_dict)
    rounds, trials = Rounds(spec, []), plan(spec)
    fractions = rounds.design.fractions
    half, full = (sequential.boundaries(fractions, "pocock", a) for a in (0.025, 0.05))
    looks = rounds.look(_frame(rounds.asked(trials), error_of))
    by_epochs = {look.cells[0][2]: look for look in looks}
    assert by_epochs[1].outcome == "holds" and by_epochs[1].level == 0.025
    assert by_epochs[1].boundary == pytest.approx(half[0])
    assert by_epochs[2].outcome == "continue" and by_epochs[2].level == 0.05
    assert by_epochs[2].boundary == pytest.approx(full[0])  # alpha's, not alpha / 2's
    rounds.add(looks)
    (second,) = rounds.look(_frame(rounds.asked(trials), error_of))
    assert (second.k, second.level, second.boundary) == (1, 0.05, pytest.approx(full[1]))
    # each record is what its reader takes back, level and all
    again = [Look.from_record(look.record()) for look in [*looks, second]]
    assert [look.level for look in again] == [0.025, 0.05, 0.05]


def test_a_driver_killed_between_a_rejection_and_the_next_panel_takes_the_same_look(tiny_dict):
    # look 2 of two open panels: the 1-epoch panel's rejection is recorded, the 2-epoch panel's
    # look is not; a resumed driver gives it the recycled level, as the uninterrupted look did
    spec, error_of = _two_panels(tiny_dict)
    none = _errors(12.0, 12.0, 4.0)
    trials, rounds = plan(spec), Rounds(spec, [])
    first = rounds.look(_frame(rounds.asked(trials), none))
    assert [look.outcome for look in first] == ["continue", "continue"]
    rounds.add(first)
    frame = _frame(rounds.asked(trials), error_of)
    second = rounds.look(frame)
    held = next(look for look in second if look.outcome == "holds")
    resumed = Rounds(spec, [Look.from_record(x.record()) for x in [*first, held]])
    (taken,) = resumed.look(frame)
    assert taken == next(look for look in second if look is not held)
    assert (taken.k, taken.level) == (1, 0.05)


def test_a_driver_killed_between_two_panels_first_looks_takes_the_missing_one(tiny_dict):
    # look 1 of two panels, the 1-epoch one decided "holds" and recorded, the 2-epoch one not:
    # only the data say which panels exist, so a resumed driver must take look 1 again for the
    # missing panel (it once read the study as finished and never looked at that panel)
    spec, error_of = _two_panels(tiny_dict)
    trials, rounds = plan(spec), Rounds(spec, [])
    frame = _frame(rounds.asked(trials), error_of)
    first = rounds.look(frame)
    held = next(look for look in first if look.outcome == "holds")
    resumed = Rounds(spec, [Look.from_record(held.record())])
    (taken,) = resumed.look(frame)
    assert taken == next(look for look in first if look is not held)
    assert (taken.k, taken.level, taken.outcome) == (0, 0.05, "continue")
    resumed.add([taken])
    assert not resumed.finished and resumed.look(frame) == []  # look 2 waits for its round
    assert list(inconsistent(spec.decide, [held, taken])) == []


def test_equivalent_passes_no_alpha_on(tiny_dict):
    # "equivalent" rejects |effect| >= margin, not the zero null: the open panel keeps alpha / 2
    data = _sequential(tiny_dict, looks=(6, 8, 10), margin=0.5)
    data["epochs"] = [1, 2]
    spec = parse_spec(data)
    same, noisy = _errors(5.0, 5.0, 1.0), _errors(10.0, 10.0, 2.0)
    rounds = Rounds(spec, [])
    frame = _frame(rounds.asked(plan(spec)), lambda t: (same if t.cell.epochs == 1 else noisy)(t))
    by_epochs = {look.cells[0][2]: look for look in rounds.look(frame)}
    assert by_epochs[1].outcome == "equivalent", by_epochs[1]
    assert by_epochs[2].level == 0.025 and by_epochs[2].outcome == "continue"


def test_a_recorded_level_above_what_the_rejections_allow_is_refused(tiny_dict):
    # neither panel rejects at look 1 (alpha 1e-6), so both are at alpha / 2; a record that
    # claims alpha is not what a driver wrote
    data = _sequential(tiny_dict, looks=(6, 8, 10), alpha=1e-6)
    data["epochs"] = [1, 2]
    spec = parse_spec(data)
    records = _first_looks(spec)
    assert [r["level"] for r in records] == [5e-7, 5e-7]
    looks = [Look.from_record(r) for r in records]
    assert list(inconsistent(spec.decide, looks)) == []
    edited = [Look.from_record(records[0] | {"level": 1e-6}), looks[1]]
    (why,) = inconsistent(spec.decide, edited)
    assert "level 1e-06, but 0 other panels had rejected by then" in why
    # a record written before looks kept their level was taken at alpha / panels
    old = [Look.from_record({k: v for k, v in r.items() if k != "level"}) for r in records]
    assert list(inconsistent(spec.decide, old)) == []
    assert with_looks_levels(old) == [5e-7, 5e-7]


def with_looks_levels(looks: list[Look]) -> list[float]:
    """The `level` column with_looks gives each panel's row from these records."""
    records = [look.record() | ({} if look.level else {"level": None}) for look in looks]
    table = pd.DataFrame(
        {"claim": [r["claim"] for r in records], "cells": [r["cells"] for r in records]}
    ).assign(verdict="continue", note=None)
    return list(with_looks(table, records)["level"])

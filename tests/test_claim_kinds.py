"""The claim kinds (optbench/spec/claim_kinds.py): every kind has each of its parts, the grid's
panels and the cells they read come from the table, and a look is kept under its comparison's
stable key, with the looks an earlier optbench kept under the panel's words still read (and
never taken again)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from test_decide import C, P, _first_looks, _sequential

from optbench.decision import frames
from optbench.decision.claims import READERS, SEED_CONTRASTS, claims_table
from optbench.decision.looks import with_looks
from optbench.plan.trials import plan
from optbench.report.figures import looks_figure
from optbench.report.writer import FIGURES
from optbench.run.rounds import Rounds, claims_reading, decision_lines
from optbench.spec.claim_kinds import (
    KINDS,
    PAPER,
    TWO_LENGTHS,
    comparison_key,
    declared_panel,
    panel_of,
    panels,
)
from optbench.spec.schema import load_spec, parse_spec
from optbench.store.database import Store
from optbench.store.migrations import keep_recorded_cells

ROOT = Path(__file__).resolve().parents[1]
# A study folder written by optbench at a05e811: its two looks are kept under the panel's words
RECORDED = ROOT / "tests" / "data" / "recorded_before_seed_default"
GRID = [(m, o, e) for m in (P, C, "vit_s1_w64_16px") for o in ("adamw", "sgd") for e in (4, 8, 16)]


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_kind_has_each_of_its_parts(name):
    kind = KINDS[name]
    assert kind.unit in ("samples", "seeds") and kind.smallest_look >= 2
    # its statistic: a reader of the claims table and, reading seeds, a per-seed contrast
    assert kind.reads in READERS and (kind.reads != "seeds" or name in SEED_CONTRASTS)
    assert kind.section in FIGURES  # a section the report draws, whose claims it shows
    assert kind.phrase.format(optimizer="AdamW", epochs=8) and kind.needs and kind.measure
    assert 0 < kind.margin_below and kind.margin_words
    if kind.better is not None:  # a study may declare it on two sides: its words of them
        per_side = 2 if name in TWO_LENGTHS else 1
        sides = [(m, "adamw", e) for m in (P, C) for e in (4, 16)[:per_side]]
        panel = declared_panel("mine", name, sides, best_of=3)
        assert C in panel.statistic and P in panel.statistic and "{" not in panel.statistic
        assert panel.words.startswith(C if kind.better == 1 else P) and "{" not in panel.measure
    if kind.paper is None:  # no claim of the paper: only a study's declared comparisons
        assert kind.better is not None and name not in PAPER and panels(GRID, [name]) == []
        return
    found = panels(GRID, [name])
    assert found and {p.claim for p in found} == {name}  # a grid with every role tests it
    for panel in found:
        assert set(panel.cells) <= set(GRID)
        assert panel_of(name, panel.cells) == panel  # a record's claim and cells name it


def test_every_seed_contrast_is_a_kind_that_reads_seeds():
    assert {n for n, k in KINDS.items() if k.reads == "seeds"} == set(SEED_CONTRASTS)


def test_a_comparison_key_is_made_of_its_kind_and_cells_not_of_words():
    found = panels(GRID)
    keys = [p.key for p in found]
    assert len(set(keys)) == len(keys)  # one key per comparison
    for panel in found:
        assert " " not in panel.key and panel.words not in panel.key
        assert panel.key == comparison_key(panel.claim, [list(c) for c in panel.cells])
        assert all(str(part) in panel.key for cell in panel.cells for part in cell)


def test_a_cell_is_read_only_by_the_panels_that_read_it(tiny_dict):
    # claim (b) compares the shortest and longest schedules: the middle one never grows
    data = _sequential(tiny_dict, looks=(3, 4)) | {"epochs": [1, 2, 3], "seeds": [0, 1, 2, 3]}
    data["search"]["n_samples"] = 1
    data["decide"]["claims"] = ["b"]
    spec = parse_spec(data)
    reading = claims_reading(spec)
    assert reading[(P, "adamw", 1)] == reading[(C, "adamw", 3)] == {"b"}
    assert reading[(P, "adamw", 2)] == set()


def test_a_look_is_kept_under_its_comparison_key(tiny_dict):
    spec = parse_spec(_sequential(tiny_dict, alpha=1e-6))
    (record,) = _first_looks(spec)
    assert record["panel"] == comparison_key(record["claim"], record["cells"])
    store = Store(spec, create=True)
    assert store.record_look(record)
    ((key, _),) = store.look_records()
    assert key == f"look/{record['panel']}/000" and " " not in key
    rounds = Rounds.of(spec, Store(spec, create=False))
    assert [look.k for look in rounds.looks[record["panel"]]] == [0]
    # its words are made from the table, as before: the line the driver prints
    assert decision_lines(rounds, None)[0].startswith(f"(a) adamw 1ep {C} vs {P}: look 1 of 3")


def _recorded(tmp_path: Path, monkeypatch):
    """The study recorded at a05e811 (both looks kept under the panel's words), in tmp_path."""
    shutil.copytree(RECORDED, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    spec, _ = keep_recorded_cells(load_spec(tmp_path / "recorded.yaml"))
    return spec


def test_looks_kept_under_the_panels_words_are_read_and_not_taken_again(tmp_path, monkeypatch):
    spec = _recorded(tmp_path, monkeypatch)
    store = Store(spec, create=False)
    words = [key for key, _ in store.look_records()]
    assert all(" " in key for key in words)  # the earlier key, made of display text
    rounds = Rounds.of(spec, store)
    ((key, panel),) = rounds.looks.items()
    assert key == comparison_key("a", panel[0].cells) and [x.k for x in panel] == [0, 1]
    assert rounds.finished and rounds.look(store.frame(rounds.asked(plan(spec)))) == []
    assert decision_lines(rounds, None)[0].startswith(f"(a) adamw 1ep {C} vs {P}: ")


def test_a_study_half_looked_at_under_the_words_goes_on_under_the_key(tmp_path, monkeypatch):
    spec = _recorded(tmp_path, monkeypatch)
    with sqlite3.connect(spec.study_dir / "study.db") as db:  # as if stopped after look 1
        db.execute("DELETE FROM study_user_attributes WHERE key LIKE 'look/%/001'")
    store = Store(spec, create=False)
    rounds = Rounds.of(spec, store)
    assert rounds.next_k() == 1  # look 1 is read, not due again
    (look,) = rounds.look(store.frame(rounds.asked(plan(spec))))
    assert look.k == 1 and look.panel == comparison_key("a", look.cells)
    assert Store(spec, create=True).record_look(look.record())
    # the earlier look 1 and the new look 2 are one panel's, for the driver and the report
    store = Store(spec, create=False)
    assert [x.k for x in Rounds.of(spec, store).looks[look.panel]] == [0, 1]
    results = frames.with_errors(store.frame(plan(spec)))
    row = with_looks(claims_table(results), store.looks()).iloc[0]
    assert row["looks"] == 2 and row["n_now"] == 6
    figure = looks_figure(store.looks())  # one panel's path, not one per key
    assert len([ax for ax in figure.axes if ax.get_visible()]) == 1

"""Rankings a study declares (`kind: rank`, spec/comparisons.py, issue 69 item 1): the block and
its refusals, its pairs as panels of the study's Holm family (run/rounds.py), cells that stop
once their place is decided, the order the page draws (decision/ranking.py,
report/ranking_page.py), and the procedure's error and cost on simulated rankings
(decision/sequential.py)."""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_decide import _frame  # the store's frame of trials with made-up errors

from optbench.decision import ranking, sequential
from optbench.decision.claims import claims_table
from optbench.decision.frames import with_errors
from optbench.decision.summary import Options
from optbench.errors import SpecError
from optbench.plan.trials import plan
from optbench.report import ranking_page
from optbench.report.claims_page import sections, verdict_lines
from optbench.run.rounds import Rounds, fingerprint, size_lines
from optbench.spec.comparisons import Comparison
from optbench.spec.schema import load_spec, parse_spec

C, S1, P, D = "vit_c_w64_16px", "vit_s1_w64_16px", "vit_p_w64_16px", "dhvt_w64_16px"
MODELS = [C, S1, P, D]


def _cell(model: str) -> dict:
    return {"model": model, "optimizer": "adamw", "epochs": 1}


def _ranking(tiny_dict, looks=(6, 8, 10), decide=True, **entry) -> dict:
    """The tiny study of four models ranked by EDF area (`order`), decided at `looks`."""
    data = copy.deepcopy(tiny_dict)
    data["models"] = MODELS
    data["search"]["n_samples"] = looks[-1]
    data["comparisons"] = [
        {"name": "order", "kind": "rank", "by": "a", "cells": [_cell(m) for m in MODELS]} | entry
    ]
    if decide:
        data["decide"] = {"claims": ["order"], "looks": list(looks)}
    return data


def _errors(spreads: dict, noise: float = 0.3):
    """A model's error grows with the sample's offset times its spread (a steeper EDF: less)."""
    rng = np.random.default_rng(0)
    offsets = rng.uniform(0, 1, 64)
    return lambda t: 10 + spreads[t.cell.model] * offsets[t.sample] + noise * rng.normal()


# --- the block ------------------------------------------------------------------------------------


def test_a_ranking_is_parsed_as_its_pairs_and_counts_them_in_the_alpha(tiny_dict):
    # before: "comparisons.0.kind: unknown kind 'rank'"
    spec = parse_spec(_ranking(tiny_dict))
    (order,) = spec.comparisons
    pairs = order.panels()
    assert len(pairs) == 6 and {p.kind.name for p in pairs} == {"a"}
    # each pair: the cell listed first is the side a positive estimate favours
    assert [p.sides for p in pairs[:1]] == [(((C, "adamw", 1),), ((S1, "adamw", 1),))]
    rounds = Rounds(spec, [])
    assert rounds.design.panels == 6 and rounds.design.panel_alpha == pytest.approx(0.05 / 6)
    assert spec.decide.unit == "samples" and spec.seed_per_sample  # a pair of EDFs: samples
    lines = size_lines(spec, plan(spec), {}, [])
    assert "6 of them declared" in lines[0]
    assert lines[1].startswith("decide: (order) rank of 4 cells by a (6 pairs")
    # the pairs' statistic in general terms (it once read "auc_10(C) - auc_10(P)", claim (a)'s)
    assert "for cells x, y: auc_10(x) - auc_10(y) (EDF area, 0-1)" in lines[1]
    assert "auc_10(C)" not in lines[1]


def test_a_two_sided_comparison_dumps_and_fingerprints_as_before(tiny_dict):
    # the ranking's keys are absent from a comparison of two sides, so a study recorded before
    # rankings keeps its design's fingerprint (its looks stay readable)
    sides = [_cell(C), _cell(P)]
    two = Comparison(name="mine", kind="a", sides=sides, expect="first")
    assert two.model_dump(mode="json") == {
        "name": "mine",
        "kind": "a",
        "sides": sides,
        "expect": "first",
    }
    # the committed reference of two declared comparisons: its looks' design is this spec's
    root = Path(__file__).resolve().parents[1]
    summary = json.loads((root / "docs/reference/lion_vs_adamw/summary.json").read_text())
    designs = {look["design"] for look in summary["looks"]}
    assert designs == {fingerprint(load_spec(root / "studies/lion_vs_adamw.yaml"))}


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ({"by": None}, "comparisons.0.by: missing; a ranking orders its cells by one of a, "),
        ({"by": "d"}, "comparisons.0.by: 'd' is not one; a ranking orders its cells by one of"),
        ({"by": "length-stability"}, "comparisons.0.by: 'length-stability' is not one"),
        ({"cells": [_cell(C), _cell(P)]}, "comparisons.0.cells: List should have at least 3"),
        (
            {"cells": [_cell(C), _cell(P), _cell(C)]},
            "comparisons.0.cells.2: vit_c_w64_16px adamw 1ep is listed twice",
        ),
        (
            {"cells": [_cell(C), _cell(P), {**_cell(D), "epochs": 9}]},
            "comparisons.0.cells.2: dhvt_w64_16px adamw 9ep is no cell of the study",
        ),
        (
            {"cells": [_cell(C), _cell(P), {**_cell(D), "epochs": [1, 2]}]},
            "comparisons.0.cells.2.epochs: kind 'a' compares one cell per side",
        ),
        ({"expect": "first"}, "comparisons.0.expect: a ranking takes cells: (three or more)"),
        ({"k": 3}, "comparisons.0.k: only kind 'best-error' (or a ranking by it) draws k"),
        ({"by": "best-error", "k": 99}, "comparisons.0.k: 99 samples is more than the study's"),
    ],
)
def test_a_bad_ranking_is_one_line_naming_the_field(tiny_dict, entry, needle):
    with pytest.raises(SpecError) as err:
        parse_spec(_ranking(tiny_dict, **entry))
    assert needle in str(err.value) and "\n" not in str(err.value).strip(), str(err.value)


def test_a_two_sided_kind_given_a_rankings_keys_is_refused(tiny_dict):
    data = _ranking(tiny_dict, decide=False)
    data["comparisons"] = [
        {"name": "mine", "kind": "a", "cells": [_cell(C), _cell(P), _cell(D)], "expect": "first"}
    ]
    with pytest.raises(SpecError, match=r"comparisons\.0\.cells: only kind 'rank' takes cells"):
        parse_spec(data)


def test_a_ranking_by_best_error_draws_its_k(tiny_dict):
    spec = parse_spec(_ranking(tiny_dict, by="best-error"))
    (order,) = spec.comparisons
    assert order.k == 4 and {p.best_of for p in order.panels()} == {4}  # BEST_OF_DEFAULT


# --- the rounds -----------------------------------------------------------------------------------


def test_a_cell_whose_place_is_decided_stops_and_the_others_grow(tiny_dict):
    # ViT_C is shown better than all three others at the second look: its place is decided and
    # it trains no more; the three whose pairs are open grow to the last look
    spec = parse_spec(_ranking(tiny_dict))
    rounds, trials = Rounds(spec, []), plan(spec)
    error_of = _errors({C: 0.5, S1: 20.0, P: 40.0, D: 41.0})
    sizes = []
    while not rounds.finished:
        rounds.add(rounds.look(_frame(rounds.asked(trials), error_of)))
        sizes.append({m: n for (m, _, _), n in rounds.targets().items()})
    decided = {look.words: look.outcome for p in rounds.looks.values() for look in p[-1:]}
    assert all(decided[f"{C} adamw 1ep vs {m} adamw 1ep"] == "holds" for m in (S1, P, D))
    assert sizes[1] == {C: 8, S1: 10, P: 10, D: 10}
    # the ranking's pairs share the study's alpha by Holm: the open ones are at a higher level
    last = {p[-1].words: p[-1] for p in rounds.looks.values()}
    assert last[f"{P} adamw 1ep vs {D} adamw 1ep"].level == pytest.approx(0.05 / 3)


# --- the order drawn ------------------------------------------------------------------------------


def _rows(verdicts: dict[tuple[str, str], str]) -> pd.DataFrame:
    """Pair rows of a ranking of C, S1, P, D (decision/claims.py's columns the order reads); the
    first-listed cell of each pair is `cells[1]` (kind a: better = 1)."""
    rows = []
    for (first, second), verdict in verdicts.items():
        estimate = {"holds": 0.3, "opposite": -0.3}.get(verdict, 0.01)
        cells = [[second, "adamw", 1], [first, "adamw", 1]]
        rows.append(
            {"claim": "order", "kind": "a", "cells": cells, "verdict": verdict}
            | {"estimate": estimate, "best_of": None, "paper": "order: x vs y, EDF area"}
        )
    return pd.DataFrame(rows)


def _words(model: str) -> str:
    return f"{model} adamw 1ep"


def test_the_order_brackets_cells_whose_places_are_not_decided():
    # C beats all; S1 beats D; S1 - P and P - D open: S1 is second or third, P anything but
    # first, D third or fourth; listed by wins minus losses
    rows = _rows(
        {
            (C, S1): "holds",
            (C, P): "holds",
            (C, D): "holds",
            (S1, P): "continue",
            (S1, D): "holds",
            (P, D): "undecided",
        }
    )
    ranked = ranking.places(rows)
    assert [(p.cell, p.places) for p in ranked] == [
        (_words(C), (1, 1)),
        (_words(S1), (2, 3)),
        (_words(P), (2, 4)),
        (_words(D), (3, 4)),
    ]
    # the line and the table name each cell by its model, what sets it apart
    assert ranking_page.order_line(rows) == f"{C} > [{S1}, {P}, {D}]"
    drawn = ranking_page.table(rows)
    assert list(drawn["place"]) == ["1", "2-3", "2-4", "3-4"]
    assert drawn["not decided against"].iloc[1] == P


def test_an_order_that_follows_from_shown_pairs_decides_the_places():
    # S1 > D and D > P are shown, so S1 > P is implied (where every decision is right, so is
    # it): every place is decided though the S1 - P pair itself is open
    order = {(C, S1): "holds", (C, P): "holds", (C, D): "holds"}
    order |= {(S1, P): "continue", (S1, D): "holds", (P, D): "opposite"}
    ranked = ranking.places(_rows(order))
    assert [(p.cell, p.places) for p in ranked] == [
        (_words(m), (i, i)) for i, m in enumerate([C, S1, D, P], 1)
    ]
    assert ranked[1].implied == (_words(P),)
    assert ranking_page.order_line(_rows(order)) == " > ".join([C, S1, D, P])
    assert ranking_page.table(_rows(order))["shown better than"].iloc[1] == f"{P}*, {D}"
    # shown pairs that contradict each other (a cycle) imply nothing
    cycle = order | {(S1, D): "holds", (P, D): "opposite", (C, P): "opposite"}
    cycle |= {(C, S1): "holds", (S1, P): "holds"}  # C > S1 > P > C... through D too
    assert all(not p.implied for p in ranking.places(_rows(cycle)))


def test_an_equivalent_pair_ties_its_cells():
    order = {(C, S1): "holds", (C, P): "holds", (C, D): "holds"}
    order |= {(S1, P): "holds", (S1, D): "holds", (P, D): "equivalent"}
    ranked = ranking.places(_rows(order))
    assert [p.places for p in ranked] == [(1, 1), (2, 2), (3, 4), (3, 4)]
    assert ranked[2].tied_with and ranking_page.order_line(_rows(order)).endswith(
        f"> [{ranked[2].cell.split()[0]}, {ranked[3].cell.split()[0]}]"
    )


def test_the_order_names_each_cell_by_what_sets_it_apart_and_the_shared_words_once():
    # four optimizers on one model and schedule (studies/rank_optimizers.yaml): the line read
    # "[vit_p_x muon 20ep, vit_p_x adamw 20ep, ...]", the model and schedule four times over
    cells = ["vit_p_x muon 20ep", "vit_p_x adamw 20ep", "vit_p_x sgd 20ep", "vit_p_x lion 20ep"]
    short, shared = ranking_page.short_names(cells)
    assert [short[c] for c in cells] == ["muon", "adamw", "sgd", "lion"]
    assert shared == "vit_p_x 20ep"
    # cells that differ in model and optimizer keep both; in everything, all their words
    mixed = ["vit_c adamw 20ep", "vit_p lion 20ep", "vit_p adamw 20ep"]
    assert ranking_page.short_names(mixed) == (
        dict(zip(mixed, ["vit_c adamw", "vit_p lion", "vit_p adamw"], strict=True)),
        "20ep",
    )
    apart = ["vit_c adamw 20ep", "vit_p lion 8ep", "dhvt sgd 4->8ep"]
    assert ranking_page.short_names(apart) == ({c: c for c in apart}, "")
    rows = _rows({pair: "continue" for pair in itertools.combinations(MODELS, 2)})
    assert "cell (each adamw 1ep)" in ranking_page.table(rows)
    assert ranking_page.summary_line("order", rows).startswith(
        "ranking (order) of 4 cells, each adamw 1ep, by EDF area to 10 points: ["
    )


@pytest.mark.slow  # the claims table's bootstrap of six pairs: about 0.8 s here
def test_the_page_draws_the_ranking_and_the_terminal_says_its_order(tiny_dict):
    spec = parse_spec(_ranking(tiny_dict, decide=False))
    frame = _frame(plan(spec), _errors({C: 0.5, S1: 20.0, P: 40.0, D: 41.0}))
    table = claims_table(
        with_errors(frame), Options(n_boot=200), "tiny", None, None, False, spec.comparisons
    )
    (section,) = sections(table, Options(n_boot=200))
    titles = [title for title, _ in section.tables]
    assert titles[1].startswith("Ranking (order): places its decided pairs leave each cell")
    drawn = section.tables[1][1]
    assert list(drawn["cell (each adamw 1ep)"])[0] == C and list(drawn["place"])[0] == "1"
    (line,) = [x for x in section.lead if x.startswith("ranking (order) of 4 cells")]
    assert "4 cells, each adamw 1ep, by EDF area to 10 points: " in line and f": {C} > " in line
    assert section.lead[0] == line  # the order first, then its six pairs' sentences
    summary = {"claims": table.to_dict(orient="records")}
    assert verdict_lines(summary)[0] == line


# --- the procedure on simulated rankings ----------------------------------------------------------


def _pairs(k: int) -> np.ndarray:
    """A ranking's contrasts: cell i minus cell j for every pair i < j."""
    pairs = list(itertools.combinations(range(k), 2))
    out = np.zeros((len(pairs), k))
    for row, (i, j) in enumerate(pairs):
        out[row, i], out[row, j] = 1, -1
    return out


LOOKS = (6, 8, 10, 12, 16, 24)


@pytest.mark.slow  # 8 rankings of 40,000 simulated studies: about 3 s here
@pytest.mark.parametrize("means", [[0, 0, 0, 0], [0.8, 0.8, 0, 0], [1.0, 0, 0, 0]])
def test_a_ranking_orders_wrongly_at_most_alpha_on_simulated_nulls(means):
    # any pair decided where its cells are equal, or against their order, is a wrong ordering;
    # with the se known (the theorem's setting) and estimated (as a look reads it)
    design = sequential.Design(LOOKS, "pocock", panels=6)
    for known in (True, False):
        found = sequential.simulate_family(
            design, means, 40_000, seed=9, known_se=known, contrasts=_pairs(4)
        )
        assert found.wrong <= design.alpha + 2 * found.wrong_se, (means, known, found)


def test_a_ranking_decides_at_fewer_samples_than_pairwise_bonferroni():
    # four cells a step of 1.5 sd apart: Holm within the ranking decides more pairs and each
    # cell stops sooner (it trains until its last open pair stops) than the pairwise
    # comparisons at alpha / 6 each
    design = sequential.Design(LOOKS, "pocock", panels=6)
    means, pairs = [4.5, 3.0, 1.5, 0.0], _pairs(4)
    holm = sequential.simulate_family(design, means, 10_000, seed=4, contrasts=pairs)
    bonferroni = sequential.simulate_family(
        design, means, 10_000, seed=4, contrasts=pairs, recycle=False
    )
    assert holm.rejected > bonferroni.rejected
    assert holm.cell_units < 0.9 * bonferroni.cell_units, (holm, bonferroni)

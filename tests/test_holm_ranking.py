"""bench/holm_analysis.py's rankings of four cells on trained replicates (issue 69 acceptance,
`rank4`): what its figures rely on. Under Holm's step-down the pairs a rejection frees are
tested at the recycled level, so a cell whose place is decided stops and only the cells still
in question train on, where the pairwise Bonferroni design keeps them training; a ranking is
fully ordered where its shown pairs, with the ones their order implies, place every cell; the
copies of a cell that a null ranking sets against each other never share a training."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from optbench.decision import sequential
from optbench.spec.comparisons import Comparison

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import holm_analysis  # noqa: E402  (a bench script, found through bench/)

LOOKS = (8, 24, 40)
CELLS = ("a", "b", "c", "d")


def _panels() -> list:
    cells = [{"model": m, "optimizer": "adamw", "epochs": 8} for m in CELLS]
    order = {"name": "order", "kind": "rank", "by": "a", "cells": cells}
    return Comparison.model_validate(order).panels()


def _pair(panel) -> str:
    return "".join(panel.models)


def _replayed(z_of: dict[str, object], holm: bool) -> tuple[list, list]:
    """Each pair's looks with the z (estimate over se) `z_of` gives it at look k (a number, or
    a function of k), replayed as the bench replays a ranking; returns (panels, stops)."""
    design = sequential.Design(LOOKS, "pocock", panels=6)
    panels = _panels()
    chosen = []
    for panel in panels:
        z = z_of[_pair(panel)]
        looks = {(0, n): ((z(k) if callable(z) else z) * 0.1, 0.1, n - 1, None) for k, n in
                 enumerate(LOOKS)}  # fmt: skip
        chosen.append((looks, 0))
    return panels, holm_analysis.replay_family(chosen, design, holm)


def _between(k: int) -> float:
    """A z that look k's interval shows at the level three rejections leave an open pair
    (alpha / 3) and not at a pair's Bonferroni level (alpha / 6)."""
    design = sequential.Design(LOOKS, "pocock", panels=6)
    holm, bonferroni = design.criticals(0.05 / 3)[k], design.criticals(0.05 / 6)[k]
    assert holm < bonferroni
    return (holm + bonferroni) / 2


def test_a_cell_whose_place_holm_decides_stops_and_the_rest_train_on():
    # a beats all three at the first look; d's pairs with b and c show only at the level a's
    # three rejections pass on; b against c shows nothing
    z_of = {"ab": 10.0, "ac": 10.0, "ad": 10.0, "bd": _between, "cd": _between, "bc": 0.0}
    panels, holm = _replayed(z_of, holm=True)
    assert holm_analysis.cell_samples(panels, holm) == {"a": 8, "b": 40, "c": 40, "d": 8}
    panels, bonferroni = _replayed(z_of, holm=False)
    assert holm_analysis.cell_samples(panels, bonferroni) == {"a": 8, "b": 40, "c": 40, "d": 40}
    assert not holm_analysis.fully_ordered(panels, holm)  # b against c is open
    # b against c shown too: Holm orders all four at the first look, Bonferroni leaves d open
    z_of["bc"] = 10.0
    panels, holm = _replayed(z_of, holm=True)
    assert holm_analysis.fully_ordered(panels, holm)
    assert set(holm_analysis.cell_samples(panels, holm).values()) == {8}
    panels, bonferroni = _replayed(z_of, holm=False)
    assert not holm_analysis.fully_ordered(panels, bonferroni)
    assert holm_analysis.cell_samples(panels, bonferroni)["d"] == 40


@pytest.mark.parametrize(("cd", "ordered"), [("holds", True), ("equivalent", False)])
def test_fully_ordered_counts_the_pairs_a_chain_of_shown_ones_implies(cd, ordered):
    # a > b > c shown; c against d shown (a chain that implies a > c, a > d, b > d) or tied
    outcomes = {"ab": "holds", "bc": "holds", "cd": cd}
    panels = _panels()
    stops = [(outcomes.get(_pair(p), "undecided"), 40) for p in panels]
    assert holm_analysis.fully_ordered(panels, stops) is ordered


def test_null_copies_of_a_cell_never_share_a_training():
    reps, samples = 8, 6
    trials = pd.DataFrame(
        [
            {"replicate": r, "model": m, "optimizer": "adamw", "epochs": 8, "sample": k}
            | {"seed": 100 + r, "lr": 0.01, "wd": 0.01, "final_error": float(r * 10 + k)}
            for r in range(reps)
            for m in holm_analysis.MODELS
            for k in range(samples)
        ]
    )
    rankings = holm_analysis.null_copies([(trials, "8")], holm_analysis.MODELS[1], 4, 3)
    for frame in rankings.values():
        assert sorted(set(frame["model"])) == ["c8#1", "c8#2", "c8#3", "c8#4"]
        assert (frame.groupby("model").size() == samples).all()
        used = [
            set(zip(f["replicate"], f["sample"], strict=True)) for _, f in frame.groupby("model")
        ]
        assert sum(map(len, used)) == len(set().union(*used))  # no training in two copies
        drawn = [set(f["replicate"]) for _, f in frame.groupby("model")]
        assert all(a.isdisjoint(b) for i, a in enumerate(drawn) for b in drawn[i + 1 :])


def _trials(levels: dict[str, float], reps: int, samples: int, epochs: int = 8) -> pd.DataFrame:
    """Planted replicate trials: model m's errors `levels[m]` plus a spread of 2 points over
    its samples that differs between models (so a pair's contrast has a small se, never 0: a
    look whose resamples all give one value learns nothing, sequential.look_outcome), a sampler
    seed per replicate, one (lr, wd) box for both models (the quickstart's pairing) and a
    training seed per pair."""
    rows = []
    for r in range(reps):
        for k in range(samples):
            for m, (model, level) in enumerate(levels.items()):
                spread = 2.0 * ((7 * r + 3 * k + 5 * m) % 11) / 10
                rows.append(
                    {"replicate": r, "model": model, "optimizer": "adamw", "epochs": epochs}
                    | {"sample": k, "seed": 1000 * r + k, "lr": 1e-3 * (1 + k), "wd": 0.05}
                    | {"status": "finished", "final_error": level + spread}
                    | {"best_error": level + spread, "digest": ""}
                )
    return pd.DataFrame(rows)


def _study(levels: dict[str, float], samples: int = 8) -> pd.DataFrame:
    """One ranking's trials: each label its planted level (`_trials`, replicate 0)."""
    return _trials(levels, 1, samples).drop(columns="replicate")


def test_a_ranking_whose_cells_stand_far_apart_trains_each_cell_to_the_first_look_only():
    far = {"a": 1.0, "b": 20.0, "c": 40.0, "d": 60.0}
    studies = {j: _study(far) for j in range(2)}
    looks = (4, 8)
    out = holm_analysis.ranking(studies, looks, "best-error")
    assert out["fixed_cell_samples"] == len(far) * looks[-1]
    for rule in ("holm", "bonferroni"):
        found = out[rule]
        assert found["wrong"] == 0 and found["pairs_decided"] == 6
        assert found["fully_ordered"] == 1
        assert found["per_cell"] == {cell: looks[0] for cell in far}
        assert found["cell_samples"] == len(far) * looks[0]


def test_a_decided_null_pair_and_an_ordering_against_the_estimand_are_wrong():
    # copies of one cell ("x#1", "x#2") that the data set apart: decided, and wrong each time
    apart = {"x#1": 1.0, "x#2": 20.0, "y": 40.0, "z": 60.0}
    out = holm_analysis.ranking({0: _study(apart)}, (4, 8), "best-error")
    assert out["holm"]["wrong"] == 1 and out["bonferroni"]["wrong"] == 1
    # a beats b in two rankings of three and loses in the third: the estimand (the mean over
    # the rankings) takes the majority's sign, so the third ranking's decision is the wrong one
    ordered = {"a": 1.0, "b": 20.0, "c": 40.0, "d": 60.0}
    swapped = ordered | {"a": 20.0, "b": 1.0}
    studies = {0: _study(ordered), 1: _study(ordered), 2: _study(swapped)}
    out = holm_analysis.ranking(studies, (4, 8), "best-error")
    assert out["estimands"]["a-b"] > 0  # a better (its errors lower) in the majority
    for rule in ("holm", "bonferroni"):
        assert out[rule]["wrong"] == pytest.approx(1 / 3, abs=1e-4)
        assert out[rule]["wrong_mc_se"] > 0


@pytest.mark.slow  # 14 kinds of rankings, each look's claims bootstrapped: several seconds
def test_rank4_seed_per_pair_runs_on_planted_replicates(tmp_path, monkeypatch):
    looks, reps = (4, 8), 8
    monkeypatch.setattr(holm_analysis, "QUICKSTART_LOOKS", looks)
    monkeypatch.setattr(holm_analysis, "SEED_PER_PAIR_RANKINGS", 2)
    p, c = holm_analysis.MODELS
    quick = _trials({c: 1.0, p: 20.0}, reps, looks[-1], epochs=20)
    quick.to_csv(tmp_path / "trials_quickstart_24.csv", index=False)
    # the mini's trainings run past the last look: the analysis cuts them there
    mini = _trials({c: 40.0, p: 60.0}, reps, 2 * looks[-1])
    mini.to_csv(tmp_path / "trials_seed_per_pair_64.csv", index=False)
    out = holm_analysis.analyse_rank4_seed_per_pair(tmp_path)
    assert out["quickstart_replicates"] == reps
    designs = out["best-error"]["designs"]
    assert set(designs["holm"]["per_cell"]) == {"c20", "p20", "c8", "p8"}
    assert designs["holm"]["cell_samples"] == 4 * looks[0]  # all far apart: first look
    for by in ("best-error", "a"):
        kinds = out[by]
        assert {f"global_null_{cell}" for cell in ("c20", "p20", "c8", "p8")} <= set(kinds)
        for found in kinds.values():
            assert found["fixed_cell_samples"] == 4 * looks[-1]
            for rule in ("holm", "bonferroni"):
                cells = found[rule]["per_cell"]
                assert found[rule]["cell_samples"] == pytest.approx(sum(cells.values()), abs=0.1)
                assert all(looks[0] <= n <= looks[-1] for n in cells.values())

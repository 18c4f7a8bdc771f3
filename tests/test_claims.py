"""The claims table on trial tables whose answer is known by construction: a claim that clearly
holds, one that clearly goes the other way, one inside the noise; and the report's hook."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from optbench.decision import frames
from optbench.decision.claims import claims_table
from optbench.decision.summary import Options
from optbench.report.writer import write_report
from optbench.spec.roles import families
from optbench.spec.schema import parse_spec

P, C, S1, S2 = "vit_p_x", "vit_c_x", "vit_s1_x", "vit_s2_x"
FAST = Options(n_boot=400)


def _rows(model, optimizer, epochs, errors_by_sample_seed):
    """Trials of one cell; errors[sample][seed], None = diverged."""
    rows = []
    for sample, per_seed in enumerate(errors_by_sample_seed):
        for seed, error in enumerate(per_seed):
            rows.append(
                {
                    "model": model,
                    "optimizer": optimizer,
                    "epochs": epochs,
                    "sample": sample,
                    "seed": seed,
                    "status": "diverged" if error is None else "finished",
                    "final_error": np.nan if error is None else float(error),
                }
            )
    return rows


def _good(model, optimizer, epochs, per_seed):
    """A `sampler: good` cell: one sample, one error per seed."""
    return _rows(model, optimizer, epochs, [per_seed])


def _claims(rows, **look) -> pd.DataFrame:
    return claims_table(frames.with_errors(pd.DataFrame(rows)), FAST, "t", **look)


def _row(table: pd.DataFrame, claim: str, **where) -> pd.Series:
    picked = table[table["claim"] == claim]
    for key, value in where.items():
        picked = picked[picked[key] == value]
    assert len(picked) == 1, picked
    return picked.iloc[0]


def test_families_pair_models_by_suffix_and_order_stems_by_patch_size():
    fams = families(["vit_p_4gf", "vit_c_4gf", "vit_s10_4gf", "vit_s2_4gf", "dhvt_x", "vit_p_y"])
    by_p = {f.p: f for f in fams}
    assert by_p["vit_p_4gf"].c == "vit_c_4gf"
    assert by_p["vit_p_4gf"].stem_order == ("vit_s2_4gf", "vit_s10_4gf", "vit_p_4gf")
    assert by_p["vit_p_y"].c is None


def _edf_cells(rng, p_spread, c_spread, n_samples=12, seeds=3):
    """Errors = 10 + spread * (how far sample i sits from the good value) + small seed noise."""
    offsets = rng.uniform(0, 1, n_samples)
    rows = []
    for model, spread in ((P, p_spread), (C, c_spread)):
        errors = [[10 + spread * o + rng.normal(0, 0.2) for _ in range(seeds)] for o in offsets]
        rows += _rows(model, "adamw", 8, errors)
    return rows


def test_edf_claim_holds_when_vit_c_is_flat_and_vit_p_spread():
    table = _claims(_edf_cells(np.random.default_rng(0), p_spread=40.0, c_spread=2.0))
    row = _row(table, "a")
    assert row["verdict"] == "holds" and row["low"] > 0


def test_edf_claim_reversed_when_vit_p_is_the_flat_one():
    table = _claims(_edf_cells(np.random.default_rng(1), p_spread=2.0, c_spread=40.0))
    assert _row(table, "a")["verdict"] == "opposite"


@pytest.mark.slow
def test_edf_claim_not_shown_when_both_models_draw_from_one_distribution():
    table = _claims(_edf_cells(np.random.default_rng(2), p_spread=15.0, c_spread=15.0))
    row = _row(table, "a")
    assert row["verdict"] == "not shown" and row["low"] < 0 < row["high"]


def test_edf_statistic_is_the_difference_of_areas_under_the_dtop1_edf():
    # ViT_C: every trial at the best (area 1). ViT_P: 1 trial of 4 at the best, the others 20
    # points off (never within 10): area 1/4. A diverged trial is never within.
    rows = _rows(C, "sgd", 8, [[5.0], [5.0], [5.0], [5.0]])
    rows += _rows(P, "sgd", 8, [[30.0], [50.0], [50.0], [None]])
    row = _row(_claims(rows), "a")
    assert row["estimate"] == pytest.approx(1.0 - 0.25)


def test_length_claim_estimate_and_verdicts():
    # P: 30 at 4 epochs, 10 at 32 (20 above its asymptote); C: 12 and 8 (4 above); seed
    # noise of each model its own, so the per-seed contrasts spread
    rows = []
    for model, short, long, noise in (
        (P, 30.0, 10.0, [0.0, 0.3, -0.3]),
        (C, 12.0, 8.0, [-0.3, 0.3, 0.0]),
    ):
        rows += _good(model, "adamw", 4, [short + n for n in noise])
        rows += _good(model, "adamw", 32, [long - n for n in noise])
    row = _row(_claims(rows), "b")
    assert row["estimate"] == pytest.approx((30 - 10) - (12 - 8))
    assert row["verdict"] == "holds"

    swapped = [dict(r, model={P: C, C: P}[r["model"]]) for r in rows]
    assert _row(_claims(swapped), "b")["verdict"] == "opposite"


def test_length_claim_not_shown_when_seed_noise_dwarfs_the_difference():
    rng = np.random.default_rng(3)
    rows = []
    for model in (P, C):
        rows += _good(model, "adamw", 4, list(20 + rng.normal(0, 6, 4)))
        rows += _good(model, "adamw", 32, list(10 + rng.normal(0, 6, 4)))
    row = _row(_claims(rows), "b")
    assert row["verdict"] == "not shown" and row["low"] < 0 < row["high"]


def test_optimizer_gap_claim_counts_a_diverged_trial_at_100_percent():
    # Gaps (sgd - adamw): P: at 4 epochs one seed of three diverges, so its SGD mean is
    # (20 + 20 + 100) / 3; at 8 epochs 25 - 15 = 10. C: 1 point at both lengths.
    rows = []
    rows += _good(P, "adamw", 4, [20.0, 20.0, 20.0]) + _good(P, "sgd", 4, [20.0, 20.0, None])
    rows += _good(P, "adamw", 8, [15.0] * 3) + _good(P, "sgd", 8, [25.0] * 3)
    rows += _good(C, "adamw", 4, [10.0] * 3) + _good(C, "sgd", 4, [11.0] * 3)
    rows += _good(C, "adamw", 8, [8.0] * 3) + _good(C, "sgd", 8, [9.0] * 3)
    row = _row(_claims(rows), "c")
    gap_p = ((140 / 3 - 20) + (25 - 15)) / 2
    assert row["estimate"] == pytest.approx(gap_p - 1.0)
    # per seed: ((0 + 10) / 2 - 1) twice and ((80 + 10) / 2 - 1) once: one seed carries the
    # effect, so three seeds do not show it
    assert row["verdict"] == "not shown" and row["low"] < 0 < row["high"]
    assert row["diverged"] == 1


def test_stem_claim_needs_every_step_to_grow():
    def stem_rows(errors, noise):
        rows = []
        for i, (model, error) in enumerate(zip((S1, S2, P), errors, strict=True)):
            own = noise[i:] + noise[:i]  # each model's seeds their own noise: steps spread
            rows += _good(model, "adamw", 8, [error + n for n in own])
        return rows

    noise = [0.0, 0.2, -0.2, 0.1]
    increasing = _row(_claims(stem_rows([10.0, 14.0, 20.0], noise)), "d")
    assert increasing["estimate"] == pytest.approx(4.0)  # the smaller step, S1 -> S2
    assert increasing["verdict"] == "holds"
    assert "S1 -> S2 -> P (Table 3)" in increasing["paper"]  # the stems that ran, no S4
    # S2 better than S1: the order fails at its first step, but is not reversed
    broken = _row(_claims(stem_rows([14.0, 10.0, 20.0], noise)), "d")
    assert broken["high"] < 0 and broken["verdict"] == "not shown"
    # error falls at every step: the reverse of the claim
    assert _row(_claims(stem_rows([20.0, 14.0, 10.0], noise)), "d")["verdict"] == "opposite"
    rng = np.random.default_rng(4)
    noisy = []
    for model in (S1, S2, P):
        noisy += _good(model, "adamw", 8, list(12 + rng.normal(0, 3, 4)))
    assert _row(_claims(noisy), "d")["verdict"] == "not shown"


def _edf_spec():
    """A digits study of the two w64 ViTs, 12 samples at 8 epochs (for write_report)."""
    return parse_spec(
        {
            "name": "t",
            "dataset": {"name": "digits", "img_size": 16},
            "models": [P.replace("_x", "_w64_16px"), C.replace("_x", "_w64_16px")],
            "optimizers": ["adamw"],
            "epochs": 8,
            "batch_size": 64,
            "search": {
                "n_samples": 12,
                "ranges": {"adamw": {"lr": [1e-4, 1e-2], "wd": [0.01, 0.5]}},
            },
        }
    )


@pytest.mark.slow
def test_report_writes_the_claims_into_summary_and_page(tmp_path):
    rows = _edf_cells(np.random.default_rng(0), p_spread=40.0, c_spread=2.0)
    trials = pd.DataFrame(rows).assign(
        study="t",
        cell_id="x",
        lr=1e-3,
        wd=0.1,
        wall_s=1.0,
        images_per_s=1.0,
        best_error=lambda d: d["final_error"],
    )
    spec = _edf_spec()
    trials["model"] = trials["model"].str.replace("_x", "_w64_16px")
    summary = write_report(spec, trials, tmp_path, None, n_boot=200, data_shape=(10, 1, 16))
    assert [c["claim"] for c in summary["claims"]] == ["a"]
    assert summary["claims"][0]["verdict"] == "holds"
    assert json.loads((tmp_path / "summary.json").read_text())["claims"][0]["claim"] == "a"
    assert "The paper&#x27;s claims" in (tmp_path / "index.html").read_text() or (
        "The paper's claims" in (tmp_path / "index.html").read_text()
    )
    # the verdict is on the page whenever the figure it reads is drawn, and only then
    write_report(spec, trials, tmp_path / "edf", {"edf"}, n_boot=50, data_shape=(10, 1, 16))
    page = (tmp_path / "edf" / "index.html").read_text()
    assert ">holds<" in page
    assert page.index("id='claims'") < page.index("Summary per cell") < page.index("id='edf'")
    write_report(spec, trials, tmp_path / "peak", {"peak"}, n_boot=50, data_shape=(10, 1, 16))
    assert "id='claims'" not in (tmp_path / "peak" / "index.html").read_text()


def test_report_with_pycls_best_reads_the_per_epoch_ema_errors(tmp_path):
    rows = _edf_cells(np.random.default_rng(0), p_spread=40.0, c_spread=2.0)
    trials = pd.DataFrame(rows).assign(
        study="t", cell_id="x", lr=1e-3, wd=0.1, wall_s=1.0, images_per_s=1.0
    )
    # each trial's EMA error was 3 points lower one epoch before its last
    trials["metrics"] = [
        [
            {"epoch": 1, "val_error": e - 3, "ema_top1": e - 3},
            {"epoch": 2, "val_error": e, "ema_top1": e},
        ]
        for e in trials["final_error"]
    ]
    trials["best_error"] = trials["final_error"] - 3
    trials["model"] = trials["model"].str.replace("_x", "_w64_16px")
    spec = _edf_spec()
    summary = write_report(
        spec, trials, tmp_path, {"peak"}, "pycls_best", n_boot=200, data_shape=(10, 1, 16)
    )
    csv = pd.read_csv(tmp_path / "trials.csv")
    np.testing.assert_allclose(csv["pycls_best"], csv["final_error"] - 3)
    assert summary["metric"] == "pycls_best"
    best = min(c["best_error"] for c in summary["cells"])
    assert best == pytest.approx(trials["final_error"].min() - 3)


@pytest.mark.parametrize("k", [1, 2])
def test_a_seed_claim_below_three_seeds_is_not_tested(k):
    # A t interval of 2 seeds has 1 degree of freedom, a bootstrap of 2 seeds 3 distinct means
    # (an interval 8x narrower than Welch's on real trials): no interval, no power, and a
    # verdict that says so, however large the effect looks.
    rows = []
    for model, short, long in ((P, 30.0, 10.0), (C, 12.0, 8.0)):
        rows += _good(model, "adamw", 4, [short + s for s in range(k)])
        rows += _good(model, "adamw", 32, [long - s for s in range(k)])
    row = _row(_claims(rows), "b")
    assert row["verdict"] == "not tested" and np.isnan(row["low"]) and np.isnan(row["high"])
    assert row["power_now"] is None and row["n_needed"] is None
    assert row["advice"] == f"too few seeds ({k}): needs at least 3 for an interval"
    assert row["estimate"] == pytest.approx(16.0)  # every seed's contrast: (30-10) - (12-8)


def test_a_seed_claim_of_cells_with_a_seed_per_sample_says_why_it_is_not_tested():
    # search.seed_per_sample: sample i of every cell has its own seed, so no sample of a cell
    # has the seeds of another's best sample; the row was left out (the EDF study's (c))
    rng = np.random.default_rng(4)
    rows = []
    for model in (P, C):
        for optimizer in ("adamw", "sgd"):
            errors = [[10 + 20 * rng.uniform()] for _ in range(8)]
            rows += [r | {"seed": 100 + r["sample"]} for r in _rows(model, optimizer, 8, errors)]
    row = _row(_claims(rows), "c")
    assert row["verdict"] == "not tested" and row["n_now"] == 0 and np.isnan(row["estimate"])
    assert "share no seeds at one sample" in row["advice"]


def test_a_three_seed_claim_gets_the_t_interval_of_its_per_seed_contrasts():
    # Seed s of every cell gives one contrast (P_short - P_long) - (C_short - C_long); the
    # interval is Student's t on those three values (scipy's), never narrower than it.
    from scipy import stats as scipy_stats

    p_short, p_long = [30.0, 26.0, 35.0], [10.0, 11.0, 9.0]
    c_short, c_long = [12.0, 13.0, 11.0], [8.0, 8.5, 7.0]
    rows = _good(P, "adamw", 4, p_short) + _good(P, "adamw", 16, p_long)
    rows += _good(C, "adamw", 4, c_short) + _good(C, "adamw", 16, c_long)
    contrasts = (np.subtract(p_short, p_long)) - (np.subtract(c_short, c_long))
    low, high = scipy_stats.t.interval(
        0.95, 2, loc=contrasts.mean(), scale=scipy_stats.sem(contrasts)
    )
    row = _row(_claims(rows), "b")
    assert row["interval"] == "t" and row["n_now"] == 3
    assert (row["low"], row["high"]) == pytest.approx((low, high))
    assert row["verdict"] == ("holds" if low > 0 else "not shown")


@pytest.mark.parametrize("boundary", [2.4, 8.93])
def test_a_seed_claims_look_interval_is_its_mean_plus_minus_the_boundarys_t_critical(boundary):
    # a look at boundary c: estimate +- sequential.critical(c, k - 1) se, as claim (a)'s. Read
    # through c's two-sided level instead, 1 - 2 sf(c) rounds to 1 near c = 8.3 (a strict
    # O'Brien-Fleming first look): an infinite interval, NaN where se is 0, which a look's
    # record refuses.
    from optbench.decision.sequential import NOTHING_LEARNED, critical

    p_short, p_long = [30.0, 26.0, 35.0], [10.0, 11.0, 9.0]
    c_short, c_long = [12.0, 13.0, 11.0], [8.0, 8.5, 7.0]
    rows = _good(P, "adamw", 4, p_short) + _good(P, "adamw", 16, p_long)
    rows += _good(C, "adamw", 4, c_short) + _good(C, "adamw", 16, c_long)
    contrasts = (np.subtract(p_short, p_long)) - (np.subtract(c_short, c_long))
    se = contrasts.std(ddof=1) / np.sqrt(3)
    half = critical(boundary, 2) * se
    row = _row(_claims(rows, boundary=boundary), "b")
    assert np.isfinite(half) and row["n_now"] == 3
    assert (row["low"], row["high"]) == pytest.approx(
        (contrasts.mean() - half, contrasts.mean() + half)
    )
    # every seed alike: se 0, a point, and nothing learned (never NaN)
    flat = _good(P, "adamw", 4, [30.0] * 3) + _good(P, "adamw", 16, [10.0] * 3)
    flat += _good(C, "adamw", 4, [12.0] * 3) + _good(C, "adamw", 16, [8.0] * 3)
    row = _row(_claims(flat, boundary=boundary), "b")
    assert row["low"] == row["high"] == pytest.approx(16.0)
    assert row["verdict"] == NOTHING_LEARNED


def test_the_claims_and_the_figures_read_the_same_cell_errors():
    # Two (lr, wd) samples of three seeds per cell, one seed diverged: claim (b)'s estimate is
    # the difference of the length figure's dtop-1 values at the shortest schedule.
    rng = np.random.default_rng(5)
    rows = []
    for model in (P, C):
        for epochs in (4, 16):
            errors = [list(rng.uniform(5, 60, 3)) for _ in range(2)]
            rows += _rows(model, "adamw", epochs, errors)
    rows[0] = dict(rows[0], status="diverged", final_error=np.nan)
    results = frames.with_errors(pd.DataFrame(rows))
    length = frames.length_stability(frames.best_by_cell(results)).set_index(["model", "epochs"])
    figure_b = length.loc[(P, 4), "dtop1"] - length.loc[(C, 4), "dtop1"]
    assert _row(_claims(rows), "b")["estimate"] == pytest.approx(figure_b)


def test_a_stem_chain_whose_steps_point_both_ways_is_not_shown_and_gets_no_power():
    # S2 beats S1 while P is far worse: "error grows at every step" is neither shown nor its
    # opposite, and no number of seeds would show it; the advice says why, without a power
    rows = []
    for model, error, noise in (
        (S1, 10.0, [-0.5, 0, 0.7]),
        (S2, 5.0, [0, 0.7, -0.5]),
        (P, 36.0, [0.7, -0.5, 0]),
    ):
        rows += _good(model, "adamw", 8, [error + n for n in noise])
    row = _row(_claims(rows), "d")
    assert row["verdict"] == "not shown" and row["estimate"] == pytest.approx(-5.0, abs=0.1)
    assert "steps point both ways" in row["advice"] and "%" not in row["advice"]


def _looked(verdict, n, n_max=24, margin=0.1, panels=2):
    """Claim (a)'s row of a sequential study whose last look (k 1) said `verdict` at n."""
    from optbench.decision.looks import with_looks
    from optbench.spec.claim_kinds import comparison_key

    table = _claims(_edf_cells(np.random.default_rng(0), p_spread=40.0, c_spread=2.0))
    claim, cells = table.iloc[0]["claim"], table.iloc[0]["cells"]
    look = {"panel": comparison_key(claim, cells), "claim": claim, "cells": cells}
    look |= {"k": 1, "n": n, "n_max": n_max, "unit": "samples"}
    look |= {"estimate": 0.05, "se": 0.01, "low": 0.02, "high": 0.08, "outcome": verdict}
    look |= {"boundary": 2.4, "margin": margin, "alpha": 0.05, "panels": panels, "note": None}
    return with_looks(table, [look]).iloc[0]


def test_the_page_says_a_decision_inside_the_margin_is_negligible_and_whose_error_rate_it_is():
    from optbench.report.claims_page import records, sentence

    line = sentence(_looked("holds, negligible", 8))
    assert "holds, negligible (the interval lies above 0 and inside +-0.1" in line
    # the panel's level, the study's alpha shared by both its panels (Holm's step-down; a
    # record without a level was taken at alpha / 2); a stop's estimate without the adjusted
    # ones (stop_estimates.py) is labelled, and no bias is claimed for it (issue 67: its sign
    # depends on the look)
    assert "a repeated 97.5% interval (this panel's level 0.025: the study's alpha 0.05" in line
    assert "the estimate at the stop, not adjusted for stopping" in line
    assert "biased away" not in line and "biased" not in sentence(_looked("holds", 24))
    row = records(pd.DataFrame([_looked("holds", 8)]))[0]
    assert (row["alpha"], row["panels"], row["margin"]) == (0.05, 2, 0.1)
    json.dumps(row)


def test_a_mixed_chain_and_a_cell_without_a_finished_trial_say_why_they_decide_nothing():
    rows = []
    noise = {S1: [-0.5, 0, 0.7], S2: [0, 0.7, -0.5], P: [0.7, -0.5, 0]}
    for model, error in ((S1, 10.0), (S2, 5.0), (P, 36.0)):
        rows += _good(model, "adamw", 8, [error + n for n in noise[model]])
    row = _row(_claims(rows), "d")
    assert (
        row["note"].startswith("mixed: error falls at S1 -> S2")
        and "grows at S2 -> P" in row["note"]
    )
    assert [s["step"] for s in row["steps"]] == ["S1 -> S2", "S2 -> P"]
    # ViT_P diverged in every trial: its area is 0 in every resample, whatever ViT_C did
    edf = [r for r in _edf_cells(np.random.default_rng(0), 2.0, 40.0) if r["model"] == C]
    edf += [
        r | {"status": "diverged", "final_error": np.nan}
        for r in _edf_cells(np.random.default_rng(0), 2.0, 40.0)
        if r["model"] == P
    ]
    a = _row(_claims(edf), "a")
    assert a["verdict"] == "not tested" and "has no finished trial" in a["advice"]


# --- nothing learned decides nothing (issue 67) ----------------------------------------------------


def test_both_models_at_chance_are_neither_tested_nor_decided():
    # the digits' 10 classes: guessing errs 90%; both cells end at 89.7 to 90.3%. A look called
    # them "equivalent" (se 0.01 against a margin of 0.1); nothing was learned
    from optbench.decision.sequential import NOTHING_LEARNED
    from optbench.report.synthetic import synthetic_trials

    results = frames.with_errors(synthetic_trials([P, C], ["adamw"], [20], 8, at_chance=(P, C)))
    at_look = claims_table(results, FAST, boundary=2.4, margin=0.1, classes=10)
    fixed = claims_table(results, FAST, classes=10)
    for table, said in ((at_look, NOTHING_LEARNED), (fixed, "not tested")):
        (row,) = table.to_dict("records")
        assert row["verdict"] == said, row
        assert row["note"].startswith("every cell is near chance (best errors 89.")
        assert "guessing 90% with 10 classes" in row["note"]


def test_one_model_at_chance_voids_the_edf_claim_whose_dtop1_reads_it_as_steep():
    # dtop-1 reads each cell against its own best: a cell that learned nothing has all its errors
    # near its best, the steepest EDF there is, so without the check ViT_C at chance beside a
    # ViT_P that learned "holds" (steeper). Comparisons of errors themselves (claim (d), declared
    # best-error ones) read such a pair as a measured difference (tests/test_your_question.py:
    # AdamW at chance against Lion holds)
    from optbench.decision.sequential import NOTHING_LEARNED
    from optbench.report.synthetic import synthetic_trials

    results = frames.with_errors(synthetic_trials([P, C], ["adamw"], [20], 8, at_chance=(C,)))
    (row,) = claims_table(results, FAST, boundary=2.4, classes=10).to_dict("records")
    assert row["verdict"] == NOTHING_LEARNED, row
    assert row["note"].startswith(f"{C} adamw 20 ep is near chance (best error 89."), row
    (row,) = claims_table(results, FAST, classes=10).to_dict("records")
    assert row["verdict"] == "not tested" and "its dtop-1 reads nothing learned" in row["note"]
    # at 100 classes (guessing errs 99%) 90% error is learning: the interval decides
    (row,) = claims_table(results, FAST, boundary=2.4, classes=100).to_dict("records")
    assert row["verdict"] != NOTHING_LEARNED and row["note"] is None, row


def test_an_se_below_a_twentieth_of_the_margin_decides_nothing():
    # two cells whose errors differ by hundredths of a point: every EDF area about 1, an se of
    # about 1e-4 against a margin of 0.1, which a look called "equivalent"
    from optbench.decision.sequential import MARGIN_SE_SHARE, NOTHING_LEARNED

    rng = np.random.default_rng(3)
    rows = [
        *_rows(P, "adamw", 20, 10 + 0.02 * rng.random((8, 1))),
        *_rows(C, "adamw", 20, 10 + 0.02 * rng.random((8, 1))),
    ]
    results = frames.with_errors(pd.DataFrame(rows))
    (row,) = claims_table(results, FAST, boundary=2.4, margin=0.1, classes=10).to_dict("records")
    assert row["se"] < MARGIN_SE_SHARE * 0.1 and -0.1 < row["low"] < row["high"] < 0.1
    assert (
        row["verdict"] == NOTHING_LEARNED
        and f"below {MARGIN_SE_SHARE:g} of the margin" in row["note"]
    )
    # a spread of real size (points, not hundredths) inside the same margin is equivalent
    rows = [
        *_rows(P, "adamw", 20, 10 + 2 * rng.random((24, 1))),
        *_rows(C, "adamw", 20, 10 + 2 * rng.random((24, 1))),
    ]
    results = frames.with_errors(pd.DataFrame(rows))
    (row,) = claims_table(results, FAST, boundary=2.4, margin=0.1, classes=10).to_dict("records")
    assert row["se"] > MARGIN_SE_SHARE * 0.1 and row["verdict"] == "equivalent", row

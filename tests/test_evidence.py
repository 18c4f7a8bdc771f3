"""How much evidence a study has: BCa intervals and their fallback, simultaneous EDF bands, and
the bootstrap power advice, on synthetic data whose truth is known by construction."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from optbench.decision import frames, stats
from optbench.decision.claims import claims_table
from optbench.decision.summary import Options, summarize
from optbench.report.claims_page import records as claims_records
from optbench.report.summary_lines import format_advice

FAST = Options(n_boot=400)
P, C = "vit_p_x", "vit_c_x"


def _mean(values: np.ndarray) -> stats.Statistic:
    return lambda idx: values[idx].mean(axis=-1)


# --- intervals ------------------------------------------------------------------------------


def test_bca_interval_covers_a_skewed_mean_about_95_percent_of_the_time():
    # exponential(1) samples of 25: the true mean is 1; a percentile interval of a skewed
    # mean undercovers on one side, BCa corrects it
    rng = np.random.default_rng(0)
    covered, methods = 0, set()
    for rep in range(200):
        values = rng.exponential(1.0, 25)
        found = stats.interval(_mean(values), (25,), n_boot=500, seed=rep)
        methods.add(found.method)
        covered += found.low <= 1.0 <= found.high
    assert methods == {"BCa"}
    assert 0.90 <= covered / 200 <= 0.99


def test_bca_matches_scipy_on_plain_values():
    values = np.random.default_rng(1).normal(3.0, 2.0, 40)
    found = stats.interval(_mean(values), (40,), n_boot=999, seed=7)
    direct = scipy_stats.bootstrap(
        (values,), np.mean, n_resamples=999, method="BCa", random_state=np.random.default_rng(7)
    ).confidence_interval
    # the same resamples (indices drawn by the same generator), so the same interval
    assert (found.low, found.high) == pytest.approx((direct.low, direct.high))


def test_interval_falls_back_to_percentile_where_bca_degenerates():
    same = stats.interval(_mean(np.full(8, 5.0)), (8,), n_boot=200)
    assert (same.estimate, same.low, same.high, same.method) == (5.0, 5.0, 5.0, "percentile")
    discrete = stats.interval(_mean(np.array([0.0, 1.0, 1.0, 0.0])), (4,), discrete=True)
    assert discrete.method == "percentile" and 0.0 <= discrete.low < discrete.high <= 1.0


def test_dkw_band_contains_the_true_cdf_everywhere_in_95_percent_of_samples():
    rng = np.random.default_rng(2)
    n, inside = 40, 0
    for _ in range(200):
        values = np.sort(rng.normal(0.0, 1.0, n))
        truth = scipy_stats.norm.cdf(values)
        eps = stats.dkw_halfwidth(n)
        # the largest gap is at a jump: compare F with the EDF just after and just before it
        after, before = np.arange(1, n + 1) / n, np.arange(n) / n
        inside += np.all(np.abs(after - truth) <= eps) and np.all(np.abs(before - truth) <= eps)
    assert inside / 200 >= 0.95


@pytest.mark.slow
def test_bootstrap_sup_band_covers_the_whole_true_cdf_about_95_percent_of_the_time():
    rng = np.random.default_rng(3)
    xs = scipy_stats.norm.ppf(np.linspace(0.05, 0.95, 37))  # the curve between its tails
    truth = scipy_stats.norm.cdf(xs)
    inside = pointwise_inside = 0
    for rep in range(200):
        errors = rng.normal(0.0, 1.0, 60)
        low, high = stats.edf_band(
            errors, xs, relative=False, n_boot=400, seed=rep, simultaneous=True
        )
        inside += np.all((low <= truth) & (truth <= high))
        p_low, p_high = stats.edf_band(errors, xs, relative=False, n_boot=400, seed=rep)
        pointwise_inside += np.all((p_low <= truth) & (truth <= p_high))
    assert 0.90 <= inside / 200 <= 1.0
    # the pointwise band, read as if it held everywhere, misses the curve far more often
    assert pointwise_inside / 200 < 0.6


def test_sup_band_is_wider_than_the_pointwise_band():
    errors = np.random.default_rng(4).normal(20.0, 3.0, 30)
    xs = np.linspace(0.0, 15.0, 61)
    low, high = stats.edf_band(errors, xs, n_boot=500, simultaneous=True)
    p_low, p_high = stats.edf_band(errors, xs, n_boot=500)
    assert np.all(low <= p_low + 1e-12) and np.all(high >= p_high - 1e-12)
    assert np.any(high - low > p_high - p_low + 0.05)


# --- power ----------------------------------------------------------------------------------


def test_power_finds_a_smaller_sample_for_a_larger_effect_and_none_for_zero():
    noise = np.random.default_rng(5).normal(0.0, 1.0, 8)
    needed = []
    for shift in (0.2, 0.4, 0.8):
        values = noise - noise.mean() + shift  # a mean of exactly `shift`, spread about 0.74
        needed.append(stats.power(_mean(values), (8,), 128, seed=0).needed)
    assert needed[0] > needed[1] > needed[2] and needed[2] <= 12
    centred = stats.power(_mean(noise - noise.mean()), (8,), 128, seed=0)
    assert centred.needed is None and centred.sizes[-1] == 128


def test_power_of_a_normal_mean_is_near_the_textbook_sample_size():
    # effect 0.5 sd: a two-sided 95% interval excludes 0 with 80% probability at n = 32
    # ((1.96 + 0.84)^2 / 0.5^2 = 31.4); the power grid steps 24, 32, 48
    values = scipy_stats.norm.ppf((np.arange(200) + 0.5) / 200) + 0.5
    assert stats.power(_mean(values), (200,), 256, n_min=4, seed=1).needed in (24, 32, 48)


def _rows(model, optimizer, epochs, errors_by_sample_seed):
    return [
        {
            "model": model,
            "optimizer": optimizer,
            "epochs": epochs,
            "sample": sample,
            "seed": seed,
            "status": "finished",
            "final_error": float(error),
            "best_error": float(error),
        }
        for sample, per_seed in enumerate(errors_by_sample_seed)
        for seed, error in enumerate(per_seed)
    ]


def _edf_study(c_spread: float, n_samples: int = 6) -> pd.DataFrame:
    """ViT_P's errors spread 30 points over the samples, ViT_C's `c_spread`; the same offsets
    and seed noise for both, so the effect is only the spread."""
    rng = np.random.default_rng(6)
    offsets = rng.uniform(0, 1, n_samples)
    noise = rng.normal(0, 0.5, (n_samples, 2))
    rows = []
    for model, spread in ((P, 30.0), (C, c_spread)):
        rows += _rows(model, "adamw", 8, 10 + spread * offsets[:, None] + noise)
    return pd.DataFrame(rows)


@pytest.mark.slow
def test_claim_advice_shrinks_as_the_effect_grows_and_is_honest_at_zero():
    needed = {}
    for c_spread in (30.0, 12.0, 6.0, 2.0):
        row = claims_table(frames.with_errors(_edf_study(c_spread)), FAST, "t").iloc[0]
        needed[c_spread] = row["n_needed"]
        assert row["unit"] == "samples" and row["n_now"] == 6
    # the same spread for both models: an estimate of exactly 0, no size shows it
    assert needed[30.0] is None or np.isnan(needed[30.0])
    zero = claims_table(frames.with_errors(_edf_study(30.0)), FAST, "t").iloc[0]
    assert "its estimate is 0 or its steps point both ways" in zero["advice"]
    records = claims_records(claims_table(frames.with_errors(_edf_study(30.0)), FAST, "t"))
    assert records[0]["n_needed"] is None
    json.dumps(records, allow_nan=False)
    assert needed[12.0] > needed[6.0] >= needed[2.0]
    big = claims_table(frames.with_errors(_edf_study(2.0)), FAST, "t").iloc[0]
    assert big["verdict"] == "holds" and big["advice"].startswith("shown with 6 samples")


def test_seed_claims_advise_seeds():
    # claim (b) with a gap that 2 seeds of noise 3 cannot separate
    rows = []
    rng = np.random.default_rng(7)
    for model, short, long in ((P, 24.0, 10.0), (C, 20.0, 10.0)):
        rows += _rows(model, "adamw", 4, [short + rng.normal(0, 3, 2)])
        rows += _rows(model, "adamw", 16, [long + rng.normal(0, 3, 2)])
    row = claims_table(frames.with_errors(pd.DataFrame(rows)), FAST, "t").iloc[0]
    assert row["claim"] == "b" and row["unit"] == "seeds" and row["n_now"] == 2
    assert "seeds" in row["advice"]


def test_summary_comparisons_carry_advice_and_format_advice_prints_it():
    trials = _edf_study(2.0, n_samples=8)
    summary = summarize("t", trials, FAST)
    comparison = summary["comparisons"][0]
    assert comparison["n_now"] == 16 and "trials" in comparison["advice"]
    summary["claims"] = claims_table(frames.with_errors(trials), FAST, "t").to_dict("records")
    text = format_advice(summary)
    assert "claim (a) adamw, 8 ep" in text and "within 4" in text


@pytest.mark.slow
def test_dry_run_prints_the_advice_of_an_earlier_report(tmp_path, monkeypatch, capsys):
    from cli_inprocess import run_cli

    study = tmp_path / "s.yaml"
    study.write_text(
        "name: s\ndataset: {name: digits, img_size: 16}\nmodels: [vit_p_w64_16px, vit_c_w64_16px]\n"
        "optimizers: [adamw]\nepochs: 1\nbatch_size: 64\nseeds: [0, 1]\n"
        "search: {n_samples: 6, ranges: {adamw: {lr: [1.0e-4, 1.0e-2], wd: [0.01, 0.5]}}}\n"
    )
    code, out, _ = run_cli(["run", str(study), "--dry-run"], tmp_path, monkeypatch, capsys)
    assert code == 0 and "no earlier report at reports/s/summary.json" in out
    trials = _edf_study(12.0).assign(
        model=lambda d: d["model"].str.replace("_x", "_w64_16px"), study="s"
    )
    summary = summarize("s", trials, FAST)
    summary["claims"] = claims_table(frames.with_errors(trials), FAST, "s").to_dict("records")
    (tmp_path / "reports" / "s").mkdir(parents=True)
    (tmp_path / "reports" / "s" / "summary.json").write_text(json.dumps(summary, default=str))
    code, out, _ = run_cli(["run", str(study), "--dry-run"], tmp_path, monkeypatch, capsys)
    assert code == 0 and "claim (a) adamw, 8 ep" in out and "samples" in out
    (tmp_path / "reports" / "s" / "summary.json").write_text("[1, 2")
    code, out, _ = run_cli(["run", str(study), "--dry-run"], tmp_path, monkeypatch, capsys)
    assert code == 0 and "not a summary.json optbench wrote" in out
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "plant", ["nested", "claims-not-objects", "fifo", "linked-file", "linked-folder"]
)
def test_the_dry_run_reads_no_crafted_or_linked_summary(tmp_path, monkeypatch, capsys, plant):
    """The earlier report's summary.json is data: one that is nested too deep for the parser,
    whose claims are not objects, a FIFO, or reached through a link gives a note, never a
    traceback or a wait."""
    from cli_inprocess import run_cli

    study = tmp_path / "s.yaml"
    study.write_text(
        "name: s\ndataset: {name: digits, img_size: 16}\nmodels: [vit_p_w64_16px]\n"
        "optimizers: [adamw]\nepochs: 1\nbatch_size: 64\n"
        "search: {n_samples: 2, ranges: {adamw: {lr: [1.0e-4, 1.0e-2], wd: [0.01, 0.5]}}}\n"
    )
    folder, elsewhere = tmp_path / "reports" / "s", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "summary.json").write_text(json.dumps({"study": "s", "claims": []}))
    folder.parent.mkdir()
    if plant == "linked-folder":
        folder.symlink_to(elsewhere)
    else:
        folder.mkdir()
    if plant == "nested":
        (folder / "summary.json").write_text("[" * 100_000)
    elif plant == "claims-not-objects":
        (folder / "summary.json").write_text(json.dumps({"claims": [1, None, "x", [2]]}))
    elif plant == "fifo":
        os.mkfifo(folder / "summary.json")
    elif plant == "linked-file":
        (folder / "summary.json").symlink_to(elsewhere / "summary.json")
    code, out, err = run_cli(["run", str(study), "--dry-run"], tmp_path, monkeypatch, capsys)
    assert code == 0, err
    not_ours = "not a summary.json optbench wrote"
    said = {"nested": not_ours, "claims-not-objects": not_ours, "fifo": "not a regular file"}
    assert said.get(plant, "a symbolic link") in out


def test_a_cell_past_the_search_end_is_not_searched_and_says_so():
    # 300 trials per model against MAX_TRIALS 256: the power search would simulate studies
    # larger than its grid (the report bench's 10,000 trials took 30x longer so).
    from optbench.decision.summary import MAX_TRIALS, advice_line

    rng = np.random.default_rng(0)
    a, b = rng.normal(10, 3, 300), rng.normal(12, 3, 300)
    power = stats.power(stats.within_diff(a, b, 4.0), (a.size, b.size), MAX_TRIALS, discrete=True)
    assert power.sizes == () and power.needed is None
    line = advice_line(power, True, 300, "trials", MAX_TRIALS)
    assert line.startswith("shown with 300 trials") and "not searched past 256" in line

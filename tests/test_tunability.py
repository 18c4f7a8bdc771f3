"""The tunability numbers (optbench/decision/tunability.py) against cases computed by hand and by
enumerating every draw or subset, the estimator's unbiasedness (exactly, over every sample of a
small population) and its band's coverage (by simulation on synthetic.py's distributions), and
their place in the report: the figure, summary.json, the API, an all-diverged study's page."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from optbench.decision import frames, tunability
from optbench.decision.tunability import expected_best, samples_within, unbiased_best
from optbench.report import synthetic, tunability_page


def _enumerated(errors: list[float], k: int) -> float:
    """E[min of k draws with replacement], by listing all n^k equally likely draws."""
    draws = list(itertools.product(errors, repeat=k))
    return sum(min(d) for d in draws) / len(draws)


def test_three_errors_by_enumeration():
    errors = [10.0, 20.0, 40.0]
    got = expected_best(np.array(errors), [1, 2, 3, 4])
    assert got[0] == pytest.approx(70 / 3)  # the mean
    # k = 2: min is 10 unless both draws avoid it (4/9): 20 both in {20, 40} but not both 40
    assert got[1] == pytest.approx((5 * 10 + 3 * 20 + 1 * 40) / 9)
    assert got == pytest.approx([_enumerated(errors, k) for k in (1, 2, 3, 4)])


def test_the_order_of_the_errors_does_not_matter_and_ties_are_fine():
    errors = [30.0, 10.0, 10.0, 25.0]
    assert expected_best(np.array(errors), [3]) == pytest.approx(_enumerated(errors, 3))


@pytest.mark.parametrize("seed", range(5))
def test_property_expected_best_falls_from_the_mean_to_the_best(seed):
    rng = np.random.default_rng(seed)
    errors = rng.uniform(5, 95, size=int(rng.integers(2, 7)))
    ks = np.arange(1, 60)
    values = expected_best(errors, ks)
    assert values[0] == pytest.approx(errors.mean())
    assert np.all(np.diff(values) <= 1e-12) and np.all(values >= errors.min() - 1e-12)
    assert values[-1] == pytest.approx(errors.min(), abs=1e-3 * np.ptp(errors) + 1e-9)
    small = int(rng.integers(1, 4))
    assert values[small - 1] == pytest.approx(_enumerated(list(errors), small))
    # the weights are a probability distribution over the sorted errors
    weights = tunability.min_weights(errors.size, ks)
    assert np.all(weights >= 0) and weights.sum(axis=0) == pytest.approx(np.ones(ks.size))


def _over_subsets(errors, k: int) -> float:
    """The mean over every k-subset of the samples of its minimum, by listing them."""
    return float(np.mean([min(s) for s in itertools.combinations(errors, k)]))


@pytest.mark.parametrize("seed", range(4))
def test_the_estimate_is_the_mean_best_over_every_subset_of_k(seed):
    rng = np.random.default_rng(seed)
    errors = np.round(rng.uniform(5, 100, size=int(rng.integers(2, 9))), 1)  # ties too
    errors[-1] = errors[0]
    ks = np.arange(1, errors.size + 1)
    assert unbiased_best(errors, ks) == pytest.approx([_over_subsets(errors, k) for k in ks])
    # the report's curve is that estimate: the mean at k = 1, the cell's best at k = n
    results = _results({"a": list(errors)})
    curve = tunability.tunability_curves(results, n_boot=20)["expected_best"].to_numpy()
    assert curve == pytest.approx([_over_subsets(errors, k) for k in ks])
    assert curve[-1] == errors.min()


def test_beyond_n_the_estimate_draws_with_replacement():
    errors = np.array([10.0, 20.0, 40.0])
    assert unbiased_best(errors, [5]) == pytest.approx([_enumerated(list(errors), 5)])


@pytest.mark.parametrize("n", [3, 4])
def test_the_estimate_is_unbiased_exactly_over_every_sample_of_a_population(n):
    # n samples drawn with replacement from four equally likely errors: the mean of the
    # estimate over all 4^n samples equals the population's E[min of k], for every k <= n
    population = [7.0, 12.0, 30.0, 100.0]
    ks = np.arange(1, n + 1)
    samples = np.array(list(itertools.product(population, repeat=n)))
    mean_estimate = unbiased_best(samples, ks).mean(axis=0)
    truth = [_enumerated(population, k) for k in ks]
    assert mean_estimate == pytest.approx(truth, rel=1e-12)
    # the with-replacement plug-in is biased upward past k = 1
    assert np.all(expected_best(samples, ks).mean(axis=0)[1:] > np.array(truth[1:]) + 0.5)


def _population(model: str) -> np.ndarray:
    """Many sample errors of synthetic.py's bowl for `model` (diverged: 100)."""
    trials = synthetic.synthetic_trials([model], ["adamw"], [5], 20_000, with_metrics=False)
    errors = trials["final_error"].to_numpy(float).copy()
    errors[trials["status"].to_numpy() == "diverged"] = tunability.DIVERGED_ERROR
    return errors


@pytest.mark.slow
@pytest.mark.parametrize(("model", "n"), [("vit_p_w64_16px", 16), ("vit_c_w64_16px", 12)])
def test_the_band_covers_the_true_expected_best(model, n):
    # 200 studies of n samples each from a known distribution: the 95% band of the report's
    # curve covers E[min of k] (the population's) at least 90% of the time, over the k that
    # carry a band (2 .. n / 2; k = 1, the mean, misses divergences rarer than 1 / n) and at
    # least 85% (Monte-Carlo error) at each. The percentile band this replaced covered 70-85%
    # at k = n / 2.
    population = _population(model)
    ks = np.arange(2, n // 2 + 1)
    truth = expected_best(population, ks)
    rng = np.random.default_rng(11)
    covered = np.zeros(ks.size)
    studies = 200
    for study in range(studies):
        errors = rng.choice(population, n)
        curve = tunability.tunability_curves(
            _results({"a": list(errors)}), n_boot=200, seed=study
        ).set_index("k")
        low, high = curve.loc[ks, "low"].to_numpy(), curve.loc[ks, "high"].to_numpy()
        covered += (low <= truth) & (truth <= high)
    coverage = covered / studies
    assert coverage.mean() >= 0.90 and coverage.min() >= 0.85, coverage


def test_no_band_past_half_the_samples_where_the_estimate_rests_on_the_best_few():
    errors = np.array([12.0, 15.0, 30.0, 31.0, 60.0, 80.0, 81.0, 90.0])
    curve = tunability.tunability_curves(_results({"a": list(errors)}), n_boot=200, seed=3)
    banded = curve["k"] <= errors.size // 2
    assert curve.loc[~banded, ["low", "high"]].isna().all().all()
    inside = curve[banded]
    assert (inside["low"] <= inside["expected_best"]).all()
    assert (inside["expected_best"] <= inside["high"]).all()
    again = tunability.tunability_curves(_results({"a": list(errors)}), n_boot=200, seed=3)
    assert again.equals(curve)
    table = tunability_page.page_table(tunability.tunability_table(_results({"a": list(errors)})))
    assert table["k = 4"].iloc[0].endswith("]") and table["k = 4"].iloc[0].count("[") == 1
    assert table["k = 8"].iloc[0] == f"{errors.min():.2f} (no band)"


def test_two_samples_say_nothing_sure_of_the_mean():
    # with 2 samples a quarter of the resamples are one sample twice (no spread, yet the mean
    # moved): the band is the whole error scale, never a zero-width one
    curve = tunability.tunability_curves(_results({"a": [10.0, 20.0]}), n_boot=200)
    assert curve[["low", "high"]].iloc[0].tolist() == [0.0, tunability.DIVERGED_ERROR]
    alike = tunability.tunability_curves(_results({"a": [7.0] * 4}), n_boot=200)
    assert (alike["low"].iloc[:2] == 7.0).all() and (alike["high"].iloc[:2] == 7.0).all()


def test_samples_within_is_flagged_where_one_trial_is_all_within_x():
    alone = _results({"alone": [10.0, 20.0, 30.0, 40.0], "two": [10.0, 10.5, 30.0, 40.0]})
    table = tunability.tunability_table(alone, n_boot=50)
    assert list(table["within_count"]) == [1, 2]
    shown = tunability_page.page_table(table).iloc[:, -1].tolist()
    assert shown == ["9 (rests on one trial)", str(samples_within(np.array([10, 10.5, 30, 40])))]


def test_samples_within_by_hand():
    # one in four within 1 point of the best: 1 - 0.75^k >= 0.9 first at k = 9 (0.75^8 = 0.100)
    assert samples_within(np.array([10.0, 20.0, 30.0, 40.0]), 1.0, 0.9) == 9
    assert 1 - 0.75**9 >= 0.9 > 1 - 0.75**8
    assert samples_within(np.array([10.0, 10.5, 30.0, 40.0]), 1.0, 0.5) == 1  # q = 0.5
    assert samples_within(np.array([10.0, 10.2]), 1.0, 0.99) == 1  # every sample within
    q = 2 / 5
    expected = math.ceil(math.log(0.05) / math.log(1 - q))
    assert samples_within(np.array([1.0, 1.5, 9.0, 9.5, 9.9]), 1.0, 0.95) == expected


def _results(errors_by_model: dict[str, list[float]], seeds: int = 1) -> pd.DataFrame:
    rows = [
        {
            "model": model,
            "optimizer": "lion",
            "epochs": 3,
            "sample": sample,
            "seed": seed,
            "status": "finished",
            "error": error + seed,
        }
        for model, errors in errors_by_model.items()
        for sample, error in enumerate(errors)
        for seed in range(seeds)
    ]
    return pd.DataFrame(rows)


def test_a_sample_is_the_mean_of_its_seeds_and_a_diverged_seed_counts_100():
    results = _results({"a": [10.0, 20.0]}, seeds=2)  # seeds add 0 and 1: means 10.5, 20.5
    results.loc[3, "error"] = np.inf  # sample 1, seed 1 diverged: (20 + 100) / 2
    table = tunability.tunability_table(results, n_boot=50)
    assert table["best"].iloc[0] == pytest.approx(10.5)
    assert table["e1"].iloc[0] == pytest.approx((10.5 + 60.0) / 2)


def test_a_cell_of_one_sample_gets_none():
    table = tunability.tunability_table(_results({"a": [10.0, 20.0], "b": [15.0]}), n_boot=50)
    assert list(table["model"]) == ["a"]
    assert {"e1", "e2"} <= set(table.columns) and "e4" not in table.columns


def test_the_api_and_summary_give_the_same_numbers():
    import optbench

    trials = synthetic.synthetic_trials(["vit_p_w64_16px", "vit_c_w64_16px"], ["adamw"], [5], 6)
    table = optbench.tunability_table(trials, n_boot=100)
    records = tunability.tunability_records(frames.with_errors(trials), n_boot=100)
    # summary.json leaves out what the table holds as NaN: no band past n / 2
    shown = [{k: v for k, v in row.items() if not pd.isna(v)} for row in table.to_dict("records")]
    assert len(table) == 2 and records["cells"] == shown and "e4_low" not in shown[0]
    assert records["within_points"] == tunability.WITHIN_POINTS


@pytest.mark.slow
def test_the_figure_has_a_panel_per_cell_and_a_line_per_model():
    import optbench

    trials = synthetic.synthetic_trials(
        ["vit_p_w64_16px", "vit_c_w64_16px"], ["adamw", "sgd"], [5], 8
    )
    fig = optbench.tunability_figure(trials, n_boot=50)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 2 and all(len(ax.get_lines()) == 2 for ax in axes)
    assert all(ax.get_xscale() == "log" for ax in axes)
    with pytest.raises(optbench.NothingToDraw):
        optbench.tunability_figure(trials[trials["sample"] == 0])


def _all_diverged() -> pd.DataFrame:
    """Synthetic trials of two models of which every one diverged in its first epoch, its
    metrics line as such a trial records it (no val_error)."""
    trials = synthetic.synthetic_trials(
        ["vit_p_w64_16px", "vit_c_w64_16px"], ["adamw"], [5], 4, with_metrics=False
    )
    return trials.assign(
        status="diverged",
        final_error=np.nan,
        best_error=np.nan,
        diverged_epoch=1.0,
        metrics=[[{"epoch": 1, "train_loss": None, "epoch_s": 0.5}] for _ in range(len(trials))],
    )


def test_an_all_diverged_cell_has_no_tunability_and_says_so():
    import optbench

    trials = _all_diverged()
    records = tunability.tunability_records(frames.with_errors(trials), n_boot=50)
    assert records["cells"] == []
    assert [c["model"] for c in records["unfinished"]] == ["vit_p_w64_16px", "vit_c_w64_16px"]
    assert all(c["n"] == 4 for c in records["unfinished"])
    with pytest.raises(optbench.NothingToDraw, match="every one diverged"):
        optbench.tunability_figure(trials, n_boot=50)
    # beside a cell that trained, the diverged one is left out of the curves, not drawn at 100
    mixed = pd.concat([trials[trials["model"] == "vit_p_w64_16px"], _finished_cell()])
    curves = tunability.tunability_curves(frames.with_errors(mixed), n_boot=50)
    assert set(curves["model"]) == {"vit_c_w64_16px"}


def _finished_cell() -> pd.DataFrame:
    return synthetic.synthetic_trials(["vit_c_w64_16px"], ["adamw"], [5], 4, with_metrics=False)


@pytest.mark.slow
def test_the_report_of_a_study_whose_every_trial_diverged_says_none_finished(tmp_path):
    import optbench
    from optbench.report.writer import write_report

    spec = optbench.load_study(Path(__file__).parents[1] / "studies" / "quickstart.yaml")
    trials = _all_diverged()
    summary = write_report(spec, trials, tmp_path / "r", n_boot=50, data_shape=(10, 1, 16))
    page = (tmp_path / "r" / "index.html").read_text()
    assert "tunability: skipped: no trial finished: every one diverged" in page
    assert page.count("none of its 4 (lr, wd) samples finished (every trial diverged)") == 2
    assert summary["tunability"]["cells"] == [] and len(summary["tunability"]["unfinished"]) == 2
    assert "curves: skipped" in page

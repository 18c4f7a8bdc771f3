"""The tunability numbers (optbench/report/tunability.py) against cases computed by hand and by
enumerating every draw, a property of the formula on random errors, and their place in the
report: the figure, summary.json and the API."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from optbench.report import frames, synthetic, tunability
from optbench.report.tunability import expected_best, expected_best_band, samples_within


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


def test_the_band_holds_the_estimate_and_is_reproducible():
    errors = np.array([12.0, 15.0, 30.0, 31.0, 60.0, 80.0])
    ks = np.arange(1, 7)
    low, high = expected_best_band(errors, ks, n_boot=500, seed=3)
    value = expected_best(errors, ks)
    assert np.all(low <= value) and np.all(value <= high) and np.all(low < high)
    again = expected_best_band(errors, ks, n_boot=500, seed=3)
    assert np.array_equal(low, again[0]) and np.array_equal(high, again[1])


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
    assert len(table) == 2 and records["cells"] == table.to_dict("records")
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

"""EDF, frac_within, EDF area, bootstrap, KS and good-range math against hand-computed values."""

import numpy as np
import pytest

from optbench.decision.edf import dtop1, edf, edf_auc, frac_within, trial_errors
from optbench.decision.stats import (
    bootstrap_ci,
    dtop1_rows,
    edf_band,
    edf_rows,
    frac_within_diff,
    good_range,
    ks_test,
)

INF = np.inf


def test_trial_errors_marks_diverged_and_missing_as_never_within():
    got = trial_errors(["finished", "diverged", "finished", "finished"], [10.0, 3.0, 12.0, np.nan])
    assert got.tolist() == [10.0, INF, 12.0, INF]


def test_dtop1_subtracts_the_best_finished_error():
    assert dtop1(np.array([10.0, 12.0, INF, 15.0])).tolist() == [0.0, 2.0, INF, 5.0]
    assert dtop1(np.array([INF, INF])).tolist() == [INF, INF]


def test_edf_counts_values_at_or_below_x_over_all_trials():
    values = np.array([0.0, 2.0, INF, 5.0])
    assert edf(values, [0, 1, 2, 5, 100]).tolist() == [0.25, 0.25, 0.5, 0.75, 0.75]
    assert np.isnan(edf(np.array([]), [1.0])).all()


def test_frac_within_hand_computed():
    dtop = np.array([0.0, 0.5, 2.0, 3.9, 4.0, 8.5, INF, INF])
    assert frac_within(dtop) == {"1": 2 / 8, "2": 3 / 8, "4": 5 / 8, "8": 5 / 8}
    assert frac_within(np.array([])) == {"1": None, "2": None, "4": None, "8": None}


def test_edf_auc_is_the_normalized_area_under_the_step_edf():
    dtop = np.array([0.0, 5.0, INF, 20.0])
    # F = 1/4 on [0, 5), 2/4 on [5, 10]: area 1.25 + 2.5 = 3.75, over 10 points
    assert edf_auc(dtop, x_max=10.0) == pytest.approx(0.375)
    xs = np.linspace(0, 10, 100001)
    assert edf_auc(dtop) == pytest.approx(np.trapezoid(edf(dtop, xs), xs) / 10, abs=1e-4)
    assert edf_auc(np.array([])) is None


def test_row_helpers_match_hand_values():
    rows = np.array([[10.0, 12.0, INF], [INF, INF, INF]])
    assert dtop1_rows(rows).tolist() == [[0.0, 2.0, INF], [INF, INF, INF]]
    values = np.array([[0.0, 1.0, INF], [2.0, 2.0, 2.0]])
    got = edf_rows(values, np.array([0.0, 1.0, 2.0]))
    np.testing.assert_allclose(got, [[1 / 3, 2 / 3, 2 / 3], [0, 0, 1]])


def test_edf_rows_agrees_with_edf_on_random_rows():
    rng = np.random.default_rng(1)
    values = np.where(rng.random((20, 30)) < 0.1, INF, rng.exponential(3.0, (20, 30)))
    xs = np.linspace(0, 10, 57)
    expected = np.stack([edf(row, xs) for row in values])
    np.testing.assert_allclose(edf_rows(values, xs), expected)


def test_bootstrap_ci_of_a_two_point_mean():
    # resampled means of [0, 1] are 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4
    mean = lambda rows: rows.mean(axis=1)  # noqa: E731
    values = np.array([0.0, 1.0])
    assert bootstrap_ci(values, mean, n_boot=4000, seed=3) == (0.0, 1.0)
    assert bootstrap_ci(values, mean, n_boot=4000, seed=3, level=0.4) == (0.5, 0.5)
    assert bootstrap_ci(np.full(5, 7.0), mean, n_boot=100) == (7.0, 7.0)


def test_bootstrap_is_seeded():
    errors = np.random.default_rng(0).normal(20, 3, 40)
    xs = np.linspace(0, 10, 11)
    a, b, c = (edf_band(errors, xs, n_boot=300, seed=s) for s in (5, 5, 6))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not (np.array_equal(a[0], c[0]) and np.array_equal(a[1], c[1]))


def test_edf_band_surrounds_the_edf_and_never_counts_diverged():
    errors = np.array([10.0, 11.0, 12.0, 14.0, INF, INF])
    xs = np.linspace(0, 20, 41)
    low, high = edf_band(errors, xs, n_boot=500, seed=0)
    point = edf(dtop1(errors), xs)
    assert np.all(low <= point + 1e-12) and np.all(point <= high + 1e-12)
    assert point[-1] == pytest.approx(4 / 6)
    assert low[-1] < 1.0  # diverged trials keep the band below 1 in most resamples
    raw_low, raw_high = edf_band(errors, np.array([9.0, 100.0]), relative=False, n_boot=200)
    assert raw_low[0] == raw_high[0] == 0.0


def test_ks_statistic_hand_computed():
    # at x = 1: F_a = 2/3, F_b = 1/4, the largest gap
    stat, p = ks_test(np.array([0.0, 1.0, INF]), np.array([0.0, 2.0, INF, INF]))
    assert stat == pytest.approx(5 / 12)
    assert 0.0 < p <= 1.0
    assert ks_test(np.array([0.0, 1.0]), np.array([0.0, 1.0])) == (0.0, 1.0)


def test_frac_within_diff_estimate_and_interval():
    a = np.array([10.0, 10.5, 11.0])  # always all within 4 of its best
    b = np.array([10.0, INF, INF, 20.0])  # 1 of 4 within 4
    diff = frac_within_diff(a, b, points=4.0, n_boot=500, seed=1)
    assert diff.estimate == pytest.approx(0.75)
    assert 0.0 <= diff.low <= diff.estimate <= diff.high <= 1.0
    same = frac_within_diff(a, a, n_boot=200, seed=1)
    assert (same.estimate, same.low, same.high) == (0.0, 0.0, 0.0)


def test_good_range_is_the_bootstrap_spread_of_the_best_runs_value():
    errors = np.array([5.0, 1.0, 3.0, INF])
    values = np.array([10.0, 20.0, 30.0, 40.0])
    got = good_range(errors, values, n_boot=1000, seed=0)
    assert got.estimate == 20.0
    # the best run is left out of about (3/4)^4 = 32% of resamples: then 30 or 10 wins;
    # the diverged run's value 40 is never a best
    assert 10.0 <= got.low <= 20.0 <= got.high <= 30.0
    assert good_range(np.array([INF, INF]), np.array([1.0, 2.0])) is None

"""Resampling statistics for EDFs: seeded bootstrap bands and CIs, the KS test, good ranges.

Every bootstrap resamples a cell's trials with replacement and recomputes the cell's best
error inside each resample, so bands and CIs include the uncertainty of the best itself.
Randomness comes only from the `seed` argument (numpy's default_rng): same inputs, same output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

N_BOOT = 1000
LEVEL = 0.95


def _rng(seed: int | np.random.SeedSequence | list[int]) -> np.random.Generator:
    return np.random.default_rng(seed)


def resample(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(n_boot, n) array: each row is `values` resampled with replacement."""
    values = np.asarray(values)
    return values[rng.integers(0, values.size, size=(n_boot, values.size))]


def dtop1_rows(errors: np.ndarray) -> np.ndarray:
    """dtop-1 of each row of a (B, n) error array; rows without a finite error are all +inf."""
    best = errors.min(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        out = errors - best
    return np.where(np.isfinite(best), out, np.inf)


def edf_rows(values: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """F(x) on the ascending grid `xs` for each row of a (B, n) array, in O(B*n + B*len(xs))."""
    n_rows, n = values.shape
    width = xs.size + 1  # the last bin collects values above the grid (and +inf)
    first_x = np.searchsorted(xs, values, side="left")  # value <= xs[j] for every j >= first_x
    flat = (np.arange(n_rows)[:, None] * width + first_x).ravel()
    counts = np.bincount(flat, minlength=n_rows * width).reshape(n_rows, width)[:, :-1]
    return counts.cumsum(axis=1) / n


def _percentiles(samples: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(samples, [tail, 100.0 - tail], axis=0)
    return low, high


def bootstrap_ci(
    values: np.ndarray,
    statistic: Callable[[np.ndarray], np.ndarray],
    *,
    n_boot: int = N_BOOT,
    seed: int = 0,
    level: float = LEVEL,
) -> tuple[float, float]:
    """Percentile bootstrap CI of `statistic`, which maps a (B, n) array of resamples to (B,)."""
    samples = statistic(resample(values, n_boot, _rng(seed)))
    low, high = _percentiles(samples, level)
    return float(low), float(high)


def edf_band(
    errors: np.ndarray,
    xs: np.ndarray,
    *,
    relative: bool = True,
    n_boot: int = N_BOOT,
    seed: int = 0,
    level: float = LEVEL,
) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise bootstrap band of the EDF on `xs`: of dtop-1 (relative) or of raw error."""
    rows = resample(errors, n_boot, _rng(seed))
    if relative:
        rows = dtop1_rows(rows)
    return _percentiles(edf_rows(rows, np.asarray(xs, dtype=float)), level)


def ks_test(dtop_a: np.ndarray, dtop_b: np.ndarray) -> tuple[float, float]:
    """Two-sample Kolmogorov-Smirnov test (scipy): (statistic, p-value). +inf (never within)
    is a legal value: it sits above every finite dtop-1 in both EDFs."""
    result = stats.ks_2samp(np.asarray(dtop_a, float), np.asarray(dtop_b, float))
    return float(result.statistic), float(result.pvalue)


@dataclass(frozen=True)
class Interval:
    """An estimate and its bootstrap confidence interval."""

    estimate: float
    low: float
    high: float


def frac_within_diff(
    errors_a: np.ndarray,
    errors_b: np.ndarray,
    *,
    points: float = 4.0,
    n_boot: int = N_BOOT,
    seed: int = 0,
    level: float = LEVEL,
) -> Interval:
    """frac_within(points) of model a minus that of model b, each model resampled on its own."""
    rng = _rng(seed)

    def within(errors: np.ndarray) -> np.ndarray:
        return (dtop1_rows(np.atleast_2d(errors)) <= points).mean(axis=1)

    estimate = float(within(errors_a)[0] - within(errors_b)[0])
    diffs = within(resample(errors_a, n_boot, rng)) - within(resample(errors_b, n_boot, rng))
    low, high = _percentiles(diffs, level)
    return Interval(estimate, float(low), float(high))


def good_range(
    errors: np.ndarray,
    values: np.ndarray,
    *,
    n_boot: int = N_BOOT,
    seed: int = 0,
    level: float = LEVEL,
) -> Interval | None:
    """The hyperparameter value of the best run and the bootstrap range of that argmin: resample
    the runs, take the value of each resample's best run, keep the central `level` percentiles.
    None when no run has a finite error."""
    errors = np.asarray(errors, dtype=float)
    values = np.asarray(values, dtype=float)
    if not np.isfinite(errors).any():
        return None
    idx = _rng(seed).integers(0, errors.size, size=(n_boot, errors.size))
    best_idx = np.take_along_axis(idx, errors[idx].argmin(axis=1)[:, None], axis=1)[:, 0]
    # a resample of only diverged runs has no best: drop it
    picked = values[best_idx][np.isfinite(errors[best_idx])]
    best = float(values[errors.argmin()])
    if picked.size == 0:
        return Interval(best, best, best)
    # an order statistic (a value some run really had), so log or linear scale agree
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(picked, [tail, 100.0 - tail], method="inverted_cdf")
    return Interval(best, float(low), float(high))

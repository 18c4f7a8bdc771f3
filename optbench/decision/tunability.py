"""Tunability of a cell: what k random (lr, wd) samples of its search box are expected to give,
estimated from the cell's own n samples (Dodge et al. 2019, "Show your work": expected
validation performance). Pure numpy and pandas.

A cell's samples are its (lr, wd) pairs; a sample's error is the mean over its seeds of its
trials' errors (%), a diverged trial (or one without an error) counting as 100 (no usable
model: the study's own rule, not dropped). With the n sample errors sorted
e_(1) <= ... <= e_(n):

- expected best error after k samples, E_k = E[min of k fresh draws from the box], estimated
  for k <= n without bias by the U-statistic over subsets (`unbiased_best`): the mean over all
  C(n, k) subsets of k samples of their minimum. e_(i) is a subset's minimum in C(n - i, k - 1)
  of them, so E_k = sum_i e_(i) C(n - i, k - 1) / C(n, k): the mean at k = 1, the cell's best at
  k = n. The with-replacement plug-in (`expected_best`, sum_i e_(i) [((n - i + 1) / n)^k -
  ((n - i) / n)^k], Dodge et al.'s formula) is biased upward for k > 1 (it redraws the same
  samples); only beyond n, where no subset has k samples, is E_k that plug-in, and the table
  says so. (The best-error comparison, decision/claims.py, still reads the plug-in.)
- its band (`unbiased_band`), for 1 <= k <= n / 2: a studentized (bootstrap-t)
  95% interval, E_k -/+ the 97.5 and 2.5 percentiles of (E*_k - E_k) / se*_k over N_BOOT
  bootstrap resamples of the n samples times se_k, se the jackknife standard error of the
  U-statistic (its leave-one-out values need k <= n - 1). No band past k = n / 2: there E_k
  rests on the best few samples, the percentile band this replaced covered 41% at k = n on
  real trainings, and this one, where it still covered (k up to n - 2), was 55-85 points wide:
  the samples cannot say how far E_k is from the truth. Coverage: docs/reports.md.
- samples to land within X points of the best with probability p: with q the fraction of the
  n samples within X points of the cell's best error, the smallest k with
  1 - (1 - q)^k >= p, i.e. ceil(log(1 - p) / log(1 - q)) (1 when q = 1): draws with
  replacement, so it may exceed n. Where only the best sample itself is within X (q = 1 / n)
  the number rests on one trial, and the table flags it (`within_count`).
  WITHIN_POINTS and PROBABILITY are the report's X and p.

Only cells with at least MIN_SAMPLES samples and one finished trial get these (one sample has
nothing to draw from; a cell whose every trial diverged has nothing to tune: `unfinished_cells`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from optbench.decision.stats import N_BOOT

MIN_SAMPLES = 2
WITHIN_POINTS = 1.0  # X: points above the cell's best error
PROBABILITY = 0.9  # p: the chance of landing within X points
TABLE_KS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)  # the table's k (those <= n)
DIVERGED_ERROR = 100.0  # a diverged trial's error here: it gave no usable model
BAND_MAX_SHARE = 0.5  # a band for k up to this share of n: past it E_k rests on the best few


def min_weights(n: int, ks: np.ndarray) -> np.ndarray:
    """(n, len(ks)): the probability that the i-th smallest of n values is the minimum of k
    draws with replacement (the plug-in's weights, module docstring), column per k."""
    i = np.arange(1, n + 1)[:, None]
    ks = np.asarray(ks, dtype=float)[None, :]
    return ((n - i + 1) / n) ** ks - ((n - i) / n) ** ks


def subset_min_weights(n: int, ks) -> np.ndarray:
    """(n, len(ks)): the share of the k-subsets of n values whose minimum is the i-th smallest,
    C(n - i, k - 1) / C(n, k), column per k (1 <= k <= n). Built as k / n times the running
    product of C(n - i - 1, k - 1) / C(n - i, k - 1) = (n - i - k + 1) / (n - i), so no
    binomial coefficient is formed (they overflow past n of about 1,000)."""
    ks = np.asarray(ks, dtype=float)[None, :]
    i = np.arange(1, n)[:, None]
    steps = np.clip((n - i - ks + 1) / (n - i), 0.0, None)
    return ks / n * np.vstack([np.ones_like(ks), np.cumprod(steps, axis=0)])


def best_weights(n: int, ks) -> np.ndarray:
    """(n, len(ks)): E_k's weights on the n sorted errors: over subsets for k <= n, with
    replacement beyond n (module docstring)."""
    ks = np.asarray(ks)
    within = subset_min_weights(n, np.minimum(ks, n))
    return np.where(ks[None, :] <= n, within, min_weights(n, ks))


def expected_best(errors: np.ndarray, ks) -> np.ndarray:
    """The with-replacement plug-in of E_k for each k of `ks`: the expected minimum of k draws
    with replacement from `errors`, over its last axis ((..., n) -> (..., len(ks)))."""
    errors = np.sort(np.asarray(errors, dtype=float))
    return errors @ min_weights(errors.shape[-1], np.asarray(ks))


def unbiased_best(errors: np.ndarray, ks) -> np.ndarray:
    """E_k for each k of `ks`, over the last axis of `errors` ((..., n) -> (..., len(ks))):
    the mean minimum over all k-subsets for k <= n (unbiased), the plug-in beyond n."""
    errors = np.sort(np.asarray(errors, dtype=float), axis=-1)
    return errors @ best_weights(errors.shape[-1], ks)


def _leave_one_out_weights(n: int, ks: np.ndarray) -> np.ndarray:
    """(n, n * len(ks)): column block j holds the subset weights of the n - 1 sorted values
    left when the j-th smallest is left out, laid on the n positions (0 at j)."""
    weights = subset_min_weights(n - 1, ks)  # (n - 1, K)
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    rows = np.where(i > j, i - 1, np.minimum(i, n - 2))  # position i's rank once j is out
    out = weights[rows]  # (n_i, n_j, K)
    out[np.arange(n), np.arange(n)] = 0.0
    return out.reshape(n, -1)


def jackknife_se(sorted_errors: np.ndarray, ks) -> np.ndarray:
    """The jackknife standard error of the U-statistic E_k (k <= n - 1) for each row of
    `sorted_errors` ((B, n), each row sorted ascending) and k of `ks`: (B, len(ks))."""
    ks = np.asarray(ks)
    b, n = sorted_errors.shape
    left_out = (sorted_errors @ _leave_one_out_weights(n, ks)).reshape(b, n, ks.size)
    spread = left_out - left_out.mean(axis=1, keepdims=True)
    return np.sqrt((n - 1) / n * (spread**2).sum(axis=1))


def unbiased_band(
    errors: np.ndarray, ks, n_boot: int = N_BOOT, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The studentized bootstrap's 95% interval of E_k for each k of `ks` (module docstring):
    NaN past n / 2. A resample whose se is 0 counts as an unbounded deviation (none where
    its E_k equals the estimate), so too few distinct samples give the whole error scale."""
    errors = np.sort(np.asarray(errors, dtype=float))
    n, ks = errors.size, np.asarray(ks)
    low, high = np.full(ks.size, np.nan), np.full(ks.size, np.nan)
    banded = ks <= BAND_MAX_SHARE * n
    if not banded.any():
        return low, high
    k_in = ks[banded]
    weights = subset_min_weights(n, k_in)
    estimate = errors @ weights
    se = jackknife_se(errors[None, :], k_in)[0]
    rng = np.random.default_rng(seed)
    resamples = np.sort(rng.choice(errors, size=(n_boot, n), replace=True), axis=1)
    boot_se = jackknife_se(resamples, k_in)
    deviation = resamples @ weights - estimate
    unbounded = np.where(deviation == 0, 0.0, np.copysign(np.inf, deviation))
    with np.errstate(divide="ignore", invalid="ignore"):
        # a resample without spread that still moved E_k: a studentized deviation without bound
        t = np.where(boot_se > 0, deviation / boot_se, unbounded)
    # the resamples' own order statistics, outward: no interpolation toward an unbounded one
    t_low = np.percentile(t, 2.5, axis=0, method="lower")
    t_high = np.percentile(t, 97.5, axis=0, method="higher")
    with np.errstate(invalid="ignore"):  # se 0: every sample alike, nothing to move E_k
        low[banded] = np.where(se > 0, estimate - t_high * se, estimate)
        high[banded] = np.where(se > 0, estimate - t_low * se, estimate)
    # errors are percentages: the band stays inside [0, DIVERGED_ERROR]
    np.clip(low, 0.0, DIVERGED_ERROR, out=low)
    np.clip(high, 0.0, DIVERGED_ERROR, out=high)
    return low, high


def within_count(errors: np.ndarray, points: float = WITHIN_POINTS) -> int:
    """How many of the samples lie within `points` of the best (the best itself included)."""
    errors = np.asarray(errors, dtype=float)
    return int(np.sum(errors <= errors.min() + points))


def samples_within(
    errors: np.ndarray, points: float = WITHIN_POINTS, probability: float = PROBABILITY
) -> int:
    """The smallest k with P(the best of k draws is within `points` of the best) >= p."""
    q = within_count(errors, points) / np.asarray(errors).size
    if q >= 1.0:
        return 1
    return max(1, math.ceil(math.log(1.0 - probability) / math.log(1.0 - q)))


CELL = ["model", "optimizer", "epochs"]


def sample_errors(results: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, sample) of result rows (frames.with_errors): model, optimizer,
    epochs, sample, `error`, its seeds' mean (a diverged trial's: DIVERGED_ERROR), and
    `finished`, whether any of its seeds finished."""
    rows = results.assign(
        error=results["error"].clip(upper=DIVERGED_ERROR), finished=np.isfinite(results["error"])
    )
    return rows.groupby([*CELL, "sample"], sort=False, as_index=False).agg(
        error=("error", "mean"), finished=("finished", "any")
    )


def _tunable_cells(results: pd.DataFrame):
    """(model, optimizer, epochs, sample errors) of each cell with MIN_SAMPLES or more samples
    and a finished trial."""
    for (model, optimizer, epochs), cell in sample_errors(results).groupby(CELL, sort=False):
        if len(cell) >= MIN_SAMPLES and cell["finished"].any():
            yield model, optimizer, int(epochs), cell["error"].to_numpy(float)


def unfinished_cells(results: pd.DataFrame) -> list[dict]:
    """The cells none of whose trials finished (every one diverged): model, optimizer, epochs
    and n, their samples. Their E_k would be DIVERGED_ERROR at every k: nothing to tune."""
    samples = sample_errors(results)
    found = samples.groupby(CELL, sort=False).agg(n=("error", "size"), any_=("finished", "any"))
    return [
        {"model": m, "optimizer": o, "epochs": int(e), "n": int(row["n"])}
        for (m, o, e), row in found.iterrows()
        if not row["any_"]
    ]


CURVE_COLUMNS = [*CELL, "n", "k", "expected_best", "low", "high"]


def tunability_curves(results: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0) -> pd.DataFrame:
    """One row per tunable cell (`_tunable_cells`) and k = 1 .. n: model, optimizer, epochs,
    n, k, expected_best (unbiased_best), low, high (the band, NaN past n / 2)."""
    rows = []
    for model, optimizer, epochs, errors in _tunable_cells(results):
        ks = np.arange(1, errors.size + 1)
        low, high = unbiased_band(errors, ks, n_boot, seed)
        for k, value, lo, hi in zip(ks, unbiased_best(errors, ks), low, high, strict=True):
            rows.append((model, optimizer, epochs, errors.size, int(k), value, lo, hi))
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


def tunability_table(results: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0) -> pd.DataFrame:
    """One row per tunable cell (`_tunable_cells`): model, optimizer, epochs, n, best, E_k
    (with its band, "E_k [low, high]" as numbers in columns e<k>, e<k>_low, e<k>_high; no band
    past n / 2) for each k of TABLE_KS up to n, `samples_within` (X =
    WITHIN_POINTS, p = PROBABILITY) and `within_count`, the samples it rests on."""
    rows = []
    for model, optimizer, epochs, errors in _tunable_cells(results):
        row = {"model": model, "optimizer": optimizer, "epochs": epochs}
        row |= {"n": int(errors.size), "best": float(errors.min())}
        ks = np.array([k for k in TABLE_KS if k <= errors.size])
        low, high = unbiased_band(errors, ks, n_boot, seed)
        for k, value, lo, hi in zip(ks, unbiased_best(errors, ks), low, high, strict=True):
            row |= {f"e{k}": float(value), f"e{k}_low": float(lo), f"e{k}_high": float(hi)}
        row["samples_within"] = samples_within(errors)
        row["within_count"] = within_count(errors)
        rows.append(row)
    return pd.DataFrame(rows, columns=None if rows else [*CELL, "n", "best"])


def tunability_records(results: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """summary.json's `tunability`: X, p, the table's rows (NaN-free) and `unfinished`, the
    cells left out because none of their trials finished."""
    table = tunability_table(results, n_boot, seed)
    rows = [{k: v for k, v in row.items() if not pd.isna(v)} for row in table.to_dict("records")]
    return {
        "within_points": WITHIN_POINTS,
        "probability": PROBABILITY,
        "cells": rows,
        "unfinished": unfinished_cells(results),
    }

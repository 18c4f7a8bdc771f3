"""Tunability of a cell: what k random (lr, wd) samples of its search box are expected to give,
computed exactly from the cell's own n samples (Dodge et al. 2019, "Show your work": expected
validation performance). Pure numpy and pandas.

A cell's samples are its (lr, wd) pairs; a sample's error is the mean over its seeds of its
trials' errors (%), a diverged trial (or one without an error) counting as 100 (no usable
model). Drawing k samples uniformly *with replacement* from the n, as a search of k fresh
draws from the same box would, sorted e_(1) <= ... <= e_(n):

- expected best error after k samples, E_k = E[min of k draws]: the best of k draws is at
  least e_(i) with probability ((n - i + 1) / n)^k, so
  E_k = sum_i e_(i) [((n - i + 1) / n)^k - ((n - i) / n)^k]. E_1 is the mean error, E_k falls
  to the cell's best as k grows.
- its band: the 2.5 and 97.5 percentiles of E_k over bootstrap resamples of the n samples
  (N_BOOT, seeded): how much E_k would move with another n samples of the same box.
- samples to land within X points of the best with probability p: with q the fraction of the
  n samples within X points of the cell's best error, the smallest k with
  1 - (1 - q)^k >= p, i.e. ceil(log(1 - p) / log(1 - q)) (1 when q = 1).
  WITHIN_POINTS and PROBABILITY are the report's X and p.

Only cells with at least MIN_SAMPLES samples get these (one sample has nothing to draw from).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from optbench.report.stats import N_BOOT

MIN_SAMPLES = 2
WITHIN_POINTS = 1.0  # X: points above the cell's best error
PROBABILITY = 0.9  # p: the chance of landing within X points
TABLE_KS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)  # the table's k (those <= n)
DIVERGED_ERROR = 100.0  # a diverged trial's error here: it gave no usable model


def min_weights(n: int, ks: np.ndarray) -> np.ndarray:
    """(n, len(ks)): the probability that the i-th smallest of n values is the minimum of k
    draws with replacement (module docstring), column per k."""
    i = np.arange(1, n + 1)[:, None]
    ks = np.asarray(ks, dtype=float)[None, :]
    return ((n - i + 1) / n) ** ks - ((n - i) / n) ** ks


def expected_best(errors: np.ndarray, ks) -> np.ndarray:
    """E_k for each k of `ks`: the expected minimum of k draws with replacement from
    `errors`, over its last axis ((..., n) -> (..., len(ks)): a bootstrap's resamples at once)."""
    errors = np.sort(np.asarray(errors, dtype=float))
    return errors @ min_weights(errors.shape[-1], np.asarray(ks))


def expected_best_band(
    errors: np.ndarray, ks, n_boot: int = N_BOOT, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The 2.5 and 97.5 percentiles of E_k over `n_boot` bootstrap resamples of `errors`."""
    errors = np.asarray(errors, dtype=float)
    rng = np.random.default_rng(seed)
    resamples = np.sort(rng.choice(errors, size=(n_boot, errors.size), replace=True), axis=1)
    values = resamples @ min_weights(errors.size, np.asarray(ks))
    low, high = np.percentile(values, [2.5, 97.5], axis=0)
    return low, high


def samples_within(
    errors: np.ndarray, points: float = WITHIN_POINTS, probability: float = PROBABILITY
) -> int:
    """The smallest k with P(the best of k draws is within `points` of the best) >= p."""
    errors = np.asarray(errors, dtype=float)
    q = float(np.mean(errors <= errors.min() + points))
    if q >= 1.0:
        return 1
    return max(1, math.ceil(math.log(1.0 - probability) / math.log(1.0 - q)))


def sample_errors(results: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, sample) of result rows (frames.with_errors): model, optimizer,
    epochs, sample and `error`, its seeds' mean (a diverged trial's: DIVERGED_ERROR)."""
    rows = results.assign(error=results["error"].clip(upper=DIVERGED_ERROR))
    keys = ["model", "optimizer", "epochs", "sample"]
    return rows.groupby(keys, sort=False, as_index=False)["error"].mean()


def tunability_curves(results: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0) -> pd.DataFrame:
    """One row per cell with MIN_SAMPLES or more samples and k = 1 .. n: model, optimizer,
    epochs, n, k, expected_best, low, high (the band)."""
    rows = []
    for (model, optimizer, epochs), cell in sample_errors(results).groupby(
        ["model", "optimizer", "epochs"], sort=False
    ):
        errors = cell["error"].to_numpy(float)
        if errors.size < MIN_SAMPLES:
            continue
        ks = np.arange(1, errors.size + 1)
        low, high = expected_best_band(errors, ks, n_boot, seed)
        for k, value, lo, hi in zip(ks, expected_best(errors, ks), low, high, strict=True):
            rows.append((model, optimizer, int(epochs), errors.size, int(k), value, lo, hi))
    columns = ["model", "optimizer", "epochs", "n", "k", "expected_best", "low", "high"]
    return pd.DataFrame(rows, columns=columns)


def tunability_table(results: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0) -> pd.DataFrame:
    """One row per cell with MIN_SAMPLES or more samples: model, optimizer, epochs, n, best,
    E_k (with its band, "E_k [low, high]" as numbers in columns e<k>, e<k>_low, e<k>_high) for
    each k of TABLE_KS up to n, and `samples_within` (X = WITHIN_POINTS, p = PROBABILITY)."""
    curves = tunability_curves(results, n_boot, seed)
    errors = sample_errors(results)
    rows = []
    for (model, optimizer, epochs), cell in curves.groupby(
        ["model", "optimizer", "epochs"], sort=False
    ):
        own = errors[
            (errors["model"] == model)
            & (errors["optimizer"] == optimizer)
            & (errors["epochs"] == epochs)
        ]["error"].to_numpy(float)
        row = {"model": model, "optimizer": optimizer, "epochs": int(epochs)}
        row |= {"n": int(own.size), "best": float(own.min())}
        for k in TABLE_KS:
            at = cell[cell["k"] == k]
            if not at.empty:
                row[f"e{k}"] = float(at["expected_best"].iloc[0])
                row[f"e{k}_low"], row[f"e{k}_high"] = (
                    float(at["low"].iloc[0]),
                    float(at["high"].iloc[0]),
                )
        row["samples_within"] = samples_within(own)
        rows.append(row)
    return pd.DataFrame(rows)


def tunability_records(results: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """summary.json's `tunability`: X, p and the table's rows (NaN-free)."""
    table = tunability_table(results, n_boot, seed)
    rows = [{k: v for k, v in row.items() if not pd.isna(v)} for row in table.to_dict("records")]
    return {"within_points": WITHIN_POINTS, "probability": PROBABILITY, "cells": rows}


def page_table(table: pd.DataFrame) -> pd.DataFrame:
    """`tunability_table` as the page shows it: each E_k as "value [low, high]" (%)."""
    shown = table[["model", "optimizer", "epochs", "n", "best"]].copy()
    shown["best"] = shown["best"].map(lambda v: f"{v:.2f}")
    for k in TABLE_KS:
        if f"e{k}" in table:
            shown[f"k = {k}"] = [
                "" if pd.isna(v) else f"{v:.2f} [{lo:.2f}, {hi:.2f}]"
                for v, lo, hi in zip(
                    table[f"e{k}"], table[f"e{k}_low"], table[f"e{k}_high"], strict=True
                )
            ]
    shown[f"samples within {WITHIN_POINTS:g} pt (p {PROBABILITY:g})"] = table["samples_within"]
    return shown

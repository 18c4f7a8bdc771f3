"""The summary statistics of one study (summary.json): per cell counts, best and median error,
fraction within x points and EDF area, and whether the best error is near chance level; between
the models of each panel, a KS test and a bootstrap CI of the difference in fraction within 4
points, and the sample size that would show that difference (bootstrap power, `advice_line`).
report/summary_lines.py puts them into words (the terminal's table, the evidence lines).

Near chance: a cell whose best error is within NEAR_CHANCE_POINTS of the error of guessing,
100 (1 - 1/classes). Its trials barely learned, so its EDF is steep for a reason that is not
stability: the report says so wherever it shows the cell.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from optbench.decision import frames, stats
from optbench.decision.edf import AUC_MAX_POINTS, dtop1, edf_auc, frac_within
from optbench.decision.stats import N_BOOT, frac_within_diff, ks_test
from optbench.provenance import mixed_code_warning

MAX_TRIALS = 256  # the power search's largest cell for the comparisons (trials per model)
MAX_SAMPLES = 128  # the power search's largest (lr, wd) sample count: twice the paper's 64


@dataclass(frozen=True)
class Options:
    """How the statistics are computed: bootstrap resamples and the seed they derive from, and
    which 95% band the EDF figures shade (drawing_samples.EDF_BANDS; nothing in summary.json)."""

    metric: str = "final_error"
    n_boot: int = N_BOOT
    seed: int = 0
    band: str = "simultaneous"

    def rng_seed(self, *key: object) -> list[int]:
        """A seed per cell or pair: stable across runs and independent of table order."""
        return [self.seed, zlib.crc32(repr(key).encode())]


NEAR_CHANCE_POINTS = 5.0


def chance_error(num_classes: int) -> float:
    """Top-1 error (%) of guessing uniformly among `num_classes` classes."""
    return 100.0 * (1.0 - 1.0 / num_classes)


def near_chance(best_error: float | None, num_classes: int | None) -> bool | None:
    """True if `best_error` is within NEAR_CHANCE_POINTS of chance; None when unknown."""
    if num_classes is None or best_error is None or not np.isfinite(best_error):
        return None
    return bool(best_error >= chance_error(num_classes) - NEAR_CHANCE_POINTS)


def _json_float(value: float) -> float | None:
    return None if value is None or not np.isfinite(value) else float(value)


def summarize(
    study: str,
    trials: pd.DataFrame,
    options: Options = Options(),
    num_classes: int | None = None,
) -> dict[str, Any]:
    """The summary.json content: per cell counts, best/median error, frac_within, EDF area and
    near_chance (null without `num_classes`); between the models of each (optimizer, epochs), a
    KS test and a bootstrap CI of the difference in frac_within 4."""
    results = frames.with_errors(trials, options.metric)
    planned = trials.groupby(frames.CELL_KEYS, sort=False).size()
    sampled = frames.sampled_cells(results)
    cells = []
    for (model, optimizer, epochs), n_planned in planned.items():
        cell = results[
            (results["model"] == model)
            & (results["optimizer"] == optimizer)
            & (results["epochs"] == epochs)
        ]
        errors = cell["error"].to_numpy()
        finite = errors[np.isfinite(errors)]
        dtop = dtop1(errors)
        best = _json_float(finite.min()) if finite.size else None
        # an EDF over (lr, wd) needs sampled pairs: at fixed (lr, wd) dtop-1 is seed noise only
        edf_cell = (model, optimizer, epochs) in sampled
        cells.append(
            {
                "model": model,
                "optimizer": optimizer,
                "epochs": int(epochs),
                "n": int(len(cell)),
                "n_diverged": int((cell["status"] == "diverged").sum()),
                "best_error": best,
                "median_error": _json_float(np.median(finite)) if finite.size else None,
                "frac_within": frac_within(dtop) if edf_cell else None,
                "n_finished": int((cell["status"] == "finished").sum()),
                "n_planned": int(n_planned),
                f"auc_{int(AUC_MAX_POINTS)}": edf_auc(dtop) if edf_cell else None,
                "near_chance": near_chance(best, num_classes),
                "dkw_halfwidth": stats.dkw_halfwidth(len(cell)) if len(cell) else None,
            }
        )
    n_results = int(len(results))
    return {
        "study": study,
        "cells": cells,
        "metric": options.metric,
        "n_results": n_results,
        "n_planned": int(len(trials)),
        "partial": n_results < len(trials),
        "status_counts": {k: int(v) for k, v in trials["status"].value_counts().items()},
        "chance_error": chance_error(num_classes) if num_classes else None,
        "comparisons": _comparisons(results, options),
        "code": code_summary(results),
    }


def code_summary(results: pd.DataFrame) -> dict[str, Any]:
    """Which code made the results (optbench.provenance): the distinct versions, commits and
    code fingerprints of the result rows (results written before these were recorded count as
    none), and the warning line when a cell mixes fingerprints (else None)."""

    def distinct(column: str) -> list[str]:
        values = results[column] if column in results else pd.Series(dtype=object)
        return sorted({v for v in values if isinstance(v, str)})

    pairs = (
        zip(results["cell_id"], results["code_fingerprint"], strict=True)
        if {
            "cell_id",
            "code_fingerprint",
        }
        <= set(results.columns)
        else ()
    )
    return {
        "versions": distinct("version"),
        "commits": distinct("commit"),
        "code_fingerprints": distinct("code_fingerprint"),
        "warning": mixed_code_warning(pairs),
    }


def _comparisons(results: pd.DataFrame, options: Options) -> list[dict[str, Any]]:
    """KS test and frac_within 4 difference between the models of each panel whose cells
    sample (lr, wd) (frames.sampled_cells: an EDF of a fixed pair's seeds is no lr/wd EDF);
    the difference's interval and power resample as claim (a) does (`_compared`)."""
    rows = []
    sampled = frames.sampled_cells(results)
    for (optimizer, epochs), panel in frames.panels(results):
        cells = {
            m: g for m, g in panel.groupby("model", sort=False) if (m, optimizer, epochs) in sampled
        }
        for model_a, model_b in combinations(cells, 2):
            errors_a, errors_b = (cells[m]["error"].to_numpy() for m in (model_a, model_b))
            ks_stat, ks_p = ks_test(dtop1(errors_a), dtop1(errors_b))
            units, sizes, a, b = _compared(cells[model_a], cells[model_b])
            paired, n_max = len(sizes) == 1, MAX_TRIALS if units == "trials" else MAX_SAMPLES
            diff = frac_within_diff(
                a,
                b,
                points=4.0,
                paired=paired,
                n_boot=options.n_boot,
                seed=options.rng_seed(optimizer, epochs, model_a, model_b),
            )
            power = stats.power(
                stats.within_diff(a, b, 4.0, paired),
                sizes,
                n_max,
                discrete=True,
                seed=options.rng_seed("power", optimizer, epochs, model_a, model_b),
            )
            n_now = min(sizes)
            rows.append(
                {
                    "optimizer": optimizer,
                    "epochs": epochs,
                    "model_a": model_a,
                    "model_b": model_b,
                    "design": "paired" if paired else "unpaired",
                    "ks_statistic": ks_stat,
                    "ks_pvalue": ks_p,
                    "frac_within_4_diff": diff.estimate,
                    "frac_within_4_diff_ci": [diff.low, diff.high],
                    "unit": units,
                    "n_now": n_now,
                    "power_now": power.power[0] if power.power else None,
                    "n_needed": power.needed,
                    "advice": advice_line(
                        power, diff.low > 0 or diff.high < 0, n_now, units, n_max
                    ),
                }
            )
    return rows


def _compared(cell_a: pd.DataFrame, cell_b: pd.DataFrame):
    """What a comparison of two cells resamples: (unit, group sizes, a, b). Where both cells
    trained the same (lr, wd) pairs with the same seeds (one box), the (lr, wd) samples
    together, each with its seeds ("samples", (n,), samples x seeds matrices); otherwise each
    cell's trials on its own ("trials", (n_a, n_b), the error vectors)."""
    if {"sample", "seed"} <= set(cell_a.columns) & set(cell_b.columns):
        ids_a, m_a = frames.sample_matrix(cell_a, np.inf)
        ids_b, m_b = frames.sample_matrix(cell_b, np.inf)
        same_seeds = set(cell_a["seed"]) == set(cell_b["seed"])
        if (
            same_seeds
            and np.array_equal(ids_a, ids_b)
            and frames.same_pairs([cell_a, cell_b], ids_a)
        ):
            return "samples", (ids_a.size,), m_a, m_b
    a, b = cell_a["error"].to_numpy(), cell_b["error"].to_numpy()
    return "trials", (a.size, b.size), a, b


def _pct(p: float) -> str:
    """A probability in whole percent, rounded down (79.5% is not yet 80%)."""
    return f"{int(p * 100 + 1e-9)}%"


def advice_line(power: stats.Power, shown: bool, n_now: int, unit: str, n_max: int) -> str:
    """The evidence of one statistic in one line: `shown` (its interval excludes 0) with n_now
    units, and from its bootstrap power how many units would show it."""
    what = "shown" if power.direction > 0 else "interval below 0"
    if not power.sizes:
        return f"{what if shown else 'not shown'} with {n_now} {unit} (power not searched past {n_max} {unit})"
    if shown:
        line = f"{what} with {n_now} {unit}; a new study of that size: {_pct(power.power[0])}"
        if power.needed is not None and power.needed > n_now:
            line += f", about {power.needed} {unit} for {_pct(stats.POWER_TARGET)}"
        return line + " (if the effect is as estimated)"
    if power.direction == 0:  # an estimate of 0, or a chain whose steps point both ways
        return (
            f"not shown with {n_now} {unit}; its estimate is 0 or its steps point both ways: "
            "no study size would show it, if the effects are as estimated"
        )
    if power.needed is None:
        size = "~0" if power.power[-1] < 0.2 else "small"
        return (
            f"not shown with {n_now} {unit}; no study of up to {n_max} {unit} would show it "
            f"({_pct(power.power[-1])} at {power.sizes[-1]}): the estimated effect is {size} "
            "against its spread"
        )
    verb = "show it" if power.direction > 0 else "put its interval below 0"
    return (
        f"not shown with {n_now} {unit}; a new study of that size: {_pct(power.power[0])}, "
        f"about {power.needed} {unit} would {verb} (if the effect is as estimated)"
    )

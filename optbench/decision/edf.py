"""Error distribution function (EDF) math for one cell's trials: pure numpy, no pandas.

A trial's error is top-1 error in percent. A trial that gave no error (diverged, or finished
without one) has error +inf: it counts in n but is never within any x. dtop-1 is a trial's
error minus the best error of its cell, and the EDF is F(x) = fraction of trials with value <= x.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

FRAC_WITHIN_POINTS: tuple[int, ...] = (1, 2, 4, 8)
AUC_MAX_POINTS = 10.0


def trial_errors(statuses: Sequence[str], errors: Sequence[float]) -> np.ndarray:
    """Errors of finished trials as given, +inf for diverged trials and for missing errors."""
    err = np.asarray(errors, dtype=float)
    finished = np.asarray(statuses) == "finished"
    return np.where(finished & np.isfinite(err), err, np.inf)


def dtop1(errors: np.ndarray) -> np.ndarray:
    """error - best error; +inf stays +inf (and everything is +inf when nothing finished)."""
    errors = np.asarray(errors, dtype=float)
    if errors.size == 0 or not np.isfinite(errors).any():
        return np.full(errors.shape, np.inf)
    return errors - errors[np.isfinite(errors)].min()


def edf(values: np.ndarray, xs: Sequence[float] | np.ndarray) -> np.ndarray:
    """F(x) = fraction of `values` <= x for each x (NaN for every x when there are no values)."""
    values = np.sort(np.asarray(values, dtype=float))
    xs = np.asarray(xs, dtype=float)
    if values.size == 0:
        return np.full(xs.shape, np.nan)
    return np.searchsorted(values, xs, side="right") / values.size


def frac_within(
    dtop: np.ndarray, points: Sequence[int] = FRAC_WITHIN_POINTS
) -> dict[str, float | None]:
    """{"k": fraction of trials with dtop-1 <= k}; None when the cell has no trials."""
    fractions = edf(dtop, np.asarray(points, dtype=float))
    return {
        str(k): (None if np.isnan(f) else float(f)) for k, f in zip(points, fractions, strict=True)
    }


def edf_auc(dtop: np.ndarray, x_max: float = AUC_MAX_POINTS) -> float | None:
    """Area under F on [0, x_max], divided by x_max: 1 when every trial hits the best, 0 when
    none is within x_max. For a step EDF it is the mean of max(0, 1 - dtop/x_max)."""
    dtop = np.asarray(dtop, dtype=float)
    if dtop.size == 0:
        return None
    return float(np.clip(1.0 - dtop / x_max, 0.0, 1.0).mean())

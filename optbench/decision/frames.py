"""Tables from a trials table: its result rows, its panels (one per optimizer and schedule
length), the error of each (model, optimizer, epochs) cell, training-length stability
(Fig 2), optimizer stability (Fig 3), the peak table (Table 2) and the trials whose curves are
drawn.

A cell's error (defined here once; the claims table uses it too) is the study analogue of the
paper's single well-tuned run: each sampled (lr, wd) pair's error is the mean over its training
seeds, a diverged seed counted as DIVERGED_ERROR; the cell's error is the lowest such mean over
its pairs that have at least one finished seed (NaN when none has). With one seed per pair it is
the best finished trial. Functions keep the row order they are given.

A trial's error is one of three (docs/reports.md): `final_error` and `best_error` as the trial
reported them, or `pycls_best` (pycls's sweep rule, `pycls_best` below).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from optbench.decision.edf import trial_errors
from optbench.spec.claim_kinds import MIN_EDF_SAMPLES

RESULT_STATUSES: tuple[str, ...] = ("finished", "diverged")
CELL_KEYS: list[str] = ["model", "optimizer", "epochs"]
DIVERGED_ERROR = 100.0  # a diverged seed in a seed mean: a finite worst case, so the mean exists


PYCLS_BEST = "pycls_best"


def pycls_best(metrics: list[dict] | None) -> float:
    """pycls's sweep error (branch vitconfigs, `pycls/sweep/analysis.py`: metric "error" =
    `test_ema_epoch.min_top1_err` reduced with `min`): the lowest top-1 error of the EMA
    weights over the epochs evaluated, from a trial's per-epoch metrics lines (`ema_top1`; a
    recipe without an EMA: `raw_top1`). A diverged trial's lines stop before the epoch it
    diverged in, so it keeps its best error from before, as in pycls, where training goes on
    through NaN losses and the minimum keeps the earlier epochs. NaN without an evaluated
    epoch."""
    lines = metrics if isinstance(metrics, list) else []
    for key in ("ema_top1", "raw_top1"):
        values = [m[key] for m in lines if isinstance(m, dict) and m.get(key) is not None]
        if values:
            return float(min(values))
    return float("nan")


def with_pycls_best(trials: pd.DataFrame) -> pd.DataFrame:
    """`trials` with a PYCLS_BEST column, from its `metrics` column (NaN without one)."""
    if PYCLS_BEST in trials.columns:
        return trials
    lines = trials["metrics"] if "metrics" in trials.columns else [None] * len(trials)
    return trials.assign(**{PYCLS_BEST: [pycls_best(m) for m in lines]})


def with_errors(trials: pd.DataFrame, metric: str = "final_error") -> pd.DataFrame:
    """The result rows (finished or diverged) with `error` = `metric`, +inf when there is none.
    With PYCLS_BEST a diverged trial has the error it reached before diverging."""
    results = trials[trials["status"].isin(RESULT_STATUSES)].copy()
    if metric == PYCLS_BEST:
        results = with_pycls_best(results)
        error = results[metric].to_numpy(float)
        results["error"] = np.where(np.isfinite(error), error, np.inf)
        return results
    results["error"] = trial_errors(results["status"].to_numpy(), results[metric].to_numpy())
    return results


def panels(results: pd.DataFrame) -> list[tuple[tuple[str, int], pd.DataFrame]]:
    """((optimizer, epochs), rows) for each panel of the figures, in the rows' order."""
    return [
        ((o, int(e)), group)
        for (o, e), group in results.groupby(["optimizer", "epochs"], sort=False)
    ]


def best_by_cell(results: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: model, optimizer, epochs, best_error (the cell's error, module
    docstring; NaN when nothing finished), and of the pair it comes from: seeds (how many),
    seed_low and seed_high (its lowest and highest seed error, the spread the figures draw).
    Rows without `sample` / `seed` columns are each their own pair."""
    finished = np.isfinite(results["error"])
    frame = pd.DataFrame(
        {
            **{k: results[k] for k in CELL_KEYS},
            "sample": results["sample"] if "sample" in results else np.arange(len(results)),
            "error": results["error"].where(finished, DIVERGED_ERROR),
            "finished": finished,
        }
    )
    pairs = frame.groupby([*CELL_KEYS, "sample"], sort=False).agg(
        mean=("error", "mean"),
        seeds=("error", "size"),
        seed_low=("error", "min"),
        seed_high=("error", "max"),
        finished=("finished", "any"),
    )
    rows = []
    for cell, group in pairs.groupby(level=CELL_KEYS, sort=False):
        usable = group[group["finished"]]
        best = usable.loc[usable["mean"].idxmin()] if len(usable) else None
        rows.append(
            {
                **dict(zip(CELL_KEYS, cell, strict=True)),
                "best_error": np.nan if best is None else float(best["mean"]),
                "seeds": 0 if best is None else int(best["seeds"]),
                "seed_low": np.nan if best is None else float(best["seed_low"]),
                "seed_high": np.nan if best is None else float(best["seed_high"]),
            }
        )
    return pd.DataFrame(rows, columns=[*CELL_KEYS, "best_error", "seeds", "seed_low", "seed_high"])


def length_stability(best: pd.DataFrame) -> pd.DataFrame:
    """dtop-1 of each schedule length against the longest finished one, per model and optimizer.

    Columns: model, optimizer, epochs, error, ref_epochs, dtop1, dtop1_low and dtop1_high (the
    length's seed spread against the reference's error). Empty when no (model, optimizer) has
    two schedule lengths with a finished result.
    """
    rows = []
    for (model, optimizer), group in best.groupby(["model", "optimizer"], sort=False):
        done = group.dropna(subset=["best_error"]).sort_values("epochs")
        if len(done) < 2:
            continue
        ref = done.iloc[-1]
        for _, row in done.iterrows():
            rows.append(
                {
                    "model": model,
                    "optimizer": optimizer,
                    "epochs": int(row["epochs"]),
                    "error": float(row["best_error"]),
                    "ref_epochs": int(ref["epochs"]),
                    "dtop1": float(row["best_error"] - ref["best_error"]),
                    "dtop1_low": float(row["seed_low"] - ref["best_error"]),
                    "dtop1_high": float(row["seed_high"] - ref["best_error"]),
                }
            )
    columns = ["model", "optimizer", "epochs", "error", "ref_epochs", "dtop1"]
    columns += ["dtop1_low", "dtop1_high"]
    return pd.DataFrame(rows, columns=columns)


def optimizer_stability(best: pd.DataFrame) -> pd.DataFrame:
    """Error per model, optimizer and schedule length, with the paper's rule for diverged cells:
    a cell without a finished trial takes the best result of a shorter schedule (same model and
    optimizer) and is marked `substituted`. Columns: model, optimizer, epochs, error, low and
    high (its seed spread), source_epochs, substituted. Cells with nothing to show (no shorter
    result either) are dropped.
    """
    rows = []
    for (model, optimizer), group in best.groupby(["model", "optimizer"], sort=False):
        group = group.sort_values("epochs")
        for _, row in group.iterrows():
            pick = row
            if np.isnan(row["best_error"]):
                shorter = group[(group["epochs"] < row["epochs"])].dropna(subset=["best_error"])
                if shorter.empty:
                    continue
                pick = shorter.loc[shorter["best_error"].idxmin()]
            rows.append(
                {
                    "model": model,
                    "optimizer": optimizer,
                    "epochs": int(row["epochs"]),
                    "error": float(pick["best_error"]),
                    "low": float(pick["seed_low"]),
                    "high": float(pick["seed_high"]),
                    "source_epochs": int(pick["epochs"]),
                    "substituted": bool(pick["epochs"] != row["epochs"]),
                }
            )
    columns = ["model", "optimizer", "epochs", "error", "low", "high", "source_epochs"]
    columns += ["substituted"]
    return pd.DataFrame(rows, columns=columns)


def optimizer_gaps(stability: pd.DataFrame) -> pd.DataFrame:
    """SGD error minus AdamW error per model and schedule length (both must be present)."""
    wide = stability.pivot_table(
        index=["model", "epochs"], columns="optimizer", values="error", sort=False
    )
    if not {"adamw", "sgd"} <= set(wide.columns):
        return pd.DataFrame(columns=["model", "epochs", "adamw", "sgd", "gap"])
    wide = wide.dropna(subset=["adamw", "sgd"]).reset_index().rename_axis(columns=None)
    wide["gap"] = wide["sgd"] - wide["adamw"]
    return wide[["model", "epochs", "adamw", "sgd", "gap"]]


def peak_table(best: pd.DataFrame) -> pd.DataFrame:
    """Table 2: best error, rows (model, optimizer), one column per schedule length."""
    table = best.pivot_table(
        index=["model", "optimizer"], columns="epochs", values="best_error", sort=False
    )
    return table.reindex(columns=sorted(table.columns))


def curve_picks(results: pd.DataFrame) -> pd.DataFrame:
    """The best, median and worst finished trial of each cell that recorded per-epoch metrics
    (in its `metrics` column, where there is one), with a `rank` column ("best" | "median" |
    "worst"). The median is the lower median."""
    has_curve = (  # a frame without a metrics column is one of trials with curves
        results["metrics"].map(lambda m: isinstance(m, list) and len(m) > 0)
        if "metrics" in results.columns
        else True
    )
    finished = results[
        (results["status"] == "finished") & has_curve & np.isfinite(results["error"])
    ]
    picks = []
    for _, cell in finished.groupby(CELL_KEYS, sort=False):
        ordered = cell.sort_values("error", kind="stable")
        positions = {"best": 0, "median": (len(ordered) - 1) // 2, "worst": len(ordered) - 1}
        for rank, pos in positions.items():
            picks.append(ordered.iloc[[pos]].assign(rank=rank))
    if not picks:
        return finished.assign(rank=pd.Series(dtype=str))
    return pd.concat(picks, ignore_index=True)


def sampled_cells(results: pd.DataFrame) -> set[tuple]:
    """The cells (model, optimizer, epochs) with at least MIN_EDF_SAMPLES distinct (lr, wd)
    samples among their results: the ones an EDF over (lr, wd) describes. Rows without a
    `sample` column are each their own sample (as in best_by_cell)."""
    cells = results.groupby(CELL_KEYS, sort=False)
    counts = cells["sample"].nunique() if "sample" in results else cells.size()
    return {cell for cell, n in counts.items() if n >= MIN_EDF_SAMPLES}


def seed_table(results: pd.DataFrame) -> pd.DataFrame:
    """Each (lr, wd) pair of the cells with fewer than MIN_EDF_SAMPLES samples, one row: its
    error per seed ("diverged" for a diverged seed), their mean (a diverged seed counted as
    DIVERGED_ERROR, as the cell error) and standard deviation. Empty without sample and seed
    columns (every row its own sample: nothing to show per seed)."""
    if not {"sample", "seed"} <= set(results.columns):
        return pd.DataFrame()
    sampled = sampled_cells(results)
    keep = [tuple(k) not in sampled for k in results[CELL_KEYS].itertuples(index=False)]
    rows = []
    for (*cell, _sample), group in results[keep].groupby([*CELL_KEYS, "sample"], sort=False):
        errors = group["error"].where(np.isfinite(group["error"]), DIVERGED_ERROR)
        seeds = {
            f"seed {int(seed)} (%)": round(float(e), 2) if np.isfinite(e) else "diverged"
            for seed, e in zip(group["seed"], group["error"], strict=True)
        }
        rows.append(
            {
                **dict(zip(CELL_KEYS, cell, strict=True)),
                "lr": group["lr"].iloc[0] if "lr" in group else np.nan,
                "wd": group["wd"].iloc[0] if "wd" in group else np.nan,
                **seeds,
                "mean (%)": round(float(errors.mean()), 2),
                "sd (points)": round(float(errors.std(ddof=1)), 2) if len(errors) > 1 else np.nan,
            }
        )
    return pd.DataFrame(rows)


# --- a cell as a (samples x seeds) array: what the claims and comparisons resample ---------


def seed_frame(results: pd.DataFrame, diverged_as: float) -> pd.DataFrame:
    """One cell's errors as a samples x seeds frame (NaN where a trial has no result);
    diverged trials (error +inf) become `diverged_as`."""
    errors = results["error"].where(np.isfinite(results["error"]), diverged_as)
    return errors.groupby([results["sample"], results["seed"]]).first().unstack("seed")


def sample_matrix(results: pd.DataFrame, diverged_as: float) -> tuple[np.ndarray, np.ndarray]:
    """(sample ids, samples x seeds errors) of one cell; incomplete samples are dropped. Column
    j holds each sample's j-th smallest seed: the same seed in every sample, or under
    search.seed_per_sample each sample's own j-th seed (plan.sampling.sample_seed)."""
    errors = results["error"].where(np.isfinite(results["error"]), diverged_as)
    place = results["seed"]
    if results.groupby("seed")["sample"].nunique().max() == 1:  # no seed in two samples
        place = results.groupby("sample")["seed"].rank(method="dense").astype(int)
    wide = errors.groupby([results["sample"], place]).first().unstack().dropna()
    return wide.index.to_numpy(), wide.to_numpy(float)


def pooled(matrix: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """The trials of the picked samples (..., n) of a (samples x seeds) matrix, as (..., n*seeds)."""
    return matrix[samples].reshape(*samples.shape[:-1], -1)


def same_pairs(cells: list[pd.DataFrame], samples: np.ndarray) -> bool:
    """Whether every cell trained the same (lr, wd) at each of `samples`: one box for all (the
    design "paired": sample i of every cell is resampled together), not a box per model."""
    if not all({"lr", "wd"} <= set(cell.columns) for cell in cells):
        return False
    pairs = [
        cell.groupby("sample")[["lr", "wd"]].first().loc[samples].to_numpy(float) for cell in cells
    ]
    return all(np.allclose(pairs[0], other, rtol=1e-12, atol=0.0) for other in pairs[1:])

"""The sequential rule (optbench.analysis.sequential) on real replicate studies: each replicate
was trained once to its largest size, and sampling keeps the first n pairs (seeds are added in
order), so look k of a sequential study is the replicate's prefix of n_k samples (seeds). For
each design this replays every replicate's looks exactly as the driver makes them (the report's
claims_table at the look's boundary) and stops at the first decision.

Definitions, per design:
- estimand at n: the mean over replicates of the fixed-size estimate at n (the statistic of (a)
  depends on n through each cell's best, so no single true value serves every size).
- decided: the share of replicates that stopped with holds, opposite or equivalent; wrong: the
  share whose decision contradicts the estimand at its stopping size (holds or opposite on the
  estimand's other side, or equivalent where |estimand| >= margin; for a null design any holds
  or opposite), with its Monte-Carlo standard error sqrt(p (1 - p) / R).
- coverage: the share of replicates whose repeated confidence interval at the stopping look
  covers the estimand at that size.
- used: the mean and 90th percentile of the samples (seeds) each replicate trained per cell.
- fixed designs: the share of replicates whose fixed-size 95% interval (the report's) shows the
  claim on the estimand's side at n, beside n (their cost).
"""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pandas as pd

from optbench.analysis import claims, sequential, tables
from optbench.analysis.summary import Options

OPTIONS = Options()


def _claim_row(frame: pd.DataFrame, claim: str, boundary: float | None) -> dict:
    table = claims.claims_table(tables.with_errors(frame), OPTIONS, "replicate", boundary)
    rows = table[table["claim"] == claim]
    assert len(rows) == 1, rows
    return rows.iloc[0].to_dict()


def _prefix(frame: pd.DataFrame, unit: str, n: int) -> pd.DataFrame:
    if unit == "samples":
        return frame[frame["sample"] < n]
    return frame[frame["seed"].isin(sorted(set(frame["seed"]))[:n])]


def looks_of(replicates: dict, claim: str, unit: str, sizes: list[int]) -> dict:
    """(estimate, se, df) of every replicate at every size: what each look reads (a look's
    interval is estimate +- critical(c, df) se, so one pass serves every boundary)."""
    out = {}
    for r, frame in replicates.items():
        for n in sizes:
            row = _claim_row(_prefix(frame, unit, n), claim, boundary=1.0)
            df = None if unit == "samples" else n - 1
            out[r, n] = (float(row["estimate"]), float(row["se"]), df, row["design"])
    return out


def replay(looks: dict, r, design: sequential.Design) -> dict:
    """One replicate's sequential study: its looks until the first decision."""
    bounds = design.boundaries()
    for k, (n, c) in enumerate(zip(design.looks, bounds, strict=True)):
        estimate, se, df, _ = looks[r, n]
        half = sequential.critical(c, df) * se
        low, high = estimate - half, estimate + half
        last = k == len(design.looks) - 1
        found = sequential.outcome(low, high, design.margin, last)
        if found != "continue":
            return {"outcome": found, "n": n, "estimate": estimate, "low": low, "high": high}
    raise AssertionError("the last look always decides or is undecided")


def _wrong(outcome: str, estimand: float, margin: float | None, null: bool) -> bool:
    if null:
        return outcome in ("holds", "opposite")
    if outcome == "holds":
        return estimand <= 0
    if outcome == "opposite":
        return estimand >= 0
    if outcome == "equivalent":
        return margin is None or abs(estimand) >= margin
    return False


def evaluate(
    replicates: dict, claim: str, unit: str, design: sequential.Design, *, null: bool = False
) -> dict:
    """The design's figures over the replicates (module docstring)."""
    looks = looks_of(replicates, claim, unit, list(design.looks))
    estimand = {n: float(np.mean([looks[r, n][0] for r in replicates])) for n in design.looks}
    runs = [replay(looks, r, design) for r in replicates]
    R = len(runs)
    outcomes = [run["outcome"] for run in runs]
    wrong = [_wrong(run["outcome"], estimand[run["n"]], design.margin, null) for run in runs]
    used = np.array([run["n"] for run in runs], dtype=float)
    decided = float(np.mean([o in sequential.DECIDED for o in outcomes]))
    share_wrong = float(np.mean(wrong))
    return {
        "design": asdict(design) | {"boundaries": [round(c, 3) for c in design.boundaries()]},
        "replicates": R,
        "pairing": sorted({looks[r, design.looks[0]][3] for r in replicates}),
        "estimand": {n: round(v, 4) for n, v in estimand.items()},
        "outcomes": {o: outcomes.count(o) for o in sequential.OUTCOMES if o in outcomes},
        "decided": round(decided, 3),
        "wrong": round(share_wrong, 3),
        "wrong_mc_se": round(math.sqrt(share_wrong * (1 - share_wrong) / R), 3),
        "coverage": round(
            float(np.mean([run["low"] <= estimand[run["n"]] <= run["high"] for run in runs])),
            3,
        ),
        f"mean_{unit}": round(float(used.mean()), 2),
        f"p90_{unit}": float(np.percentile(used, 90, method="inverted_cdf")),
    }


def fixed_designs(replicates: dict, claim: str, unit: str, sizes: list[int]) -> dict:
    """The share of replicates whose fixed-size 95% interval (the report's) shows the claim
    on the side of the estimand at n, per n (its cost: n per cell)."""
    out = {}
    for n in sizes:
        rows = [_claim_row(_prefix(f, unit, n), claim, None) for f in replicates.values()]
        estimand = np.mean([row["estimate"] for row in rows])
        side = "holds" if estimand > 0 else "opposite"
        out[n] = {
            "estimand": round(float(estimand), 4),
            "shown": round(float(np.mean([row["verdict"] == side for row in rows])), 3),
            "coverage": round(
                float(np.mean([row["low"] <= estimand <= row["high"] for row in rows])), 3
            ),
        }
    return out


def by_replicate(trials: pd.DataFrame) -> dict:
    return {int(r): frame for r, frame in trials.groupby("replicate")}


def swapped_nulls(trials: pd.DataFrame, models: tuple[str, str], shifts: int) -> dict:
    """Exact nulls from real trainings: replicate r's cell of one model against replicate
    (r + shift) mod R's cell of the same model relabelled as the other, for shift 1..`shifts`
    (both the same model, so every estimand is 0 by symmetry; different sampler seeds, so
    unpaired). Each replicate's cell appears 2 x `shifts` times: the studies are not
    independent, so their share is read with that in mind."""
    p, c = models
    reps = sorted(set(trials["replicate"]))
    out = {}
    for model in models:
        cells = {r: trials[(trials["replicate"] == r) & (trials["model"] == model)] for r in reps}
        for shift in range(1, shifts + 1):
            for i, a in enumerate(reps):
                b = reps[(i + shift) % len(reps)]
                out[f"{model}:{a}-{b}"] = pd.concat(
                    [cells[a].assign(model=p), cells[b].assign(model=c)]
                )
    return out

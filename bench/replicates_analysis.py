"""The replicate bench's analysis (bench/replicates.py analyse DIR): how the report's claims
(optbench.decision.claims, exactly as `optbench report` computes them) and some alternative
interval methods behave over independent replicate studies of real trainings.

Definitions, per claim and study size:
- estimand: the mean of the replicates' estimates (the statistic's expectation for a study of
  that design and size; the statistic of (a) depends on the size through the cell's best).
- coverage: the share of replicate 95% intervals that contain the estimand (goal >= 0.90; with
  R = 20 replicates a true 95% interval covers in 17 to 20 of them in 95% of benches).
- pooled verdict: "holds" when the t interval over the R estimates lies above 0, "opposite"
  below, else "not shown"; agreement: the share of replicates with that verdict.
- advice gap: |mean predicted power of a study of that size - observed share of replicates
  whose verdict shows the effect on the estimand's side| (goal <= 0.10): "holds" for a positive
  estimand, "opposite" for a negative one (at 4 epochs ViT_P's trials sit close together far
  from trained, so its dtop-1 EDF is the steeper one). A replicate predicts its power for its
  own estimate's side; one whose estimate lies on the other side predicts 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from optbench.decision import claims, frames, stats
from optbench.decision.summary import Options

OPTIONS = Options()  # the report's defaults: 1000 resamples, seed 0
MIN_REPLICATES = 20  # the R; below it a share of intervals says too little
MODELS = ("vit_p_w64_16px", "vit_c_w64_16px")  # ViT_P, ViT_C: bench/replicates.py's MODELS


def _claim_row(frame: pd.DataFrame, claim: str) -> dict:
    table = claims.claims_table(frames.with_errors(frame), OPTIONS, "replicate")
    rows = table[table["claim"] == claim]
    assert len(rows) == 1, rows
    return rows.iloc[0].to_dict()


def _matrix(frame: pd.DataFrame, model: str) -> np.ndarray:
    cell = frame[frame["model"] == model].sort_values("sample")
    return np.where(cell["status"] == "finished", cell["final_error"], np.inf).astype(float)


def _edf_candidates(frame: pd.DataFrame, seed: list[int]) -> dict[str, tuple[float, float]]:
    """Claim (a)'s interval by other methods than the report's, on one replicate."""
    p, c = (_matrix(frame, model) for model in MODELS)
    n = p.size

    def paired(idx):
        return claims._auc(c[idx]) - claims._auc(p[idx])

    def unpaired(idx_p, idx_c):
        return claims._auc(c[idx_c]) - claims._auc(p[idx_p])

    out = {}
    for name, statistic, sizes in (("paired", paired, (n,)), ("unpaired", unpaired, (n, n))):
        found = stats.interval(statistic, sizes, seed=seed)
        out[f"bca_{name}"] = (found.low, found.high)
        found = stats.interval(statistic, sizes, seed=seed, discrete=True)
        out[f"percentile_{name}"] = (found.low, found.high)
    # m-out-of-n bootstrap (m = n^(2/3)): the spread of m-resamples scaled by sqrt(m / n)
    m = max(2, round(n ** (2 / 3)))
    rng = np.random.default_rng(seed)
    estimate = float(unpaired(np.arange(n), np.arange(n)))
    reps = unpaired(rng.integers(0, n, (1000, m)), rng.integers(0, n, (1000, m)))
    low_q, high_q = np.percentile(reps - estimate, [2.5, 97.5])
    scale = np.sqrt(m / n)
    out["m_out_of_n_unpaired"] = (estimate - scale * high_q, estimate - scale * low_q)
    return out


def _summary(rows: list[dict], extra: dict[str, list[tuple[float, float]]]) -> dict:
    estimates = np.array([r["estimate"] for r in rows], dtype=float)
    estimand = float(estimates.mean())
    pooled = stats.t_interval(estimates)
    pooled_verdict = claims.verdict(pooled.low, pooled.high)
    verdicts = [r["verdict"] for r in rows]
    tested = [r for r in rows if r["verdict"] != claims.NOT_TESTED]
    out = {
        "replicates": len(rows),
        "estimand": round(estimand, 4),
        "replicate_sd": round(float(estimates.std(ddof=1)), 4),
        "pooled": [round(pooled.low, 4), round(pooled.high, 4), pooled_verdict],
        "verdicts": {v: verdicts.count(v) for v in sorted(set(verdicts))},
        "agreement": round(float(np.mean([v == pooled_verdict for v in verdicts])), 3),
    }
    if tested:
        lows = np.array([r["low"] for r in tested], dtype=float)
        highs = np.array([r["high"] for r in tested], dtype=float)
        out["coverage"] = round(float(np.mean((lows <= estimand) & (estimand <= highs))), 3)
        out["mean_halfwidth"] = round(float(np.mean((highs - lows) / 2)), 4)
        side = 1.0 if estimand > 0 else -1.0
        shown = "holds" if side > 0 else "opposite"
        predicted = [(r["power_now"] or 0.0) if r["estimate"] * side > 0 else 0.0 for r in tested]
        holds = float(np.mean([r["verdict"] == shown for r in rows]))
        out["predicted_power"] = round(float(np.mean(predicted)), 3)
        out["observed_shown"] = round(holds, 3)
        # the observed share's own binomial standard error: the gap is read against it
        out["observed_shown_se"] = round(float(np.sqrt(holds * (1 - holds) / len(rows))), 3)
        out["advice_gap"] = round(abs(float(np.mean(predicted)) - holds), 3)
    out["methods"] = {
        name: {
            "coverage": round(float(np.mean([lo <= estimand <= hi for lo, hi in ivs])), 3),
            "mean_halfwidth": round(float(np.mean([(hi - lo) / 2 for lo, hi in ivs])), 4),
        }
        for name, ivs in extra.items()
    }
    return out


def analyse_a(trials: pd.DataFrame, n: int) -> dict:
    rows, extra = [], {}
    for replicate, frame in trials[trials["sample"] < n].groupby("replicate"):
        rows.append(_claim_row(frame, "a"))
        for name, iv in _edf_candidates(frame, [0, int(replicate), n]).items():
            extra.setdefault(name, []).append(iv)
    return _summary(rows, extra)


def _welch(frame: pd.DataFrame) -> tuple[float, float]:
    """Welch-Satterthwaite t interval of (P_s - P_l) - (C_s - C_l) from the four cells' seeds
    taken as independent samples (the interval the issue compared the bootstrap with)."""
    means, variances, ks = [], [], []
    for model in MODELS:
        for epochs in sorted(set(frame["epochs"])):
            e = frame[(frame["model"] == model) & (frame["epochs"] == epochs)]["final_error"]
            means.append(e.mean())
            variances.append(e.var(ddof=1) / len(e))
            ks.append(len(e))
    signs = np.array([1, -1, -1, 1])
    estimate = float(signs @ np.array(means))
    var = float(np.sum(variances))
    df = var**2 / sum(v**2 / (k - 1) for v, k in zip(variances, ks, strict=True))
    half = float(scipy_stats.t.ppf(0.975, df) * np.sqrt(var))
    return estimate - half, estimate + half


def _seed_bootstrap(frame: pd.DataFrame, seed) -> tuple[float, float]:
    """The report's method before issue 31: BCa over each cell's seeds, resampled on its own."""
    cells = [
        frame[(frame["model"] == m) & (frame["epochs"] == e)]["final_error"].to_numpy(float)
        for m in MODELS
        for e in sorted(set(frame["epochs"]))
    ]

    def statistic(*idx):
        e = [cell[i].mean(axis=-1) for cell, i in zip(cells, idx, strict=True)]
        return (e[0] - e[1]) - (e[2] - e[3])

    found = stats.interval(statistic, tuple(c.size for c in cells), seed=seed)
    return found.low, found.high


def _contrasts(trials: pd.DataFrame) -> np.ndarray:
    """Claim (b)'s contrast of every seed: (P_s - P_l) - (C_s - C_l), seed by seed."""
    wide = trials.pivot_table(index="seed", columns=["model", "epochs"], values="final_error")
    (p, c), (short, long) = MODELS, (min(trials["epochs"]), max(trials["epochs"]))
    return ((wide[(p, short)] - wide[(p, long)]) - (wide[(c, short)] - wide[(c, long)])).to_numpy()


def reference_power(contrasts: np.ndarray, k: int) -> float:
    """The power of a k-seed study from every seed's contrast at once (noncentral t with the
    pooled mean and sd): a steadier figure than the share of R replicates that hold."""
    nc = contrasts.mean() / (contrasts.std(ddof=1) / np.sqrt(k))
    crit = scipy_stats.t.ppf(0.975, k - 1)
    return float(scipy_stats.nct.sf(crit, k - 1, nc) + scipy_stats.nct.cdf(-crit, k - 1, nc))


def analyse_b(trials: pd.DataFrame, seeds_per_study: int) -> dict:
    seeds = sorted(set(trials["seed"]))
    groups = {s: i // seeds_per_study for i, s in enumerate(seeds)}
    trials = trials.assign(group=trials["seed"].map(groups))
    n_groups = len(seeds) // seeds_per_study
    rows, extra = [], {"welch": [], "bootstrap_before_issue_31": []}
    for group, frame in trials[trials["group"] < n_groups].groupby("group"):
        rows.append(_claim_row(frame, "b"))
        if seeds_per_study >= 2:
            extra["welch"].append(_welch(frame))
            extra["bootstrap_before_issue_31"].append(_seed_bootstrap(frame, [0, int(group)]))
    out = _summary(rows, extra)
    if seeds_per_study >= 2:
        out["reference_power"] = round(reference_power(_contrasts(trials), seeds_per_study), 3)
    return out


def analyse(folder: Path) -> dict:
    out: dict = {"bench": "replicates"}
    b_file = folder / "trials_b.csv"
    if b_file.exists():
        b = pd.read_csv(b_file)
        for k in (3, 2):
            out[f"b_{k}_seeds"] = analyse_b(b, k)
    for n in (40, 10):  # each stage's own file: the 40-sample stage may have stopped early
        found = folder / f"trials_a_{n}.csv"
        if found.exists():
            out[f"a_{n}_samples"] = analyse_a(pd.read_csv(found), n)
    parts = [k for k in out if k != "bench"]
    out["replicates"] = {k: out[k]["replicates"] for k in parts}
    # fewer than MIN_REPLICATES replicates are listed, not read as a coverage or a gap
    read = [k for k in parts if out[k]["replicates"] >= MIN_REPLICATES]
    out["coverage"] = {k: out[k].get("coverage") for k in read}
    out["advice_gap"] = {k: out[k].get("advice_gap") for k in read}
    return out

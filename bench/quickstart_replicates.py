"""The quickstart's design on fresh replicates trained as it ships (issue 67 item 9):
`python bench/replicates.py analyse-quickstart DIR` reads DIR/trials_quickstart_24.csv
(bench/replicates.py train-quickstart: ViT_P and ViT_C, AdamW, 20 epochs, a training seed per
(lr, wd) pair, every replicate trained to 24 samples, the last look) and prints one JSON line.

Each replicate's looks are replayed as the driver takes them (bench/sequential_analysis.py's
looks_of and replay; the rule studies/quickstart.yaml ships: looks 6-24, Pocock, alpha 0.05,
margin 0.1, claim (a) paired by sample) to its first decision; at that stop the naive estimate,
the stagewise-ordering median-unbiased estimate and its interval and the bias-adjusted mean
(optbench.decision.stop_estimates.at_stop, from the boundaries the rule applied), beside the
repeated interval.

The estimand is the trained effect at the last look: the mean over the replicates of their
24-sample estimate. Over replicates: the share decided, the wrong decisions (against that
estimand), the mean and 90th percentile of the samples at the stop, the coverage of the estimand
by the repeated and by the ordering interval (and, "_at_stop_size", of the mean over the
replicates of their estimate at the stop's size, as bench/sequential_analysis.py reads coverage),
and each estimate's mean bias against the estimand. Each figure carries a 95% percentile bootstrap interval over replicates: DRAWS
resamples of whole replicates with replacement (seeded), the estimand recomputed in each, so the
interval is the uncertainty over trainings, not over one study's trials. A share where every
replicate agrees gives a bootstrap interval of one point, so each share also carries the exact
binomial (Clopper-Pearson) interval of its count of replicates.

Exact nulls of the same trainings, as sequential_analysis.swapped_nulls builds them: replicate
a's ViT_P cell against replicate b's ViT_P cell relabelled ViT_C, and ViT_C likewise, for
b = a + 1 .. a + shifts (mod R), shifts = min(NULL_SHIFTS, R // 2), each unordered pair of
replicates one study per model (every pair up to R = 11). The two sides drew their pairs with different sampler
seeds, so they share no (lr, wd) pair: claim (a) reads them unpaired (resampled side by side),
where the design itself pairs by sample. Wrong: any decision of a direction. Its Monte-Carlo se
sqrt(p (1 - p) / studies) is a lower bound (each replicate's cell is in 2 x shifts studies);
its bootstrap interval resamples replicates, a study (a, b) weighted by how often both were
drawn (w_a w_b).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sequential_analysis as replays  # noqa: E402
import stop_estimates as estimates_at_stop  # noqa: E402  (bench/stop_estimates.py)

from optbench.decision import sequential  # noqa: E402

TRIALS = "trials_quickstart_24.csv"
DRAWS = 2000  # bootstrap resamples of the replicates
SEED = 0
LEVEL = 0.95
ESTIMATES = ("naive", "median_unbiased", "bias_adjusted")


def complete(trials: pd.DataFrame, last: int) -> dict:
    """Replicates with every sample up to `last` for both models (a part-way file may end in
    one being written)."""
    out = {}
    for r, frame in replays.by_replicate(trials).items():
        sizes = [frame[frame["model"] == m]["sample"].nunique() for m in replays.MODELS]
        if min(sizes) >= last:
            out[r] = frame
    return out


def stops(reps: dict, design: sequential.Design) -> list[dict]:
    """Each replicate's stop: outcome, size, the three estimates there, the repeated and the
    ordering interval, and its estimate at the last look (the estimand's part)."""
    looks = replays.looks_of(reps, "a", "samples", list(design.looks))
    out = []
    for r in reps:
        run, _, found = estimates_at_stop.stop_of(looks, r, design)
        out.append(
            {
                "replicate": r,
                "outcome": run["outcome"],
                "n": run["n"],
                "naive": found.naive,
                "median_unbiased": found.median_unbiased,
                "bias_adjusted": found.bias_adjusted,
                "repeated": [run["low"], run["high"]],
                "ordering": [found.low, found.high],
                "at_last": looks[r, design.looks[-1]][0],
                "at_looks": {n: looks[r, n][0] for n in design.looks},  # not printed
            }
        )
    return out


def _wrong(outcome: str, estimand: float, margin: float | None, null: bool = False) -> bool:
    # "holds, negligible" claims the direction as "holds" does
    return replays._wrong(outcome.split(",")[0], estimand, margin, null)


def summary(rows: list[dict], margin: float | None) -> dict:
    """The figures over `rows` (replicates' stops, possibly drawn with repeats)."""
    estimand = float(np.mean([x["at_last"] for x in rows]))
    used = np.array([x["n"] for x in rows], float)
    at_size = {n: float(np.mean([x["at_looks"][n] for x in rows])) for n in rows[0]["at_looks"]}

    def share(test) -> float:
        return float(np.mean([test(x) for x in rows]))

    def covers(interval: list[float], value: float) -> bool:
        return interval[0] <= value <= interval[1]

    return {
        "estimand": estimand,
        "decided": share(lambda x: x["outcome"] in sequential.DECIDED),
        "wrong": share(lambda x: _wrong(x["outcome"], estimand, margin)),
        "mean_samples": float(used.mean()),
        "p90_samples": float(np.percentile(used, 90, method="inverted_cdf")),
        "repeated_coverage": share(lambda x: covers(x["repeated"], estimand)),
        "ordering_coverage": share(lambda x: covers(x["ordering"], estimand)),
        "repeated_coverage_at_stop_size": share(lambda x: covers(x["repeated"], at_size[x["n"]])),
        "ordering_coverage_at_stop_size": share(lambda x: covers(x["ordering"], at_size[x["n"]])),
    } | {f"bias_{name}": float(np.mean([x[name] for x in rows])) - estimand for name in ESTIMATES}


def bootstrap(statistic, count: int, draws: int = DRAWS, seed: int = SEED) -> dict:
    """{figure: [low, high]}: the LEVEL percentile interval of each figure `statistic(idx)`
    returns over `draws` resamples idx of range(count) with replacement (whole replicates);
    a draw whose figure is undefined (nan) is left out of that figure."""
    rng = np.random.default_rng(seed)
    drawn = [statistic(rng.integers(0, count, count)) for _ in range(draws)]
    tail = 100 * (1 - LEVEL) / 2
    return {
        key: [float(q) for q in np.nanpercentile([d[key] for d in drawn], [tail, 100 - tail])]
        for key in drawn[0]
    }


def _rounded(value, digits: int = 4):
    if isinstance(value, (list, tuple)):
        return [_rounded(v, digits) for v in value]
    return round(float(value), digits) if isinstance(value, float) else value


SHARES = ("decided", "wrong", "repeated_coverage", "ordering_coverage")
SHARES += ("repeated_coverage_at_stop_size", "ordering_coverage_at_stop_size")


def _with_intervals(point: dict, intervals: dict, count: int) -> dict:
    """Each figure with its bootstrap interval; a share of replicates also with the exact
    (Clopper-Pearson) 95% interval of its count, which stays wide where every replicate agrees
    and the percentile bootstrap collapses to a point."""
    out = {}
    for key, v in point.items():
        out[key] = {"value": _rounded(v), "interval": _rounded(intervals[key])}
        if key in SHARES:
            found = stats.binomtest(round(v * count), count).proportion_ci(LEVEL)
            out[key]["exact_interval"] = _rounded([found.low, found.high])
    return out


def null_studies(trials: pd.DataFrame, reps: dict) -> tuple[dict, np.ndarray, int]:
    """The exact nulls of the module docstring, {key: study}, each study's two replicates as
    positions in sorted(reps) (for `pair_weights`) and the shifts that paired them; no study
    where there are under 2 replicates."""
    order = sorted(reps)
    shifts = min(replays.NULL_SHIFTS, len(order) // 2)
    if shifts < 1:
        return {}, np.zeros((0, 2), int), shifts
    kept = trials[trials["replicate"].isin(order)]
    studies, seen = {}, set()
    for key, study in replays.swapped_nulls(kept, replays.MODELS, shifts).items():
        model, pair = key.rsplit(":", 1)
        unordered = (model, frozenset(pair.split("-")))
        if unordered not in seen:  # shift R / 2 meets each pair twice: one study of it
            seen.add(unordered)
            studies[key] = study
    position = {r: i for i, r in enumerate(order)}
    sides = np.array(
        [[position[int(r)] for r in key.rsplit(":", 1)[1].split("-")] for key in studies]
    )
    return studies, sides, shifts


def pair_weights(sides: np.ndarray, count: int):
    """The weight of each null study in a resample idx of the `count` replicates: w_a w_b, how
    often each of its two replicates was drawn (a study stands or falls with both)."""

    def weights(idx: np.ndarray) -> np.ndarray:
        drawn = np.bincount(idx, minlength=count).astype(float)
        return drawn[sides[:, 0]] * drawn[sides[:, 1]]

    return weights


def nulls(trials: pd.DataFrame, reps: dict, design: sequential.Design) -> dict:
    """The exact nulls of the module docstring: the wrong share, its Monte-Carlo se and its
    bootstrap interval over replicates."""
    studies, sides, shifts = null_studies(trials, reps)
    if not studies:
        return {"studies": 0}
    looks = replays.looks_of(studies, "a", "samples", list(design.looks))
    runs = {key: replays.replay(looks, key, design) for key in studies}
    wrong = np.array([_wrong(runs[key]["outcome"], 0.0, design.margin, True) for key in studies])
    decided = np.array([runs[key]["outcome"] in sequential.DECIDED for key in studies])
    weights = pair_weights(sides, len(reps))

    def rate(idx: np.ndarray) -> dict:
        weight = weights(idx)
        total = weight.sum()
        return {"wrong": float(weight @ wrong / total) if total else math.nan}

    p = float(wrong.mean())
    outcomes = [run["outcome"] for run in runs.values()]
    return {
        "studies": len(studies),
        "shifts": shifts,
        "pairing": sorted({looks[key, design.looks[0]][3] for key in studies}),
        "outcomes": {o: outcomes.count(o) for o in sequential.OUTCOMES if o in outcomes},
        "decided": _rounded(float(decided.mean())),
        "wrong": _rounded(p),
        "wrong_mc_se": _rounded(math.sqrt(p * (1 - p) / len(studies))),
        "wrong_interval": _rounded(bootstrap(rate, len(reps))["wrong"]),
        "mean_samples": _rounded(float(np.mean([run["n"] for run in runs.values()]))),
    }


def trials_file(path: Path) -> Path:
    """PATH's trials: the file itself, or a folder's TRIALS (train-quickstart's)."""
    return path if path.suffix == ".csv" else path / TRIALS


def analyse(path: Path, study: str = "quickstart.yaml") -> dict:
    """The JSON line of bench/RESULTS.md's "quickstart replicates, a seed per pair" section, from
    `trials_file(path)` (another csv of the design's columns, e.g. the one-seed replicates'
    trials_shared_24.csv, is read the same way). `study` names the shipped study under
    studies/ whose rule is replayed: "mini/mini_edf.yaml" reads the mini's seed-per-pair
    replicates (trials_seed_per_pair_64.csv) at their own stops, with the same intervals over
    replicates."""
    design = replays.shipped_design(study)
    trials = pd.read_csv(trials_file(Path(path)))
    reps = complete(trials, design.looks[-1])
    rows = stops(reps, design)
    point = summary(rows, design.margin)
    intervals = bootstrap(lambda idx: summary([rows[i] for i in idx], design.margin), len(rows))
    outcomes = [x["outcome"] for x in rows]
    return {
        "bench": "replicates-quickstart",
        "study": study,
        "design": {
            "looks": list(design.looks),
            "spending": design.spending,
            "alpha": design.alpha,
            "margin": design.margin,
            "boundaries": _rounded(design.boundaries(), 3),
        },
        "replicates": len(rows),
        "bootstrap": {"draws": DRAWS, "seed": SEED, "level": LEVEL, "resamples": "replicates"},
        "outcomes": {o: outcomes.count(o) for o in sequential.OUTCOMES if o in outcomes},
        "stops_by_look": {n: [x["n"] for x in rows].count(n) for n in design.looks},
        "per_replicate": [{k: _rounded(v) for k, v in x.items() if k != "at_looks"} for x in rows],
        "over_replicates": _with_intervals(point, intervals, len(rows)),
        "nulls": nulls(trials, reps, design),
    }

"""The estimates at a stop (optbench.decision.stop_estimates) on real trainings: the mini's EDF
design (studies/mini/mini_edf.yaml: claim (a), per-model boxes, a seed per pair) replayed on the
20 committed replicates trained to 64 samples (docs/reference/replicates/
trials_seed_per_pair_64.csv) as bench/sequential_analysis.py replays them, and on studies of
that design drawn from the same trainings (seed_per_sample_studies, "unpaired": they share
trials, so they are not independent). Each study stops at its first decision; at its stop the
stagewise-ordering interval and estimates are computed from the boundaries it applied (its
panel's share alpha / panels, no recycling: one claim replayed alone).

The truth is the trained effect: the mean over the 20 replicates of the fixed-size estimate at
64 samples (the statistic of (a) moves with n, so the mean at the stopping size is printed as
well). Prints one JSON line: per set of studies, the coverage of the ordering interval and of
the repeated interval of each, with Monte-Carlo standard errors sqrt(p (1 - p) / R) (for the
drawn studies a lower bound: they share trials), and the bias of the naive, median-unbiased
and bias-adjusted estimates (median and mean) overall and by stopping look.

    python bench/stop_estimates.py [DRAWN_STUDIES]
    python bench/stop_estimates.py --simulated [NAME ...]  # docs/sequential.md's designs

`--simulated`: the designs tests/test_stop_estimates.py checks, 1,000 studies each of normal
units with the se estimated at each look (stop_estimates.replay), at one panel's alpha 0.05,
and 400 studies each at the levels a panel's interval takes beside others (0.025, 0.05 / 12;
`SIMULATED`; NAME picks designs): coverage of the ordering interval at the panel's level with
its Monte-Carlo se, the stops by look, the median bias of the median-unbiased and
naive estimates (with the median's MC se) and the mean bias of the bias-adjusted and naive
ones, overall and at the stops before the last look.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sequential_analysis as replays  # noqa: E402

from optbench.decision import stop_estimates  # noqa: E402

REPLICATES = Path(__file__).resolve().parents[1] / "docs" / "reference" / "replicates"


def stop_of(looks: dict, key, design) -> tuple[dict, int, stop_estimates.StopEstimate]:
    """A study's looks replayed to its stop (sequential_analysis.replay: `looks` is its
    looks_of) and the estimates there, from the boundaries the design applied: the replay's
    record, the stopping look's index and at_stop's estimates."""
    run = replays.replay(looks, key, design)
    k = design.looks.index(run["n"])
    estimate, se, _, _ = looks[key, run["n"]]
    bounds = design.boundaries()
    return run, k, stop_estimates.at_stop(design.looks, bounds, k, estimate, se, design.margin)


def estimated(studies: dict, truth: float) -> dict:
    """Each study's stop under the mini's design and the figures of the module docstring."""
    design = replays.shipped_design("mini/mini_edf.yaml")
    looks = replays.looks_of(studies, "a", "samples", list(design.looks))
    estimand = {n: float(np.mean([looks[r, n][0] for r in studies])) for n in design.looks}
    rows = []
    for r in studies:
        run, k, found = stop_of(looks, r, design)
        rows.append(
            {"k": k, "naive": found.naive, "repeated": (run["low"], run["high"])}
            | {"at_n": estimand[run["n"]], "found": found}
        )
    count = len(rows)
    covered = np.mean([x["found"].low <= truth <= x["found"].high for x in rows])
    covered_n = np.mean([x["found"].low <= x["at_n"] <= x["found"].high for x in rows])
    repeated = np.mean([x["repeated"][0] <= truth <= x["repeated"][1] for x in rows])

    def bias(chosen: list[dict]) -> dict:
        values = {
            "naive": [x["naive"] for x in chosen],
            "median_unbiased": [x["found"].median_unbiased for x in chosen],
            "bias_adjusted": [x["found"].bias_adjusted for x in chosen],
        }
        return {"studies": len(chosen)} | {
            f"{name}_{how}": round(float(f(np.array(v) - truth)), 4)
            for name, v in values.items()
            for how, f in (("median", np.median), ("mean", np.mean))
        }

    by_look = {
        int(design.looks[k]): bias([x for x in rows if x["k"] == k])
        for k in sorted({x["k"] for x in rows})
    }
    return {
        "studies": count,
        "ordering_coverage": round(float(covered), 3),
        "ordering_coverage_mc_se": replays._mc_se(covered, count),
        "ordering_coverage_of_estimand_at_stop": round(float(covered_n), 3),
        "repeated_coverage": round(float(repeated), 3),
        "bias": bias(rows),
        "bias_by_stopping_look": by_look,
    }


# (name, looks, effect in sd of a unit, margin, the panel's level, studies):
# tests/test_stop_estimates.py's designs at one panel's alpha 0.05, then the levels a panel's
# interval takes beside others: 0.025 (one of two panels), 0.05 / 12 (a pair of a four-cell
# ranking beside another: 99.6%)
SIMULATED = (
    ("samples_6_to_24", (6, 9, 12, 16, 24), 0.5, None, 0.05, 1000),
    ("seeds_3_to_6", (3, 4, 5, 6), 1.0, None, 0.05, 1000),
    ("samples_6_to_24_margin", (6, 9, 12, 16, 24), 0.1, 1.0, 0.05, 1000),
    ("samples_6_to_24_null", (6, 9, 12, 16, 24), 0.0, None, 0.05, 1000),
    ("samples_6_to_24_level_0.025", (6, 9, 12, 16, 24), 0.5, None, 0.025, 400),
    ("seeds_3_to_6_level_0.025", (3, 4, 5, 6), 1.0, None, 0.025, 400),
    ("samples_6_to_24_level_0.05/12", (6, 9, 12, 16, 24), 0.5, None, 0.05 / 12, 400),
)


def simulated(names: list[str]) -> dict:
    """The designs named (all where none is), each's figures of the module docstring."""
    out = {}
    for name, looks, effect, margin, level, studies in SIMULATED:
        if names and name not in names:
            continue
        fractions = [n / looks[-1] for n in looks]
        bounds = stop_estimates.sequential.boundaries(fractions, "pocock", level)
        r = stop_estimates.replay(looks, bounds, effect, margin, studies, tail=level / 2)
        early = r.stop < len(looks) - 1
        cov = float(r.covered.mean())
        median_se = math.sqrt(math.pi / 2) * float(np.std(r.median_unbiased)) / math.sqrt(studies)
        out[name] = {
            "looks": looks,
            "effect": effect,
            "margin": margin,
            "level": round(level, 5),
            "studies": studies,
            "stops": np.bincount(r.stop, minlength=len(looks)).tolist(),
            "coverage": round(cov, 3),
            "coverage_mc_se": replays._mc_se(cov, studies),
            "interval_level": round(1 - level, 4),
            "median_bias_median_unbiased": round(float(np.median(r.median_unbiased)) - effect, 3),
            "median_bias_naive": round(float(np.median(r.naive)) - effect, 3),
            "median_mc_se": round(median_se, 3),
            "mean_bias_bias_adjusted": round(float(r.bias_adjusted.mean()) - effect, 3),
            "mean_bias_naive": round(float(r.naive.mean()) - effect, 3),
            "early_mean_bias_bias_adjusted": round(
                float(r.bias_adjusted[early].mean()) - effect, 3
            ),
            "early_mean_bias_naive": round(float(r.naive[early].mean()) - effect, 3),
        }
    return out


def main(argv: list[str]) -> None:
    if argv[:1] == ["--simulated"]:
        print(json.dumps({"bench": "stop-estimates-simulated"} | simulated(argv[1:])))
        return
    drawn = int(argv[0]) if argv else 100
    trials = pd.read_csv(REPLICATES / "trials_seed_per_pair_64.csv")
    reps = replays.by_replicate(trials)
    full = replays.looks_of(reps, "a", "samples", [64])
    truth = float(np.mean([full[r, 64][0] for r in reps]))
    out = {"bench": "stop-estimates", "truth": round(truth, 4)}
    out["replicates"] = estimated(reps, truth)
    many = replays.seed_per_sample_studies(trials, drawn, "unpaired")
    out["drawn"] = estimated(many, truth)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])

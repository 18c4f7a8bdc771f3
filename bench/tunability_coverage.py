"""How well the tunability view (optbench.decision.tunability) estimates E_k, the expected best
error after k random (lr, wd) samples, on studies of n samples drawn from a known population:

- synthetic: synthetic.py's bowls (ViT_P-like: steep, about 9% diverged; ViT_C-like: shallow,
  about 2% diverged), a population of POPULATION samples whose with-replacement E_k is the
  truth, STUDIES studies of n samples each;
- replicates: the quickstart's 20 replicate studies of 24 samples per model
  (docs/reference/replicates/trials_shared_24.csv), the truth the unbiased E_k of all 480
  samples of a model pooled (20 studies: a coarse check).

Per k: `bias`, the mean estimate minus the truth, for the unbiased estimate and the old
with-replacement plug-in; `coverage`, the share of studies whose 95% band holds the truth, for
the report's band (studentized bootstrap, k <= n / 2) and the old percentile band. One JSON
line. `nice python bench/tunability_coverage.py [STUDIES]`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from optbench.decision import tunability
from optbench.report import synthetic

POPULATION = 40_000
N_BOOT = 1000
REPLICATES = Path(__file__).parents[1] / "docs" / "reference" / "replicates"


def _old_band(errors: np.ndarray, ks: np.ndarray, rng: np.random.Generator) -> tuple:
    """The band this replaced: percentiles of the plug-in over bootstrap resamples."""
    resamples = np.sort(rng.choice(errors, size=(N_BOOT, errors.size)), axis=1)
    values = resamples @ tunability.min_weights(errors.size, ks)
    return tuple(np.percentile(values, [2.5, 97.5], axis=0))


def _measure(studies: list[np.ndarray], truth: np.ndarray, ks: np.ndarray) -> dict:
    rng = np.random.default_rng(0)
    est, plug, cov, old_cov = [], [], [], []
    for i, errors in enumerate(studies):
        est.append(tunability.unbiased_best(errors, ks))
        plug.append(tunability.expected_best(errors, ks))
        low, high = tunability.unbiased_band(errors, ks, N_BOOT, seed=i)
        cov.append((low <= truth) & (truth <= high))
        old_low, old_high = _old_band(errors, ks, rng)
        old_cov.append((old_low <= truth) & (truth <= old_high))
    banded = ks <= tunability.BAND_MAX_SHARE * ks[-1]

    def per_k(values, keep=None) -> dict:
        mean = np.mean(values, axis=0)
        return {
            int(k): round(float(v), 3)
            for k, v in zip(ks, mean, strict=True)
            if keep is None or keep[k - 1]
        }

    return {
        "studies": len(studies),
        "n": int(ks[-1]),
        "bias_unbiased": per_k(np.array(est) - truth),
        "bias_plug_in": per_k(np.array(plug) - truth),
        "coverage": per_k(cov, banded),
        "coverage_old_band": per_k(old_cov),
    }


def _population(model: str) -> np.ndarray:
    trials = synthetic.synthetic_trials([model], ["adamw"], [5], POPULATION, with_metrics=False)
    errors = trials["final_error"].to_numpy(float).copy()
    errors[trials["status"].to_numpy() == "diverged"] = tunability.DIVERGED_ERROR
    return errors


def main(n_studies: int = 400) -> dict:
    out: dict = {"bench": "tunability-coverage", "synthetic": [], "replicates": []}
    rng = np.random.default_rng(1)
    for model in ("vit_p_w64_16px", "vit_c_w64_16px"):
        population = _population(model)
        for n in (8, 16, 24):
            ks = np.arange(1, n + 1)
            studies = [rng.choice(population, n) for _ in range(n_studies)]
            found = _measure(studies, tunability.expected_best(population, ks), ks)
            out["synthetic"].append({"model": model} | found)
    trials = pd.read_csv(REPLICATES / "trials_shared_24.csv")
    for model, rows in trials.groupby("model"):
        by_study = [g["final_error"].to_numpy(float) for _, g in rows.groupby("replicate")]
        ks = np.arange(1, by_study[0].size + 1)
        truth = tunability.unbiased_best(np.concatenate(by_study), ks)
        out["replicates"].append({"model": model} | _measure(by_study, truth, ks))
    return out


if __name__ == "__main__":
    print(json.dumps(main(*map(int, sys.argv[1:]))))

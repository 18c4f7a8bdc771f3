"""Where (lr, wd) pairs come from: seeded log-uniform draws, a pure function of the study's
search settings. The same YAML gives the same pairs, in any order, on any machine.

Pairs are drawn per optimizer, not per model: sample i of every model uses the same point of
the unit square, mapped into that model's (lr, wd) box. With shared ranges, models therefore
see identical pairs (a paired comparison); with per-model good values, the same relative
position. Growing n_samples keeps the first n pairs.

Training seeds: every sample trains with each of the study's `seeds`, or with
`search.seed_per_sample` with seeds of its own (`sample_seed`), the same for sample i of every
model, so a shared box stays paired.

- random: optuna's RandomSampler, seeded (seed, optimizer), asked n times in order.
- good: no sampling; the one pair is the (model, optimizer)'s good value (for schedule-length
  and optimizer grids run at known-good settings, as the paper's Figs 2-3).
- qmc: scrambled Sobol points from scipy. optuna's QMCSampler is not used because it samples
  trials independently (i.e. randomly) until one has completed, and optbench asks every trial of
  a cell before any has run.
"""

from __future__ import annotations

import hashlib
import math

import optuna
from optuna.distributions import FloatDistribution

from optbench.spec.schema import Range, Search


def distributions(bounds: Range) -> dict[str, FloatDistribution]:
    """The optuna search space of one (model, optimizer): log-uniform lr and wd."""
    return {
        "lr": FloatDistribution(*bounds.lr, log=True),
        "wd": FloatDistribution(*bounds.wd, log=True),
    }


def _stream_seed(seed: int, optimizer: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{optimizer}".encode()).digest()[:4], "little")


def sample_seed(seed: int, sample: int) -> int:
    """Sample `sample`'s training seed for the study seed `seed` under search.seed_per_sample:
    a hash, so seeds of different samples and study seeds never meet (0 .. 2**63 - 1)."""
    digest = hashlib.sha256(f"{seed}/sample{sample}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _log_map(u: float, low: float, high: float) -> float:
    return math.exp(math.log(low) + u * (math.log(high) - math.log(low)))


def sample_pairs(
    search: Search, bounds: Range, optimizer: str, n: int
) -> list[tuple[float, float]]:
    """The first n (lr, wd) pairs of one (model, optimizer) box."""
    seed = _stream_seed(search.seed, optimizer)
    if search.sampler == "qmc":
        from scipy.stats import qmc

        points = qmc.Sobol(d=2, scramble=True, seed=seed).random(n)
        return [(_log_map(u, *bounds.lr), _log_map(v, *bounds.wd)) for u, v in points]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    dists = distributions(bounds)
    pairs = []
    for _ in range(n):
        trial = study.ask(dists)
        pairs.append((trial.params["lr"], trial.params["wd"]))
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)  # only the draw matters
    return pairs


def study_pairs(search: Search, model: str, optimizer: str) -> list[tuple[float, float]]:
    """The pairs a study trains for one (model, optimizer)."""
    if search.sampler == "good":
        good = search.good_values[model][optimizer]
        return [(good.lr, good.wd)]
    return sample_pairs(search, search.bounds(model, optimizer), optimizer, search.n_samples)

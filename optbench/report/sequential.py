"""Sample until decided: the group-sequential rule that decides a claim at looks fixed in advance
(docs/sequential.md), as pure arithmetic on each look's estimate and standard error.

A study with a `decide:` block trains in rounds; after each round (a *look*, at n_k samples or
seeds out of at most n_K) the claim's statistic is recomputed on the first n_k units. Acting on
a 95% interval at every look would make errors more likely with each look; instead the type-I
error alpha is *spent* over the looks (Lan and DeMets 1983): by information fraction
t_k = n_k / n_K at most `spent(t_k)` of it, with
- "pocock": alpha ln(1 + (e - 1) t), about evenly: early looks stop large effects early;
- "obrien-fleming": 2 - 2 Phi(z_{alpha/2} / sqrt(t)), almost nothing early: the last look is
  close to the fixed-size test.
The boundary c_k of look k is the z that spends exactly alpha(t_k) - alpha(t_{k-1}) given that
no earlier look crossed, under the joint normal law of nested looks (corr(Z_i, Z_j) =
sqrt(t_i / t_j)), computed by recursive numerical integration (Armitage, McPherson and Rowe
1969; Jennison and Turnbull 2000, ch. 19): deterministic, no Monte Carlo.

Each look reports a *repeated confidence interval* estimate +- c_k se (Jennison and Turnbull
ch. 9): the intervals of all looks cover the true value together with probability 1 - alpha,
so every decision read off them is wrong with probability at most alpha however the study
stops. The outcomes:
- holds: the interval lies above 0;            - opposite: it lies below 0;
- equivalent: it lies inside [-margin, +margin] (only with a margin, declared before the data);
- continue: none of these and looks remain;    - undecided: none of these at the last look.
An se estimated from few units (k training seeds; claim (a)'s bootstrap se of n samples) is
read with Student's t at the boundary's nominal level instead of z (`critical`, the
"significance level approach"; n - 1 degrees of freedom).

The normal law is exact for means of independent units; claim (a)'s statistic (a difference of
EDF areas of dtop-1, the best a minimum that moves as samples are added) only approximates it:
its error rates are measured on replicate studies (bench/replicates.py), not assumed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

ALPHA = 0.05
SPENDING = ("pocock", "obrien-fleming")
OUTCOMES = ("holds", "opposite", "equivalent", "continue", "undecided")
DECIDED = ("holds", "opposite", "equivalent")
_GRID_POINTS = 801  # per look: boundaries within 1e-5 of a 2001-point grid's
# A z no look reaches: the grid's edge, and the boundary of a look that spends nothing (finite:
# its tail, about 1e-88, and Student's t at that tail are numbers, and so is its interval)
_FAR = 20.0


def spent(spending: str, t: float, alpha: float = ALPHA) -> float:
    """The type-I error spent by information fraction t in [0, 1] (two-sided)."""
    if t <= 0:
        return 0.0
    t = min(t, 1.0)
    if spending == "pocock":
        return alpha * math.log(1 + (math.e - 1) * t)
    if spending == "obrien-fleming":  # the upper tail itself: 2 - 2 Phi underflows to 0
        return float(2 * stats.norm.sf(stats.norm.isf(alpha / 2) / math.sqrt(t)))
    raise ValueError(f"unknown spending {spending!r}: one of {', '.join(SPENDING)}")


class _Continuation:
    """The sub-density of the score S_k = Z_k sqrt(t_k) on the continuation region of the looks
    so far (no earlier look crossed), on a grid: what carries the law from look to look. The
    score's increments are independent N(0, t_k - t_{k-1}) under a null effect."""

    def __init__(self) -> None:
        self.t = 0.0
        self.grid = self.density = None

    def crossing(self, tk: float, c: float) -> float:
        """P(no earlier look crossed and |Z_k| >= c) at the next look, at fraction tk."""
        bound = c * math.sqrt(tk)
        if self.grid is None:
            return float(2 * stats.norm.sf(c))
        sd = math.sqrt(tk - self.t)
        tails = stats.norm.sf((bound - self.grid) / sd) + stats.norm.cdf((-bound - self.grid) / sd)
        return float(np.trapezoid(self.density * tails, self.grid))

    def advance(self, tk: float, c: float) -> None:
        """Move to the look at tk with boundary c: keep the paths that did not cross."""
        half = min(c, _FAR) * math.sqrt(tk)
        grid = np.linspace(-half, half, _GRID_POINTS)
        if self.grid is None:
            density = stats.norm.pdf(grid, scale=math.sqrt(tk))
        else:
            sd = math.sqrt(tk - self.t)
            kernel = stats.norm.pdf((grid[:, None] - self.grid[None, :]) / sd) / sd
            density = np.trapezoid(kernel * self.density[None, :], self.grid, axis=1)
        self.t, self.grid, self.density = tk, grid, density


def _check_fractions(fractions: list[float]) -> list[float]:
    t = [float(x) for x in fractions]
    if not t or t[0] <= 0 or t[-1] > 1 or any(b <= a for a, b in zip(t, t[1:], strict=False)):
        raise ValueError(f"information fractions must increase within (0, 1]: {fractions}")
    return t


def crossing_probabilities(fractions: list[float], bounds: list[float]) -> list[float]:
    """Under a null effect, the probability that look k is the first whose |Z_k| reaches its
    bound, for two-sided bounds at the information fractions (their sum: the design's alpha)."""
    law, out = _Continuation(), []
    for tk, c in zip(_check_fractions(fractions), bounds, strict=True):
        out.append(law.crossing(tk, c))
        law.advance(tk, c)
    return out


def _excess(c: float, law: _Continuation, tk: float, target: float) -> float:
    return law.crossing(tk, c) - target


def boundaries(fractions: list[float], spending: str, alpha: float = ALPHA) -> list[float]:
    """Two-sided z boundaries c_1..c_K at the information fractions t_1 < ... < t_K = 1, look k
    spending spent(t_k) - spent(t_{k-1}) of alpha given that no earlier look crossed: each c_k
    is the root of its crossing probability (`_Continuation`)."""
    law, out, before = _Continuation(), [], 0.0
    for tk in _check_fractions(fractions):
        now = spent(spending, tk, alpha)
        target = now - before
        if target <= 0 or law.crossing(tk, _FAR) >= target:
            c = _FAR  # nothing left to spend at this look
        else:
            root = optimize.brentq(_excess, 0.0, _FAR, args=(law, tk, target), xtol=1e-10)
            c = float(root)
        out.append(c)
        law.advance(tk, c)
        before = now
    return out


def nominal_level(c: float) -> float:
    """The two-sided confidence level whose normal critical value is c (0.95 at 1.96)."""
    return float(1 - 2 * stats.norm.sf(c))


def critical(c: float, df: float | None = None) -> float:
    """The critical value of an interval at the boundary c's nominal level: c itself for a
    normal statistic, Student's t with `df` degrees of freedom at the same tail for a mean of
    few units."""
    if df is None or not math.isfinite(c):
        return c
    return float(stats.t.isf(stats.norm.sf(c), df))


def repeated_interval(
    estimate: float, se: float, c: float, df: float | None
) -> tuple[float, float]:
    """A look's repeated confidence interval at boundary c: estimate +- critical(c, df) se."""
    half = critical(c, df) * se
    return estimate - half, estimate + half


def outcome(low: float, high: float, margin: float | None, last: bool) -> str:
    """What a look's repeated confidence interval [low, high] decides (module docstring)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "undecided" if last else "continue"
    if low > 0:
        return "holds"
    if high < 0:
        return "opposite"
    if margin is not None and -margin < low and high < margin:
        return "equivalent"
    return "undecided" if last else "continue"


@dataclass(frozen=True)
class Design:
    """The looks of a sequential study: the sizes n_1 < ... < n_K (samples or seeds), how
    alpha is spent over them, and the equivalence margin (None: no "equivalent" outcome)."""

    looks: tuple[int, ...]
    spending: str = "pocock"
    alpha: float = ALPHA
    margin: float | None = None

    @property
    def fractions(self) -> list[float]:
        return [n / self.looks[-1] for n in self.looks]

    def boundaries(self) -> list[float]:
        return boundaries(self.fractions, self.spending, self.alpha)


def more_needed(estimate: float, se: float, n_now: int, c: float, margin: float | None) -> int:
    """How many units in all (samples or seeds) a fixed-size study would likely need to decide
    what the last look left undecided, if the effect and the spread per unit are as estimated:
    the n where the estimate is (c + z_0.8) standard errors from 0 (to show it) or, with a
    margin, from the nearer margin (to show equivalence), se shrinking as 1 / sqrt(n). A normal
    approximation: it says how far off a decision is, not a guarantee."""
    need = c + float(stats.norm.ppf(0.8))
    gaps = [abs(estimate)]
    if margin is not None and abs(estimate) < margin:
        gaps.append(margin - abs(estimate))
    gap = max(gaps)
    if gap <= 0 or se <= 0:
        return 0  # no effect and no margin: no size shows anything
    return max(n_now + 1, math.ceil(n_now * (need * se / gap) ** 2))


def stop_probabilities(design: Design, z_full: float, paths: int = 20_000, seed: int = 0):
    """The probability that a study of this design stops at each look (the last one whatever
    it shows) if the effect is z_full standard errors of the full study away from 0: Brownian
    paths with that drift, seeded. What `--dry-run` turns into an expected size."""
    rng = np.random.default_rng(seed)
    t = np.asarray(design.fractions)
    steps = rng.normal(size=(paths, t.size)) * np.sqrt(np.diff(np.concatenate([[0.0], t])))
    z = (np.cumsum(steps, axis=1) + z_full * t) / np.sqrt(t)  # the look's z, with the drift
    bounds = np.asarray(design.boundaries())
    crossed = np.abs(z) >= bounds
    first = np.where(crossed.any(axis=1), crossed.argmax(axis=1), t.size - 1)
    return np.bincount(first, minlength=t.size) / paths

"""The numbers to quote where a sequential panel stops (docs/sequential.md, "At a stop"): the
stagewise-ordering median-unbiased estimate and its ordering interval at the panel's level
(Jennison and Turnbull 2000, ch. 8.4; Armitage 1957's analysis-time ordering) and Whitehead's (1986)
bias-adjusted mean, from the boundaries the panel's looks actually applied.

The estimate at a stop is biased: stopping when the interval clears 0 keeps high draws at early
looks, and the paths that reach late looks are those whose estimate stayed small. Both numbers
here read the rule's own law. Its statistic at look j is the mean of the first n_j units and
its se estimated from them (n_j - 1 degrees of freedom), compared with the t critical value
`sequential.critical(c_j, n_j - 1)` of the boundary c_j the look applied (Holm's recycled
levels included: the records keep each look's boundary; the looks after a stop, which only the
bias-adjusted mean reads, take the boundaries of the stop's level). That law is *simulated*:
`PATHS` seeded studies of normal units (`_Law`: per look the mean and sample standard deviation
of N(0, 1) units, drawn as block sums and chi-square sums of squares), shifted by the effect
theta and scaled by the spread per unit that the stop estimated (sigma = se sqrt(n_stop),
plugged in: the one approximation, its effect on coverage measured in docs/sequential.md), the
same paths for every theta (so the p-value is monotone in theta without a margin).

- Stagewise ordering: an outcome (look j, estimate) ranks above every outcome of a later look
  when it stopped above its upper boundary, below them when it stopped below its lower one;
  outcomes reaching the same look rank by their studentized estimate (x_j - theta) / se_j. The
  p-value p(theta) = P_theta(an outcome at least as high as the one observed) needs only the
  looks up to the stop. The median-unbiased estimate solves p = 1/2, the interval p = level / 2
  and 1 - level / 2 at the panel's level (the one its boundaries spend: 95% for one panel at
  alpha 0.05; 97.5% for one of two before Holm passes a level on), so the interval excludes 0
  exactly where the ordering's test at that level rejects, and a panel undecided at its last
  look gets an interval that holds 0 (a 95% one beside a 0.4% level would not). At the first look the ordering is the fixed-size one: the estimate itself and its
  Student's t interval (computed exactly there, no simulation), so a one-look design is the
  usual t interval.
- Whitehead's bias-adjusted mean solves theta + bias(theta) = observed, bias(theta) =
  E_theta[estimate at the stop] - theta over the whole design (the looks after the stop too).
- An "equivalent" stop (a TOST margin, the interval inside +-margin) ends a path at an earlier
  look too: such an outcome ranks against the later looks' by its studentized estimate, as if
  read at the stop (it crossed neither boundary, so neither end of the order claims it). A stop
  at the last look is ranked the same way: the paths that reached it rank by their estimate, the
  ones that stopped earlier by the boundary they crossed.
- A chain's record (claim (d), several steps) keeps only its smallest step, which did not
  decide alone: no adjusted numbers for it (`of_panel`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from optbench.decision import sequential
from optbench.spec.claim_kinds import KINDS, comparison_key

PATHS = 20_000  # the simulated studies per law: p-values within about 0.001 at its 2.5% tails
TAIL = 0.025  # each side of the ordering interval where no level is given: a 95% interval
# the roots to a thousandth of the stop's se: far below the simulation's own noise
_TOLERANCE = 1e-3


@dataclass(frozen=True)
class StopEstimate:
    """What a panel's stop supports, in the units of its estimate."""

    naive: float  # the estimate at the stop, as the look recorded it
    median_unbiased: float  # stagewise ordering: p(theta) = 1/2
    low: float  # the stagewise-ordering interval, at 1 - 2 tail
    high: float
    bias_adjusted: float  # Whitehead's: theta + bias(theta) = naive


@functools.cache
def _law(looks: tuple[int, ...], paths: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per path (rows) and look (columns), the mean and the sample standard deviation of the
    first n_j of i.i.d. N(0, 1) units: block sums N(0, m) and within-block sums of squares
    chi-square(m - 1), so the cost does not grow with the sizes. Antithetic: the second half
    of the paths are the first's negated (the same sd), so the means are 0 exactly and a
    one-look design's bias is 0, not the simulation's noise."""
    rng = np.random.default_rng(seed)
    n = np.asarray(looks, float)
    m = np.diff(n, prepend=0.0)
    half = (paths + 1) // 2
    sums = rng.standard_normal((half, n.size)) * np.sqrt(m)
    within = rng.chisquare(np.maximum(m - 1, 1), (half, n.size)) * (m > 1)
    sums, within = np.concatenate([sums, -sums]), np.concatenate([within, within])
    total, squares = np.cumsum(sums, axis=1), np.cumsum(within + sums * sums / m, axis=1)
    mean = total / n
    sd = np.sqrt(np.maximum(squares - n * mean * mean, 0.0) / (n - 1))
    return mean, sd


@dataclass(frozen=True)
class _Rule:
    """The panel's rule in units of the stop's spread (delta = theta / sigma)."""

    n: np.ndarray  # the looks' sizes
    crit: np.ndarray  # the t critical value each look applied (or would apply)
    margin: float | None  # in units of sigma
    mean: np.ndarray  # _law's
    sd: np.ndarray

    def exits(self, delta: float, upto: int) -> tuple[np.ndarray, np.ndarray]:
        """Each path's first look (up to `upto`, that one included) whose interval decides and
        how: +1 above 0, -1 below, 0 equivalent; paths deciding nowhere: look `upto`, sign 2."""
        shifted = self.mean[:, : upto + 1] + delta
        half = self.sd[:, : upto + 1] / np.sqrt(self.n[: upto + 1])
        with np.errstate(divide="ignore", invalid="ignore"):
            t = shifted / half
        crit = self.crit[: upto + 1]
        up, down = t >= crit, t <= -crit
        inside = np.zeros_like(up)
        if self.margin is not None:
            inside = (np.abs(shifted) + crit * half < self.margin) & ~up & ~down
        any_ = up | down | inside
        first = np.where(any_.any(axis=1), any_.argmax(axis=1), upto)
        rows = np.arange(first.size)
        how = np.where(up[rows, first], 1, np.where(down[rows, first], -1, 0))
        how = np.where(any_[rows, first], how, 2)
        return first, how

    def pivot(self, look: np.ndarray) -> np.ndarray:
        """Each path's studentized estimate (x_j - theta) / se_j at its look j: free of theta."""
        rows = np.arange(look.size)
        return self.mean[rows, look] * np.sqrt(self.n[look]) / self.sd[rows, look]

    def p_value(self, delta: float, stop: int, observed_delta: float) -> float:
        """P_delta(an outcome at least as high as the observed, the stagewise ordering)."""
        first, how = self.exits(delta, stop)
        observed = (observed_delta - delta) * math.sqrt(self.n[stop])  # its (x - theta) / se
        early = first < stop
        above = (early & (how == 1)) | (((~early) | (how == 0)) & (self.pivot(first) >= observed))
        return float(above.mean())

    def mean_at_stop(self, delta: float) -> float:
        """E_delta[estimate at the stop] over the whole design, in units of sigma."""
        first, _ = self.exits(delta, self.n.size - 1)
        return delta + float(self.mean[np.arange(first.size), first].mean())


def _solve(f, target: float, start: float, step: float) -> float:
    """The root of the increasing f(x) = target, bracketed from `start` by doubling steps."""
    low = high = start
    step0 = step
    while f(low) > target:
        step, low = 2 * step, low - step
    while f(high) < target:
        step, high = 2 * step, high + step
    while high - low > _TOLERANCE * step0:
        mid = (low + high) / 2
        if f(mid) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def at_stop(
    looks,
    bounds,
    stop: int,
    estimate: float,
    se: float,
    margin: float | None = None,
    paths: int = PATHS,
    seed: int = 0,
    tail: float = TAIL,
) -> StopEstimate | None:
    """The estimates at a panel's stop at look `stop` (0-based) of a design of `looks` (every
    look's size, n_1 < ... < n_K) whose z boundaries `bounds` (one per look: those applied up
    to the stop, the ones that would apply after it) are read with Student's t at n_j - 1
    degrees of freedom; `estimate` and `se` the stop's, `margin` the design's TOST margin;
    `tail` each side of the interval (the panel's level / 2).
    None where the se carries no spread (no law to scale) or a look has fewer than 2 units."""
    n = np.asarray(looks, int)
    if not (math.isfinite(estimate) and math.isfinite(se) and se > 0) or n.min() < 2:
        return None
    sigma = se * math.sqrt(n[stop])
    crit = np.array([sequential.critical(c, k - 1) for c, k in zip(bounds, n, strict=True)])
    mean, sd = _law(tuple(int(k) for k in n), paths, seed)
    rule = _Rule(n.astype(float), crit, None if margin is None else margin / sigma, mean, sd)
    observed, step = estimate / sigma, 1 / math.sqrt(n[stop])  # one se, in units of sigma

    def quantile(p: float) -> float:
        if stop == 0:  # everything reaches the first look: the fixed-size t interval, exactly
            return estimate + se * float(stats.t.ppf(p, n[0] - 1))
        return sigma * _solve(lambda d: rule.p_value(d, stop, observed), p, observed, step)

    adjusted = _solve(rule.mean_at_stop, observed, observed, step)
    return StopEstimate(
        naive=estimate,
        median_unbiased=quantile(0.5),
        low=quantile(tail),
        high=quantile(1 - tail),
        bias_adjusted=sigma * adjusted,
    )


def of_panel(records: list[dict], design_looks) -> StopEstimate | None:
    """`at_stop` from one panel's look records (decision/looks.py's, in order of k) under a design
    of `design_looks` (decide.looks): the boundaries its looks recorded, the later looks' at the
    stop's level. None where the panel has not stopped on its interval (continue, nothing
    learned), where it is a chain of several steps (module docstring), or where the records do
    not match the design's sizes."""
    last = records[-1]
    if last["outcome"] not in (*sequential.DECIDED, "undecided"):
        return None
    if KINDS[last.get("kind") or last["claim"]].chain and len(last["cells"]) > 2:
        return None
    sizes = [int(x) for x in design_looks]
    stop = int(last["k"])
    if [r["n"] for r in records] != sizes[: stop + 1] or [r["k"] for r in records] != list(
        range(stop + 1)
    ):
        return None
    level = last.get("level") or last.get("alpha", sequential.ALPHA) / last.get("panels", 1)
    later = sequential.boundaries(
        [x / sizes[-1] for x in sizes], last.get("spending", "pocock"), level
    )
    bounds = [r["boundary"] for r in records] + later[stop + 1 :]
    margin = last.get("margin")
    return at_stop(sizes, bounds, stop, last["estimate"], last["se"], margin, tail=level / 2)


COLUMNS = ("median_unbiased", "ordering_low", "ordering_high", "bias_adjusted")


def with_stop_estimates(table, looks: list[dict], design_looks):
    """The claims table of a sequential study (looks.with_looks's) with each stopped panel's
    `COLUMNS` (NaN where `of_panel` gives none)."""
    panels: dict[str, list[dict]] = {}
    for look in sorted(looks, key=lambda x: x["k"]):
        panels.setdefault(comparison_key(look["claim"], look["cells"]), []).append(look)
    values = {column: [] for column in COLUMNS}
    for row in table.itertuples():
        records = panels.get(comparison_key(row.claim, row.cells))
        found = of_panel(records, design_looks) if records else None
        numbers = (
            (found.median_unbiased, found.low, found.high, found.bias_adjusted)
            if found
            else (math.nan,) * len(COLUMNS)
        )
        for column, x in zip(COLUMNS, numbers, strict=True):
            values[column].append(x)
    return table.assign(**values)


@dataclass(frozen=True)
class Replayed:
    """Studies of one design simulated on normal units and estimated at their stops
    (`replay`): per study, its stopping look and each number."""

    effect: float
    stop: np.ndarray
    naive: np.ndarray
    se: np.ndarray
    median_unbiased: np.ndarray
    low: np.ndarray
    high: np.ndarray
    bias_adjusted: np.ndarray

    @property
    def covered(self) -> np.ndarray:
        return (self.low <= self.effect) & (self.effect <= self.high)


def replay(
    looks,
    bounds,
    effect: float,
    margin: float | None = None,
    studies: int = 1000,
    seed: int = 1,
    paths: int = PATHS,
    tail: float = TAIL,
) -> Replayed:
    """`studies` seeded studies of N(effect, 1) units under the rule (t critical values of
    `bounds`, the se estimated at each look, `margin`'s equivalence stops), each estimated at
    its stop by `at_stop` (its own law of `paths` studies, seed 0, independent of these; its
    interval at 1 - 2 `tail`, the level `bounds` spend): what the coverage and bias in
    docs/sequential.md and tests/test_stop_estimates.py measure."""
    n = np.asarray(looks, float)
    crit = np.array([sequential.critical(c, k - 1) for c, k in zip(bounds, n, strict=True)])
    mean, sd = _law(tuple(int(k) for k in n), studies, seed)
    first, _ = _Rule(n, crit, margin, mean, sd).exits(effect, n.size - 1)
    rows = np.arange(first.size)
    estimates = effect + mean[rows, first]
    ses = sd[rows, first] / np.sqrt(n[first])
    found = [
        at_stop(looks, bounds, int(k), x, s, margin, tail=tail)
        for k, x, s in zip(first, estimates, ses, strict=True)
    ]
    columns = np.array([[f.median_unbiased, f.low, f.high, f.bias_adjusted] for f in found])
    return Replayed(effect, first, estimates, ses, *columns.T)

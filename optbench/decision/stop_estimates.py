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
    """The panel's rule in units of the stop's spread (delta = theta / sigma), read on _law's
    paths for several studies at once: each argument holds one value per study (a row of the
    results, a column per path), so that a replay's studies search their roots together. The
    tables are per look (a row each, contiguous), computed once per law: every study's
    arithmetic is the same element by element as one study's alone, so the numbers are too."""

    n: np.ndarray  # the looks' sizes
    crit: np.ndarray  # the t critical value each look applied (or would apply)
    mean: np.ndarray  # _law's mean, look by look: (looks, paths)
    half: np.ndarray  # each path's se at each look: sd / sqrt(n)
    reach: np.ndarray  # crit * half: how far each look's interval reaches from its estimate
    pivot: np.ndarray  # each path's studentized estimate (x_j - theta) / se_j: free of theta
    rise: np.ndarray  # the least delta whose t = (mean + delta) / half reaches crit: above 0
    fall: np.ndarray  # the least delta whose t exceeds -crit: below 0 under it

    def _decisions(self, j: int, delta: np.ndarray, margin: np.ndarray | None):
        """At look j, per study (rows, its delta and margin in units of sigma) and path: whether
        its interval lies above 0, below 0, and whether it decides at all (above, below or,
        with a margin, within it)."""
        d = delta[:, None]
        up, down = d >= self.rise[j], d < self.fall[j]  # t >= crit, t <= -crit, exactly
        decided = up | down
        if margin is not None:
            decided |= np.abs(self.mean[j] + d) + self.reach[j] < margin[:, None]
        return up, down, decided

    def _leaving(self, delta: np.ndarray, margin: np.ndarray | None):
        """Per look j before the last: (j, the paths, per study, whose interval first decides
        at look j)."""
        undecided = np.ones((delta.size, self.mean.shape[1]), bool)
        for j in range(self.n.size - 1):
            now = undecided & self._decisions(j, delta, margin)[2]
            yield j, now
            undecided &= ~now

    def first(self, delta: np.ndarray, margin: np.ndarray | None) -> np.ndarray:
        """Per study and path, the first look whose interval decides (the last look where
        none does)."""
        first = np.full((delta.size, self.mean.shape[1]), self.n.size - 1)
        for j, now in self._leaving(delta, margin):
            np.copyto(first, j, where=now)
        return first

    def p_value(
        self, delta: np.ndarray, stop: int, observed_delta: np.ndarray, margin: np.ndarray | None
    ) -> np.ndarray:
        """Per study (all stopped at look `stop`), P_delta(an outcome at least as high as the
        observed, the stagewise ordering): the paths that left earlier above 0, or within the
        margin with a higher studentized estimate, and those that reached the stop with one."""
        observed = (observed_delta - delta) * np.sqrt(self.n[stop])  # its (x - theta) / se
        undecided = np.ones((delta.size, self.mean.shape[1]), bool)
        count = np.zeros(delta.size, int)
        for j in range(stop):
            up, down, decided = self._decisions(j, delta, margin)
            if margin is not None:
                up |= decided & ~down & (self.pivot[j] >= observed[:, None])
            count += np.count_nonzero(undecided & up, axis=1)
            undecided &= ~decided
        count += np.count_nonzero(undecided & (self.pivot[stop] >= observed[:, None]), axis=1)
        return count / undecided.shape[1]

    def mean_at_stop(self, delta: np.ndarray, margin: np.ndarray | None) -> np.ndarray:
        """Per study, E_delta[estimate at the stop] over the whole design, in units of sigma."""
        at_stop = np.empty((delta.size, self.mean.shape[1]))
        at_stop[:] = self.mean[-1]
        for j, now in self._leaving(delta, margin):
            np.copyto(at_stop, self.mean[j], where=now)
        return delta + at_stop.mean(axis=1)


@functools.cache
def _rule(looks: tuple[int, ...], crit: tuple[float, ...], paths: int, seed: int) -> _Rule:
    """The rule of a design's looks and critical values on _law(looks, paths, seed): built
    once per design, for every stop estimated under it."""
    n, c = np.asarray(looks, float), np.asarray(crit)
    law, sd = _law(looks, paths, seed)
    table = functools.partial(np.ascontiguousarray, dtype=float)
    mean, half = table(law.T), table((sd / np.sqrt(n)).T)
    bound = c[:, None]

    def t(delta: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return (mean + delta) / half

    rise, fall = _least(lambda x: t(x) >= bound), _least(lambda x: ~(t(x) <= -bound))
    pivot = table((law * np.sqrt(n) / sd).T)
    return _Rule(n, c, mean, half, bound * half, pivot, rise, fall)


_INF = np.int64(0x7FF0000000000000)  # the bits of +inf: floats' ordered keys run -_INF to _INF


def _float(key: np.ndarray) -> np.ndarray:
    """The floats of ordered keys: a non-negative key is a float's bits, a negative one its
    negative's."""
    size = np.abs(key).view(np.float64)
    return np.where(key < 0, -size, size)


def _least(holds) -> np.ndarray:
    """Per element, the least float x for which holds(x), monotone in x, is true (+inf where
    none below it is): a bisection on the floats' order, exact, so that a comparison of x
    with it answers as holds(x) would."""
    low = np.full(holds(np.zeros(1)).shape, -_INF)
    high = np.full(low.shape, _INF)
    while (high > low + 1).any():
        mid = (low >> 1) + (high >> 1) + (low & high & 1)  # their mean, rounded down, in range
        true = holds(_float(mid))
        high, low = np.where(true, mid, high), np.where(true, low, mid)
    return _float(high)


def _criticals(bounds, n: np.ndarray) -> tuple[float, ...]:
    """The t critical value of each look's boundary, at n_j - 1 degrees of freedom."""
    return tuple(sequential.critical(c, k - 1) for c, k in zip(bounds, n, strict=True))


def _solve(f, target, start: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Per problem (an element of `start`), the root of its increasing f = target, bracketed
    from `start` by doubling steps, then bisected to _TOLERANCE of the first step. The problems
    move in lockstep, each through the points that it would alone: f(x, rows) gives the values
    of the problems `rows` at x."""
    target = np.broadcast_to(target, start.shape)
    low, high, step0, step = start.copy(), start.copy(), step, step.copy()
    at_start = f(start, np.arange(start.size))
    below = np.flatnonzero(at_start > target)
    while below.size:
        step[below], low[below] = 2 * step[below], low[below] - step[below]
        below = below[f(low[below], below) > target[below]]
    above = np.flatnonzero(at_start < target)
    while above.size:
        step[above], high[above] = 2 * step[above], high[above] + step[above]
        above = above[f(high[above], above) < target[above]]
    wide = np.flatnonzero(high - low > _TOLERANCE * step0)
    while wide.size:
        mid = (low[wide] + high[wide]) / 2
        under = f(mid, wide) < target[wide]
        low[wide[under]], high[wide[~under]] = mid[under], mid[~under]
        wide = wide[high[wide] - low[wide] > _TOLERANCE * step0[wide]]
    return (low + high) / 2


@dataclass(frozen=True)
class _Stops:
    """Stops of studies of one design (a value per study: its stopping look, 0-based, its
    estimate and se), to estimate together."""

    stop: np.ndarray
    estimate: np.ndarray
    se: np.ndarray


def _estimated(rule: _Rule, stops: _Stops, margin: float | None, tail: float) -> np.ndarray:
    """`at_stop`'s numbers (median-unbiased, low, high, bias-adjusted: the rows) for each of
    `stops` (the columns)."""
    n, stop = rule.n, stops.stop
    sigma = stops.se * np.sqrt(n[stop])
    scaled = None if margin is None else margin / sigma
    observed, step = stops.estimate / sigma, 1 / np.sqrt(n[stop])  # one se, in units of sigma
    later = np.flatnonzero(stop > 0)

    def part(rows: np.ndarray):
        return None if scaled is None else scaled[rows]

    def p_value(d: np.ndarray, rows: np.ndarray) -> np.ndarray:
        at, found = later[rows], np.empty(d.size)
        for k in np.unique(stop[at]):
            same = stop[at] == k
            found[same] = rule.p_value(d[same], int(k), observed[at[same]], part(at[same]))
        return found

    def quantile(p: float) -> np.ndarray:
        # everything reaches the first look: the fixed-size t interval there, exactly
        found = stops.estimate + stops.se * float(stats.t.ppf(p, n[0] - 1))
        found[later] = sigma[later] * _solve(p_value, p, observed[later], step[later])
        return found

    adjusted = _solve(lambda d, rows: rule.mean_at_stop(d, part(rows)), observed, observed, step)
    return np.array([quantile(0.5), quantile(tail), quantile(1 - tail), sigma * adjusted])


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
    rule = _rule(tuple(int(k) for k in n), _criticals(bounds, n), paths, seed)
    one = _Stops(np.array([stop]), np.array([estimate], float), np.array([se], float))
    median_unbiased, low, high, adjusted = (
        float(x[0]) for x in _estimated(rule, one, margin, tail)
    )
    return StopEstimate(estimate, median_unbiased, low, high, adjusted)


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
    chunk: int = 50,
) -> Replayed:
    """`studies` seeded studies of N(effect, 1) units under the rule (t critical values of
    `bounds`, the se estimated at each look, `margin`'s equivalence stops), each estimated at
    its stop as `at_stop` estimates it (its own law of `paths` studies, seed 0, independent of
    these; its interval at 1 - 2 `tail`, the level `bounds` spend), `chunk` studies at a time
    (the same numbers as one by one, in less time): what the coverage and bias in
    docs/sequential.md and tests/test_stop_estimates.py measure."""
    sizes = tuple(int(k) for k in looks)
    crit = _criticals(bounds, np.asarray(sizes))
    drawn = _rule(sizes, crit, studies, seed)  # the studies themselves, in units of sd
    first = drawn.first(np.array([effect]), None if margin is None else np.array([margin]))[0]
    rows = np.arange(first.size)
    estimates = effect + drawn.mean[first, rows]
    ses = drawn.half[first, rows]
    rule = _rule(sizes, crit, paths, 0)
    parts = [
        _estimated(rule, _Stops(first[at], estimates[at], ses[at]), margin, tail)
        for at in np.array_split(rows, max(1, -(-rows.size // chunk)))
    ]
    return Replayed(effect, first, estimates, ses, *np.concatenate(parts, axis=1))

"""Resampling statistics for EDFs: seeded bootstrap bands and CIs (pointwise and simultaneous),
BCa intervals with their percentile fallback, bootstrap power (how many samples would show an
effect), the KS test, good ranges; and for statistics of training seeds, Student-t intervals of
per-seed contrasts with their power (`t_interval`, `seed_power`).

Every bootstrap resamples a cell's trials with replacement and recomputes the cell's best
error inside each resample, so bands and CIs include the uncertainty of the best itself.
Randomness comes only from the `seed` argument (numpy's default_rng): same inputs, same output.

A statistic of resampled groups (`interval`, `power`) is a function of index arrays, one per
group (a group: the units resampled together, e.g. a cell's (lr, wd) samples or its seeds),
each of shape (..., n_g) with any leading batch shape, returning the statistic with that
leading shape. Resampling indices instead of values lets one statistic serve the data, every
bootstrap resample, the jackknife of BCa and the larger samples of the power estimate.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

N_BOOT = 1000
LEVEL = 0.95
# Bootstrap power (`power`): outer resamples at each candidate size, inner resamples per
# interval, and the probability the interval must exclude 0 with.
POWER_OUTER = 200
POWER_INNER = 200
POWER_TARGET = 0.8


def _rng(seed: int | np.random.SeedSequence | list[int]) -> np.random.Generator:
    return np.random.default_rng(seed)


def resample(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(n_boot, n) array: each row is `values` resampled with replacement."""
    values = np.asarray(values)
    return values[rng.integers(0, values.size, size=(n_boot, values.size))]


def dtop1_rows(errors: np.ndarray) -> np.ndarray:
    """dtop-1 of each row of a (B, n) error array; rows without a finite error are all +inf."""
    best = errors.min(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        out = errors - best
    return np.where(np.isfinite(best), out, np.inf)


def edf_rows(values: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """F(x) on the ascending grid `xs` for each row of a (B, n) array, in O(B*n + B*len(xs))."""
    n_rows, n = values.shape
    width = xs.size + 1  # the last bin collects values above the grid (and +inf)
    first_x = np.searchsorted(xs, values, side="left")  # value <= xs[j] for every j >= first_x
    flat = (np.arange(n_rows)[:, None] * width + first_x).ravel()
    counts = np.bincount(flat, minlength=n_rows * width).reshape(n_rows, width)[:, :-1]
    return counts.cumsum(axis=1) / n


def _percentiles(samples: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(samples, [tail, 100.0 - tail], axis=0)
    return low, high


def bootstrap_ci(
    values: np.ndarray,
    statistic: Callable[[np.ndarray], np.ndarray],
    *,
    n_boot: int = N_BOOT,
    seed: int = 0,
    level: float = LEVEL,
) -> tuple[float, float]:
    """Percentile bootstrap CI of `statistic`, which maps a (B, n) array of resamples to (B,)."""
    samples = statistic(resample(values, n_boot, _rng(seed)))
    low, high = _percentiles(samples, level)
    return float(low), float(high)


def edf_replicates(
    errors: np.ndarray, xs: np.ndarray, *, relative: bool, n_boot: int, seed
) -> tuple[np.ndarray, np.ndarray]:
    """The EDF on `xs` of the trials' errors (dtop-1 with `relative`, the best recomputed in
    each resample) and its `n_boot` bootstrap replicates (n_boot, len(xs))."""
    xs = np.asarray(xs, dtype=float)
    errors = np.asarray(errors, dtype=float)[None, :]
    rows = resample(errors[0], n_boot, _rng(seed))
    if relative:
        errors, rows = dtop1_rows(errors), dtop1_rows(rows)
    return edf_rows(errors, xs)[0], edf_rows(rows, xs)


def edf_band(
    errors: np.ndarray,
    xs: np.ndarray,
    *,
    relative: bool = True,
    n_boot: int = N_BOOT,
    seed: int = 0,
    level: float = LEVEL,
    simultaneous: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap band of the EDF on `xs`, of dtop-1 (relative) or of raw error: pointwise
    (percentiles at each x), or `simultaneous` (`sup_band`, clipped to [0, 1]; for dtop-1 it
    covers the best's uncertainty, which DKW cannot)."""
    curve, replicates = edf_replicates(errors, xs, relative=relative, n_boot=n_boot, seed=seed)
    if not simultaneous:
        return _percentiles(replicates, level)
    low, high = sup_band(curve, replicates, level)
    return np.clip(low, 0.0, 1.0), np.clip(high, 0.0, 1.0)


def ks_test(dtop_a: np.ndarray, dtop_b: np.ndarray) -> tuple[float, float]:
    """Two-sample Kolmogorov-Smirnov test (scipy): (statistic, p-value). +inf (never within)
    is a legal value: it sits above every finite dtop-1 in both EDFs."""
    result = stats.ks_2samp(np.asarray(dtop_a, float), np.asarray(dtop_b, float))
    return float(result.statistic), float(result.pvalue)


@dataclass(frozen=True)
class Interval:
    """An estimate and its bootstrap confidence interval."""

    estimate: float
    low: float
    high: float


def within_diff(errors_a: np.ndarray, errors_b: np.ndarray, points: float, paired: bool = False):
    """frac_within(points) of a minus that of b, as a statistic of resampled indices: the
    fraction of a resample's trials within `points` of its own best. Unpaired: one group per
    model, `errors_*` each model's trials. `paired`: one group, `errors_*` (samples x seeds)
    matrices of the same (lr, wd) samples, sample i of both resampled together."""
    errors_a, errors_b = np.asarray(errors_a, float), np.asarray(errors_b, float)

    def within(errors: np.ndarray, idx: np.ndarray) -> np.ndarray:
        trials = errors[idx].reshape(*idx.shape[:-1], -1)  # a matrix's seeds pooled
        best = trials.min(axis=-1, keepdims=True)
        with np.errstate(invalid="ignore"):
            return (np.isfinite(best) & (trials - best <= points)).mean(axis=-1)

    if paired:
        return lambda idx: within(errors_a, idx) - within(errors_b, idx)
    return lambda idx_a, idx_b: within(errors_a, idx_a) - within(errors_b, idx_b)


def frac_within_diff(
    errors_a: np.ndarray,
    errors_b: np.ndarray,
    *,
    points: float = 4.0,
    paired: bool = False,
    n_boot: int = N_BOOT,
    seed: int | list[int] = 0,
    level: float = LEVEL,
) -> Interval:
    """frac_within(points) of model a minus that of model b (`within_diff`: each model's
    trials resampled on its own, or `paired` samples together); a fraction of trials is
    discrete, so its interval is the percentile one."""
    sizes = (len(errors_a),) if paired else (np.size(errors_a), np.size(errors_b))
    found = interval(
        within_diff(errors_a, errors_b, points, paired),
        sizes,
        discrete=True,
        n_boot=n_boot,
        seed=seed,
        level=level,
    )
    return Interval(found.estimate, found.low, found.high)


def good_range(
    errors: np.ndarray,
    values: np.ndarray,
    *,
    n_boot: int = N_BOOT,
    seed: int = 0,
    level: float = LEVEL,
) -> Interval | None:
    """The hyperparameter value of the best run and the bootstrap range of that argmin: resample
    the runs, take the value of each resample's best run, keep the central `level` percentiles.
    None when no run has a finite error."""
    errors = np.asarray(errors, dtype=float)
    values = np.asarray(values, dtype=float)
    if not np.isfinite(errors).any():
        return None
    idx = _rng(seed).integers(0, errors.size, size=(n_boot, errors.size))
    best_idx = np.take_along_axis(idx, errors[idx].argmin(axis=1)[:, None], axis=1)[:, 0]
    # a resample of only diverged runs has no best: drop it
    picked = values[best_idx][np.isfinite(errors[best_idx])]
    best = float(values[errors.argmin()])
    if picked.size == 0:
        return Interval(best, best, best)
    # an order statistic (a value some run really had), so log or linear scale agree
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(picked, [tail, 100.0 - tail], method="inverted_cdf")
    return Interval(best, float(low), float(high))


# --- intervals of a statistic of resampled groups ------------------------------------------------

Statistic = Callable[..., np.ndarray]


@dataclass(frozen=True)
class GroupInterval:
    """An estimate, its interval, how the interval was computed ("BCa", "percentile" or "t")
    and the estimate's standard error (the bootstrap replicates' standard deviation, or s /
    sqrt(k) for a t interval)."""

    estimate: float
    low: float
    high: float
    method: str
    se: float = float("nan")


def full_indices(sizes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """The data itself as index arrays: group g is arange(sizes[g])."""
    return tuple(np.arange(n) for n in sizes)


def interval(
    statistic: Statistic,
    sizes: tuple[int, ...],
    *,
    discrete: bool = False,
    n_boot: int = N_BOOT,
    seed: int | list[int] = 0,
    level: float = LEVEL,
) -> GroupInterval:
    """BCa interval (scipy.stats.bootstrap) of `statistic` over its groups, each resampled on
    its own, or the percentile interval of the same resamples where BCa does not apply: a
    `discrete` statistic (a fraction of trials: its bootstrap distribution has ties and atoms,
    where BCa's bias correction and acceleration are not defined by smooth quantiles), or where
    BCa degenerates (all resamples equal, an estimate outside the resamples' range: scipy
    warns and returns NaN)."""
    estimate = float(statistic(*full_indices(sizes)))
    method = "percentile" if discrete else "BCa"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = stats.bootstrap(
            full_indices(sizes),
            lambda *idx, axis=-1: statistic(*idx),
            n_resamples=n_boot,
            vectorized=True,
            confidence_level=level,
            method=method,
            random_state=_rng(seed),
        )
    low, high = result.confidence_interval
    degenerate = any(issubclass(w.category, stats.DegenerateDataWarning) for w in caught)
    if method == "BCa" and (degenerate or not (np.isfinite(low) and np.isfinite(high))):
        method = "percentile"
        low, high = _percentiles(result.bootstrap_distribution, level)
    se = float(np.std(result.bootstrap_distribution, ddof=1))
    return GroupInterval(estimate, float(low), float(high), method, se)


# --- bootstrap power: the sample size that would show an effect ------------------------------


def power_grid(n_min: int, n_max: int) -> list[int]:
    """Candidate sizes from `n_min` up to `n_max`: about 1.5x steps (4, 6, 8, 12, 16, ...)."""
    steps = [k * 2**e for e in range(0, 12) for k in (2, 3)]
    return sorted({n_min, *(n for n in steps if n_min < n <= n_max)})


@dataclass(frozen=True)
class Power:
    """The probability, at each candidate size, that the interval excludes 0 on the estimate's
    side; `needed` is the smallest size reaching POWER_TARGET (None: none up to the grid's end).
    Empty `sizes`: the study is already larger than the search's largest size (not searched)."""

    sizes: tuple[int, ...]
    power: tuple[float, ...]
    needed: int | None
    direction: int  # +1: the estimate is above 0, -1: below, 0: exactly 0


def power(
    statistic: Statistic,
    sizes: tuple[int, ...],
    n_max: int,
    *,
    n_min: int | None = None,
    discrete: bool = False,
    seed: int | list[int] = 0,
    level: float = LEVEL,
    n_outer: int = POWER_OUTER,
    n_inner: int = POWER_INNER,
    target: float = POWER_TARGET,
) -> Power:
    """Bootstrap power: treat the observed units of each group as the population, draw
    `n_outer` studies of n units per group (n from `power_grid`, from `n_min`, default the
    smallest group's size, so the first entry is a study of the present size; every group
    at n), compute each
    one's interval from `n_inner` resamples as `interval` would (BCa, percentile for a
    `discrete` statistic or where BCa degenerates), and count the studies whose interval
    excludes 0 on the side of the observed estimate. The sizes are tried in ascending order and
    the search stops at the first that reaches `target`. "If the effect is as estimated": the
    population is the data, so a zero estimate (or identical groups) never reaches it."""
    rng = _rng(seed)
    estimate = float(statistic(*full_indices(sizes)))
    direction = int(np.sign(estimate))
    start = min(sizes) if n_min is None else n_min
    if start > n_max:  # past the search's end already: its interval says it, no power search
        return Power((), (), None, direction)
    grid, found = [], []
    needed = None
    for n in power_grid(start, n_max):
        hits = 0
        if direction != 0:
            hits = _exclusions(
                statistic, sizes, n, direction, discrete, level, (n_outer, n_inner), rng
            )
        grid.append(n)
        found.append(hits / n_outer)
        if found[-1] >= target:
            needed = n
            break
    return Power(tuple(grid), tuple(found), needed, direction)


def _exclusions(statistic, sizes, n, direction, discrete, level, counts, rng) -> int:
    """How many of n_outer simulated studies of n units per group exclude 0 on `direction`'s
    side. Worked in chunks of studies so memory stays near 50 MB whatever n is."""
    n_outer, n_inner = counts
    accel = None if discrete else _acceleration(statistic, sizes, n)
    chunk = max(1, int(2e6 // (n_inner * n * len(sizes))))
    hits = 0
    for start in range(0, n_outer, chunk):
        rows = min(chunk, n_outer - start)
        studies = [rng.integers(0, size, (rows, 1, n)) for size in sizes]
        resampled = [
            np.take_along_axis(s, rng.integers(0, n, (rows, n_inner, n)), axis=2) for s in studies
        ]
        replicates = statistic(*resampled)  # (rows, n_inner)
        if discrete:
            low, high = _percentiles(replicates.T, level)
        else:
            low, high = _bca_rows(statistic(*studies), replicates, accel, level)
        hits += int(((low > 0) if direction > 0 else (high < 0)).sum())
    return hits


def _acceleration(statistic, sizes: tuple[int, ...], n: int) -> float:
    """BCa's acceleration for studies of n units per group, from the jackknife of the observed
    data (every group in turn, the others whole, as scipy does). The acceleration is the
    influence function's skewness over 6 sqrt(size): a group's jackknife sums of d^3 and d^2
    shrink as (n_g / n)^2 and n_g / n when it grows from n_g to n units, so one jackknife of
    the data serves every simulated study (a per-study jackknife cost n times more)."""
    cubes = squares = 0.0
    for g, size in enumerate(sizes):
        keep = np.array([np.delete(np.arange(size), i) for i in range(size)])  # (n_g, n_g - 1)
        full = full_indices(sizes)
        jack = statistic(*(keep if h == g else idx for h, idx in enumerate(full)))
        d = jack.mean() - jack
        cubes += float((d**3).sum()) * (size / n) ** 2
        squares += float((d**2).sum()) * (size / n)
    return cubes / (6.0 * squares**1.5) if squares > 0 else float("nan")


def _bca_rows(estimate, replicates, accel: float, level) -> tuple[np.ndarray, np.ndarray]:
    """BCa bounds of each simulated study (a row of `replicates`, its estimate a row of
    `estimate`), as scipy.stats.bootstrap computes them: bias z0 from the share of replicates
    below the study's estimate, the acceleration `accel`; the percentile bounds where that
    degenerates (z0 infinite, no jackknife spread)."""
    # the share of replicates below the estimate, ties counted half (scipy's percentileofscore)
    z0 = special.ndtri(((replicates < estimate).mean(1) + (replicates <= estimate).mean(1)) / 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = special.ndtri(np.array([(1 - level) / 2, (1 + level) / 2]))[:, None]
        shifted = z0 + (z0 + z) / (1 - accel * (z0 + z))
        quantiles = special.ndtr(shifted)  # (2, rows)
    ok = np.isfinite(quantiles).all(axis=0)
    quantiles = np.where(ok, quantiles, np.array([(1 - level) / 2, (1 + level) / 2])[:, None])
    ordered = np.sort(replicates, axis=1)
    # linear interpolation between order statistics, as np.percentile (and scipy) do
    pos = quantiles * (ordered.shape[1] - 1)
    lo, frac = np.floor(pos).astype(int), pos - np.floor(pos)
    hi = np.minimum(lo + 1, ordered.shape[1] - 1)
    rows = np.arange(ordered.shape[0])
    bounds = ordered[rows, lo] * (1 - frac) + ordered[rows, hi] * frac
    return bounds[0], bounds[1]


# --- simultaneous bands for EDF curves ----------------------------------------------------


def dkw_halfwidth(n: int, level: float = LEVEL) -> float:
    """Dvoretzky-Kiefer-Wolfowitz (Massart's constant): P(sup_x |F_n(x) - F(x)| > eps) <= 2
    exp(-2 n eps^2), so eps = sqrt(ln(2 / alpha) / (2 n)) bounds the whole EDF of n iid values
    at once with probability >= level."""
    return float(np.sqrt(np.log(2.0 / (1.0 - level)) / (2.0 * n)))


def sup_band(
    curve: np.ndarray, replicates: np.ndarray, level: float = LEVEL
) -> tuple[np.ndarray, np.ndarray]:
    """Simultaneous band from bootstrap `replicates` (B, len(curve)) of a curve: curve +- the
    `level` quantile over replicates of the largest deviation max_x |replicate(x) - curve(x)|
    (the bootstrap of the maximum deviation: it holds for every x at once). Constant width:
    a studentized version (deviation / the replicates' spread at x) narrows the band where
    the EDF is near 0 or 1, but covered a normal CDF in only 81% of 200 samples of 60 against
    95% for this one (tests/test_evidence.py measures the latter)."""
    q = float(np.quantile(np.abs(replicates - curve).max(axis=1), level))
    return curve - q, curve + q


# --- statistics of training seeds: Student-t intervals of per-seed contrasts -------------------
#
# A seed claim compares cells trained with the same seeds; seed s of every cell gives one value
# of the claim's contrast, and those k values are independent draws. A bootstrap of k = 2 or 3
# values has 3 or 10 distinct means and intervals narrower than the seeds' spread asks for
# (bench/RESULTS.md, replicates: 22 of 30 2-seed intervals covered); Student's t on the k
# per-seed values is exact for normal contrasts and honest about k - 1 degrees of freedom.


def t_interval(
    values: np.ndarray, level: float = LEVEL, critical: float | None = None
) -> GroupInterval:
    """Student-t interval of the mean of `values` (one per training seed; at least 2) at
    `level`, or mean +- `critical` se (a sequential look's: sequential.critical, which stays
    finite where a level near 1 rounds to 1)."""
    values = np.asarray(values, dtype=float)
    k = values.size
    mean = float(values.mean())
    se = float(values.std(ddof=1) / np.sqrt(k))
    if critical is None:
        critical = float(stats.t.ppf((1 + level) / 2, k - 1))
    half = float(critical * se)
    return GroupInterval(mean, mean - half, mean + half, "t", se)


SEED_POWER_DRAWS = 4000  # simulated studies per candidate seed count (power within ~1 point)


def seed_power(
    contrasts: np.ndarray,
    k_max: int,
    *,
    seed: int | list[int] = 0,
    level: float = LEVEL,
    target: float = POWER_TARGET,
) -> Power:
    """Power of a seed claim: the probability that a study of k seeds shows it, for k from the
    present count up (power_grid), if the per-seed contrasts are normal with the observed means
    and covariance. `contrasts` is (steps, k): a claim that needs every step above 0 (a chain
    such as S1 < S2 < P) holds in a simulated study when every step's t interval lies above 0
    (or below, for a negative estimate); one contrast is one step. Estimated means make this
    the power "if the effect is as estimated", as `power` is for samples."""
    contrasts = np.atleast_2d(np.asarray(contrasts, dtype=float))
    steps, k_now = contrasts.shape
    mean = contrasts.mean(axis=1)
    smallest = mean[np.argmin(np.abs(mean))]
    direction = int(np.sign(smallest)) if np.all(np.sign(mean) == np.sign(smallest)) else 0
    if k_now > k_max:
        return Power((), (), None, direction)
    cov = np.atleast_2d(np.cov(contrasts, ddof=1))
    rng = _rng(seed)
    grid, found, needed = [], [], None
    for k in power_grid(k_now, k_max):
        hits = 0.0
        if direction != 0:
            draws = rng.multivariate_normal(mean, cov, size=(SEED_POWER_DRAWS, k))  # (D, k, steps)
            m = draws.mean(axis=1)
            half = stats.t.ppf((1 + level) / 2, k - 1) * draws.std(axis=1, ddof=1) / np.sqrt(k)
            shown = (m - half > 0) if direction > 0 else (m + half < 0)
            hits = float(shown.all(axis=1).mean())
        grid.append(k)
        found.append(hits)
        if hits >= target:
            needed = k
            break
    return Power(tuple(grid), tuple(found), needed, direction)

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
ch. 9): with z and a known se the intervals of all looks cover together with probability
1 - alpha, so every decision read off them is wrong with probability at most alpha however the
study stops; with the se estimated (below) about alpha, a few percent of it more. A study's
alpha is its own, not each panel's: a study that decides m panels (m counted from its grid
before any data, `Design.panels`) starts each at alpha / m and recycles alpha by Holm's
step-down in its graphical form (Maurer and Bretz 2013): once r panels have rejected their zero
null (`REJECTS`: holds or opposite, negligible or not), each open panel's level is
alpha / (m - r) (`Design.level`), its boundaries those of the same spending function at that
level over all its looks (`Design.boundaries`), applied from the look at which the r-th panel
rejected on (that look included: a look's rejections are recycled until none is added). An
"equivalent" decision, a "nothing learned" stop and "undecided" reject no zero null and pass
nothing on. With z and a known se, the chance that any of the study's decisions on a zero null
is wrong is then at most alpha, whatever the panels' correlation (the Bonferroni-based closed
test of Maurer and Bretz, since each boundary falls as its level grows); with the se estimated,
about alpha as for one panel (`simulate_family` measures both, docs/sequential.md). The
outcomes (`look_outcome`, the one rule a look is
taken by and its record read back with; `outcome` reads an interval):
- holds: the interval lies above 0 (for a chain of steps, claim (d): every step's);
- opposite: it lies below 0 (every step's: error falls at every step);
- "holds, negligible" / "opposite, negligible": one of these with the interval inside
  [-margin, +margin] too: a real difference, smaller than the margin;
- equivalent: it lies inside [-margin, +margin] (only with a margin, declared before the data);
- continue: none of these and looks remain;    - undecided: none of these at the last look;
- nothing learned: a cell with no finished trial, every cell near chance (claims.py), or
  intervals with no information (`no_information`: an se of 0, or below MARGIN_SE_SHARE of the
  margin); the panel stops, a non-binding futility stop (the boundaries ignore it, so it only
  lowers the error rate).
A chain whose steps are shown both ways ("mixed", `direction`) decides nothing (continue, or
undecided at the last look).
An se estimated from few units (k training seeds; claim (a)'s bootstrap se of n samples) is
read with Student's t at the boundary's nominal level instead of z (`critical`, the
"significance level approach"; n - 1 degrees of freedom). That is close to alpha, not exact:
on normal units with an estimated variance it errs more often, 5% to 13% of alpha more at the
shipped designs (`simulate`, measured in docs/sequential.md): "about alpha", not "at most".

The normal law is exact for means of independent units; claim (a)'s statistic (a difference of
EDF areas of dtop-1, the best a minimum that moves as samples are added) only approximates it:
its error rates are measured on replicate studies (bench/replicates.py), not assumed.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

ALPHA = 0.05
SPENDING = ("pocock", "obrien-fleming")
HOLDS_NEGLIGIBLE, OPPOSITE_NEGLIGIBLE = "holds, negligible", "opposite, negligible"
DECIDED = ("holds", "opposite", HOLDS_NEGLIGIBLE, OPPOSITE_NEGLIGIBLE, "equivalent")
# the non-binding futility stop: the data carry nothing to decide from (`look_outcome`)
NOTHING_LEARNED = "nothing learned"
OUTCOMES = (*DECIDED, "continue", "undecided", NOTHING_LEARNED)
# the decisions that reject a panel's zero null, whose alpha Holm's step-down passes on to the
# panels still open (module docstring); "equivalent" rejects another null (|effect| >= margin)
REJECTS = ("holds", "opposite", HOLDS_NEGLIGIBLE, OPPOSITE_NEGLIGIBLE)
# a standard error this small against the interval's scale is no spread (float rounding of a
# bootstrap of identical values)
SE_FLOOR = 1e-12
# An se below this share of the margin is data that carry nothing, not precision: at the sizes
# studies look at (the shipped ones at most 64 samples or 6 seeds) a real spread gives one many
# times larger (the quickstart's se at its stop is 0.85 of its margin; 1/20 of it would take
# about 3,000 samples of the quickstart's spread)
MARGIN_SE_SHARE = 0.05
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
    return list(_boundaries(tuple(_check_fractions(fractions)), spending, float(alpha)))


@functools.cache  # a study's looks ask for the same few levels again and again (Design.level)
def _boundaries(fractions: tuple[float, ...], spending: str, alpha: float) -> tuple[float, ...]:
    law, out, before = _Continuation(), [], 0.0
    for tk in fractions:
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
    return tuple(out)


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


def direction(lows, highs) -> str:
    """What the intervals [lows[i], highs[i]] of a claim's steps show together (one step for
    most claims, every step of a chain for claim (d)): "holds" when every one lies above 0,
    "opposite" when every one lies below 0, "mixed" when some lie above and some below, ""
    when none of these. The one chain rule of the fixed-size verdict and of a look."""
    lows, highs = np.atleast_1d(np.asarray(lows, float)), np.atleast_1d(np.asarray(highs, float))
    if (lows > 0).all():
        return "holds"
    if (highs < 0).all():
        return "opposite"
    return "mixed" if (lows > 0).any() and (highs < 0).any() else ""


def no_information(lows, ses, margin: float | None) -> str | None:
    """Why a look's (or a fixed-size row's) step intervals carry no information, from their own
    numbers: a standard error of 0 (every resample gives one value, SE_FLOOR) or, with a margin,
    below MARGIN_SE_SHARE of it; None when every step has a spread."""
    lows, ses = np.atleast_1d(np.asarray(lows, float)), np.atleast_1d(np.asarray(ses, float))
    scale = max(1.0, float(np.abs(lows).max())) if np.isfinite(lows).all() else 1.0
    if not (ses > SE_FLOOR * scale).all():
        return "its contrast has no spread (se 0: every resample gives one value): no decision"
    if margin is not None and not (ses >= MARGIN_SE_SHARE * margin).all():
        return (
            f"its se ({float(ses.min()):.2g}) is below {MARGIN_SE_SHARE:g} of the margin "
            f"({margin:g}): data that vary this little learned nothing, no decision"
        )
    return None


def look_outcome(
    lows,
    highs,
    ses,
    margin: float | None,
    last: bool,
    nothing_learned: str | None = None,
    note: str | None = None,
) -> tuple[str, str | None]:
    """The one rule of a look, as the look takes it (claims.py) and as its reader checks a
    recorded one (decision/looks.py): its outcome and why it decides nothing (None where it
    decides on its interval). `nothing_learned`: why the cells carry nothing (claims.py: a cell
    with no finished trial, or every cell near chance); `note`: why the intervals decide nothing though
    the data are real (a chain shown both ways; in a record, any note of a look that continued).
    - nothing learned (NOTHING_LEARNED, the panel stops there: a non-binding futility stop, at
      any look): the cells learned nothing, or the intervals carry no information
      (`no_information`); the boundaries are those of the rule without it, so stopping here
      can only lower the error rate;
    - continue (undecided at the last look) with `note`;
    - else what the intervals give (`outcome`)."""
    if nothing_learned is not None:
        return NOTHING_LEARNED, nothing_learned
    if note is not None:
        return ("undecided" if last else "continue"), note
    blank = no_information(lows, ses, margin)
    if blank is not None:
        return NOTHING_LEARNED, blank
    return outcome(lows, highs, margin, last), None


def outcome(low, high, margin: float | None, last: bool, decidable: bool = True) -> str:
    """What a look's repeated confidence interval [low, high] decides (module docstring); for a
    chain, `low` and `high` are every step's. `decidable` False (degenerate data, claims.py)
    decides nothing."""
    lows, highs = np.atleast_1d(np.asarray(low, float)), np.atleast_1d(np.asarray(high, float))
    open_ = "undecided" if last else "continue"
    if not (decidable and np.isfinite(lows).all() and np.isfinite(highs).all()):
        return open_
    inside = margin is not None and bool(((-margin < lows) & (highs < margin)).all())
    shown = direction(lows, highs)
    if shown in ("holds", "opposite"):
        return f"{shown}, negligible" if inside else shown
    return "equivalent" if inside else open_


@dataclass(frozen=True)
class Design:
    """The looks of a sequential study: the sizes n_1 < ... < n_K (samples or seeds), how
    alpha is spent over them, the equivalence margin (None: no "equivalent" outcome), and the
    number of panels the study decides, over which its alpha is shared by Holm's step-down
    (module docstring)."""

    looks: tuple[int, ...]
    spending: str = "pocock"
    alpha: float = ALPHA
    margin: float | None = None
    panels: int = 1

    @property
    def fractions(self) -> list[float]:
        return [n / self.looks[-1] for n in self.looks]

    @property
    def panel_alpha(self) -> float:
        """Each panel's share of the study's alpha before any panel rejects (Bonferroni's)."""
        return self.level(0)

    def level(self, rejected: int) -> float:
        """An open panel's level once `rejected` of the study's panels have rejected their
        zero null: alpha / (panels - rejected), Holm's step-down with equal weights (each
        rejection passes its level on equally to the panels still open)."""
        return self.alpha / max(1, self.panels - rejected)

    def boundaries(self, level: float | None = None) -> list[float]:
        """The z boundaries of a panel at `level` (its share before any rejection if None)."""
        return boundaries(
            self.fractions, self.spending, self.panel_alpha if level is None else level
        )

    def criticals(self, level: float | None = None) -> list[float]:
        """The critical value of each look's interval: Student's t with n_k - 1 degrees of
        freedom at its boundary's tail, as a look reads an estimated se."""
        bounds = self.boundaries(level)
        return [critical(c, n - 1) for c, n in zip(bounds, self.looks, strict=True)]


def step_down(take, design: Design, rejected: int, outcome_of=lambda x: x.outcome) -> dict:
    """One look of a study's open panels under Holm's step-down (module docstring): `take(level)`
    gives each open panel's look at that level ({key: look}); the look is taken at the level the
    `rejected` panels give, then again at the higher level while it adds rejections
    (`REJECTS`, read by `outcome_of`), each panel keeping the look that rejected it. Returns
    every panel's look, in the order of the first pass. The one loop of the rule: the rounds
    (run/rounds.py) and the benches replay it."""
    taken: dict = {}
    order: list = []
    while True:
        found = take(design.level(rejected + len(taken)))
        order = order or list(found)
        found = {key: x for key, x in found.items() if key not in taken}
        new = {key: x for key, x in found.items() if outcome_of(x) in REJECTS}
        if not new:
            found |= taken
            return {key: found[key] for key in order}
        taken |= new


@dataclass(frozen=True)
class Simulated:
    """Studies of one design simulated on normal units (`simulate`)."""

    stops: np.ndarray  # the share that stops at each look (the last one whatever it shows)
    decided: float  # the share whose interval left 0 at some look (holds or opposite)
    wrong: float  # the share decided against the effect's sign (any decision at effect 0)
    paths: int

    @property
    def wrong_se(self) -> float:
        """The Monte-Carlo standard error of `wrong`."""
        return math.sqrt(self.wrong * (1 - self.wrong) / self.paths)


def simulate(
    design: Design, effect: float = 0.0, paths: int = 200_000, seed: int = 0, chunk: int = 50_000
) -> Simulated:
    """The rule as a look applies it, on `paths` studies of independent normal units N(effect,
    1) (effect in standard deviations of one unit): at look k the mean of the first n_k units
    and its estimated se s / sqrt(n_k), the interval mean +- design.criticals()[k] se. Seeded
    and vectorised; what `--dry-run`'s expected size and the calibration in docs/sequential.md
    rest on (margins are not simulated: only holds and opposite stop a path early)."""
    rng = np.random.default_rng(seed)
    looks = np.asarray(design.looks)
    crit = np.asarray(design.criticals())
    stops = np.zeros(looks.size)
    decided = wrong = 0
    for start in range(0, paths, chunk):
        units = rng.normal(effect, 1.0, size=(min(chunk, paths - start), looks[-1]))
        mean, _, any_, first = read_paths(units, looks, crit)
        stops += np.bincount(first, minlength=looks.size)
        sign = np.sign(mean[np.arange(first.size), first])
        decided += int(any_.sum())
        wrong += int((any_ & ((sign != np.sign(effect)) | (effect == 0))).sum())
    return Simulated(stops / paths, decided / paths, wrong / paths, paths)


def read_paths(units: np.ndarray, looks: np.ndarray, crit: np.ndarray):
    """The rule read on simulated studies (`units`: one row of units, in order, per study) at
    `looks` with the t critical values `crit`: per study and look the mean and t (mean over
    s / sqrt(n_k); nan where s is 0 or undefined), per study whether some look crossed and
    the look it stops at (the first crossing, else the last). `simulate` and `--dry-run`'s
    expected size (run/expected_size.py) read studies by it."""
    sums = np.cumsum(units, axis=1)[:, looks - 1]
    squares = np.cumsum(units * units, axis=1)[:, looks - 1]
    mean = sums / looks
    with np.errstate(divide="ignore", invalid="ignore"):
        var = np.maximum(squares - looks * mean * mean, 0.0) / (looks - 1)
        t = mean / np.sqrt(var / looks)
    crossed = np.abs(t) >= crit
    any_ = crossed.any(axis=1)
    first = np.where(any_, crossed.argmax(axis=1), looks.size - 1)
    return mean, t, any_, first


@dataclass(frozen=True)
class SimulatedFamily:
    """Studies of one design deciding several panels, simulated on normal units
    (`simulate_family`)."""

    wrong: float  # the share with any wrong decision (a zero null rejected, or a wrong sign)
    rejected: float  # the mean number of panels whose zero null was rejected
    units: float  # the mean size (units per cell) at which a panel stopped
    paths: int
    cell_units: float  # the mean size a cell trained: until the last panel reading it stopped

    @property
    def wrong_se(self) -> float:
        """The Monte-Carlo standard error of `wrong`."""
        return math.sqrt(self.wrong * (1 - self.wrong) / self.paths)


def simulate_family(
    design: Design,
    effects,
    paths: int = 100_000,
    seed: int = 0,
    *,
    known_se: bool = False,
    recycle: bool = True,
    correlation: float = 0.0,
    contrasts=None,
    chunk: int = 20_000,
) -> SimulatedFamily:
    """The study's rule over its `design.panels` panels, each of independent normal units
    N(effects[i], 1) (`correlation`: that share of each unit's variance common to every panel's
    unit of the same index); with `contrasts` (panels x cells), `effects` are the cells' means
    instead and a panel's unit is that contrast of the cells' units of the same index (a
    ranking's pairs: e_i - e_j, paired by sample). On `paths` seeded studies, vectorised: at
    look k each open panel's
    statistic (mean / se; the se estimated, as `simulate`, or known with `known_se`) against
    its critical value at its level, a rejection passing its level on (Holm, `Design.level`;
    `recycle` False: every panel at alpha / m throughout, Bonferroni) and the look's rejections
    recycled until none is added. What tests/test_sequential.py's family-wise checks read."""
    means = np.asarray(effects, float)
    reads = np.eye(means.size) if contrasts is None else np.asarray(contrasts, float)
    effects = reads @ means
    m = effects.size
    if m != design.panels:
        raise ValueError(f"{m} effects for a design of {design.panels} panels")
    rng = np.random.default_rng(seed)
    looks = np.asarray(design.looks)
    # per number of rejections so far (row) the critical value of each look (column)
    table = design.boundaries if known_se else design.criticals
    crit = np.array([table(design.level(r if recycle else 0)) for r in range(m + 1)])
    wrong = rejected = 0
    units = cell_units = 0.0
    for start in range(0, paths, chunk):
        p = min(chunk, paths - start)
        noise = rng.normal(size=(p, means.size, looks[-1]))
        if correlation:
            shared = rng.normal(size=(p, 1, looks[-1]))
            noise = math.sqrt(1 - correlation) * noise + math.sqrt(correlation) * shared
        x = np.einsum("mc,pcn->pmn", reads, noise + means[None, :, None])
        mean = np.cumsum(x, axis=2)[:, :, looks - 1] / looks
        if known_se:  # a panel unit's variance: its contrast of the cells' (correlated) units
            var = (1 - correlation) * (reads**2).sum(axis=1) + correlation * reads.sum(axis=1) ** 2
            stat = mean * np.sqrt(looks) / np.sqrt(var)[None, :, None]
        else:
            squares = np.cumsum(x * x, axis=2)[:, :, looks - 1]
            var = np.maximum(squares - looks * mean * mean, 0.0) / (looks - 1)
            with np.errstate(divide="ignore", invalid="ignore"):
                stat = mean / np.sqrt(var / looks)
        open_ = np.ones((p, m), bool)
        count = np.zeros(p, int)
        stop = np.full((p, m), looks[-1])
        bad = np.zeros(p, bool)
        for k in range(looks.size):
            while True:
                new = open_ & (np.abs(stat[:, :, k]) >= crit[count, k][:, None])
                if not new.any():
                    break
                sign = np.sign(stat[:, :, k])
                bad |= (new & ((effects == 0) | (sign != np.sign(effects)))).any(axis=1)
                open_ &= ~new
                count += new.sum(axis=1)
                stop[new] = looks[k]
        wrong += int(bad.sum())
        rejected += int(count.sum())
        units += float(stop.sum())
        # a cell trains until the last panel that reads it stops
        reading = reads != 0
        cell_units += float(np.where(reading.T[None], stop[:, None, :], 0).max(axis=2).sum())
    cells = paths * means.size
    return SimulatedFamily(
        wrong / paths, rejected / paths, units / (paths * m), paths, cell_units / cells
    )


def more_needed(estimate: float, se: float, n_now: int, c: float, margin: float | None) -> int:
    """The size (units per cell: samples or seeds) at which one look at boundary c, read with
    Student's t as a look reads it (n - 1 degrees of freedom), would likely (80%) show what the
    last look left undecided, if the effect and the spread per unit are as estimated: the
    smallest n where the estimate is critical(c, n - 1) + z_0.8 standard errors from 0 (to show
    it) or, with a margin, from the nearer margin (to show equivalence), se shrinking as
    1 / sqrt(n). A guide for the last look of a new design, not a guarantee."""
    gaps = [abs(estimate)]
    if margin is not None and abs(estimate) < margin:
        gaps.append(margin - abs(estimate))
    gap = max(gaps)
    if gap <= 0 or not se > 0:
        return 0  # no effect and no margin: no size shows anything
    power = float(stats.norm.ppf(0.8))
    n = n_now + 1
    # start near the normal law's answer; t only adds to it
    n = max(n, math.ceil(n_now * ((c + power) * se / gap) ** 2))
    while gap / (se * math.sqrt(n_now / n)) < critical(c, n - 1) + power:
        n += 1
    return n


def stop_probabilities(design: Design, z_full: float, paths: int = 20_000, seed: int = 0):
    """The probability that a study of this design stops at each look (the last one whatever
    it shows) if the effect is z_full standard errors of the full study away from 0, with the
    se estimated at each look as the looks read it (`simulate`, t intervals). What
    `--dry-run` turns into an expected size."""
    effect = z_full / math.sqrt(design.looks[-1])  # per unit, in units' standard deviations
    return simulate(design, effect, paths, seed).stops

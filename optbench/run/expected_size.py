"""`--dry-run`'s expected size of a panel from an earlier report's estimate, by the rule's own law
(decision/sequential.py: normal units, the se estimated at each look, t intervals).

The size the rule takes at an effect z (full-study standard errors), E_z[N] = g(z), falls from
the last look to the first as |z| grows, in an S: plugged in at an estimate, g(z_hat) is
biased by the estimate's spread (and, where the earlier study stopped early, by its stop):
below the real rule's size by 8-14% at effects of 1.5 to 4 full-study standard errors, and a
plug-in of Whitehead's bias-adjusted estimate still by -7.5% at 2 and +14% at 5
(docs/sequential.md). So the size is estimated by the function h of the estimate that the
earlier study's law maps onto the size: E_z[h(z_hat)] = g(z), solved from h = g by `STEPS`
steps of h <- h + g - E_z[h(z_hat)] on a grid of effects (the iterated bootstrap bias
correction), the expectation over `PATHS` seeded studies (the same units for every effect:
common random numbers, so h is smooth). The earlier study's law is this design's where its
row stopped (decided, or at the last look) in a study of this design's looks; otherwise
(a fixed-size study, a study of other looks, or one still running) that of one look at the
row's size (the estimate's spread, not its stop: a running study's estimate is taken as is).
The estimate is clipped to the sizes the design can take. Margins are not simulated (only
holds and opposite end a path early), as in `sequential.simulate`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache

import numpy as np

from optbench.decision import sequential

PATHS = 10_000  # simulated studies per effect of the grid (the same units for every effect)
GRID_STEP = 0.05  # effects tried, in full-study standard errors
GRID_TOP = 12.0  # beyond it every path of a shipped design stops at its first look
STEPS = 4  # fixed-point steps: one left -5% near the planned effect, two -2.7%, four -1.1%
SEED = 0


@lru_cache(maxsize=4)
def _units(n: int) -> np.ndarray:
    """`PATHS` studies of `n` seeded N(0, 1) units: shifted by each effect tried."""
    return np.random.default_rng(SEED).standard_normal((PATHS, n))


def _stops(looks: tuple[int, ...], crit: tuple[float, ...], effect: float, n_max: int):
    """Per simulated study of `looks` read at the t critical values `crit`
    (`sequential.read_paths`) with units of mean `effect`: the look it stops at (the last whatever it shows) and
    its estimate there in standard errors of a study of `n_max` units."""
    n = np.asarray(looks)
    _, t, _, first = sequential.read_paths(_units(int(n[-1])) + effect, n, np.asarray(crit))
    # no spread (one unit, or equal units): a t of 0
    return first, np.nan_to_num(t[np.arange(first.size), first]) * np.sqrt(n_max / n[first])


@lru_cache(maxsize=32)
def _estimator(design: sequential.Design, law: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The effects of the grid and h at each: the expected size's estimator for an estimate
    drawn by the law of a study of looks `law` (this design's: its rule; else one look)."""
    looks, n_max = design.looks, design.looks[-1]
    grid = np.arange(0.0, GRID_TOP + GRID_STEP / 2, GRID_STEP)
    own, rule = law == looks, tuple(design.criticals())
    sizes, drawn = [], []
    for z in grid:
        effect = z / math.sqrt(n_max)
        first, estimate = _stops(looks, rule, effect, n_max)
        sizes.append(np.asarray(looks)[first].mean())
        drawn.append(np.abs(estimate if own else _stops(law, (math.inf,), effect, n_max)[1]))
    size = np.asarray(sizes)
    h = size
    for _ in range(STEPS):
        h = h + size - np.array([np.interp(x, grid, h).mean() for x in drawn])
    return grid, np.clip(h, looks[0], looks[-1])


def earlier_z(design: sequential.Design, row: Mapping) -> float:
    """An earlier report's claims row (summary.json) as an effect in full-study standard errors
    of `design`: its estimate over its se, scaled to the design's last look (as estimated)."""
    return row["estimate"] / row["se"] * (design.looks[-1] / row["n_now"]) ** 0.5


def earlier_law(design: sequential.Design, row: Mapping) -> tuple[int, ...]:
    """The looks of the study whose law drew the row's estimate: the design's where the row
    stopped at one of its looks in a study of them, else one look at the row's size."""
    looks = design.looks
    stopped = row.get("verdict") not in (None, "continue")
    own = stopped and row.get("looks") and row["n_now"] in looks and row.get("n_max") == looks[-1]
    return looks if own else (int(row["n_now"]),)


def expected_size(design: sequential.Design, row: Mapping) -> float:
    """The expected size (units per cell) of a panel of `design` whose effect an earlier row
    estimated (`earlier_z`), from the estimator its law calibrates (module docstring)."""
    z = abs(earlier_z(design, row))
    grid, h = _estimator(design, earlier_law(design, row))
    if not math.isfinite(z):
        return float(design.looks[0] if z > 0 else design.looks[-1])
    return float(np.interp(z, grid, h))

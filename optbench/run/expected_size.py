"""`--dry-run`'s expected size of a panel from an earlier report's estimate, by the rule's own law
(report/sequential.py: normal units, the se estimated at each look, t intervals): the
probability of stopping at each look if the effect is as estimated, `stop_probabilities`. An
estimate taken where a sequential study stopped early is biased away from 0 (it stopped
because it was large), and fed as it is it made the expected size 8.5-12.3% too small at
effects of 2 to 4 full-study standard errors (docs/sequential.md). So such an estimate is
first replaced by Whitehead's (1986) bias-adjusted one: the effect whose mean estimate at the
stop, under this design's rule, is the one observed (`adjusted_z`); an estimate at the last
look, or from a study without looks, is kept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache

import numpy as np

from optbench.report import sequential

PATHS = 10_000  # simulated studies behind the adjustment (common to every effect tried)
GRID_STEP = 0.02  # effects tried, in full-study standard errors
SEED = 0


@lru_cache(maxsize=32)
def _stopped_means(design: sequential.Design, top: int) -> tuple[np.ndarray, np.ndarray]:
    """The effects 0, GRID_STEP, ... up to `top` (full-study standard errors) and at each the
    mean estimate at the stop (`Simulated.stopped_z`), on the same seeded paths (common random
    numbers: a smooth, increasing function of the effect); computed once per design and top,
    for every row of an earlier report."""
    grid = np.arange(0.0, top + GRID_STEP / 2, GRID_STEP)
    root = math.sqrt(design.looks[-1])
    means = [sequential.simulate(design, z / root, PATHS, SEED).stopped_z for z in grid]
    return grid, np.maximum.accumulate(means)


def adjusted_z(design: sequential.Design, z_observed: float) -> float:
    """Whitehead's bias-adjusted effect: the z (full-study standard errors) whose mean estimate
    at the stop under `design`'s rule is `z_observed`, by interpolation on a grid from 0 (the
    rule is symmetric: the sign is kept)."""
    size = abs(z_observed)
    if not np.isfinite(size) or size == 0:
        return z_observed
    # the mean at the stop lies beyond the effect: a grid up to the observed one holds it
    grid, means = _stopped_means(design, math.ceil(size))
    return math.copysign(float(np.interp(size, means, grid)), z_observed)


def earlier_z(design: sequential.Design, row: Mapping) -> float:
    """The effect, in full-study standard errors, that `--dry-run` plans a panel for from an
    earlier report's claims row (summary.json): its estimate over its se, scaled to the design's
    last look, bias-adjusted where the row stopped early at a look of this design."""
    looks = design.looks
    z_full = row["estimate"] / row["se"] * (looks[-1] / row["n_now"]) ** 0.5
    early = row.get("looks") and row["n_now"] in looks[:-1] and row.get("n_max") == looks[-1]
    if not early or row.get("verdict") in (None, "continue"):
        return z_full  # at the last look, still running, or a fixed-size study's: no stop bias
    return adjusted_z(design, z_full)


def expected_size(design: sequential.Design, row: Mapping) -> float:
    """The expected size (units per cell) of a panel of `design` whose effect is as the earlier
    row estimated it (`earlier_z`), by the rule's own law."""
    stops = sequential.stop_probabilities(design, earlier_z(design, row))
    return float(sum(p * n for p, n in zip(stops, design.looks, strict=True)))

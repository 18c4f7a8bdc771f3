"""`--dry-run`'s expected size from an earlier report's estimate (run/expected_size.py; issue 67
item 8): an estimate where a sequential study stopped early is bias-adjusted by the rule's own
law, so that the expected size is within 5% of what the real rule gives."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from optbench.report.sequential import Design
from optbench.run.expected_size import earlier_z, expected_size

LOOKS = (6, 8, 10, 12, 16, 24)  # the quickstart's design (studies/quickstart.yaml)
DESIGN = Design(LOOKS, "pocock", 0.05, None, 1)
# the effect the dry run plans for: one the fixed study of 24 samples shows 90% of the time
PLANNED_Z = float(stats.norm.isf(0.025) + stats.norm.ppf(0.9))


def _studies(z_full: float, n: int, seed: int) -> list[dict]:
    """`n` studies of the design on normal units of effect `z_full` full-study standard errors,
    each looked at as the rule looks (mean, s / sqrt(n_k), Student's t at the design's
    critical values), stopped at its first decision: each its claims row at the stop."""
    looks, crit = np.asarray(LOOKS), np.asarray(DESIGN.criticals())
    units = np.random.default_rng(seed).normal(z_full / np.sqrt(looks[-1]), 1.0, (n, looks[-1]))
    rows = []
    for path in units:
        for k, size in enumerate(looks):
            mean, se = path[:size].mean(), path[:size].std(ddof=1) / np.sqrt(size)
            if abs(mean / se) >= crit[k] or k == looks.size - 1:
                decided = abs(mean / se) >= crit[k]
                verdict = ("holds" if mean > 0 else "opposite") if decided else "undecided"
                rows.append(
                    {"estimate": mean, "se": se, "n_now": int(size), "n_max": int(looks[-1]),
                     "looks": k + 1, "verdict": verdict, "level": None}
                )  # fmt: skip
                break
    return rows


@pytest.mark.slow  # 20,150 simulated studies and 150 expected sizes (45-85 s here)
def test_the_dry_runs_expected_size_from_an_earlier_estimate_is_the_real_rules():
    # the real rule's expected size at the planned effect: 20,000 studies' stopping sizes
    truth = float(np.mean([row["n_now"] for row in _studies(PLANNED_Z, 20_000, seed=1)]))
    earlier = _studies(PLANNED_Z, 150, seed=2)
    assert sum(row["n_now"] < LOOKS[-1] for row in earlier) > 50  # many stopped early
    planned = float(np.mean([expected_size(DESIGN, row) for row in earlier]))
    assert abs(planned / truth - 1) <= 0.05, (planned, truth)


@pytest.mark.slow  # three adjustments, each on 10,000 simulated studies (2 s)
def test_only_an_early_stops_estimate_is_adjusted_toward_zero():
    row = {"estimate": 1.0, "se": 0.25, "n_now": 6, "n_max": 24, "looks": 1, "verdict": "holds"}
    plug_in = 1.0 / 0.25 * 2.0  # scaled from 6 to 24 samples
    assert 0 < earlier_z(DESIGN, row) < plug_in - 1
    opposite = row | {"estimate": -1.0, "verdict": "opposite"}
    assert earlier_z(DESIGN, opposite) == pytest.approx(-earlier_z(DESIGN, row))
    # at the last look, still running, or from a study without looks: as estimated
    for kept in (
        row | {"n_now": 24, "looks": 6, "verdict": "undecided"},
        row | {"verdict": "continue"},
        row | {"looks": 0, "n_max": None},
    ):
        z = kept["estimate"] / kept["se"] * (24 / kept["n_now"]) ** 0.5
        assert earlier_z(DESIGN, kept) == pytest.approx(z)

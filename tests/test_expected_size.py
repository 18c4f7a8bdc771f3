"""`--dry-run`'s expected size from an earlier report's estimate (run/expected_size.py; issue 67
item 8): estimated by the function of the estimate that the earlier study's law calibrates, so
that over earlier studies it is within 5% of what the real rule gives, at small effects too."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from optbench.decision.sequential import Design
from optbench.report.summary_lines import earlier_claims
from optbench.run.expected_size import earlier_law, expected_size

LOOKS = (6, 8, 10, 12, 16, 24)  # the quickstart's design (studies/quickstart.yaml)
DESIGN = Design(LOOKS, "pocock", 0.05, None, 1)
# the effect the dry run plans for: one the fixed study of 24 samples shows 90% of the time
PLANNED_Z = float(stats.norm.isf(0.025) + stats.norm.ppf(0.9))


def _units(z_full: float, n: int, seed: int) -> np.ndarray:
    """`n` studies' normal units of effect `z_full` full-study standard errors, one row each."""
    return np.random.default_rng(seed).normal(z_full / np.sqrt(LOOKS[-1]), 1.0, (n, LOOKS[-1]))


def _studies(z_full: float, n: int, seed: int) -> list[dict]:
    """`n` studies of the design on normal units of effect `z_full` full-study standard errors,
    each looked at as the rule looks (mean, s / sqrt(n_k), Student's t at the design's
    critical values), stopped at its first decision: each its claims row at the stop."""
    looks, crit = np.asarray(LOOKS), np.asarray(DESIGN.criticals())
    rows = []
    for path in _units(z_full, n, seed):
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


def _relative_error(z_full: float, truths: int, earlier: int) -> float:
    """The mean expected size over `earlier` studies drawn at `z_full`, each planned from its
    claims row at its stop, relative to the real rule's (the mean size of `truths` studies)."""
    truth = float(np.mean([row["n_now"] for row in _studies(z_full, truths, seed=1)]))
    rows = _studies(z_full, earlier, seed=2)
    return float(np.mean([expected_size(DESIGN, row) for row in rows])) / truth - 1


@pytest.mark.slow  # 22,000 simulated studies one by one per effect (2-3 s each here)
@pytest.mark.parametrize("z_full", [1.5, 2.0, PLANNED_Z, 4.0])
def test_the_dry_runs_expected_size_is_the_real_rules_from_small_to_large_effects(z_full):
    # the size falls in an S with the estimate: plugged in, Whitehead's adjusted estimate
    # made it 7.5% low at 2 full-study standard errors, where most studies reach the last look
    earlier = _studies(z_full, 1_000, seed=2)
    assert sum(row["n_now"] < LOOKS[-1] for row in earlier) > 50  # many stopped early
    assert abs(_relative_error(z_full, truths=20_000, earlier=1_000)) <= 0.05


@pytest.mark.slow  # three estimators' tables, each on 10,000 studies per effect (1.8 s here)
def test_the_law_of_the_estimate_is_the_earlier_studys():
    row = {"estimate": 1.0, "se": 0.25, "n_now": 6, "n_max": 24, "looks": 1, "verdict": "holds"}
    assert earlier_law(DESIGN, row) == LOOKS  # stopped early in a study of these looks
    assert earlier_law(DESIGN, row | {"n_now": 24, "looks": 6, "verdict": "undecided"}) == LOOKS
    # still running, a fixed-size study's, or another design's: one look at its size
    for other in (row | {"verdict": "continue"}, row | {"looks": 0, "n_max": None}):
        assert earlier_law(DESIGN, other) == (6,)
    assert earlier_law(DESIGN, row | {"n_now": 7, "n_max": 24}) == (7,)
    # the size lies within the design's looks and does not depend on the sign
    for z in (0.0, 1.0, 5.0, 40.0):
        up = row | {"estimate": z * 0.25}
        size = expected_size(DESIGN, up)
        assert LOOKS[0] <= size <= LOOKS[-1]
        assert expected_size(DESIGN, up | {"estimate": -z * 0.25}) == size
    # an early stop at a large estimate: its law (which keeps the large draws) plans more
    # units than the same estimate from a fixed-size study of 6 would
    assert expected_size(DESIGN, row) > expected_size(DESIGN, row | {"looks": 0, "n_max": None})


def _trained_bench():
    """bench/expected_size.py, whose `trained` comparison runs on replicates of real trainings."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import expected_size as bench

    return bench


@pytest.mark.slow  # 21,000 simulated studies, the estimator, 1,000 looks.with_looks (63 s at load 15)
def test_the_trained_comparison_finds_the_dry_runs_error_on_planted_replicates():
    # replicates of normal units at the planned effect, read as the bench reads a trained
    # replicate's looks (sequential_analysis.looks_of: estimate, se, df, pairing per size): the
    # stops, plans and error it reports must be the ones the rule and the dry run give there
    count = 1_000
    looks = {
        (r, n): (path[:n].mean(), path[:n].std(ddof=1) / np.sqrt(n), n - 1, "paired")
        for r, path in enumerate(_units(PLANNED_Z, count, seed=2))
        for n in LOOKS
    }
    bench = _trained_bench()
    planned, stopped = bench.planned_and_stopped(looks, list(range(count)), DESIGN)
    rows = _studies(PLANNED_Z, count, seed=2)  # the same units, each stopped by the rule
    assert stopped.tolist() == [row["n_now"] for row in rows]
    plans = [expected_size(DESIGN, row) for row in rows]  # planned from each claims row at its stop
    assert planned == pytest.approx(plans)
    found = bench.compared(planned, stopped, count, lambda idx: np.bincount(idx, minlength=count))
    mean_stop = np.mean([row["n_now"] for row in rows])
    assert found["planned"]["value"] == pytest.approx(np.mean(plans), abs=1e-3)
    assert found["stopped"]["value"] == pytest.approx(mean_stop, abs=1e-3)
    assert found["error"]["value"] == pytest.approx(np.mean(plans) / mean_stop - 1, abs=1e-4)
    # the stops' interval is the mean stop's over replicates: 2 x 1.96 of its se wide
    low, high = found["stopped"]["interval"]
    se = np.std([row["n_now"] for row in rows], ddof=1) / np.sqrt(count)
    assert (high - low) / (2 * 1.96 * se) == pytest.approx(1, abs=0.15)
    # the real rule's size (20,000 other studies) is within 4 se of the mean stop, and the dry
    # run within 5% of both here, as on the simulated bench
    truth = np.mean([row["n_now"] for row in _studies(PLANNED_Z, 20_000, seed=1)])
    assert abs(mean_stop - truth) < 4 * se
    assert found["within_5pct"] and abs(np.mean(plans) / truth - 1) <= 0.05
    # one replicate drawn every time: the interval is that replicate's error alone
    one = bench.compared(planned, stopped, count, lambda idx: (np.arange(count) == 0) * 1.0)
    assert one["error"]["interval"] == [round(planned[0] / stopped[0] - 1, 4)] * 2


@pytest.mark.slow  # imports the bench and its replays (the spec, the driver): 6.6 s at load 15
def test_the_trained_bench_plans_from_the_claims_row_a_report_keeps_at_the_stop():
    # bench/expected_size.py's stop_row: a replayed study's stop as the report's summary.json
    # keeps it (the look's record through looks.with_looks), which the dry run takes as an
    # earlier estimate (earlier_claims) read at the stop, and as a stop of this design (its law)
    bench = _trained_bench()
    run = {"outcome": "holds", "n": 10, "estimate": 0.3, "low": 0.05, "high": 0.55}
    row = json.loads(json.dumps(bench.stop_row(run, 0.08, DESIGN)))
    assert earlier_claims({"claims": [row]}) == [row]
    assert (row["estimate"], row["se"], row["n_now"], row["verdict"]) == (0.3, 0.08, 10, "holds")
    assert (row["looks"], row["n_max"]) == (3, LOOKS[-1])  # 10 is the design's third look
    assert earlier_law(DESIGN, row) == LOOKS
    # undecided at the maximum: a stop of the design too, not a fixed-size study of 24
    last = bench.stop_row(run | {"outcome": "undecided", "n": 24, "low": -0.1}, 0.08, DESIGN)
    assert (last["looks"], last["verdict"]) == (len(LOOKS), "undecided")
    assert earlier_law(DESIGN, last) == LOOKS

"""Cell tables: best per cell, training-length and optimizer stability, peak table, curve picks."""

import numpy as np
import pandas as pd

from optbench.decision.frames import (
    best_by_cell,
    curve_picks,
    length_stability,
    optimizer_gaps,
    optimizer_stability,
    peak_table,
    with_errors,
)


def _trials(rows: list[tuple]) -> pd.DataFrame:
    """rows of (model, optimizer, epochs, status, final_error)."""
    frame = pd.DataFrame(rows, columns=["model", "optimizer", "epochs", "status", "final_error"])
    frame["metrics"] = [[{"epoch": 1, "val_error": e}] for e in frame["final_error"]]
    return frame


def test_with_errors_keeps_only_results():
    trials = _trials(
        [
            ("m", "adamw", 10, "finished", 20.0),
            ("m", "adamw", 10, "diverged", np.nan),
            ("m", "adamw", 10, "failed", np.nan),
            ("m", "adamw", 10, "pending", np.nan),
        ]
    )
    results = with_errors(trials)
    assert results["status"].tolist() == ["finished", "diverged"]
    assert results["error"].tolist() == [20.0, np.inf]


def test_length_stability_against_the_longest_finished_schedule():
    trials = _trials(
        [
            ("m", "adamw", 10, "finished", 20.0),
            ("m", "adamw", 10, "finished", 25.0),
            ("m", "adamw", 20, "finished", 15.0),
            ("m", "adamw", 40, "finished", 12.0),
            ("n", "adamw", 10, "finished", 30.0),
            ("n", "adamw", 20, "finished", 28.0),
            ("n", "adamw", 40, "diverged", np.nan),  # longest has no result: 20 is the reference
        ]
    )
    got = length_stability(best_by_cell(with_errors(trials)))
    m = got[got["model"] == "m"]
    assert m["dtop1"].tolist() == [8.0, 3.0, 0.0]
    assert set(m["ref_epochs"]) == {40}
    n = got[got["model"] == "n"]
    assert n["dtop1"].tolist() == [2.0, 0.0] and set(n["ref_epochs"]) == {20}


def test_length_stability_is_empty_with_one_schedule():
    trials = _trials([("m", "adamw", 10, "finished", 20.0)])
    assert length_stability(best_by_cell(with_errors(trials))).empty


def test_optimizer_stability_replaces_a_diverged_cell_by_the_best_shorter_schedule():
    trials = _trials(
        [
            ("m", "adamw", 10, "finished", 20.0),
            ("m", "adamw", 20, "finished", 15.0),
            ("m", "adamw", 40, "finished", 12.0),
            ("m", "sgd", 10, "finished", 24.0),
            ("m", "sgd", 20, "finished", 21.0),
            ("m", "sgd", 40, "diverged", np.nan),
            ("m", "sgd", 40, "diverged", np.nan),
        ]
    )
    table = optimizer_stability(best_by_cell(with_errors(trials)))
    sgd40 = table[(table["optimizer"] == "sgd") & (table["epochs"] == 40)].iloc[0]
    assert (sgd40["error"], sgd40["source_epochs"], sgd40["substituted"]) == (21.0, 20, True)
    assert table["substituted"].sum() == 1
    gaps = optimizer_gaps(table)
    assert gaps["gap"].tolist() == [4.0, 6.0, 9.0]


def test_peak_table_pivots_best_errors_by_schedule():
    trials = _trials(
        [
            ("m", "adamw", 20, "finished", 15.0),
            ("m", "adamw", 10, "finished", 20.0),
            ("m", "adamw", 10, "finished", 18.0),
        ]
    )
    table = peak_table(best_by_cell(with_errors(trials)))
    assert list(table.columns) == [10, 20]
    assert table.loc[("m", "adamw")].tolist() == [18.0, 15.0]


def test_curve_picks_best_lower_median_and_worst():
    trials = _trials([("m", "adamw", 10, "finished", e) for e in [5.0, 1.0, 3.0, 4.0, 2.0]])
    trials.loc[len(trials)] = ["m", "adamw", 10, "diverged", np.nan, []]
    picks = curve_picks(with_errors(trials))
    assert dict(zip(picks["rank"], picks["error"], strict=True)) == {
        "best": 1.0,
        "median": 3.0,
        "worst": 5.0,
    }


def _seeded(rows: list[tuple]) -> pd.DataFrame:
    """rows of (model, epochs, sample, seed, status, final_error), all AdamW."""
    frame = pd.DataFrame(
        rows, columns=["model", "epochs", "sample", "seed", "status", "final_error"]
    )
    return frame.assign(optimizer="adamw")


def test_a_cells_error_is_the_lowest_seed_mean_not_the_luckiest_seed():
    trials = _seeded(
        [
            ("m", 10, 0, 0, "finished", 2.0),  # the single best trial, but a noisy pair: mean 11
            ("m", 10, 0, 1, "finished", 20.0),
            ("m", 10, 1, 0, "finished", 6.0),  # mean 7: the cell's error
            ("m", 10, 1, 1, "finished", 8.0),
        ]
    )
    cell = best_by_cell(with_errors(trials)).iloc[0]
    assert (cell["best_error"], cell["seeds"], cell["seed_low"], cell["seed_high"]) == (
        7.0,
        2,
        6.0,
        8.0,
    )


def test_a_diverged_seed_counts_as_100_and_an_all_diverged_cell_has_no_error():
    trials = _seeded(
        [
            ("m", 10, 0, 0, "finished", 4.0),
            ("m", 10, 0, 1, "diverged", np.nan),  # mean (4 + 100) / 2 = 52
            ("m", 10, 1, 0, "finished", 60.0),
            ("m", 10, 1, 1, "finished", 50.0),  # mean 55
            ("m", 20, 0, 0, "diverged", np.nan),
            ("m", 20, 0, 1, "diverged", np.nan),
        ]
    )
    best = best_by_cell(with_errors(trials)).set_index("epochs")
    assert best.loc[10, "best_error"] == 52.0
    assert np.isnan(best.loc[20, "best_error"]) and best.loc[20, "seeds"] == 0
    # the paper's rule then substitutes the shorter schedule, with that cell's seed spread
    table = optimizer_stability(best.reset_index()).set_index("epochs")
    assert table.loc[20, ["error", "low", "high", "substituted"]].tolist() == [
        52.0,
        4.0,
        100.0,
        True,
    ]


def test_length_stability_spreads_each_lengths_seeds_against_the_reference():
    trials = _seeded(
        [
            ("m", 10, 0, 0, "finished", 20.0),
            ("m", 10, 0, 1, "finished", 30.0),
            ("m", 40, 0, 0, "finished", 9.0),
            ("m", 40, 0, 1, "finished", 11.0),
        ]
    )
    got = length_stability(best_by_cell(with_errors(trials)))
    short = got[got["epochs"] == 10].iloc[0]
    assert (short["dtop1"], short["dtop1_low"], short["dtop1_high"]) == (15.0, 10.0, 20.0)


def _epochs(key: str, errors: list[float]) -> list[dict]:
    return [{"epoch": i + 1, "val_error": e, key: e} for i, e in enumerate(errors)]


def test_pycls_best_is_the_lowest_ema_error_and_a_diverged_trial_keeps_it():
    trials = pd.DataFrame(
        {
            "model": ["m"] * 4,
            "optimizer": ["sgd"] * 4,
            "epochs": [3] * 4,
            "status": ["finished", "diverged", "finished", "diverged"],
            "final_error": [35.0, np.nan, 44.0, np.nan],
            "best_error": [30.0, np.nan, 41.0, np.nan],
            "metrics": [
                # raw errors alongside: pycls's rule reads the EMA's
                [dict(e, raw_top1=e["ema_top1"] - 5) for e in _epochs("ema_top1", [50, 30, 35])],
                _epochs("ema_top1", [60.0, 40.0]),  # diverged in its third epoch
                _epochs("raw_top1", [48.0, 41.0, 44.0]),  # a recipe without an EMA
                [],  # diverged before its first evaluation
            ],
        }
    )
    got = with_errors(trials, "pycls_best")
    np.testing.assert_array_equal(got["error"], [30.0, 40.0, 41.0, np.inf])
    assert list(got["status"]) == ["finished", "diverged", "finished", "diverged"]
    # the other two definitions: a diverged trial has no error
    np.testing.assert_array_equal(with_errors(trials)["error"], [35.0, np.inf, 44.0, np.inf])
    best = best_by_cell(got)
    assert best["best_error"].iloc[0] == 30.0

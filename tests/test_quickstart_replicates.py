"""bench/quickstart_replicates.py (`python bench/replicates.py analyse-quickstart DIR`): the
quickstart's rule replayed on replicates, read at each replicate's own stop, with intervals
over replicates, on small synthetic replicates of the design's shape."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from optbench.decision import claims, frames
from optbench.decision.summary import Options

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("vit_p_w64_16px", "vit_c_w64_16px")
LOOKS = (6, 8, 10, 12, 16, 24)  # studies/quickstart.yaml's looks and margin
MARGIN = 0.1


def _bench():
    sys.path.insert(0, str(ROOT / "bench"))
    import quickstart_replicates

    return quickstart_replicates


def _trials(effects, seed: int = 1, copies: bool = False, n: int = 24) -> pd.DataFrame:
    """Replicates of n (lr, wd) pairs shared by both models (paired by sample); ViT_C's errors
    lie nearer its best by the replicate's `effect` share, so its EDF is the steeper. `copies`:
    every replicate is the first one's trainings."""
    rng = np.random.default_rng(seed)
    rows = []
    for r, effect in enumerate(effects):
        if not copies or r == 0:
            lr, wd = 10 ** rng.uniform(-3.7, -1.7, n), 10 ** rng.uniform(-2.5, -0.3, n)
            spread = 40 * rng.uniform(size=n)
            errors = {
                MODELS[0]: 10 + spread + rng.normal(0, 1, n),
                MODELS[1]: 10 + spread * (1 - effect) + rng.normal(0, 1, n),
            }
        for model, error in errors.items():
            for k in range(n):
                e = float(np.clip(error[k], 1, 80))
                rows.append(
                    {"replicate": r, "model": model, "optimizer": "adamw", "epochs": 20}
                    | {"sample": k, "seed": 100 * r + k, "lr": lr[k], "wd": wd[k]}
                    | {"status": "finished", "final_error": e, "best_error": e, "digest": "0"}
                )
    return pd.DataFrame(rows)


def _analysed(tmp_path, trials: pd.DataFrame) -> dict:
    trials.to_csv(tmp_path / "trials_quickstart_24.csv", index=False)
    return _bench().analyse(tmp_path)


def _look_row(frame: pd.DataFrame, n: int, boundary: float, last: bool) -> dict:
    """Claim (a)'s row as the study's look at n samples computes it (the claims table)."""
    table = claims.claims_table(
        frames.with_errors(frame[frame["sample"] < n]), Options(), "", boundary, MARGIN, last
    )
    return table[table["claim"] == "a"].iloc[0].to_dict()


@pytest.mark.slow
def test_each_replicate_is_read_at_its_first_decided_look_with_intervals_over_replicates(
    tmp_path,
):
    trials = _trials([0.9, 0.7, 0.5, 0.4, 0.3, 0.0])
    found = _analysed(tmp_path, trials)
    bounds = found["design"]["boundaries"]
    assert found["design"]["looks"] == list(LOOKS) and found["replicates"] == 6
    decided = 0
    for row in found["per_replicate"]:
        frame = trials[trials["replicate"] == row["replicate"]]
        for k, n in enumerate(LOOKS):  # the looks a study takes, until the first decision
            look = _look_row(frame, n, bounds[k], last=k == len(LOOKS) - 1)
            if look["verdict"] not in ("continue", "undecided"):
                decided += 1
                break
        assert (row["n"], row["outcome"]) == (n, look["verdict"])
        assert row["naive"] == pytest.approx(look["estimate"], abs=1e-4)
        assert row["repeated"] == pytest.approx([look["low"], look["high"]], abs=2e-3)
        assert row["ordering"][0] <= row["median_unbiased"] <= row["ordering"][1]
        last = _look_row(frame, 24, bounds[-1], last=True)
        assert row["at_last"] == pytest.approx(last["estimate"], abs=1e-4)
    early = [x for x in found["per_replicate"] if x["n"] < 24]
    assert early and any(abs(x["naive"] - x["at_last"]) > 0.01 for x in early)
    # 4 of 6 replicates decided: resampling 6 replicates, the share is Binomial(6, 2/3) / 6,
    # whose 2.5% and 97.5% points are 2/6 (P(<= 1/6) = 13/729) and 6/6 (P(6/6) = 64/729)
    assert decided == 4
    over = found["over_replicates"]
    assert over["decided"]["value"] == pytest.approx(4 / 6, abs=1e-4)
    assert over["decided"]["interval"] == pytest.approx([2 / 6, 1.0], abs=1e-4)
    estimand = np.mean([x["at_last"] for x in found["per_replicate"]])
    assert over["estimand"]["value"] == pytest.approx(estimand, abs=1e-3)
    assert over["estimand"]["interval"][0] < estimand < over["estimand"]["interval"][1]
    # the nulls: replicate a's cell of one model against replicate b's (b != a) of the same
    # model, each of the 15 unordered pairs of 6 replicates once per model; different boxes'
    # draws, so unpaired
    nulls = found["nulls"]
    assert nulls["studies"] == 2 * 15
    assert nulls["shifts"] == 3  # the shifts that met every pair of the 6 (shift 3 twice)
    assert nulls["pairing"] == ["unpaired"]
    assert nulls["wrong_interval"][0] <= nulls["wrong"] <= nulls["wrong_interval"][1]


@pytest.mark.slow
def test_replicates_that_repeat_one_training_carry_no_uncertainty_over_trainings(tmp_path):
    # six copies of one replicate: resampling replicates draws the same study every time, so
    # every interval is its point (resampling trials within a replicate would widen them)
    found = _analysed(tmp_path, _trials([0.5] * 6, copies=True))
    assert len({x["n"] for x in found["per_replicate"]}) == 1
    for name, figure in found["over_replicates"].items():
        assert figure["interval"] == [figure["value"]] * 2, name
    assert found["nulls"]["wrong_interval"] == [found["nulls"]["wrong"]] * 2


@pytest.mark.slow
def test_another_shipped_study_is_replayed_at_its_own_looks_and_panel_level(tmp_path):
    # `analyse-quickstart CSV mini/mini_edf.yaml`: the mini's EDF study read on replicates of its
    # 64 samples stops each at the first of its own looks that decides, with the boundaries of
    # its alpha shared by its two panels (higher than one panel's at the same looks)
    from optbench.decision import sequential
    from optbench.spec.schema import load_spec

    spec = load_spec(ROOT / "studies" / "mini" / "mini_edf.yaml")
    looks = list(spec.decide.looks)
    trials = _trials([0.9, 0.5, 0.2, 0.0], n=looks[-1])
    trials.to_csv(tmp_path / "mini.csv", index=False)
    found = _bench().analyse(tmp_path / "mini.csv", "mini/mini_edf.yaml")
    assert found["study"] == "mini/mini_edf.yaml" and found["design"]["looks"] == looks
    bounds = found["design"]["boundaries"]
    alone = sequential.Design(tuple(looks), spec.decide.spending, spec.decide.alpha).boundaries()
    assert all(b > a for b, a in zip(bounds, alone, strict=True))
    for row in found["per_replicate"]:
        frame = trials[trials["replicate"] == row["replicate"]]
        for k, n in enumerate(looks):
            look = _look_row(frame, n, bounds[k], last=k == len(looks) - 1)
            if look["verdict"] not in ("continue", "undecided"):
                break
        assert (row["n"], row["outcome"]) == (n, look["verdict"])

"""The paper in miniature (studies/mini/, docs/mini.md): every study file validates and plans,
replicates each measurement over what its claims resample (seeds for the length and stem
studies, (lr, wd) samples for the EDF study), and takes its good values from the committed
calibration by the documented rule (scripts/mini_good_values.py), never by hand."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pandas as pd
import pytest

from optbench.decision import claims
from optbench.plan.trials import plan
from optbench.run.preflight import check_spec
from optbench.spec.schema import load_spec

ROOT = Path(__file__).parent.parent
MINI = sorted((ROOT / "studies" / "mini").glob("*.yaml"))
MEASUREMENTS = [p for p in MINI if p.stem != "mini_calibrate"]
CALIBRATION = ROOT / "docs" / "reference" / "mini" / "mini_calibrate" / "trials.csv"


def _script():
    spec = importlib.util.spec_from_file_location(
        "mini_good_values", ROOT / "scripts" / "mini_good_values.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("path", MINI, ids=lambda p: p.name)
def test_mini_study_validates_and_plans(path):
    spec = load_spec(path)
    assert spec.name == path.stem
    check_spec(spec, data=True, source=path)
    assert plan(spec)


@pytest.mark.parametrize("path", MEASUREMENTS, ids=lambda p: p.name)
def test_every_measurement_replicates_what_its_claims_resample(path):
    spec = load_spec(path)
    if spec.search.sampler == "good":  # one (lr, wd) per cell: claims (b)-(d) are over seeds
        assert len(spec.seeds) >= claims.MIN_SEEDS
    else:  # claim (a) resamples (lr, wd) samples, one run each as the paper's
        assert spec.search.n_samples >= 32  # half the paper's 64


def test_good_value_rule_is_the_geometric_mean_of_the_two_best_trials():
    trials = pd.DataFrame(
        {
            "model": ["vit_c_w64_16px"] * 4,
            "optimizer": ["sgd"] * 4,
            "lr": [0.5, 2.0, 8.0, 0.1],
            "wd": [1e-5, 4e-5, 1e-3, 1e-6],
            "status": ["finished", "finished", "finished", "diverged"],
            "final_error": [10.0, 11.0, 30.0, float("nan")],
        }
    )
    values = _script().good_values(trials)
    assert values["vit_c_w64_16px"]["sgd"]["lr"] == pytest.approx(math.sqrt(0.5 * 2.0))
    assert values["vit_c_w64_16px"]["sgd"]["wd"] == pytest.approx(math.sqrt(1e-5 * 4e-5))
    assert values["vit_s1_w64_16px"] == values["vit_c_w64_16px"]  # the ablations take ViT_C's


@pytest.mark.parametrize("path", MEASUREMENTS, ids=lambda p: p.name)
def test_measurements_use_the_calibrations_good_values(path):
    expected = _script().good_values(pd.read_csv(CALIBRATION))
    spec = load_spec(path)
    for model in spec.models:
        for optimizer in spec.optimizers:
            good = spec.search.good_values[model][optimizer]
            want = expected[model][optimizer]
            assert (good.lr, good.wd) == pytest.approx((want["lr"], want["wd"])), (model, optimizer)

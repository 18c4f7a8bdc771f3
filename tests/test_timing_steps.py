"""Where a step's time goes (issue 66 item 1): result.json's `timing.steps` (trial/timing.py's
STEP_PARTS, taken by train/epoch.py's step clock), the trial's first step and whether its
dataset was its process's earlier read, and `optbench status`'s line of them per cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_inprocess import tiny_config

from optbench.train import parts
from optbench.train.compute import Compute
from optbench.train.distributed import DistContext
from optbench.train.epoch import run_epoch
from optbench.train.run_trial import run_trial
from optbench.train.signals import StopRequest
from optbench.train.stepper import SoloStepper
from optbench.trial import timing
from optbench.trial.timing import STEP_PARTS, TrialTiming


def test_two_steps_are_timed_part_by_part_within_the_epochs_time(tmp_path):
    cfg = tiny_config(epochs=2)
    cfg = cfg.model_copy(update={"recipe": cfg.recipe.model_copy(update={"ema": True})})
    compute = Compute.for_trial(cfg.recipe, "cpu", DistContext(), None)
    stepper = SoloStepper(cfg, compute, "pil", tmp_path / "checkpoint.pt")
    [state] = stepper.begin(False)
    ran = run_epoch(stepper, [state], compute, StopRequest(), steps=2)
    assert not ran.complete and ran.steps_run == 2 and ran.clock == "host"
    assert set(ran.parts) == {*STEP_PARTS, "first_step"}
    assert all(ran.parts[p] >= 0 for p in STEP_PARTS)
    # the parts that compute are never free; the model's is the largest on a tiny input
    assert all(ran.parts[p] > 0 for p in ("augment", "forward_backward", "optimizer", "ema"))
    assert ran.parts["forward_backward"] == max(ran.parts[p] for p in STEP_PARTS)
    steps_s = sum(ran.parts[p] for p in STEP_PARTS)
    assert steps_s <= state.epoch_s  # the epoch's time holds its steps, and its setup
    assert 0 < ran.parts["first_step"] < steps_s


@pytest.mark.slow
def test_a_trials_timing_holds_every_steps_parts_and_a_warm_process_says_its_data_was_read(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(timing, "_PROCESS", {"start_s": None, "imports_s": None, "programs": 0})
    parts._warm.update(key=None, data=None, device=None, on_device=None)
    first = run_trial(tiny_config(epochs=2), tmp_path / "a")
    warm = run_trial(tiny_config(epochs=2, lr=1e-2), tmp_path / "b")
    recorded = json.loads((Path(tmp_path) / "a" / "result.json").read_text())["timing"]
    got = TrialTiming(**recorded)
    steps = got.steps
    assert steps is not None and steps.clock == "host"
    batches = 1437 // 128  # digits' training split at batch 128 (drop_last)
    assert steps.count == 2 * batches
    assert all(getattr(steps, p) > 0 for p in ("augment", "forward_backward", "optimizer", "ema"))
    assert steps.total() <= got.epochs
    assert 0 < got.first_step_s < got.epochs
    assert (first.timing.warm_data, warm.timing.warm_data) == (False, True)
    assert warm.timing.steps.count == steps.count

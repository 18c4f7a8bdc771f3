"""No host synchronisation inside a training step (issue 66 item 2): the steps of an epoch
read no device value on the host, whatever the number of steps; the losses are summed on the
device and read once at the epoch's end (train/epoch.py), which is where the divergence rule
looks (train/loop.py). The counter (tests/host_reads.py) counts the reads on the CPU and flags
a planted per-step `.item()`."""

from __future__ import annotations

import pytest
from cli_inprocess import tiny_config
from host_reads import HostReads

from optbench.train.compute import Compute
from optbench.train.distributed import DistContext
from optbench.train.epoch import run_epoch
from optbench.train.population import PopulationStepper
from optbench.train.signals import StopRequest
from optbench.train.stepper import SoloStepper


def _stepper(tmp_path, population: bool, **recipe):
    cfg = tiny_config(epochs=2)
    cfg = cfg.model_copy(update={"recipe": cfg.recipe.model_copy(update=recipe)})
    compute = Compute.for_trial(cfg.recipe, "cpu", DistContext(), None)
    if population:
        cfgs = [cfg, cfg.model_copy(update={"lr": cfg.lr / 2})]
        stepper = PopulationStepper(cfgs, compute, "pil", [True, True], tmp_path / "p.pt")
    else:
        stepper = SoloStepper(cfg, compute, "pil", tmp_path / "checkpoint.pt")
    return stepper, compute


def reads_over(stepper, compute, steps: int) -> HostReads:
    """The host's reads while `steps` steps of a fresh epoch run (and their loss is read)."""
    states = stepper.begin(False)
    with HostReads(stepper.optimizer) as reads:
        ran = run_epoch(stepper, states, compute, StopRequest(), steps=steps)
    assert not ran.complete and ran.steps_run == steps
    return reads


# mixup/CutMix and the EMA each run inside the step; a population steps K members at once
CASES = [
    pytest.param(False, {}, id="solo"),
    pytest.param(False, {"ema": True, "mixup_alpha": 0.8, "cutmix_alpha": 1.0}, id="ema+mixing"),
    pytest.param(True, {"ema": True}, id="population"),
]


@pytest.mark.parametrize(("population", "recipe"), CASES)
def test_an_epochs_steps_read_nothing_on_the_host_but_the_loss_once(tmp_path, population, recipe):
    stepper, compute = _stepper(tmp_path, population, **recipe)
    few, more = reads_over(stepper, compute, 2), reads_over(stepper, compute, 5)
    assert few.count == more.count == 1, more.where  # no read grows with the steps
    [(where, _)] = more.where.items()
    assert where.startswith("tolist ") and where.endswith("epoch.py:_over_ranks")


def test_the_counter_flags_a_planted_per_step_read(tmp_path, monkeypatch):
    stepper, compute = _stepper(tmp_path, False)
    losses = stepper.losses

    def reading(x, y):
        out = losses(x, y)
        out.sum().item()  # planted: the loss read on the host after every step
        return out

    monkeypatch.setattr(stepper, "losses", reading)
    reads = reads_over(stepper, compute, 3)
    assert reads.count == 3 + 1  # one per step, and the epoch's own
    assert sum(n for w, n in reads.where.items() if w.endswith(":reading")) == 3

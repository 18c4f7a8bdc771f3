"""No host synchronisation inside a training step (issue 66 item 2): the steps of an epoch
read no device value on the host, whatever the number of steps; the losses are summed on the
device and read once at the epoch's end (train/epoch.py), which is where the divergence rule
looks (train/loop.py); and the steps send no host data to the device with a blocking copy (on
CUDA one waits for the queued kernels as a read does). The counters (tests/host_reads.py) count
both on the CPU and flag a planted per-step `.item()` and a planted blocking upload."""

from __future__ import annotations

import pytest
import torch
from cli_inprocess import tiny_config
from host_reads import BlockingUploads, HostReads

from optbench.data import augment
from optbench.spec.recipe import Recipe
from optbench.train.compute import Compute
from optbench.train.distributed import DistContext
from optbench.train.epoch import run_epoch
from optbench.train.population import PopulationStepper
from optbench.train.population_optim import PopulationOptimizer
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


def reads_over(stepper, compute, steps: int) -> tuple[HostReads, BlockingUploads]:
    """The host's reads, and the blocking uploads, while `steps` steps of a fresh epoch run
    (and their loss is read)."""
    states = stepper.begin(False)
    with HostReads(stepper.optimizer) as reads, BlockingUploads() as uploads:
        ran = run_epoch(stepper, states, compute, StopRequest(), steps=steps)
    assert not ran.complete and ran.steps_run == steps
    return reads, uploads


# mixup/CutMix and the EMA each run inside the step; a population steps K members at once
CASES = [
    pytest.param(False, {}, id="solo"),
    pytest.param(False, {"ema": True, "mixup_alpha": 0.8, "cutmix_alpha": 1.0}, id="ema+mixing"),
    pytest.param(True, {"ema": True}, id="population"),
]


@pytest.mark.parametrize(("population", "recipe"), CASES)
def test_an_epochs_steps_read_nothing_on_the_host_but_the_loss_once(tmp_path, population, recipe):
    stepper, compute = _stepper(tmp_path, population, **recipe)
    (few, few_uploads), (more, more_uploads) = (reads_over(stepper, compute, n) for n in (2, 5))
    assert few.count == more.count == 1, more.where  # no read grows with the steps
    [(where, _)] = more.where.items()
    assert where.startswith("tolist ") and where.endswith("epoch.py:_over_ranks")
    # an epoch's own (its loss sums, its order) at most: none grows with the steps
    assert few_uploads.where == more_uploads.where and more_uploads.count <= 2, more_uploads.where


def test_the_counter_flags_a_planted_per_step_read(tmp_path, monkeypatch):
    stepper, compute = _stepper(tmp_path, False)
    losses = stepper.losses

    def reading(x, y):
        out = losses(x, y)
        out.sum().item()  # planted: the loss read on the host after every step
        return out

    monkeypatch.setattr(stepper, "losses", reading)
    reads, _ = reads_over(stepper, compute, 3)
    assert reads.count == 3 + 1  # one per step, and the epoch's own
    assert sum(n for w, n in reads.where.items() if w.endswith(":reading")) == 3


def test_the_counter_flags_a_planted_per_step_blocking_upload(tmp_path, monkeypatch):
    stepper, compute = _stepper(tmp_path, False)
    _, before = reads_over(stepper, compute, 3)
    losses = stepper.losses

    def uploading(x, y):
        return losses(x, y) * torch.tensor([1.0], device=x.device)  # planted: a scale sent per step

    monkeypatch.setattr(stepper, "losses", uploading)
    _, planted = reads_over(stepper, compute, 3)
    assert planted.count == before.count + 3
    assert sum(n for w, n in planted.where.items() if w.endswith(":uploading")) == 3


def test_pca_lighting_sends_its_constants_once_without_blocking(monkeypatch):
    x = torch.rand(4, 3, 8, 8) * 255
    augment._pca_basis.cache_clear()
    with BlockingUploads() as uploads:
        augment.pca_lighting(x, 0.1)
    assert uploads.count == 0, uploads.where
    # the counter sees the plain copies the helper replaced (pycls's eigen-vectors and -values),
    # on a device's first batch only
    monkeypatch.setattr(augment, "to_device", lambda t, device: t.to(device))
    augment._pca_basis.cache_clear()
    counts = []
    for _ in range(3):
        with BlockingUploads() as uploads:
            augment.pca_lighting(x, 0.1)
        counts.append(uploads.count)
    augment._pca_basis.cache_clear()
    assert counts == [2, 0, 0], counts


def test_a_populations_step_sends_its_members_scalars_without_blocking():
    flats = [torch.nn.Parameter(torch.randn(3, 17)), torch.nn.Parameter(torch.randn(3, 5))]
    for name in ("adamw", "sgd", "lion"):
        optimizer = PopulationOptimizer(flats, [True, False], [0.05, 0.0, 1e-3], [1e-3] * 3,
                                        name, Recipe())  # fmt: skip
        for active in ([True] * 3, [True, False, True]):  # a member frozen: its rows picked out
            for flat in flats:
                flat.grad = torch.randn_like(flat)
            with BlockingUploads() as uploads:
                optimizer.step([1e-3] * 3, active)
            assert uploads.count == 0, (name, active, uploads.where)

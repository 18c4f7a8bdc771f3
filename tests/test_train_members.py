"""The training loop (optbench/train/loop.py, epoch.py, stepper.py): a solo trial run through it
takes exactly the steps of the plain PyTorch loop it stands for, and its epoch sinks
(trackers/sinks.py) see each metrics line once, in order."""

from __future__ import annotations

import pytest
import torch
from cli_inprocess import tiny_config

from optbench.data.seeding import derive_seed, seed_step
from optbench.spec.recipe import Recipe
from optbench.trackers.sinks import epoch_sinks
from optbench.train.compute import Compute
from optbench.train.distributed import DistContext
from optbench.train.ema import WeightAverage
from optbench.train.loop import weights_digest
from optbench.train.optim import LrSchedule, build_optimizer
from optbench.train.parts import build_parts
from optbench.train.run_trial import run_trial
from optbench.trial.results import read_metrics


def plain_loop(cfg) -> tuple[str, list[float]]:
    """The solo trial written out as one loop (CPU: no autocast, no layout change, no DDP):
    each step reseeded from its position, the batch augmented, the lr set, forward, zero_grad,
    backward, the optimizer step, then the EMA. Its weights' digest and epoch losses."""
    compute = Compute.for_trial(cfg.recipe, "cpu", DistContext(), None)
    parts = build_parts(cfg, compute)
    model, steps = parts.model, len(parts.batches)
    optimizer = build_optimizer(model, cfg)
    schedule = LrSchedule(cfg, steps)
    ema = WeightAverage(model, cfg, steps) if cfg.recipe.ema else None
    losses = []
    for epoch in range(cfg.epochs):
        model.train()
        total = torch.zeros((), dtype=torch.float64)
        for b, (x, y) in enumerate(parts.batches.train(epoch, 0)):
            step = epoch * steps + b
            seed_step(derive_seed(cfg.seed, "step", step, 0), compute.device)
            x, y = parts.augment(x, y)
            for group in optimizer.param_groups:
                group["lr"] = schedule.lr(step)
            loss = parts.criterion(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if ema is not None:
                ema.after_step(model, epoch, b, step)
            total += loss.detach()
        losses.append(total.item() / steps)
    return weights_digest(model), losses


@pytest.mark.slow
@pytest.mark.parametrize(
    "recipe",
    [{"warmup_epochs": 0}, {"preset": "deit", "warmup_epochs": 1}],
    ids=["basic", "deit"],  # deit: drop path, RandAugment, mixup/CutMix, random erasing, EMA
)
def test_a_solo_trial_takes_the_steps_of_the_plain_loop(tmp_path, recipe):
    torch.set_num_threads(1)
    # no precise BN: evaluation leaves the weights as they are
    cfg = tiny_config(epochs=2, batch_size=64, recipe=Recipe(**recipe))
    digest, losses = plain_loop(cfg)
    result = run_trial(cfg, tmp_path)
    assert result.status == "finished" and result.digest == digest
    assert [m["train_loss"] for m in read_metrics(tmp_path)] == losses


class Recorded:
    """A sink that keeps what it is given; `fails` makes its close raise (a full disk)."""

    def __init__(self, fails: bool = False):
        self.lines, self.closed, self.fails = [], False, fails

    def write(self, line: dict) -> None:
        self.lines.append(line)

    def close(self) -> None:
        self.closed = True
        if self.fails:
            raise OSError(28, "No space left on device")


def test_epoch_sinks_see_each_line_in_order_and_a_failed_close_leaves_none_open(tmp_path):
    seen = []
    sinks = epoch_sinks(tiny_config(), tmp_path, on_epoch=seen.append)
    first, failing, last = Recorded(), Recorded(fails=True), Recorded()
    sinks.sinks = [first, *sinks.sinks, failing, last]
    lines = [{"epoch": 1, "lr": 0.1}, {"epoch": 2, "lr": 0.05}]
    for line in lines:
        sinks.write(line)
    assert seen == first.lines == last.lines == lines
    with pytest.raises(OSError):
        sinks.close()
    assert first.closed and failing.closed and last.closed


def _solo(tmp_path, **changes):
    from optbench.train.stepper import SoloStepper

    cfg = tiny_config(epochs=1, batch_size=512, **changes)  # digits: 2 steps an epoch
    compute = Compute.for_trial(cfg.recipe, "cpu", DistContext(), None)
    return cfg, compute, SoloStepper(cfg, compute, "pil", tmp_path / "checkpoint.pt")


def test_a_solo_stepper_refuses_to_train_before_begin(tmp_path):
    # before begin() the model is neither restored nor wrapped (DDP, compile): no step may run
    _, _, stepper = _solo(tmp_path)
    batches = stepper.parts.batches
    x = torch.zeros(2, batches.in_chans, batches.img_size, batches.img_size)
    with pytest.raises(RuntimeError, match="begin"):
        stepper.losses(x, torch.zeros(2, dtype=torch.long))
    with pytest.raises(RuntimeError, match="begin"):
        stepper.train()
    stepper.begin(resume=False)
    assert stepper.losses(x, torch.zeros(2, dtype=torch.long)).shape == (1,)


def test_an_epoch_runs_the_steps_it_is_given_and_returns_the_lrs_it_trained_at(tmp_path):
    from optbench.train.epoch import run_epoch
    from optbench.train.signals import StopRequest

    cfg, compute, stepper = _solo(tmp_path)
    (state,) = stepper.begin(resume=False)
    steps = len(stepper.parts.batches)
    assert steps == 2
    stop = StopRequest()
    first = run_epoch(stepper, [state], compute, stop, steps=1)
    assert not first.complete and first.stop == 0 and state.batch == 1  # stopped by the limit
    rest = run_epoch(stepper, [state], compute, stop)
    assert rest.complete and rest.lrs == [LrSchedule(cfg, steps).lr(steps - 1)]
    # the optimizer trained at that lr: the schedule's, set by the stepper, not read back
    assert stepper.optimizer.param_groups[0]["lr"] == rest.lrs[0]

"""Training one epoch (`train_one_epoch`): the optimizer steps from the trial's position to the
epoch's end, or to the step after which every rank agrees to stop (signals.py: under DDP the
ranks agree every STOP_CHECK_EVERY steps, so a step costs no host sync).

Each step is reseeded from its position (seeding.py), so a resumed epoch replays exactly. The
loss is summed on the device and read once at the epoch's end, so divergence costs no host sync
per step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from optbench.train.build import TrialParts
from optbench.train.compute import Compute
from optbench.train.config import TrainConfig
from optbench.train.seeding import derive_seed, seed_step
from optbench.train.signals import StopAgreement, StopRequest
from optbench.train.state import TrialState


@dataclass(frozen=True)
class EpochRun:
    """How a call of `train_one_epoch` ended."""

    complete: bool  # the epoch ran to its end (False: stopped mid-epoch, position in state)
    stop: int  # the signal the ranks agreed to stop for after the last step run (0: none)
    train_loss: float = float("nan")  # mean over the epoch's steps and ranks (complete only)
    seconds: float = 0.0  # the epoch's training time, resumed parts included (complete only)


def train_one_epoch(
    trained: nn.Module,
    parts: TrialParts,
    cfg: TrainConfig,
    compute: Compute,
    state: TrialState,
    stop: StopRequest,
) -> EpochRun:
    """Run the optimizer steps of epoch `state.epoch` from batch `state.batch`. If the
    ranks agree to stop before the epoch's last step, record the position in `state`
    (batch, loss_sum, epoch_s) and return an incomplete run."""
    epoch, steps_per_epoch = state.epoch, len(parts.batches)
    trained.train()
    loss_sum = torch.full((), state.loss_sum, device=compute.device, dtype=torch.float64)
    agreement = StopAgreement(stop, compute.dist, compute.device)
    signum = 0
    t0 = time.perf_counter() - state.epoch_s
    for b, (x, y) in enumerate(parts.batches.train(epoch, state.batch), start=state.batch):
        step = epoch * steps_per_epoch + b
        seed_step(derive_seed(cfg.seed, "step", step, compute.dist.rank), compute.device)
        x, y = parts.augment(x, y)
        parts.schedule.set_lr(step)
        with compute.autocast():
            loss = parts.criterion(trained(compute.layout(x)), y)
        parts.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        parts.optimizer.step()
        if parts.ema is not None:
            parts.ema.after_step(parts.model, epoch, b, step)
        loss_sum += loss.detach()
        epoch_end = b + 1 == steps_per_epoch
        signum = agreement.after_step(step, epoch_end)  # every rank stops at the same step
        if signum and not epoch_end:
            state.batch = b + 1
            state.loss_sum = compute.dist.sum_(loss_sum).item() / compute.dist.world
            state.epoch_s = time.perf_counter() - t0
            return EpochRun(complete=False, stop=signum)
    train_loss = compute.dist.sum_(loss_sum).item() / compute.dist.world / steps_per_epoch
    return EpochRun(True, signum, train_loss, time.perf_counter() - t0)

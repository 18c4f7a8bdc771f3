"""Training one epoch (`train_one_epoch`): the optimizer steps from the trial's position to the
epoch's end, or to the step after which every rank agrees to stop (signals.py: under DDP the
ranks agree every STOP_CHECK_EVERY steps, so a step costs no host sync).

Each step is reseeded from its position (seeding.py), so a resumed epoch replays exactly. The
loss is summed on the device and read once at the epoch's end, so divergence costs no host sync
per step.

Input wait (`InputClock`): the part of an epoch's training time the steps wait for their
input. On the CPU, the wall time spent getting the next batch. On CUDA, what the GPU does not
spend inside steps: CUDA events mark each step's start (once its batch is in hand) and end on
the stream, and at the epoch's end (already a sync) the time between the first start and the
last end less the steps' own time is the wait (decoding on the GPU, in the tensor pipeline,
counts as input). No host sync per step either way.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
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
    wait_s: float = 0.0  # of which waiting for input (InputClock; complete only)


class InputClock:
    """The seconds an epoch's steps waited for input (module docstring); `batches` wraps the
    batch iterator, `step_started` / `step_ended` bracket each step's own work."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.host_wait = 0.0
        self.events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    def batches(self, it) -> Iterator:
        it = iter(it)
        while True:
            t = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                return
            self.host_wait += time.perf_counter() - t
            yield item

    def step_started(self) -> None:
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            self.events.append((start, torch.cuda.Event(enable_timing=True)))

    def step_ended(self) -> None:
        if self.cuda:
            self.events[-1][1].record()

    def waited_s(self) -> float:
        """Seconds waited so far (on CUDA this waits for the steps' events)."""
        if not self.cuda:
            return self.host_wait
        if not self.events:
            return 0.0
        self.events[-1][1].synchronize()
        span = self.events[0][0].elapsed_time(self.events[-1][1])
        busy = sum(a.elapsed_time(b) for a, b in self.events)
        return max(0.0, span - busy) / 1000.0


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
    (batch, loss_sum, epoch_s, epoch_wait_s) and return an incomplete run."""
    epoch, steps_per_epoch = state.epoch, len(parts.batches)
    trained.train()
    loss_sum = torch.full((), state.loss_sum, device=compute.device, dtype=torch.float64)
    agreement = StopAgreement(stop, compute.dist, compute.device)
    signum = 0
    t0 = time.perf_counter() - state.epoch_s
    clock = InputClock(compute.device)
    batches = clock.batches(parts.batches.train(epoch, state.batch))
    for b, (x, y) in enumerate(batches, start=state.batch):
        clock.step_started()
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
        clock.step_ended()
        epoch_end = b + 1 == steps_per_epoch
        signum = agreement.after_step(step, epoch_end)  # every rank stops at the same step
        if signum and not epoch_end:
            state.batch = b + 1
            state.loss_sum = compute.dist.sum_(loss_sum).item() / compute.dist.world
            state.epoch_s = time.perf_counter() - t0
            state.epoch_wait_s += clock.waited_s()
            return EpochRun(complete=False, stop=signum)
    train_loss = compute.dist.sum_(loss_sum).item() / compute.dist.world / steps_per_epoch
    seconds = time.perf_counter() - t0
    return EpochRun(True, signum, train_loss, seconds, state.epoch_wait_s + clock.waited_s())

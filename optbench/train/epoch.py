"""Training one epoch (`run_epoch`), the one epoch skeleton of a solo trial and a population
(a Stepper of K >= 1 members, stepper.py): the optimizer steps from the members' position to the
epoch's end, or to the step after which every rank agrees to stop (signals.py: under DDP, solo
only, the ranks agree every STOP_CHECK_EVERY steps, so a step costs no host sync).

Each step is reseeded from its position (data/seeding.py), so a resumed epoch replays exactly; its
batch is drawn and augmented once for all members. The losses are summed on the device and read
once at the epoch's end (summed over the ranks under DDP), so divergence costs no host sync per
step.

Input wait (`input_clock`): the part of an epoch's training time the steps wait for their
input. On the CPU (`InputClock`), the wall time spent getting the next batch. On CUDA
(`DeviceInputClock`), what the GPU does not spend inside steps: CUDA events mark each step's
start (once its batch is in hand) and end on the stream, and at the epoch's end (already a sync)
the time between the first start and the last end less the steps' own time is the wait
(decoding on the GPU, in the tensor pipeline, counts as input). No host sync per step either
way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from optbench.data.seeding import derive_seed, seed_step
from optbench.train.compute import Compute
from optbench.train.signals import StopAgreement, StopRequest
from optbench.train.state import TrialState
from optbench.train.stepper import Stepper


@dataclass(frozen=True)
class EpochRun:
    """How a call of `run_epoch` ended."""

    complete: bool  # the epoch ran to its end (False: stopped mid-epoch, position in states)
    stop: int  # the signal the ranks agreed to stop for after the last step run (0: none)
    # per member, mean over the epoch's steps and ranks (complete only)
    train_losses: list[float] | None = None
    lrs: list[float] | None = None  # per member, the lr of the epoch's last step (complete only)
    seconds: float = 0.0  # the epoch's training time, resumed parts included (complete only)
    wait_s: float = 0.0  # of which waiting for input (InputClock; complete only)


class InputClock:
    """The seconds an epoch's steps waited for input, on the CPU: the wall time spent getting
    the next batch. `batches` wraps the batch iterator, `step_started` / `step_ended` bracket
    each step's own work."""

    def __init__(self):
        self.host_wait = 0.0

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
        pass

    def step_ended(self) -> None:
        pass

    def waited_s(self) -> float:
        """Seconds waited so far."""
        return self.host_wait


class DeviceInputClock(InputClock):
    """On CUDA: the time the device spends outside the steps, between the first step's start
    and the last one's end (module docstring). `event` is the timing event class of the
    device's stream (torch.cuda.Event; a test's fake on the CPU)."""

    def __init__(self, event: Callable[..., Any]):
        super().__init__()
        self.event = event
        self.events: list[tuple[Any, Any]] = []

    def step_started(self) -> None:
        start = self.event(enable_timing=True)
        start.record()
        self.events.append((start, self.event(enable_timing=True)))

    def step_ended(self) -> None:
        self.events[-1][1].record()

    def waited_s(self) -> float:
        """Seconds waited so far (this waits for the steps' events)."""
        if not self.events:
            return 0.0
        self.events[-1][1].synchronize()
        span = self.events[0][0].elapsed_time(self.events[-1][1])
        busy = sum(a.elapsed_time(b) for a, b in self.events)
        return max(0.0, span - busy) / 1000.0


def input_clock(device: torch.device) -> InputClock:
    """The input-wait clock of an epoch on `device`."""
    return DeviceInputClock(torch.cuda.Event) if device.type == "cuda" else InputClock()


def run_epoch(
    stepper: Stepper,
    states: list[TrialState],
    compute: Compute,
    stop: StopRequest,
    steps: int | None = None,
) -> EpochRun:
    """Run the optimizer steps of epoch `lead.epoch` from batch `lead.batch` (lead: the first
    active member's state; the active members share their position), at most `steps` of them
    (None: to the epoch's end; measure.py times a few). If the ranks agree to stop, or the
    steps are run, before the epoch's last step, record the position in each active member's
    state (batch, loss_sum, epoch_s, epoch_wait_s) and return an incomplete run."""
    cfg, parts = stepper.cfgs[0], stepper.parts
    lead = states[stepper.active.index(True)]
    epoch, steps_per_epoch = lead.epoch, len(parts.batches)
    stepper.train()
    sums = [s.loss_sum for s in states]
    loss_sum = torch.tensor(sums, device=compute.device, dtype=torch.float64)
    agreement = StopAgreement(stop, compute.dist, compute.device)
    signum = 0
    t0 = time.perf_counter() - lead.epoch_s
    clock = input_clock(compute.device)
    batches = clock.batches(parts.batches.train(epoch, lead.batch))
    lrs: list[float] = []
    for b, (x, y) in enumerate(batches, start=lead.batch):
        clock.step_started()
        step = epoch * steps_per_epoch + b
        seed_step(derive_seed(cfg.seed, "step", step, compute.dist.rank), compute.device)
        x, y = parts.augment(x, y)
        lrs = [schedule.lr(step) for schedule in stepper.schedules]
        with compute.autocast():
            losses = stepper.losses(compute.layout(x), y)
        stepper.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()  # member k's gradient is d loss_k: the members do not mix
        stepper.update(lrs)
        if stepper.ema is not None:
            stepper.ema.after_step(stepper.weights, epoch, b, step)
        loss_sum += losses.detach()
        clock.step_ended()
        epoch_end = b + 1 == steps_per_epoch
        signum = agreement.after_step(step, epoch_end)  # every rank stops at the same step
        ran_out = steps is not None and b + 1 - lead.batch >= steps
        if (signum or ran_out) and not epoch_end:
            means = _over_ranks(loss_sum, compute)
            seconds, waited = time.perf_counter() - t0, clock.waited_s()
            for k, s in enumerate(states):
                if stepper.active[k]:
                    s.batch, s.loss_sum, s.epoch_s = b + 1, means[k], seconds
                    s.epoch_wait_s += waited
            return EpochRun(complete=False, stop=signum)
    train_losses = [v / steps_per_epoch for v in _over_ranks(loss_sum, compute)]
    seconds = time.perf_counter() - t0
    waited = lead.epoch_wait_s + clock.waited_s()
    return EpochRun(True, signum, train_losses, lrs, seconds, waited)


def _over_ranks(loss_sum: torch.Tensor, compute: Compute) -> list[float]:
    """Each member's loss sum, averaged over the ranks (DDP; one rank: itself)."""
    return [v / compute.dist.world for v in compute.dist.sum_(loss_sum).tolist()]

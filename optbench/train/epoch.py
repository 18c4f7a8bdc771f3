"""Training one epoch (`run_epoch`), the one epoch skeleton of a solo trial and a population
(a Stepper of K >= 1 members, stepper.py): the optimizer steps from the members' position to the
epoch's end, or to the step after which every rank agrees to stop (signals.py: under DDP, solo
only, the ranks agree every STOP_CHECK_EVERY steps, so a step costs no host sync).

Each step is reseeded from its position (data/seeding.py), so a resumed epoch replays exactly; its
batch is drawn and augmented once for all members. The losses are summed on the device and read
once at the epoch's end (summed over the ranks under DDP), so divergence costs no host sync per
step.

Where a step's time goes (`step_clock`; trial/timing.py's STEP_PARTS): the clock is marked
after each part of a step (its batch fetched, copied to the device, augmented, forward and
backward, the optimizer's update, the EMA's, the host's bookkeeping) and each interval is charged
to the part it ends, so every second of the steps counts once. On the CPU (`StepClock`) the
marks read the wall clock. On CUDA (`DeviceStepClock`) each mark records a timing event on the
stream and the intervals are read at the epoch's end, after its loss read (already a sync): no
host sync per step. Input wait (`waited_s`, metrics.jsonl's `input_wait`) is getting and copying
the batch: on CUDA what the device spends outside the steps' other parts (decoding on the GPU,
in the tensor pipeline, counts as input).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from optbench.data.seeding import derive_seed, seed_step
from optbench.train.compute import Compute
from optbench.train.signals import StopAgreement, StopRequest
from optbench.train.state import TrialState
from optbench.train.stepper import Stepper
from optbench.trial.timing import STEP_PARTS


@dataclass(frozen=True)
class EpochRun:
    """How a call of `run_epoch` ended."""

    complete: bool  # the epoch ran to its end (False: stopped mid-epoch, position in states)
    stop: int  # the signal the ranks agreed to stop for after the last step run (0: none)
    # per member, mean over the epoch's steps and ranks (complete only)
    train_losses: list[float] | None = None
    lrs: list[float] | None = None  # per member, the lr of the epoch's last step (complete only)
    seconds: float = 0.0  # the epoch's training time, resumed parts included (complete only)
    wait_s: float = 0.0  # of which getting and copying input (StepClock; complete only)
    # seconds per step part (trial/timing.py's STEP_PARTS, and `first_step` where one ended),
    # of the steps this call ran, by the clock of that kind
    parts: dict[str, float] = field(default_factory=dict)
    steps_run: int = 0
    clock: str = "host"


class StepClock:
    """The seconds of an epoch's steps per part (STEP_PARTS), on the host's clock: `batches`
    wraps the batch iterator (charging `input_wait`), `mark(part)` charges the time since the
    last mark to `part`, `step_ended()` counts a step; `read()` gives the parts so far."""

    kind = "host"

    def __init__(self):
        self.seconds = dict.fromkeys(STEP_PARTS, 0.0)
        self.steps = 0
        self.first_step_s: float | None = None  # the clock's start to its first step's end
        self._start = self._last = time.perf_counter()

    def batches(self, it) -> Iterator:
        for item in it:
            self.mark("input_wait")
            yield item

    def mark(self, part: str) -> None:
        now = time.perf_counter()
        self.seconds[part] += now - self._last
        self._last = now

    def step_ended(self) -> None:
        self.steps += 1
        if self.steps == 1:
            self.first_step_s = self._last - self._start

    def read(self) -> dict[str, float]:
        """Seconds per part so far, with `first_step` where a step ended."""
        first = {} if self.first_step_s is None else {"first_step": self.first_step_s}
        return {**self.seconds, **first}

    def waited_s(self) -> float:
        """Seconds spent getting and copying the batches so far (read())."""
        parts = self.read()
        return parts["input_wait"] + parts["to_device"]


class DeviceStepClock(StepClock):
    """On CUDA: each mark records a timing event on the stream; `read()` waits for the last
    one and charges each interval between two marks, on the device's timeline, to the part
    the later one ends (module docstring). `event` is the device's timing event class
    (torch.cuda.Event; a test's fake on the CPU)."""

    kind = "cuda events"

    def __init__(self, event: Callable[..., Any]):
        super().__init__()
        self.event = event
        self.marks: list[tuple[str, Any]] = [("", self._record())]  # the clock's start
        self._first_mark: int | None = None  # the first step's last mark

    def _record(self) -> Any:
        done = self.event(enable_timing=True)
        done.record()
        return done

    def mark(self, part: str) -> None:
        self.marks.append((part, self._record()))

    def step_ended(self) -> None:
        self.steps += 1
        if self.steps == 1:
            self._first_mark = len(self.marks) - 1

    def read(self) -> dict[str, float]:
        if len(self.marks) > 1:
            self.marks[-1][1].synchronize()
            start = self.marks[0][1]
            for (_, a), (part, b) in itertools.pairwise(self.marks):
                self.seconds[part] += a.elapsed_time(b) / 1000.0
            if self._first_mark is not None:
                end = self.marks[self._first_mark][1]
                self.first_step_s = start.elapsed_time(end) / 1000.0
                self._first_mark = None
            self.marks = self.marks[-1:]  # read once: the last mark starts what follows
        return super().read()


def step_clock(device: torch.device) -> StepClock:
    """The step clock of an epoch on `device`."""
    return DeviceStepClock(torch.cuda.Event) if device.type == "cuda" else StepClock()


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
    clock = step_clock(compute.device)
    batches = clock.batches(parts.batches.train(epoch, lead.batch))
    lrs: list[float] = []
    for b, (x, y) in enumerate(batches, start=lead.batch):
        # the pipelines that hold batches on the host hand them over pinned (data/batches.py)
        x, y = x.to(compute.device, non_blocking=True), y.to(compute.device, non_blocking=True)
        clock.mark("to_device")
        step = epoch * steps_per_epoch + b
        seed_step(derive_seed(cfg.seed, "step", step, compute.dist.rank), compute.device)
        x, y = parts.augment(x, y)
        clock.mark("augment")
        lrs = [schedule.lr(step) for schedule in stepper.schedules]
        with compute.autocast():
            losses = stepper.losses(compute.layout(x), y)
        stepper.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()  # member k's gradient is d loss_k: the members do not mix
        clock.mark("forward_backward")
        stepper.update(lrs)
        clock.mark("optimizer")
        if stepper.ema is not None:
            stepper.ema.after_step(stepper.weights, epoch, b, step)
        clock.mark("ema")
        loss_sum += losses.detach()
        epoch_end = b + 1 == steps_per_epoch
        signum = agreement.after_step(step, epoch_end)  # every rank stops at the same step
        clock.mark("host_reads")
        clock.step_ended()
        ran_out = steps is not None and b + 1 - lead.batch >= steps
        if (signum or ran_out) and not epoch_end:
            means = _over_ranks(loss_sum, compute)
            clock.mark("host_reads")
            seconds, waited = time.perf_counter() - t0, clock.waited_s()
            for k, s in enumerate(states):
                if stepper.active[k]:
                    s.batch, s.loss_sum, s.epoch_s = b + 1, means[k], seconds
                    s.epoch_wait_s += waited
            return EpochRun(False, signum, **_timed(clock))
    train_losses = [v / steps_per_epoch for v in _over_ranks(loss_sum, compute)]
    clock.mark("host_reads")
    waited = lead.epoch_wait_s + clock.waited_s()
    seconds = time.perf_counter() - t0
    return EpochRun(True, signum, train_losses, lrs, seconds, waited, **_timed(clock))


def _timed(clock: StepClock) -> dict:
    """EpochRun's timing fields from the epoch's step clock."""
    return {"parts": clock.read(), "steps_run": clock.steps, "clock": clock.kind}


def _over_ranks(loss_sum: torch.Tensor, compute: Compute) -> list[float]:
    """Each member's loss sum, averaged over the ranks (DDP; one rank: itself)."""
    return [v / compute.dist.world for v in compute.dist.sum_(loss_sum).tolist()]

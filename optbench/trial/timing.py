"""Where a trial's seconds go: `TrialTiming`, result.json's `timing` (docs/outputs.md), the
`PartClock` the trainer times its parts with, and what the trial's process paid before its
first trial (`process_started`, `imports_took`, `process_costs`; what a SLURM job imports
first, `JOB_IMPORTS`).

The parts of a trial (PARTS) cover its wall_s, from the moment it starts (train/loop.py:
start_program) to its result: `setup` (the compute settings), `data` (its dataset loaded and
batched), `model` (model, optimizer and EMA built, a checkpoint restored), `epochs` (the
training steps), `evaluation` (precise BN and the validation passes), `checkpoints`, `writes`
(metrics.jsonl and the epoch sinks at each epoch end) and `end` (the final weights' digest);
they sum to wall_s up to the few statements between them. result.json's own write comes after
wall_s is taken, so it is in neither.

The `epochs` part is split further (`steps`, a `StepTiming`: STEP_PARTS over the program's
epochs, train/epoch.py's step clock): `input_wait` (getting the next batch), `to_device`
(its host-to-device copy), `augment`, `forward_backward` (the loss and its gradients), `optimizer`,
`ema`, and `host_reads` (the host reading device values: the loss sums at the epoch's end, the
stop agreement under DDP, and the step's bookkeeping). On a CPU each is the clock's time; on
CUDA the device's (timing events recorded between the parts, read once per epoch at its end):
a part the host launches slower than the device runs it counts the device's idle time too.
Their sum is the steps' time, at most the `epochs` part (which also holds each epoch's setup).

A worker process (a local pool worker, a SLURM job's step) pays its start once: from the
process's birth to the trial code (`process_start_s`: interpreter, unpickling the job) and the
trainer's imports (`imports_s`), both recorded on the first trial (or population) it runs
(`process_trial` 1); later trials of a warm process record `process_trial` 2, 3, ... and no
start. A trial trained outside a worker (`optbench train`, the API) records none.

Plain Python: no torch (the trial/ contract).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt

# What a SLURM job's process imports before its first trial, named once: submitit unpickles the
# job (TrialBatch's module), whose call imports the trainer (executors/slurm/job.py), and
# `--measure` imports the same to time a job's start (train/measure.py: process_s).
JOB_IMPORTS = (
    "submitit",
    "optbench.executors.slurm.job",
    "torch",
    "timm",
    "optbench.train.run_trial",
)

# Checkpoints at epoch ends cost at most this share of a trial's time (train/loop.py's cadence;
# the cost plan, plan/costs.py, estimates them so).
CHECKPOINT_SHARE = 0.02

PARTS = ("setup", "data", "model", "epochs", "evaluation", "checkpoints", "writes", "end")

# A part of a trial never takes more than a year: more is a crafted file, not a measurement.
Seconds = Annotated[StrictFloat, Field(ge=0, le=3.2e7)]


class StepTiming(BaseModel):
    """`timing.steps`: seconds per part of the training steps (STEP_PARTS) over a program's
    epochs, the steps counted, and the clock that took them ("cuda events" or "host")."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    # Where the `epochs` part's steps go, in the order a step runs them (module docstring):
    # STEP_PARTS, below, is these fields.
    input_wait: Seconds = 0.0
    to_device: Seconds = 0.0
    augment: Seconds = 0.0
    forward_backward: Seconds = 0.0
    optimizer: Seconds = 0.0
    ema: Seconds = 0.0
    host_reads: Seconds = 0.0
    count: StrictInt = Field(default=0, ge=0, le=10**12)  # optimizer steps timed
    clock: Literal["host", "cuda events"] = "host"

    def total(self) -> float:
        """The steps' time: every part's sum."""
        return sum(getattr(self, part) for part in STEP_PARTS)


STEP_PARTS = tuple(name for name in StepTiming.model_fields if name not in ("count", "clock"))


class TrialTiming(BaseModel):
    """result.json's `timing`: seconds per part of the trial (module docstring), and its
    process's start where this trial paid it."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    setup: Seconds = 0.0
    data: Seconds = 0.0
    model: Seconds = 0.0
    epochs: Seconds = 0.0
    evaluation: Seconds = 0.0
    checkpoints: Seconds = 0.0
    writes: Seconds = 0.0
    end: Seconds = 0.0
    process_start_s: Seconds | None = None  # the process's birth to the trial code
    imports_s: Seconds | None = None  # the trainer's imports in that process
    process_trial: StrictInt | None = Field(default=None, ge=1, le=10**9)  # n-th of its process
    steps: StepTiming | None = None  # the epochs' steps, part by part (None: before issue 66)
    # the trial's dataset was its warm process's earlier read (train/parts.py: warm_dataset)
    warm_data: StrictBool | None = None
    # its first optimizer step, in the `epochs` part: what a step pays once per model in its
    # process (torch.compile's compilation, cuDNN's autotuning, the allocator's first blocks)
    first_step_s: Seconds | None = None

    def within_wall(self) -> float:
        """The parts' sum: the trial's wall_s, but for the statements between the parts."""
        return sum(getattr(self, part) for part in PARTS)

    def paid_s(self) -> float:
        """What this trial cost its worker: its parts and the process start it paid."""
        return self.within_wall() + (self.process_start_s or 0.0) + (self.imports_s or 0.0)


class PartClock:
    """Seconds per part (PARTS) of one program (a trial or a population), accumulated: `with
    clock.part("data"): ...`. A part opened inside another pauses the outer one, so each second
    counts in one part. Made as the program starts: the process's first program takes its start
    (process_costs)."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PARTS, 0.0)
        self.steps = dict.fromkeys(STEP_PARTS, 0.0)
        self.step_count, self.step_clock = 0, "host"
        self.first_step_s: float | None = None
        self.warm_data: bool | None = None
        self.process = process_costs()
        self._open: list[str] = []  # the parts open, innermost last
        self._since = 0.0  # when the innermost part last resumed

    def _charge(self) -> None:
        now = time.perf_counter()
        if self._open:
            self.seconds[self._open[-1]] += now - self._since
        self._since = now

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        if name not in self.seconds:
            raise ValueError(f"not a part of a trial's timing: {name}")
        self._charge()
        self._open.append(name)
        try:
            yield
        finally:
            self._charge()
            self._open.pop()

    def add_steps(self, seconds: dict[str, float], count: int, clock: str) -> None:
        """An epoch's `count` steps took `seconds` per step part (STEP_PARTS), by `clock`; the
        first such call's first step is the program's first."""
        for name, s in seconds.items():
            if name == "first_step":
                if self.first_step_s is None:
                    self.first_step_s = s
            elif name in self.steps:
                self.steps[name] += s
            else:
                raise ValueError(f"not a part of a step's timing: {name}")
        self.step_count += count
        self.step_clock = clock

    def timing(self) -> TrialTiming:
        """The parts so far, with the process's start if this is its first program."""
        self._charge()
        parts = {name: round(s, 4) for name, s in self.seconds.items()}
        steps = None
        if self.step_count:
            split = {name: round(s, 4) for name, s in self.steps.items()}
            steps = StepTiming(**split, count=self.step_count, clock=self.step_clock)
        first = None if self.first_step_s is None else round(self.first_step_s, 4)
        return TrialTiming(
            **parts, **self.process, steps=steps, warm_data=self.warm_data, first_step_s=first
        )


# --- what the process paid before its first trial ------------------------------------------------

_PROCESS: dict = {"start_s": None, "imports_s": None, "programs": 0}


def process_age_s() -> float | None:
    """Seconds since this process was born (Linux's /proc; None elsewhere), to 10 ms."""
    try:
        with open("/proc/self/stat", "rb") as stat, open("/proc/uptime", "rb") as up:
            # the command name (field 2) may hold spaces: fields are counted after its ")"
            fields = stat.read().rsplit(b")", 1)[1].split()
            uptime = float(up.read().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def process_started() -> None:
    """A worker's trial code starts now: its process's start is its age."""
    _PROCESS["start_s"] = process_age_s()


def imports_took(seconds: float) -> None:
    """The worker's trainer imports took `seconds`."""
    _PROCESS["imports_s"] = seconds


def process_costs() -> dict:
    """For the process's next program: its ordinal (`process_trial`), with the process's start
    and imports for the first one (nothing where no worker marked them: `optbench train`)."""
    _PROCESS["programs"] += 1
    n = _PROCESS["programs"]
    if _PROCESS["start_s"] is None:
        return {}
    costs = {"process_trial": n}
    if n == 1:
        costs["process_start_s"] = round(_PROCESS["start_s"], 4)
        costs["imports_s"] = round(_PROCESS["imports_s"] or 0.0, 4)
    return costs

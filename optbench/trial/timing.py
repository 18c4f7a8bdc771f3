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
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt

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

    def timing(self) -> TrialTiming:
        """The parts so far, with the process's start if this is its first program."""
        self._charge()
        parts = {name: round(s, 4) for name, s in self.seconds.items()}
        return TrialTiming(**parts, **self.process)


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

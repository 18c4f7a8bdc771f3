"""A short timed training run of one configuration (`measure_config`), for the cost plan of
`optbench run --dry-run --measure` (optbench/plan/costs.py), run in a fresh process as a job
runs its trial (`measure_fresh`), which also times that process's start, imports and exit.

It times what a trial does, in the trainer's own code: reading its dataset (once per process,
as a worker keeps it for its later trials; an image dataset's listing of its images with it),
building the trial's real parts
(parts.py: its data, model, recipe, input pipeline and batch, at the precision the device gives
it), `warmup` optimizer steps (what they take beyond the steady pace counts as start-up) and
then `steps` timed ones through the trainer's own epoch code (epoch.run_epoch over a
SoloStepper, told to run exactly that many steps), an epoch's end as the recipe runs it
(evaluation.py: precise BN and the validation pass of the raw weights and the EMA, capped at
`steps` batches and scaled), one checkpoint write and the final weights' digest, and reads the
peak device memory. A CUDA
out-of-memory error is a measurement too: the configuration does not fit at this batch, and the
run is repeated at half the per-process batch until one fits (what DDP over more GPUs gives
each process). Nothing here reads a study; the checkpoint goes to `scratch` and is removed.
"""

from __future__ import annotations

import importlib
import itertools
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

from optbench import safefs
from optbench.data.input_plan import resolve_execution
from optbench.errors import MeasureFailed
from optbench.host import freeze_at_exit
from optbench.train.compute import Compute, runtime_info
from optbench.train.distributed import DistContext
from optbench.train.epoch import run_epoch
from optbench.train.evaluation import member_errors, recompute_members_bn
from optbench.train.loop import weights_digest
from optbench.train.parts import warm_dataset
from optbench.train.precise_bn import precise_bn_batches
from optbench.train.signals import StopRequest
from optbench.train.state import TrialState, save_state
from optbench.train.stepper import SoloStepper
from optbench.trial.config import Execution, TrainConfig
from optbench.trial.timing import JOB_IMPORTS
from optbench.user_code import import_modules

SCRATCH_CHECKPOINT = "measure-checkpoint.pt"  # written in `scratch`, then removed


def device_name(device: torch.device) -> str:
    """The device as result.json names it, with torch's CPU threads on a CPU."""
    name = runtime_info(device)["device"]
    return f"{name}, {torch.get_num_threads()} thread(s)" if device.type == "cpu" else name


def _run_steps(stepper: SoloStepper, compute: Compute, state: TrialState, steps: int):
    """Run `steps` optimizer steps from `state`'s position, across epoch ends: their
    training seconds and input-wait seconds, and the position after them."""
    seconds = wait = 0.0
    while steps > 0:
        before_s, before_w = state.epoch_s, state.epoch_wait_s
        left = len(stepper.parts.batches) - state.batch
        ran = run_epoch(stepper, [state], compute, StopRequest(), steps=min(steps, left))
        if ran.complete:  # the epoch ended: the next one starts from its first batch
            seconds += ran.seconds - before_s
            wait += ran.wait_s - before_w
            steps -= left
            state = TrialState(epoch=state.epoch + 1)
        else:
            seconds += state.epoch_s - before_s
            wait += state.epoch_wait_s - before_w
            steps = 0
    return seconds, wait, state


class _FirstBatches:
    """The first `n` validation batches of `batches`, as count_errors reads a split; `images`
    counts one pass over them (each kind of weights makes its own pass)."""

    def __init__(self, batches, n: int):
        self.batches, self.n, self.num_classes = batches, n, batches.num_classes
        self.images = 0
        self.passes = 0

    def val(self):
        self.passes += 1
        for x, y in itertools.islice(self.batches.val(), self.n):
            if self.passes == 1:
                self.images += len(y)
            yield x, y


def _val_images(batches, timed: int) -> int:
    """Images in the validation split of this copy of the data, where it can be told (else
    the images timed)."""
    for count in (lambda: len(batches.val_set), lambda: len(batches.data.val_y)):
        try:
            return count()
        except AttributeError:
            continue
    return timed


def _measure_once(
    cfg: TrainConfig, execution: Execution, compute: Compute, steps: int, warmup: int, scratch: Path
) -> dict:
    start = time.perf_counter()  # as start_program's: what a trial's wall_s counts from
    execution = resolve_execution(execution, compute.device.type, cfg.recipe)
    if compute.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(compute.device)
    stepper = SoloStepper(cfg, compute, execution.pipeline, scratch / SCRATCH_CHECKPOINT, scratch)
    parts = stepper.parts
    (state,) = stepper.begin(resume=False)
    build_s = time.perf_counter() - start  # the data, the model, its optimizer and EMA
    warm_s, _, state = _run_steps(stepper, compute, state, warmup)
    seconds, wait, state = _run_steps(stepper, compute, state, steps)
    step_s = seconds / steps
    # an epoch's end as the recipe runs it (evaluation.py): precise BN of each kind of weights
    # over its batches, then each kind's errors on the split; both capped at `steps` batches
    t = time.perf_counter()
    bn_batches = recompute_members_bn(stepper, compute, 0, limit=steps)
    bn_s = time.perf_counter() - t
    first = _FirstBatches(parts.batches, steps)
    t = time.perf_counter()
    member_errors(stepper, compute, first)
    eval_s = time.perf_counter() - t
    t = time.perf_counter()
    save_state(scratch / SCRATCH_CHECKPOINT, cfg, stepper, state, compute.dist, scratch)
    checkpoint_s = time.perf_counter() - t
    safefs.remove(scratch / SCRATCH_CHECKPOINT, scratch)
    t = time.perf_counter()
    weights_digest(parts.model)  # a trial's end: its result's digest
    end_s = time.perf_counter() - t
    if compute.device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(compute.device)
        capacity = torch.cuda.get_device_properties(compute.device).total_memory
    else:  # the process's peak resident memory (kilobytes on Linux, bytes on macOS)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak *= 1 if sys.platform == "darwin" else 1024
        capacity = _host_memory()
    full_bn = precise_bn_batches(cfg.recipe.precise_bn_images, cfg.batch_size, len(parts.batches))
    return {
        "device": device_name(compute.device),
        "pipeline": execution.pipeline,
        "batch": cfg.batch_size,
        "steps": steps,
        "warmup": warmup,
        "images_per_s": round(steps * cfg.batch_size / seconds, 3),
        "step_s": round(step_s, 6),
        "input_wait": round(wait / seconds, 4) if seconds else None,
        "n_train": parts.batches.num_train,
        # an epoch's end: its validation passes (one per kind of weights: raw, EMA), per image
        # of the split ...
        "eval_s_per_image": eval_s / max(1, first.images),
        "eval_passes": first.passes,
        "n_val": _val_images(parts.batches, first.images),
        # ... its precise BN, all of its batches (none where the recipe asks none)
        "precise_bn_s": round(bn_s * full_bn / bn_batches, 4) if bn_batches else 0.0,
        "checkpoint_s": round(checkpoint_s, 4),
        # a trial's own start, its dataset already read (measure_config's data_s): build,
        # and what its first steps take beyond the steady pace
        "start_s": round(build_s + max(0.0, warm_s - warmup * step_s), 3),
        "end_s": round(end_s, 4),
        "peak_memory_bytes": int(peak),
        "device_memory_bytes": int(capacity),
    }


def _host_memory() -> int:
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def measure_config(
    cfg: TrainConfig,
    execution: Execution,
    device: str,
    *,
    steps: int,
    warmup: int,
    scratch: Path,
) -> dict:
    """Time `cfg` on `device` (module docstring). The figures at the largest per-process
    batch that fits, halving from cfg.batch_size; `fits` says whether cfg.batch_size did,
    `fitting_batch` which batch was measured and `data_s` what reading the dataset took (not in
    `start_s`: a process's later trials find it read)."""
    import_modules(cfg.imports)  # the study's own models and optimizers, as a job imports them
    # where and how every batch below computes (the recipe's, whatever the batch)
    compute = Compute.for_trial(cfg.recipe, device, DistContext(), None)
    # The dataset's read (an image dataset listed), once: a worker or a job of several trials
    # keeps it (parts.py: warm_dataset), so only its first trial pays it; each batch below then
    # starts warm.
    t = time.perf_counter()
    warm_dataset(cfg, compute)
    data_s = round(time.perf_counter() - t, 3)
    batch = cfg.batch_size
    while True:
        try:
            figures = _measure_once(
                cfg.model_copy(update={"batch_size": batch}),
                execution,
                compute,
                steps,
                warmup,
                scratch,
            )
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            if batch == 1:
                return {"device": device, "fits": False, "fitting_batch": None}
            batch //= 2
            continue
        return {
            **figures,
            "data_s": data_s,
            "fits": batch == cfg.batch_size,
            "fitting_batch": batch,
        }


def measure_fresh(
    cfg: TrainConfig, execution: Execution, device: str, *, threads: int, **timing
) -> dict:
    """`measure_config` (`timing`: its steps, warmup and scratch) in a fresh Python process
    (`threads` torch threads on a CPU), as a job runs its trial: the first trial of a process
    pays for what its build loads first (the dataset's library, the model's first
    construction), which a process that measured another configuration already holds. Adds
    `process_s`: what the process takes beyond its trial, its start, the imports of a job
    (trial/timing.py: JOB_IMPORTS) and its exit (the interpreter's teardown, torch's included).
    MeasureFailed with the child's last line if it fails."""
    request = {
        "config": cfg.model_dump(mode="json"),
        "execution": execution.model_dump(mode="json"),
        "device": device,
        "steps": timing["steps"],
        "warmup": timing["warmup"],
        "scratch": str(timing["scratch"]),
        "threads": threads,
    }
    started = time.time()  # the child's clock is the same wall clock
    proc = subprocess.run(
        [sys.executable, "-m", "optbench.train.measure"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
    )
    ended = time.time()
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"]
        raise MeasureFailed(f"--measure: measuring {cfg.model} failed: {lines[-1]}")
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    start_s = figures.pop("imported_at") - started
    figures["process_s"] = round(start_s + ended - figures.pop("measured_at"), 3)
    return figures


def _measure_here() -> None:
    """`python -m optbench.train.measure`: measure the configuration JSON on stdin, print its
    figures as one JSON line (module `measure_fresh`)."""
    freeze_at_exit()  # as a job's process ends (executors/slurm/job.py)
    for name in JOB_IMPORTS:  # what a SLURM job's process imports before its trial
        importlib.import_module(name)
    imported_at = time.time()
    request = json.loads(sys.stdin.read())
    torch.set_num_threads(request["threads"])
    figures = measure_config(
        TrainConfig.model_validate(request["config"]),
        Execution.model_validate(request["execution"]),
        request["device"],
        steps=request["steps"],
        warmup=request["warmup"],
        scratch=Path(request["scratch"]),
    )
    print(json.dumps({**figures, "imported_at": imported_at, "measured_at": time.time()}))
    sys.stdout.flush()  # what follows is the process's exit


if __name__ == "__main__":
    _measure_here()

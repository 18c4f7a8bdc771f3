"""A short timed training run of one configuration (`measure_config`), for the cost plan of
`optbench run --dry-run --measure` (optbench/plan/costs.py).

It builds the trial's real parts (parts.py: its model, recipe, input pipeline and batch, at the
precision the device gives it), runs `warmup` optimizer steps untimed and then `steps` timed
ones through the trainer's own epoch code (epoch.run_epoch over a SoloStepper, told to run
exactly that many steps), times a validation pass (capped at `steps` batches; per image) and one
checkpoint write, and reads the peak device memory. A CUDA
out-of-memory error is a measurement too: the configuration does not fit at this batch, and the
run is repeated at half the per-process batch until one fits (what DDP over more GPUs gives
each process). Nothing here reads a study; the checkpoint goes to `scratch` and is removed.
"""

from __future__ import annotations

import itertools
import resource
import sys
import time
from pathlib import Path

import torch

from optbench import safefs
from optbench.data.input_plan import resolve_execution
from optbench.train.compute import Compute, runtime_info
from optbench.train.distributed import DistContext
from optbench.train.epoch import run_epoch
from optbench.train.evaluation import count_errors
from optbench.train.signals import StopRequest
from optbench.train.state import TrialState, save_state
from optbench.train.stepper import SoloStepper
from optbench.trial.config import Execution, TrainConfig

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
    """The first `n` validation batches of `batches`, as count_errors reads a split."""

    def __init__(self, batches, n: int):
        self.batches, self.n, self.num_classes = batches, n, batches.num_classes
        self.images = 0

    def val(self):
        for x, y in itertools.islice(self.batches.val(), self.n):
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
    cfg: TrainConfig, execution: Execution, device: str, steps: int, warmup: int, scratch: Path
) -> dict:
    compute = Compute.for_trial(cfg.recipe, device, DistContext(), None)
    execution = resolve_execution(execution, compute.device.type, cfg.recipe)
    if compute.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(compute.device)
    start = time.perf_counter()
    stepper = SoloStepper(cfg, compute, execution.pipeline, scratch / SCRATCH_CHECKPOINT, scratch)
    parts = stepper.parts
    (state,) = stepper.begin(resume=False)
    _, _, state = _run_steps(stepper, compute, state, warmup)
    build_s = time.perf_counter() - start  # start-up and warm-up, as a trial's first steps
    seconds, wait, state = _run_steps(stepper, compute, state, steps)
    models = 1 + (stepper.ema is not None)
    first = _FirstBatches(parts.batches, steps)
    t = time.perf_counter()
    parts.model.eval()
    count_errors(parts.model, first, parts.augment, compute)
    eval_s = time.perf_counter() - t
    t = time.perf_counter()
    save_state(scratch / SCRATCH_CHECKPOINT, cfg, stepper, state, compute.dist, scratch)
    checkpoint_s = time.perf_counter() - t
    safefs.remove(scratch / SCRATCH_CHECKPOINT, scratch)
    if compute.device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(compute.device)
        capacity = torch.cuda.get_device_properties(compute.device).total_memory
    else:  # the process's peak resident memory (kilobytes on Linux, bytes on macOS)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak *= 1 if sys.platform == "darwin" else 1024
        capacity = _host_memory()
    return {
        "device": device_name(compute.device),
        "pipeline": execution.pipeline,
        "batch": cfg.batch_size,
        "steps": steps,
        "warmup": warmup,
        "images_per_s": round(steps * cfg.batch_size / seconds, 3),
        "step_s": round(seconds / steps, 6),
        "input_wait": round(wait / seconds, 4) if seconds else None,
        "n_train": parts.batches.num_train,
        # a validation pass: the raw model and its EMA, each epoch, per image
        "eval_s_per_image": eval_s * models / max(1, first.images),
        "n_val": _val_images(parts.batches, first.images),
        "checkpoint_s": round(checkpoint_s, 4),
        "start_s": round(build_s, 3),
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
    batch that fits, halving from cfg.batch_size; `fits` says whether cfg.batch_size did and
    `fitting_batch` which batch was measured."""
    batch = cfg.batch_size
    while True:
        try:
            figures = _measure_once(
                cfg.model_copy(update={"batch_size": batch}),
                execution,
                device,
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
        return {**figures, "fits": batch == cfg.batch_size, "fitting_batch": batch}

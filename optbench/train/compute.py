"""Where and how a trial computes: its device (under DDP, its rank's device and process group),
bf16 autocast, channels_last, torch.compile, fused optimizer kernels, and its input pipeline's
workers; and what its floating-point results depend on besides its config (`runtime_info`, in
result.json).

The GPU settings (`recipe.amp`, `recipe.channels_last`, `recipe.compile`, and fused optimizer
kernels) apply on CUDA only; on the CPU all of them are off, so CPU results stay exact and
comparable. Each also runs on the CPU when a test builds a Compute with it on
(tests/test_gpu_branches.py, tests/test_train_loop.py).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

import torch

from optbench.host import cpu_name
from optbench.spec.recipe import Recipe
from optbench.train.distributed import DistContext, process_device


@dataclass(frozen=True)
class Compute:
    """Where and how this process computes its share of a trial: device, process group,
    precision, memory layout and DataLoader workers."""

    device: torch.device
    dist: DistContext
    amp: bool
    channels_last: bool
    compile: bool = False
    fused: bool = False  # the optimizer's fused kernels (foreach otherwise; train/optim.py)
    workers: int | None = None  # input workers; None: data/batches.py's loader_workers()
    # where a shard index is cached if the shards' folder is not writable (the study folder);
    # None: nowhere (datasets.load_dataset's cache_dir)
    data_cache: Path | None = None

    @classmethod
    def for_trial(
        cls,
        recipe: Recipe,
        device: str,
        dist: DistContext,
        workers: int | None,
        data_cache: Path | None = None,
    ) -> Compute:
        """This process's share of a trial asked to run on `device` ("cpu", "cuda")."""
        dev = torch.device(device)
        if dist.enabled and dev.type == "cuda":
            dev = process_device(dist, device, torch.cuda.device_count())
            torch.cuda.set_device(dev)
        on_gpu = dev.type == "cuda"
        return cls(
            dev,
            dist,
            amp=recipe.amp and on_gpu,
            channels_last=recipe.channels_last and on_gpu,
            compile=recipe.compile and on_gpu,
            fused=on_gpu,
            workers=workers,
            data_cache=data_cache,
        )

    def autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp)

    def layout(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x


def runtime_info(device) -> dict:
    """What a trial's floating-point results depend on besides its config: torch's CPU thread
    count, the library versions and the device (CPU model or GPU name). Two trials of the same
    config give the same digest when all of these are equal (docs/faults.md)."""
    import numpy
    import timm

    if device.type == "cuda":
        where = f"{device}: {torch.cuda.get_device_name(device)}"
    else:
        where = f"{device.type}: {cpu_name()}"
    return {
        "threads": torch.get_num_threads(),
        "device": where,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "timm": timm.__version__,
            "numpy": numpy.__version__,
        },
    }

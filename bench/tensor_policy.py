"""Images/s of the recipes' auto-augment policies: the tensor policy (data/tensor_policy.py) on
the CPU (and on CUDA when there is one) against the PIL path (`augment.per_image`), batch 128
of natural-ish uint8 images at 32 px and 224 px. Each figure: the median over `--repeats`
batches after one warm-up batch; wall time and the process's user+sys CPU time per image.
Also the tensor policy's aten operations per batch of 32 px images at batch 8 and 256
(`tensor_policy.aten_ops`: [ops called, with the ops they call], on the CPU; issue 66), and
at 256 per operation name (`aten_ops_by_name`).
Prints one JSON line.

    PYTHONPATH=. python bench/tensor_policy.py [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from optbench.data import augment
from optbench.data.tensor_policy import aten_ops, aten_ops_by_name, tensor_policy
from optbench.host import cpu_name

POLICIES = ("pycls_v0", "rand-m9-mstd0.5-inc1")
SIZES = (32, 224)
BATCH = 128
OP_BATCHES = (8, 256)


def natural_batch(size: int, seed: int = 0, batch: int = BATCH) -> torch.Tensor:
    """Smooth colour gradients plus noise, (batch, 3, size, size) uint8."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    phase = rng.uniform(0, 6, (batch, 3, 1, 1))
    x = 128 + 100 * np.sin(3 * xx + 2 * yy + phase) + rng.normal(0, 12, (batch, 3, size, size))
    return torch.from_numpy(np.clip(x, 0, 255).astype(np.uint8))


def ops_per_batch(name: str) -> dict:
    """The policy's aten ops per batch of 32 px images, after a first batch (which makes the
    per-shape constants): {"batch_N": [ops called, with their sub-ops]}, and "by_name" at the
    largest batch: {name: [calls, with the sub-ops]}."""
    policy, out = tensor_policy(name, 32), {}
    for batch in OP_BATCHES:
        x, g = natural_batch(32, batch=batch), torch.Generator().manual_seed(0)
        policy(x, g)
        out[f"batch_{batch}"] = list(aten_ops(lambda p=policy, x=x, g=g: p(x, g)))
    by_name = aten_ops_by_name(lambda p=policy, x=x, g=g: p(x, g))
    out["by_name"] = {op: list(count) for op, count in by_name.items()}
    return out


def measure(run: Callable[[], object], repeats: int, sync: Callable[[], None]) -> dict:
    run()
    sync()
    walls, cpus = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        run()
        sync()
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - t0)
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    return {
        "img_per_s": round(BATCH / wall, 1),
        "ms_per_batch": round(wall * 1e3, 1),
        "cpu_ms_per_batch": round(cpu * 1e3, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out: dict = {
        "bench": "tensor_policy",
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "threads": args.threads,
        "batch": BATCH,
        "load_before": round(os.getloadavg()[0], 2),
    }
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if "cuda" in devices:
        out["gpu"] = torch.cuda.get_device_name()
    for name in POLICIES:
        out[f"{name}_aten_ops"] = ops_per_batch(name)
        for size in SIZES:
            x = natural_batch(size)
            pil = augment.timm_policy(name, 3, size)
            out[f"{name}_{size}px_pil"] = measure(
                lambda pil=pil, x=x: augment.per_image(pil, x), args.repeats, lambda: None
            )
            policy = tensor_policy(name, size)
            for device in devices:
                xd, gen = x.to(device), torch.Generator().manual_seed(0)
                sync = torch.cuda.synchronize if device == "cuda" else lambda: None
                out[f"{name}_{size}px_tensor_{device}"] = measure(
                    lambda p=policy, xd=xd, g=gen: p(xd, g), args.repeats, sync
                )
    out["load_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

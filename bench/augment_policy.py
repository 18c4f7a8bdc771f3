"""What an auto-augment policy costs per training batch on the small-dataset (device) path.

Times `BatchAugment.apply_policy` on uint8 batches shaped like the quickstart's digits
(1x16x16, batch 128) and like CIFAR (3x32x32, batch 256), synthetic images (no download), for:
torchvision's AutoAugment applied to groups of 8 images and to single images (tensor ops), and
timm's policies applied per image through PIL ("pycls_v0", the paper preset's; DeiT's
"rand-m9-mstd0.5-inc1"). Each figure is the median of `--repeats` batches, in ms per batch and
us per image. The last line is JSON.

    PYTHONPATH=. python bench/augment_policy.py [--repeats 20] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch

from optbench.data.augment import BatchAugment
from optbench.spec.recipe import Recipe

SHAPES = {"digits": (128, 1, 16), "cifar": (256, 3, 32)}  # batch, channels, size
POLICIES = {
    "torchvision_autoaugment_group8": {"auto_augment": "autoaugment", "augment_group": 8},
    "torchvision_autoaugment_per_image": {"auto_augment": "autoaugment", "augment_group": 1},
    "timm_pycls_v0_per_image": {"auto_augment": "pycls_v0"},
    "timm_rand-m9-mstd0.5-inc1_per_image": {"auto_augment": "rand-m9-mstd0.5-inc1"},
}


def ms_per_batch(recipe: Recipe, batch: int, chans: int, size: int, repeats: int) -> float:
    augment = BatchAugment(
        recipe,
        num_classes=10,
        mean=(0.5,) * chans,
        std=(0.25,) * chans,
        device=torch.device("cpu"),
        in_chans=chans,
        img_size=size,
    )
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (batch, chans, size, size), generator=gen).to(torch.uint8)
    augment.apply_policy(x)  # warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        augment.apply_policy(x)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out: dict = {
        "bench": "augment_policy",
        "machine": f"{platform.node() and 'vm'} {platform.machine()}",
        "load_average": round(os.getloadavg()[0], 2),
        "threads": args.threads,
    }
    for data, (batch, chans, size) in SHAPES.items():
        for name, keys in POLICIES.items():
            ms = ms_per_batch(Recipe(**keys), batch, chans, size, args.repeats)
            out[f"{data}_{name}"] = {
                "ms_per_batch": round(ms, 2),
                "us_per_image": round(ms * 1e3 / batch, 1),
            }
            print(f"{data:7s} batch {batch} {name:40s} {ms:8.2f} ms/batch", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

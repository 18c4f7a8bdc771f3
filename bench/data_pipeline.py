"""The device-resident batched data pipeline against a torchvision DataLoader with per-image
transforms, on CIFAR-sized data (synthetic uint8 32x32x3 images; no download).

Both produce the same thing per batch: random crop with 4 px zero padding, horizontal flip,
normalization, as float tensors with labels, ready for the model. The DataLoader side is the
usual torchvision recipe (CIFAR10-style dataset of HWC uint8 arrays, RandomCrop(32, padding=4),
RandomHorizontalFlip, ToTensor, Normalize), timed with 0 and with `--workers` worker processes;
the faster of the two is the baseline. A second optbench figure adds torchvision's AutoAugment
(groups of 8) and the paper recipe's mixup/CutMix (work the baseline does not do) for reference.
Nothing trains: this times data only. The last line is JSON; `ratio` = optbench images/s /
DataLoader images/s (target >= 10 on the CPU).

    PYTHONPATH=. python bench/data_pipeline.py [--images 10000] [--batch 256] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T

from optbench.data.augment import BatchAugment
from optbench.data.batches import DeviceBatches
from optbench.data.datasets import DeviceData
from optbench.spec.recipe import Recipe

MEAN, STD = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)


class HwcImages(Dataset):
    """What torchvision's CIFAR10 holds: HWC uint8 numpy images and int labels."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        from PIL import Image

        return self.transform(Image.fromarray(self.images[i])), int(self.labels[i])


def dataloader_images_per_s(images, labels, batch: int, workers: int) -> float:
    transform = T.Compose(
        [
            T.RandomCrop(32, padding=4),
            T.RandomHorizontalFlip(),
            T.ToTensor(),
            T.Normalize(MEAN, STD),
        ]
    )
    loader = DataLoader(
        HwcImages(images, labels, transform),
        batch_size=batch,
        shuffle=True,
        drop_last=True,
        num_workers=workers,
        persistent_workers=False,
    )
    t0 = time.perf_counter()
    n = sum(len(y) for _, y in loader)  # worker start-up counts: it is paid every epoch
    return n / (time.perf_counter() - t0)


def optbench_images_per_s(data: DeviceData, batch: int, recipe: Recipe) -> float:
    batches = DeviceBatches(data, batch, seed=0)
    augment = BatchAugment(recipe, num_classes=10, mean=MEAN, std=STD, device=torch.device("cpu"))
    torch.manual_seed(0)
    t0 = time.perf_counter()
    n = 0
    for x, y in batches.train(epoch=0):
        x, y = augment(x, y)
        n += len(x)
    return n / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    hwc = rng.integers(0, 256, (args.images, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, args.images)
    chw = torch.from_numpy(hwc).permute(0, 3, 1, 2).contiguous()
    y = torch.from_numpy(labels)
    data = DeviceData(chw, y, chw[:0], y[:0], 10, MEAN, STD)
    crop_flip = Recipe(translate=4, hflip=True)
    # torchvision's AutoAugment in groups of 8 (the figure in RESULTS.md); the paper preset's
    # per-image pycls_v0 policy is timed by bench/augment_policy.py
    paper = Recipe(preset="paper", auto_augment="autoaugment", translate=4, hflip=True)

    def best(f, *a) -> float:
        return max(f(*a) for _ in range(args.repeats))

    loaders = {
        w: best(dataloader_images_per_s, hwc, labels, args.batch, w) for w in {0, args.workers}
    }
    ours = best(optbench_images_per_s, data, args.batch, crop_flip)
    ours_paper = best(optbench_images_per_s, data, args.batch, paper)
    baseline = max(loaders.values())
    line = {
        "bench": "data_pipeline",
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}",
        "device": "cpu",
        "threads": args.threads,
        "images": args.images,
        "batch": args.batch,
        **{f"dataloader_workers{w}_images_per_s": round(v, 1) for w, v in sorted(loaders.items())},
        "optbench_images_per_s": round(ours, 1),
        "optbench_paper_recipe_images_per_s": round(ours_paper, 1),
        "ratio": round(ours / baseline, 2),
        "target": 10,
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()

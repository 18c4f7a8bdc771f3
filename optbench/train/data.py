"""Datasets, held on the training device as uint8 tensors and augmented there in batches.

Small datasets (digits; CIFAR later) fit in memory, so the fastest loop keeps them on the device
and does every augmentation as one batched tensor op: no per-image Python on the hot path.
`DATASETS` names every dataset a study may use; `check_dataset` validates a dataset's
location without loading it (so a bad path is caught before anything is written).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from optbench.spec import Dataset, UsageError


@dataclass(frozen=True)
class DeviceData:
    """A train/val split as uint8 image tensors (N, C, H, W) and int64 labels, on one device."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]

    @property
    def in_chans(self) -> int:
        return self.train_x.shape[1]

    @property
    def img_size(self) -> int:
        return self.train_x.shape[-1]

    def to(self, device: torch.device | str) -> DeviceData:
        return DeviceData(
            self.train_x.to(device),
            self.train_y.to(device),
            self.val_x.to(device),
            self.val_y.to(device),
            self.num_classes,
            self.mean,
            self.std,
        )


def _resize_uint8(x: torch.Tensor, size: int | None) -> torch.Tensor:
    if size is None or size == x.shape[-1]:
        return x
    y = F.interpolate(x.float(), size=(size, size), mode="bilinear", align_corners=False)
    return y.round().clamp(0, 255).to(torch.uint8)


def _stratified_split(
    y: np.ndarray, val_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    train, val = train_test_split(idx, test_size=val_fraction, stratify=y, random_state=seed)
    return np.sort(train), np.sort(val)


def load_digits(spec: Dataset) -> DeviceData:
    """scikit-learn's 1,797 real 8x8 handwritten digits (bundled, nothing downloaded).

    Pixel values 0..16 are scaled to 0..255. The split is fixed: stratified, 20% validation,
    split seed 0, independent of any trial's seed.
    """
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    images = np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8)  # (N, 8, 8)
    x = torch.from_numpy(images).unsqueeze(1)  # (N, 1, 8, 8)
    x = _resize_uint8(x, spec.img_size)
    y = torch.from_numpy(bunch.target.astype(np.int64))
    train, val = _stratified_split(bunch.target, 0.2, seed=0)
    train_x = x[train]
    mean = (train_x.float().mean().item() / 255.0,)
    std = (train_x.float().std().item() / 255.0,)
    return DeviceData(train_x, y[train], x[val], y[val], 10, mean, std)


def _check_nothing(spec: Dataset) -> None:
    if spec.root is not None:
        raise UsageError(
            f"dataset.root: {spec.name} is bundled and takes no root (got {spec.root})"
        )


# name -> (check the location without loading, load)
DATASETS: dict[str, tuple[Callable[[Dataset], None], Callable[[Dataset], DeviceData]]] = {
    "digits": (_check_nothing, load_digits),
}


def check_dataset(spec: Dataset) -> None:
    """Raise UsageError naming the path and expected layout if `spec` cannot be loaded."""
    if spec.name not in DATASETS:
        raise UsageError(f"dataset.name: unknown dataset {spec.name!r}; known: {sorted(DATASETS)}")
    DATASETS[spec.name][0](spec)


@dataclass(frozen=True)
class DatasetInfo:
    """What a dataset looks like to a model, and how many training images an epoch has."""

    num_classes: int
    in_chans: int
    img_size: int
    n_train: int


def dataset_info(spec: Dataset) -> DatasetInfo:
    """Shape and size of a dataset (for compute estimates and complexity tables)."""
    data = load_dataset(spec)  # cheap for the bundled digits
    return DatasetInfo(data.num_classes, data.in_chans, data.img_size, len(data.train_y))


def load_dataset(spec: Dataset) -> DeviceData:
    check_dataset(spec)
    return DATASETS[spec.name][1](spec)


class GpuLoader:
    """Batches of a DeviceData split, augmented on its device: translate (pad + random crop),
    horizontal flip, normalization. The order and the augmentation come from one generator,
    so a seed fixes the whole stream."""

    def __init__(
        self,
        data: DeviceData,
        batch_size: int,
        *,
        translate: int,
        hflip: bool,
        generator: torch.Generator,
    ):
        self.data, self.batch_size = data, batch_size
        self.translate, self.hflip, self.gen = translate, hflip, generator
        dev = data.train_x.device
        self.mean = torch.tensor(data.mean, device=dev).view(1, -1, 1, 1)
        self.std = torch.tensor(data.std, device=dev).view(1, -1, 1, 1)

    def __len__(self) -> int:
        return len(self.data.train_y) // self.batch_size  # drop the ragged last batch

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() / 255.0 - self.mean) / self.std

    def augment(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        dev = x.device
        if self.translate:
            p = self.translate
            padded = F.pad(x, (p, p, p, p))
            dy = torch.randint(0, 2 * p + 1, (b,), generator=self.gen, device=dev)
            dx = torch.randint(0, 2 * p + 1, (b,), generator=self.gen, device=dev)
            rows = (dy[:, None] + torch.arange(h, device=dev))[:, None, :, None]
            cols = (dx[:, None] + torch.arange(w, device=dev))[:, None, None, :]
            bidx = torch.arange(b, device=dev)[:, None, None, None]
            cidx = torch.arange(x.shape[1], device=dev)[None, :, None, None]
            x = padded[bidx, cidx, rows, cols]
        if self.hflip:
            flip = torch.rand(b, generator=self.gen, device=dev) < 0.5
            x = torch.where(flip[:, None, None, None], x.flip(-1), x)
        return x

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.data.train_y)
        order = torch.randperm(n, generator=self.gen, device=self.data.train_y.device)
        for i in range(len(self)):
            idx = order[i * self.batch_size : (i + 1) * self.batch_size]
            x = self.augment(self.data.train_x[idx])
            yield self.normalize(x), self.data.train_y[idx]

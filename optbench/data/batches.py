"""Batches: how a dataset reaches the model, as uint8 image batches and int labels on the
training device, in an order fixed by (seed, epoch). Every path has one interface
(`TrainBatches`) and a `pipeline` name ("pil" or "tensor", what result.json's `execution`
records):

- `DeviceBatches` (small datasets, `DeviceData`): index the device-resident tensors with a slice
  of the epoch's order; augmentation then runs there in whole batches (augment.py), the policy
  per sample on the device in the tensor pipeline. No per-image Python on the hot path.
- `PreparedBatches` (small datasets, pil pipeline, a PIL policy): DataLoader worker processes
  prepare the next batches ahead (translate, flip and the exact PIL policy per image), seeded
  by the batch's position; the rest runs batched on the device.
- `FolderBatches` (class-folder datasets, pil pipeline): persistent DataLoader workers decode
  and crop each image (RandomResizedCrop, flip, the recipe's auto-augment policy) with PIL;
  batches arrive as pinned uint8 tensors, prefetched, and the rest (PCA lighting,
  normalization, erasing, mixup/CutMix) runs batched on the device.
- tensor_folder.TensorFolderBatches (class-folder datasets, tensor pipeline): bytes read ahead
  by threads, decoded and augmented in batches on the device.

Every random order is derived from (seed, epoch), and every per-image random transform of the
worker paths from (seed, epoch, image index) or (seed, epoch, batch) (and the pass: training,
or a precise-BN pass that draws fresh augmentations), so a position in training fixes its
data whatever the number of workers: a trial resumed mid-epoch sees exactly the batches an
uninterrupted one sees. Under DDP each process takes its contiguous share (`Shard`) of every
global batch.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch.utils.data import DataLoader
from torch.utils.data import Dataset as TorchDataset

from optbench.data.augment import build_policy, per_image, random_crop_flip
from optbench.data.datasets import (
    IMAGE_ERRORS,
    DeviceData,
    FolderData,
    UnreadableImage,
    split_samples,
)
from optbench.data.input_plan import InputPlan, input_plan
from optbench.data.seeding import derive_seed
from optbench.data.shards import load_rgb
from optbench.host import usable_cores
from optbench.spec.recipe import Recipe


@dataclass(frozen=True)
class Shard:
    """This process's share of a global batch under DDP (rank r of world w); (0, 1) alone."""

    rank: int = 0
    world: int = 1


def epoch_order(n: int, seed: int, epoch: int, repeated_aug: int) -> torch.Tensor:
    """The training order of one epoch (n indices, on the CPU), fixed by (seed, epoch).

    With repeated augmentation r > 1 (DeiT's RASampler), an epoch draws n / r distinct images
    and shows each r times in a row, so the r copies fall into the same global batch."""
    gen = torch.Generator().manual_seed(derive_seed(seed, "order", epoch))
    if repeated_aug == 1:
        return torch.randperm(n, generator=gen)
    distinct = torch.randperm(n, generator=gen)[: -(-n // repeated_aug)]
    # distinct.repeat_interleave(r)[:n], without making the r x len(distinct) copies first
    return distinct[torch.arange(n) // repeated_aug]


class TrainBatches(Protocol):
    """What the loop needs from a dataset: uint8 batches in a fixed order; `train`'s on the
    device or pinned on the host (the step copies them, train/epoch.py), `val`'s on the device."""

    data: DeviceData | FolderData  # what they are read from
    num_classes: int
    in_chans: int
    img_size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    geometric_on_device: bool  # False: crop/flip/policy were applied per image already
    pipeline: str  # "pil" or "tensor" (result.json's execution.pipeline)
    pca_lighting: bool  # whether recipe.lighting_std applies (RGB class-folder datasets)

    def __len__(self) -> int: ...  # batches per epoch

    @property
    def num_train(self) -> int: ...  # training images

    def train(
        self, epoch: int, start: int, stream: str = "image"
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]: ...

    def val(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]: ...


class DeviceBatches:
    """Batches of a DeviceData: index the device tensors with a slice of the epoch order.

    `batch_size` is the global batch; under DDP this process takes its contiguous share."""

    geometric_on_device = True
    pca_lighting = False  # pycls adds none on CIFAR; the eigenvectors are ImageNet's

    def __init__(
        self,
        data: DeviceData,
        batch_size: int,
        *,
        seed: int,
        repeated_aug: int = 1,
        shard: Shard = Shard(),
        pipeline: str = "tensor",
    ):
        """`pipeline`: the name recorded; the same batches either way (a policy runs in
        BatchAugment, per sample on the device in the tensor pipeline)."""
        self.data, self.batch_size, self.seed = data, batch_size, seed
        self.pipeline = pipeline
        self.repeated_aug, self.shard = repeated_aug, shard
        self.local_batch = batch_size // shard.world
        self.num_classes, self.in_chans = data.num_classes, data.in_chans
        self.img_size, self.mean, self.std = data.img_size, data.mean, data.std

    def __len__(self) -> int:
        return self.data.num_train // self.batch_size  # drop the ragged last batch

    @property
    def num_train(self) -> int:
        return self.data.num_train

    def train(
        self, epoch: int, start: int = 0, stream: str = "image"
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The epoch's batches of raw images from batch `start` (augmented on the device, so
        `stream` changes nothing here)."""
        order = epoch_order(self.data.num_train, self.seed, epoch, self.repeated_aug)
        order = order.to(self.data.train_y.device)
        for b in range(start, len(self)):
            lo = b * self.batch_size + self.shard.rank * self.local_batch
            idx = order[lo : lo + self.local_batch]
            yield self.data.train_x[idx], self.data.train_y[idx]

    def val(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This process's share of the validation split in batches of its training batch, as
        every pipeline evaluates: on a CPU that is faster than one large chunk (the attention
        of a batch stays in cache); an image's logits are the same bits either way on this
        project's CPU (tests/test_data.py checks it)."""
        x = self.data.val_x[self.shard.rank :: self.shard.world]
        y = self.data.val_y[self.shard.rank :: self.shard.world]
        chunk = max(1, self.local_batch)
        for i in range(0, len(y), chunk):
            yield x[i : i + chunk], y[i : i + chunk]


class _PreparedBatch(TorchDataset):
    """A worker's side of PreparedBatches: the batch of key (epoch, batch, stream, indices),
    translated, flipped and put through the PIL policy image by image, every draw seeded by
    (seed, stream, epoch, batch, rank)."""

    def __init__(
        self, images: torch.Tensor, labels: torch.Tensor, recipe: Recipe, seed: int, rank: int
    ):
        self.images, self.labels, self.seed, self.rank = images, labels, seed, rank
        self.translate, self.hflip = recipe.translate, recipe.hflip
        self.policy = build_policy(recipe, images.shape[1], images.shape[-1])

    def __len__(self) -> int:
        return 0  # read by keys only

    def __getitem__(
        self, key: tuple[int, int, str, tuple[int, ...]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        epoch, batch, stream, indices = key
        s = derive_seed(self.seed, stream, epoch, batch, self.rank)
        random.seed(s)
        np.random.seed(s % 2**32)  # timm's RandAugment picks its ops with numpy
        torch.manual_seed(s)
        x = random_crop_flip(self.images[list(indices)], self.translate, self.hflip)
        return per_image(self.policy, x), self.labels[list(indices)]


class PreparedBatches(DeviceBatches):
    """DeviceBatches whose translate, flip and PIL policy run on DataLoader worker processes
    that prepare the next batches ahead (exact PIL ops, no host sync in the training step);
    the labels and the validation split stay on the device. `workers=0` prepares each batch in
    this process: the same batches."""

    geometric_on_device = False
    pipeline = "pil"

    def __init__(
        self,
        data: DeviceData,
        batch_size: int,
        recipe: Recipe,
        *,
        seed: int,
        device: torch.device,
        shard: Shard = Shard(),
        workers: int = 0,
    ):
        host = data.to("cpu")
        super().__init__(
            data.to(device),
            batch_size,
            seed=seed,
            repeated_aug=recipe.repeated_aug,
            shard=shard,
            pipeline=self.pipeline,
        )
        self.device, self.workers = device, workers
        self._keys = _Keys()
        self._loader = DataLoader(
            _PreparedBatch(host.train_x, host.train_y, recipe, seed, shard.rank),
            sampler=self._keys,
            batch_size=None,  # each key is a whole batch
            num_workers=workers,
            pin_memory=device.type == "cuda",
            prefetch_factor=4 if workers else None,
            persistent_workers=workers > 0,
        )

    def train(
        self, epoch: int, start: int = 0, stream: str = "image"
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = epoch_order(self.data.num_train, self.seed, epoch, self.repeated_aug)
        lo = [b * self.batch_size + self.shard.rank * self.local_batch for b in range(len(self))]
        batches = [tuple(order[i : i + self.local_batch].tolist()) for i in lo]
        self._keys.keys = [(epoch, b, stream, batches[b]) for b in range(start, len(self))]
        yield from self._loader  # pinned on CUDA: the step's copies do not wait for the GPU


class _Keys:
    """A sampler whose keys are set before each pass (a persistent DataLoader keeps its workers
    and asks its sampler anew at every iter())."""

    def __init__(self):
        self.keys: list = []

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self):
        return iter(self.keys)


def _resampled(plan: InputPlan, resize) -> list:
    """`resize` (a v2 transform class with its size bound) as plan.resampling says: Pillow's
    filters on the PIL image (antialiased: `bilinear_antialias`, `bicubic`, as DHVT's PIL
    pipeline), or, `bilinear`, the uint8 tensor without antialiasing (torch's half-pixel
    bilinear: pycls's cv2 INTER_LINEAR, rounded to uint8; docs/recipes.md measures the
    difference), then back to PIL."""
    from torchvision.transforms import v2

    r = plan.resampling
    if r.on_tensor:
        return [v2.PILToTensor(), resize(r.mode, r.antialias), v2.ToPILImage()]
    return [resize(r.mode, r.antialias)]


def _train_transform(plan: InputPlan, recipe: Recipe):
    """The training transform of one image: RandomResizedCrop, flip, the recipe's policy."""
    from torchvision.transforms import v2

    def crop(mode, antialias):
        return v2.RandomResizedCrop(
            plan.img_size, plan.crop_scale, plan.crop_ratio, interpolation=mode, antialias=antialias
        )

    steps = _resampled(plan, crop)
    if plan.hflip:
        steps.append(v2.RandomHorizontalFlip())
    policy = build_policy(recipe, 3, plan.img_size)
    if policy is not None:
        steps.append(policy)
    steps.append(v2.PILToTensor())
    return v2.Compose(steps)


def _val_transform(plan: InputPlan):
    """The evaluation transform: the shorter side to plan.eval_resize, centre crop img_size."""
    from torchvision.transforms import v2

    def resize(mode, antialias):
        return v2.Resize(plan.eval_resize, interpolation=mode, antialias=antialias)

    return v2.Compose([*_resampled(plan, resize), v2.CenterCrop(plan.img_size), v2.PILToTensor()])


class _SeededImages(TorchDataset):
    """A split's images (datasets.split_samples: files of class folders, as ImageFolder would
    read them but without dot-folders, or shard members) read by keys (epoch, index, stream): each image's
    random transform is seeded by (seed, stream, epoch, index), so it does not depend on which
    worker reads it or when; stream "image" is training, another name draws other
    augmentations of the image."""

    def __init__(self, data: FolderData, split: str, transform, seed: int):
        self.samples = split_samples(data, split)
        self.transform, self.seed = transform, seed

    def __len__(self) -> int:
        return len(self.samples)

    def _load(self, index: int):
        sample, label = self.samples[index]
        return self.transform(load_rgb(sample)), label  # PIL, converted to RGB

    def __getitem__(self, key: tuple[int, int, str]):
        epoch, index, stream = key
        s = derive_seed(self.seed, stream, epoch, index)
        random.seed(s)
        np.random.seed(s % 2**32)  # timm's RandAugment picks its ops with numpy
        torch.manual_seed(s)
        try:
            return self._load(index)
        except IMAGE_ERRORS as err:  # a broken file, or a decompression bomb
            raise UnreadableImage.of(self.samples[index][0], str(err)) from None


def _epoch_keys(
    order: torch.Tensor, epoch: int, batch_size: int, start: int, shard: Shard, stream: str
) -> list[list[tuple[int, int, str]]]:
    """Lists of (epoch, index, stream) keys, one per batch of this rank, from batch `start`."""
    order_list, local = order.tolist(), batch_size // shard.world
    return [
        [(epoch, i, stream) for i in order_list[lo : lo + local]]
        for b in range(start, len(order_list) // batch_size)
        for lo in [b * batch_size + shard.rank * local]
    ]


def loader_workers(threads: int | None = None) -> int:
    """DataLoader workers for one trial: the cores it owns, less one for the training process.
    A trial owns its share of the usable cores: the executor gives each of its workers
    `cores // workers` torch threads (executors/local.py), so that share is this process's
    torch thread count, capped by what affinity and cgroups allow."""
    threads = torch.get_num_threads() if threads is None else threads
    return max(1, min(usable_cores(), threads) - 1)


class FolderBatches:
    """Batches of a FolderData through persistent DataLoader workers: PIL decode and
    augmentation per image, pinned memory, prefetching. `plan`: the trial's input plan (None:
    computed here from `recipe`)."""

    geometric_on_device = False
    pipeline = "pil"

    def __init__(
        self,
        data: FolderData,
        batch_size: int,
        recipe: Recipe,
        *,
        seed: int,
        device: torch.device,
        shard: Shard = Shard(),
        workers: int,
        plan: InputPlan | None = None,
    ):
        self.data, self.batch_size, self.seed, self.device = data, batch_size, seed, device
        self.repeated_aug, self.shard = recipe.repeated_aug, shard
        self.workers = workers
        self.num_classes, self.in_chans = data.num_classes, data.in_chans
        self.img_size, self.mean, self.std = data.img_size, data.mean, data.std
        self.pca_lighting = data.in_chans == 3
        self.plan = plan or input_plan(recipe, data, self.pipeline, device.type)
        self.train_set = _SeededImages(data, "train", _train_transform(self.plan, recipe), seed)
        self.val_set = _SeededImages(data, "val", _val_transform(self.plan), seed)
        self._train_keys, self._val_keys = _Keys(), _Keys()
        self._train_loader = self._loader(self.train_set, self._train_keys)
        self._val_loader = self._loader(self.val_set, self._val_keys)

    def __len__(self) -> int:
        return len(self.train_set) // self.batch_size

    @property
    def num_train(self) -> int:
        return len(self.train_set)

    def _loader(self, dataset, batch_sampler) -> DataLoader:
        return DataLoader(
            dataset,
            batch_sampler=batch_sampler,
            num_workers=self.workers,
            pin_memory=self.device.type == "cuda",
            prefetch_factor=4 if self.workers else None,
            persistent_workers=self.workers > 0,  # started once per trial, not per epoch
        )

    def _to_device(self, batches, copy: bool) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The batches, copied to the device if `copy` (else pinned on the host, the step
        copies them); a worker's unreadable image as one line naming the file."""
        try:
            for x, y in batches:
                if copy:
                    x, y = (
                        x.to(self.device, non_blocking=True),
                        y.to(self.device, non_blocking=True),
                    )
                yield x, y
        except UnreadableImage as err:  # a worker's: one line naming the file
            raise UnreadableImage.from_worker(err) from None

    def train(
        self, epoch: int, start: int = 0, stream: str = "image"
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The epoch's batches from batch `start`, each image cropped, flipped and augmented
        as seeded by (seed, stream, epoch, index)."""
        order = epoch_order(len(self.train_set), self.seed, epoch, self.repeated_aug)
        keys = _epoch_keys(order, epoch, self.batch_size, start, self.shard, stream)
        return self._pass(self._train_loader, self._train_keys, keys, copy=False)

    def val(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.val_set)
        mine = torch.arange(self.shard.rank, n, self.shard.world).tolist()
        chunk = max(1, self.batch_size // self.shard.world)
        keys = [[(0, i, "image") for i in mine[j : j + chunk]] for j in range(0, len(mine), chunk)]
        return self._pass(self._val_loader, self._val_keys, keys, copy=True)

    def _pass(self, loader: DataLoader, sampler: _Keys, keys: list, copy: bool) -> Iterator:
        def batches():
            sampler.keys = keys  # set when the pass starts: one pass of a loader at a time
            yield from loader

        return self._to_device(batches(), copy)

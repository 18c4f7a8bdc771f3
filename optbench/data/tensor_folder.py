"""The tensor pipeline of class-folder datasets (`TensorFolderBatches`): files read ahead by a
few threads, JPEGs decoded in batches on the trial's device (torchvision's `decode_jpeg`:
nvjpeg on CUDA) or, on the CPU (or with `host_decode`), by the reader threads themselves
(libjpeg-turbo, in parallel), every other format the up-front check counts (PNG,
BMP, TIFF, PPM/PGM, WebP) decoded by PIL in the reader threads as the PIL pipeline decodes it;
then RandomResizedCrop, flip and the recipe's policy per image on that device, as the trial's
input plan (input_plan.py) says. The same code runs on the CPU and on CUDA.

It computes what the PIL pipeline (batches.FolderBatches) computes, in the same order: the
files of `epoch_order`'s permutation (repeated augmentation included), the crop drawn as
torchvision's RandomResizedCrop draws it (`crop_params`), a flip with probability 1/2, the
policy per sample (`device_policy`). Where it differs (the resampling kernels of
tensor and PIL resizing; nvjpeg's IDCT) is measured in docs/recipes.md.

Randomness: every draw of a batch comes from one CPU `torch.Generator` seeded by (seed, stream,
epoch, batch, rank), so the batch at a position is fixed whatever ran before it: a trial
resumed mid-epoch sees the batches an uninterrupted one sees.
"""

from __future__ import annotations

import io
import math
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch
from PIL import Image
from torchvision.io import ImageReadMode, decode_jpeg
from torchvision.transforms.v2 import functional as TF

from optbench.data.augment import apply_grouped, build_policy, policy_group
from optbench.data.batches import Shard, epoch_order
from optbench.data.datasets import (
    IMAGE_ERRORS,
    FolderData,
    UnreadableImage,
    refuse_bomb,
    split_samples,
)
from optbench.data.input_plan import CROP_RATIO, CROP_SCALE, InputPlan, input_plan
from optbench.data.seeding import derive_seed
from optbench.data.shards import read_bytes
from optbench.data.tensor_ops import to_device
from optbench.data.tensor_policy import tensor_policy
from optbench.spec.recipe import Recipe

# batches whose bytes are being read ahead of the one decoded (with host_decode, their pixels:
# 256 images of 500x375 RGB are 144 MB a batch)
PREFETCH_BATCHES = 4
JPEG_MAGIC = b"\xff\xd8"
CPU = torch.device("cpu")


def crop_params(
    height: int,
    width: int,
    generator: torch.Generator,
    scale: tuple[float, float] = CROP_SCALE,
    ratio: tuple[float, float] = CROP_RATIO,
) -> tuple[int, int, int, int]:
    """(top, left, h, w) of a RandomResizedCrop, drawn from `generator` exactly as torchvision's
    RandomResizedCrop.get_params draws it from the global generator: up to 10 tries of an area
    fraction and a log-uniform aspect ratio, then the whole image clamped to `ratio`, centred."""
    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1], generator=generator).item()
        aspect = torch.exp(
            torch.empty(1).uniform_(log_ratio[0], log_ratio[1], generator=generator)
        ).item()
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = int(torch.randint(0, height - h + 1, size=(1,), generator=generator).item())
            left = int(torch.randint(0, width - w + 1, size=(1,), generator=generator).item())
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = height, int(round(height * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def device_policy(
    recipe: Recipe, in_chans: int = 3, img_size: int = 224
) -> Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None:
    """The recipe's policy as the tensor pipeline applies it, `policy(x_uint8, generator)`, on
    the batch's device, each image's draws taken from `generator` (a CPU torch.Generator);
    None without a policy. timm's and pycls's policies: tensor_policy.py, per sample.
    torchvision's: its own tensor ops on groups of `recipe.augment_group` images (as
    BatchAugment applies them, augment.apply_grouped), from the global generator reseeded from
    `generator`."""
    if recipe.auto_augment == "none":
        return None
    group = policy_group(recipe)
    if group is not None:
        policy = build_policy(recipe, in_chans, img_size)

        def grouped(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
            seed = int(torch.randint(0, 2**62, (1,), generator=generator))
            with torch.random.fork_rng(devices=[]):  # torchvision draws on the CPU
                torch.manual_seed(seed)
                return apply_grouped(policy, x, group)

        return grouped
    policy = tensor_policy(recipe.auto_augment, img_size, in_chans=in_chans)
    return lambda x, generator: policy(x, generator)[0]


def pil_decode(path: str, data: bytes) -> torch.Tensor:
    """An image's bytes decoded as the PIL pipeline decodes them (torchvision's default_loader:
    PIL's `convert("RGB")`, so palette, grey, alpha and 16-bit images give its pixels; 16-bit
    values above 255 clip to 255, as PIL's conversion does): uint8 (3, H, W). UnreadableImage
    names a file PIL cannot read (a decompression bomb included)."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            rgb = np.array(im.convert("RGB"))  # writable: torch takes it without a warning
    except IMAGE_ERRORS as err:
        raise UnreadableImage.of(path, str(err)) from None
    return torch.from_numpy(rgb).permute(2, 0, 1).contiguous()


def _read(path, decode_jpegs: bool = False) -> torch.Tensor:
    """In a reader thread, of a file's path or a shard member (datasets.split_samples): a
    JPEG's bytes (1-D uint8, decoded later on the device, in batches) or, with `decode_jpegs`,
    the JPEG decoded here by libjpeg-turbo ((3, H, W); torchvision's decoder releases the GIL,
    so the readers decode in parallel); any other image (PNG, BMP, TIFF, PPM/PGM, WebP, ...)
    decoded here with PIL (`pil_decode`: (3, H, W)). UnreadableImage names a file that cannot be
    read or is empty."""
    try:
        data = read_bytes(path)
    except OSError as err:
        raise UnreadableImage.of(path, err.strerror or str(err)) from None
    if not data:
        raise UnreadableImage.of(path, "an empty file")
    if data[:2] != JPEG_MAGIC:
        return pil_decode(path, data)
    refuse_bomb(path, data)  # ~30 us a JPEG, against ~1.5 ms to decode it
    encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return _decode_jpeg(encoded, path, CPU) if decode_jpegs else encoded


def decode(
    items: list[torch.Tensor], paths: Sequence[str], device: torch.device
) -> list[torch.Tensor]:
    """RGB uint8 images (3, H, W) on `device` from what `_read` gave: JPEG bytes decoded
    together in one call on `device`, images PIL decoded already moved there."""
    # decoded on the host (PIL, or host_decode's threads): sent without blocking, as a plain
    # copy per image would wait for the device's queued work
    out = [None if e.dim() == 1 else to_device(e, device) for e in items]
    jpegs = [i for i, e in enumerate(items) if e.dim() == 1]
    if jpegs:
        try:
            images = decode_jpeg([items[i] for i in jpegs], mode=ImageReadMode.RGB, device=device)
        except RuntimeError:  # find the file: one by one
            images = [_decode_jpeg(items[i], paths[i], device) for i in jpegs]
        for i, im in zip(jpegs, images, strict=True):
            out[i] = im
    return out  # type: ignore[return-value]


def _decode_jpeg(data: torch.Tensor, path: str, device: torch.device) -> torch.Tensor:
    """One JPEG on `device`; one torchvision cannot decode goes to PIL (UnreadableImage when
    neither can read it)."""
    try:
        return decode_jpeg(data, mode=ImageReadMode.RGB, device=device)
    except RuntimeError:
        return to_device(pil_decode(path, data.numpy().tobytes()), device)


def train_images(
    images: list[torch.Tensor],
    plan: InputPlan,
    generator: torch.Generator,
    policy: Callable | None,
) -> torch.Tensor:
    """RandomResizedCrop to plan.img_size (plan.resampling), a flip with probability 1/2 (if
    plan.hflip), then the policy per sample: a uint8 batch (N, 3, size, size). Per image the
    draws are taken in the PIL pipeline's order: crop, then flip."""
    out, size = [], [plan.img_size, plan.img_size]
    for im in images:
        top, left, h, w = crop_params(
            im.shape[-2], im.shape[-1], generator, plan.crop_scale, plan.crop_ratio
        )
        im = TF.resized_crop(im, top, left, h, w, size, **plan.resampling.kwargs)
        if plan.hflip and torch.rand(1, generator=generator).item() < 0.5:
            im = im.flip(-1)
        out.append(im)
    x = torch.stack(out)
    return x if policy is None else policy(x, generator)


def val_images(images: list[torch.Tensor], plan: InputPlan) -> torch.Tensor:
    """Resize the shorter side to plan.eval_resize, center-crop plan.img_size (as the PIL
    pipeline's evaluation transform)."""
    resize, kwargs = [plan.eval_resize], plan.resampling.kwargs
    return torch.stack(
        [TF.center_crop(TF.resize(im, resize, **kwargs), [plan.img_size]) for im in images]
    )


class TensorFolderBatches:
    """Batches of a FolderData decoded and augmented on the device (module docstring). `plan`:
    the trial's input plan (None: computed here from `recipe`). `host_decode`: JPEGs decoded by
    the reader threads (None: on the CPU only; bench/input_stages.py measures both on CUDA)."""

    geometric_on_device = False  # crop, flip and policy are applied here, per image
    pipeline = "tensor"

    def __init__(
        self,
        data: FolderData,
        batch_size: int,
        recipe: Recipe,
        *,
        seed: int,
        device: torch.device,
        shard: Shard = Shard(),
        readers: int = 4,
        plan: InputPlan | None = None,
        host_decode: bool | None = None,
    ):
        self.data, self.batch_size, self.seed, self.device = data, batch_size, seed, device
        # JPEGs decoded by the reader threads (libjpeg-turbo, in parallel) rather than in one
        # call on the device; on the CPU that call is the same decoder on one thread
        self.host_decode = device.type == "cpu" if host_decode is None else host_decode
        self.repeated_aug, self.shard = recipe.repeated_aug, shard
        self.plan = plan or input_plan(recipe, data, self.pipeline, device.type)
        self.local_batch = batch_size // self.shard.world
        self.num_classes, self.in_chans = data.num_classes, data.in_chans
        self.img_size, self.mean, self.std = data.img_size, data.mean, data.std
        self.pca_lighting = data.in_chans == 3
        self.train_samples = split_samples(data, "train")
        self.val_samples = split_samples(data, "val")
        self.policy = device_policy(recipe, data.in_chans, data.img_size)
        self.readers = max(1, readers)
        self._pool: ThreadPoolExecutor | None = None

    def __len__(self) -> int:
        return len(self.train_samples) // self.batch_size

    @property
    def num_train(self) -> int:
        return len(self.train_samples)

    def _read_ahead(
        self, batches: Iterator[list[tuple[str, int]]]
    ) -> Iterator[tuple[list[str], list[torch.Tensor], torch.Tensor]]:
        """(paths, encoded bytes, labels) of each batch, the files of the next PREFETCH_BATCHES
        batches read meanwhile by the reader threads."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.readers, thread_name_prefix="optbench-read")
        pending: deque[tuple[list[str], list[Future], torch.Tensor]] = deque()

        def submit(samples: list[tuple[str, int]]) -> None:
            paths = [p for p, _ in samples]
            labels = torch.tensor([c for _, c in samples], dtype=torch.int64)
            if self.device.type == "cuda":  # pinned: the copy to the GPU does not wait for it
                labels = labels.pin_memory()
            pending.append(
                (paths, [self._pool.submit(_read, p, self.host_decode) for p in paths], labels)
            )

        for samples in batches:
            submit(samples)
            if len(pending) > PREFETCH_BATCHES:
                paths, futures, labels = pending.popleft()
                yield paths, [f.result() for f in futures], labels
        while pending:
            paths, futures, labels = pending.popleft()
            yield paths, [f.result() for f in futures], labels

    def train(
        self, epoch: int, start: int = 0, stream: str = "image"
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The epoch's batches from batch `start`, each drawn from the generator of (seed,
        stream, epoch, batch, rank)."""
        order = epoch_order(len(self.train_samples), self.seed, epoch, self.repeated_aug).tolist()
        rank_lo = self.shard.rank * self.local_batch

        def samples() -> Iterator[list[tuple[str, int]]]:
            for b in range(start, len(self)):
                lo = b * self.batch_size + rank_lo
                yield [self.train_samples[i] for i in order[lo : lo + self.local_batch]]

        for b, (paths, encoded, labels) in enumerate(self._read_ahead(samples()), start=start):
            gen = torch.Generator().manual_seed(
                derive_seed(self.seed, stream, epoch, b, self.shard.rank)
            )
            images = decode(encoded, paths, self.device)
            x = train_images(images, self.plan, gen, self.policy)
            yield x, labels.to(self.device, non_blocking=True)

    def val(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        mine = self.val_samples[self.shard.rank :: self.shard.world]
        chunk = max(1, self.local_batch)
        chunks = (mine[j : j + chunk] for j in range(0, len(mine), chunk))
        for paths, encoded, labels in self._read_ahead(chunks):
            images = decode(encoded, paths, self.device)
            x = val_images(images, self.plan)
            yield x, labels.to(self.device, non_blocking=True)

"""Batched training augmentation on the training device: whole batches, no per-image Python.

`BatchAugment` turns a batch of uint8 images (N, C, H, W) and int labels into the float inputs
and the targets the loss sees, in the recipe's order:

    translate (zero-pad + random crop) -> horizontal flip -> AutoAugment / RandAugment
    -> normalize -> random erasing -> mixup / CutMix (timm's Mixup; soft targets)

Policies come from torchvision.transforms.v2 (AutoAugment, RandAugment), which apply one sampled
sub-policy to the whole tensor they are given. To keep per-image diversity without a Python
loop over images, the batch is cut into groups of `recipe.augment_group` images and each group
draws its own sub-policy and magnitude: an image's own augmentation has exactly the library's
distribution; only images of one group share it. Group size 1 is exact per-image augmentation.

Randomness: everything here draws from torch's and numpy's global generators, which the loop
reseeds before every step from (seed, epoch, step, rank) (see loop.py), so a batch's
augmentation depends on its position only: resuming mid-epoch replays it exactly.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from timm.data import Mixup
from torchvision.transforms import v2

from optbench.spec import Recipe


def random_crop_flip(x: torch.Tensor, pad: int, hflip: bool) -> torch.Tensor:
    """RandomCrop(size, padding=pad) with zero padding, then a horizontal flip with probability
    1/2 if `hflip`, for a whole uint8 batch (N, C, H, W) in one gather: each output pixel reads
    padded[image, channel, offset(image) + pattern(pixel)], where the pattern is mirrored for
    flipped images."""
    if pad == 0 and not hflip:
        return x
    b, c, h, w = x.shape
    dev = x.device
    hp, wp = h + 2 * pad, w + 2 * pad
    padded = F.pad(x, (pad, pad, pad, pad)).reshape(b, c, hp * wp)
    dy = torch.randint(0, 2 * pad + 1, (b,), device=dev)
    dx = torch.randint(0, 2 * pad + 1, (b,), device=dev)
    rows = torch.arange(h, device=dev)[:, None] * wp
    cols = torch.arange(w, device=dev)[None, :]
    pattern = (rows + cols).reshape(1, -1)
    if hflip:
        flip = torch.rand(b, device=dev) < 0.5
        pattern = torch.where(flip[:, None], (rows + (w - 1 - cols)).reshape(1, -1), pattern)
    index = (dy * wp + dx)[:, None] + pattern  # (N, H*W)
    return padded.gather(2, index[:, None, :].expand(b, c, h * w)).reshape(b, c, h, w)


def random_erasing(
    x: torch.Tensor,
    prob: float,
    area: tuple[float, float] = (0.02, 1 / 3),
    log_ratio: tuple[float, float] = (math.log(0.3), math.log(1 / 0.3)),
    attempts: int = 10,
) -> torch.Tensor:
    """Random erasing in timm's "pixel" mode, batched: with probability `prob` an image gets one
    rectangle (area fraction and aspect ratio drawn as timm draws them, retried up to `attempts`
    times until it fits) filled with standard-normal noise. `x` is normalized float (N, C, H, W).
    (timm's RandomErasing draws the same way but loops over a batch's images in Python.)"""
    if prob == 0:
        return x
    b, c, h, w = x.shape
    dev = x.device
    eh = torch.zeros(b, dtype=torch.long, device=dev)
    ew = torch.zeros(b, dtype=torch.long, device=dev)
    todo = torch.rand(b, device=dev) < prob
    for _ in range(attempts):
        target = torch.empty(b, device=dev).uniform_(*area) * (h * w)
        ratio = torch.exp(torch.empty(b, device=dev).uniform_(*log_ratio))
        th = torch.sqrt(target * ratio).round().long()
        tw = torch.sqrt(target / ratio).round().long()
        fits = todo & (th < h) & (tw < w) & (th > 0) & (tw > 0)
        eh, ew = torch.where(fits, th, eh), torch.where(fits, tw, ew)
        todo = todo & ~fits
    top = (torch.rand(b, device=dev) * (h - eh + 1)).long()
    left = (torch.rand(b, device=dev) * (w - ew + 1)).long()
    rows = torch.arange(h, device=dev)[None, :, None]
    cols = torch.arange(w, device=dev)[None, None, :]
    inside = (
        (rows >= top[:, None, None])
        & (rows < (top + eh)[:, None, None])
        & (cols >= left[:, None, None])
        & (cols < (left + ew)[:, None, None])
    )
    noise = torch.randn_like(x)
    return torch.where(inside[:, None], noise, x)


def build_policy(recipe: Recipe) -> v2.Transform | None:
    """torchvision's AutoAugment or RandAugment as the recipe names it, or None."""
    if recipe.auto_augment == "autoaugment":
        return v2.AutoAugment(v2.AutoAugmentPolicy(recipe.autoaugment_policy))
    if recipe.auto_augment == "randaugment":
        return v2.RandAugment(num_ops=recipe.randaugment_n, magnitude=recipe.randaugment_m)
    return None


class BatchAugment:
    """The recipe's training augmentation for one dataset, applied to whole batches."""

    def __init__(
        self,
        recipe: Recipe,
        *,
        num_classes: int,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        device: torch.device,
        geometric: bool = True,
    ):
        """`geometric=False` skips translate/flip/policy: the DataLoader path already applied
        them per image on the CPU workers."""
        self.recipe, self.geometric = recipe, geometric
        self.policy = build_policy(recipe) if geometric else None
        self.mean = torch.tensor(mean, device=device).view(1, -1, 1, 1) * 255.0
        self.std = torch.tensor(std, device=device).view(1, -1, 1, 1) * 255.0
        self.mixup = None
        if recipe.mixup_alpha > 0 or recipe.cutmix_alpha > 0:
            self.mixup = Mixup(
                mixup_alpha=recipe.mixup_alpha,
                cutmix_alpha=recipe.cutmix_alpha,
                switch_prob=0.5,
                mode="batch",
                label_smoothing=recipe.label_smoothing,
                num_classes=num_classes,
            )

    @property
    def soft_targets(self) -> bool:
        """True when targets are mixed class distributions (use a soft-target loss)."""
        return self.mixup is not None

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """uint8 -> float, minus mean, over std (mean and std given in [0, 1] units)."""
        return x.float().sub_(self.mean).div_(self.std)

    def apply_policy(self, x: torch.Tensor) -> torch.Tensor:
        group = self.recipe.augment_group
        return torch.cat([self.policy(x[i : i + group]) for i in range(0, len(x), group)])

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.geometric:
            x = random_crop_flip(x, self.recipe.translate, self.recipe.hflip)
            if self.policy is not None:
                x = self.apply_policy(x)
        x = random_erasing(self.normalize(x), self.recipe.random_erasing)
        if self.mixup is not None:
            x, y = self.mixup(x, y)
        return x, y

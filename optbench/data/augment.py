"""Training augmentation on the training device, in whole batches where it can be.

`BatchAugment` turns a batch of uint8 images (N, C, H, W) and int labels into the float inputs
and the targets the loss sees, in the recipe's order:

    translate (zero-pad + random crop) -> horizontal flip -> auto-augment policy
    -> PCA lighting -> normalize -> random erasing -> mixup / CutMix (timm's Mixup; soft targets)

Everything before mixup is per-image augmentation (`BatchAugment.inputs`, also what precise BN
recomputes its statistics from, as pycls's loader does); mixup / CutMix mixes the batch.

Policies (`recipe.auto_augment`, see `build_policy`):
- torchvision's AutoAugment and RandAugment ("autoaugment", "randaugment") apply one sampled
  sub-policy to the whole tensor they are given; to keep per-image diversity without a Python
  loop over images, the batch is cut into groups of `recipe.augment_group` images and each group
  draws its own sub-policy: an image's own augmentation has exactly the library's distribution;
  only images of one group share it.
- timm's policies (its AutoAugment and RandAugment config strings: "v0", "original-mstd0.5",
  "rand-m9-mstd0.5-inc1", ...; and "pycls_v0", pycls's AutoAugment) work on PIL images: each image of a batch goes through the
  policy on its own, on the CPU (bench/augment_policy.py measures the cost). In the tensor
  pipeline the same policies run per sample on the device instead (`device_policy`,
  tensor_policy.py).
Where worker processes or the tensor pipeline already applied crop, flip and policy per image
(class-folder datasets; in-memory ones with a PIL policy in the pil pipeline), `geometric=False`
here (batches.py).

Randomness: everything here draws from torch's, numpy's and Python's global generators, which
the loop reseeds before every step from (seed, step, rank) (seeding.py), so a batch's
augmentation depends on its position only: resuming mid-epoch replays it exactly.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageOps
from timm.data import Mixup
from timm.data import auto_augment as timm_aa
from torchvision.transforms import v2

from optbench.data.tensor_ops import to_device
from optbench.spec.catalogue import IMAGENET_MEAN, IMAGENET_STD
from optbench.spec.recipe import TORCHVISION_POLICIES, Recipe

# AlexNet-style PCA lighting noise: eigenvalues and eigenvectors (columns) of ImageNet's RGB
# pixel covariance, in [0, 1] units, as fb.resnet.torch and pycls publish them.
IMAGENET_PCA_EIGVAL = (0.2175, 0.0188, 0.0045)
IMAGENET_PCA_EIGVEC = (
    (-0.5675, 0.7192, 0.4009),
    (-0.5808, -0.0045, -0.8140),
    (-0.5836, -0.6948, 0.4203),
)


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


def pca_lighting(x: torch.Tensor, std: float) -> torch.Tensor:
    """AlexNet-style PCA lighting noise on float RGB images in [0, 255] (N, 3, H, W): each
    image gets eigvec @ (alpha * eigval) added to every pixel, alpha ~ N(0, std^2) per image and
    eigen-direction (pycls's `lighting`, without clipping, like pycls)."""
    if std == 0:
        return x
    eigval, eigvec = _pca_basis(x.device)
    alpha = torch.randn(len(x), 3, device=x.device) * std
    rgb = (alpha * eigval) @ eigvec.T  # rgb[n, i] = sum_j eigvec[i, j] alpha[n, j] eigval[j]
    return x + 255.0 * rgb[:, :, None, None]


@functools.lru_cache(maxsize=8)
def _pca_basis(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """pycls's eigen-values and -vectors on `device`, sent once per device: made on the host
    and sent without blocking (torch.tensor(..., device=cuda) copies from pageable memory, a
    host sync), and kept, so that a step sends nothing."""
    eigval = to_device(torch.tensor(IMAGENET_PCA_EIGVAL), device)
    eigvec = to_device(torch.tensor(IMAGENET_PCA_EIGVEC), device)
    return eigval, eigvec


def _pycls_posterize_level(level: float, _hparams: dict) -> tuple[int]:
    """pycls's posterize: bits = int(magnitude x 4), at least 1 (its POSTERIZE_MIN; timm's v0
    keeps 0 bits, a black image, at magnitude 2)."""
    return (max(1, int(level / 10 * 4)),)


def _posterize(img: Image.Image, bits_to_keep: int, **_) -> Image.Image:
    """timm's posterize, also for 0 bits: a black image, as Pillow gave until it began to
    reject bits < 1 (timm's v0 and increasing RandAugment ops ask for 0 bits)."""
    if bits_to_keep >= 8:
        return img
    if bits_to_keep <= 0:
        return Image.new(img.mode, img.size)
    return ImageOps.posterize(img, bits_to_keep)


def _ops(transform) -> list:
    """The AugmentOps of a timm AutoAugment or RandAugment (its `level_fn` and `aug_fn` are
    replaced below: timm builds every op from module-level tables)."""
    if isinstance(transform, timm_aa.AutoAugment):
        return [op for sub_policy in transform.policy for op in sub_policy]
    return list(transform.ops)


def timm_policy(name: str, in_chans: int = 3, img_size: int = 224) -> Callable:
    """A PIL-image auto-augment policy from timm, by config string, with the hyper-parameters
    timm's create_transform gives it (DeiT's call: bicubic resampling, fill = ImageNet's mean,
    translate_const = 0.45 x img_size). "pycls_v0" is pycls's AutoAugment: timm's v0 policy
    with bilinear resampling, grey (128) fill and pycls's posterize floor of 1 bit."""

    def fill(rgb: tuple[int, ...]) -> tuple[int, ...] | int:
        return rgb if in_chans == 3 else round(sum(rgb) / len(rgb))

    if name == "pycls_v0":
        hparams = {"interpolation": Image.BILINEAR, "img_mean": fill((128, 128, 128))}
        transform = timm_aa.auto_augment_transform("v0", hparams)
        for op in _ops(transform):
            if op.name == "Posterize":
                op.level_fn = _pycls_posterize_level
    else:
        hparams = {
            "translate_const": int(img_size * 0.45),
            "img_mean": fill(tuple(min(255, round(255 * m)) for m in IMAGENET_MEAN)),
            "interpolation": Image.BICUBIC,
        }
        if name.startswith("rand"):
            transform = timm_aa.rand_augment_transform(name, hparams)
        else:
            transform = timm_aa.auto_augment_transform(name, hparams)
    for op in _ops(transform):
        if op.name.startswith("Posterize"):
            op.aug_fn = _posterize
    return transform


def build_policy(recipe: Recipe, in_chans: int = 3, img_size: int = 224) -> Callable | None:
    """The recipe's auto-augment policy (module docstring), or None. torchvision's take
    tensors or PIL images; timm's take PIL images."""
    if recipe.auto_augment == "none":
        return None
    if recipe.auto_augment == "autoaugment":
        return v2.AutoAugment(v2.AutoAugmentPolicy(recipe.autoaugment_policy))
    if recipe.auto_augment == "randaugment":
        return v2.RandAugment(num_ops=recipe.randaugment_n, magnitude=recipe.randaugment_m)
    return timm_policy(recipe.auto_augment, in_chans, img_size)


def uses_pil_policy(recipe: Recipe) -> bool:
    """Whether the recipe's policy is one of timm's or pycls's (PIL ops in the pil pipeline,
    tensor_policy.py's in the tensor pipeline); torchvision's run on tensors in both."""
    return recipe.auto_augment not in ("none", *TORCHVISION_POLICIES)


def policy_group(recipe: Recipe) -> int | None:
    """How many images share one draw of the recipe's policy: `recipe.augment_group` for
    torchvision's (which apply one sub-policy to the whole tensor they are given), None for a
    policy drawn per image (timm's, pycls's) or none."""
    return recipe.augment_group if recipe.auto_augment in TORCHVISION_POLICIES else None


def apply_grouped(policy: Callable, x: torch.Tensor, group: int) -> torch.Tensor:
    """A torchvision policy on consecutive groups of `group` images of a batch, each group
    drawing its own sub-policy (`policy_group`; module docstring)."""
    return torch.cat([policy(x[i : i + group]) for i in range(0, len(x), group)])


def per_image(policy: Callable, x: torch.Tensor) -> torch.Tensor:
    """Apply a PIL-image policy to each image of a uint8 batch (N, C, H, W), C = 1 or 3."""
    images = x.permute(0, 2, 3, 1).cpu().numpy()
    gray = images.shape[-1] == 1
    out = np.stack(
        [np.asarray(policy(Image.fromarray(im[..., 0] if gray else im))) for im in images]
    )
    out = out[..., None] if gray else out
    return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous().to(x.device)


def input_stats(
    recipe: Recipe, mean: tuple[float, ...], std: tuple[float, ...]
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The mean and std the inputs are normalized with: the dataset's own, or (`normalize:
    imagenet`, DeiT's code on every dataset) ImageNet's; one-channel data then gets the average
    of ImageNet's three."""
    if recipe.normalize == "dataset":
        return mean, std
    if len(mean) == 3:
        return IMAGENET_MEAN, IMAGENET_STD
    return (sum(IMAGENET_MEAN) / 3,) * len(mean), (sum(IMAGENET_STD) / 3,) * len(mean)


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
        in_chans: int = 3,
        img_size: int = 224,
        geometric: bool = True,
        pca_lighting: bool = False,
        device_policy: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None,
    ):
        """`mean`, `std`: the normalization (see `input_stats`). `geometric=False` skips
        translate/flip/policy: the DataLoader path already applied them per image on the CPU
        workers. `pca_lighting`: whether the data takes `recipe.lighting_std` (RGB class-folder
        datasets, as in pycls, whose eigenvectors are ImageNet's). `device_policy(x, generator)`:
        the tensor pipeline's policy, per sample on the device (tensor_policy.py), run instead
        of the recipe's PIL policy."""
        self.recipe, self.geometric = recipe, geometric
        self.group = policy_group(recipe)  # None: per image
        self.on_device = device_policy is not None
        self.policy = None
        if geometric:
            self.policy = device_policy or build_policy(recipe, in_chans, img_size)
        self.lighting_std = recipe.lighting_std if pca_lighting else 0.0
        self.mean = torch.tensor(mean, device=device).view(1, -1, 1, 1) * 255.0
        self.std = torch.tensor(std, device=device).view(1, -1, 1, 1) * 255.0
        self.mixup = None
        if recipe.mixup_alpha > 0 or recipe.cutmix_alpha > 0:
            self.mixup = Mixup(
                mixup_alpha=recipe.mixup_alpha,
                cutmix_alpha=recipe.cutmix_alpha,
                switch_prob=0.5,
                mode="batch",
                correct_lam=True,  # the weight of the CutMix box actually pasted (clipped)
                label_smoothing=recipe.label_smoothing,
                num_classes=num_classes,
            )

    @property
    def soft_targets(self) -> bool:
        """True when targets are mixed class distributions (use a soft-target loss)."""
        return self.mixup is not None

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Images in [0, 255] (uint8 or float) -> float, minus mean, over std."""
        return (x.float() - self.mean).div_(self.std)

    def apply_policy(self, x: torch.Tensor) -> torch.Tensor:
        if self.on_device:  # its draws from a generator seeded by the global one (the step's)
            seed = int(torch.randint(0, 2**62, (1,)))
            return self.policy(x, torch.Generator().manual_seed(seed))
        if self.group is None:
            return per_image(self.policy, x)
        return apply_grouped(self.policy, x, self.group)

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        """Per-image augmentation of a uint8 batch, up to the normalized float inputs."""
        if self.geometric:
            x = random_crop_flip(x, self.recipe.translate, self.recipe.hflip)
            if self.policy is not None:
                x = self.apply_policy(x)
        x = pca_lighting(x.float(), self.lighting_std)
        return random_erasing(self.normalize(x), self.recipe.random_erasing)

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.inputs(x)
        if self.mixup is not None:
            x, y = self.mixup(x, y)
        return x, y

"""timm's and pycls's auto-augment policies as data, applied per sample to uint8 batches on any
device (the tensor pipeline's policy; `augment.timm_policy` is the PIL one it must equal).

A `TensorPolicy` is the policy's table, read from the very timm object `augment.timm_policy`
builds for the recipe's name (DALI auto_aug style: data, not code):
- AutoAugment (`kind="auto"`: "pycls_v0", "v0", "original-mstd0.5", ...): each image draws one
  sub-policy uniformly, then applies each of its ops with the op's probability;
- RandAugment (`kind="rand"`: "rand-m9-mstd0.5-inc1", ...): each image draws `num_layers` ops
  uniformly with replacement (numpy's `choice`, timm without weights), or, with timm's choice
  weights, without replacement; each is applied with probability `p`.
An applied op draws, in timm's `AugmentOp` order: its magnitude (Gaussian noise of std `mstd`,
or uniform in [0, m] for an infinite one, clipped to [0, mmax or 10]), the sign of its argument
(ops whose level function negates half the time), and for the affine ops the resampling filter
when timm draws it (its `_RANDOM_INTERPOLATION`, bilinear or bicubic).

`policy(x, generator)` draws all of that for the whole batch from `generator` (a CPU
`torch.Generator`: the draws do not depend on the device), in fixed-size blocks per batch (so
the stream differs from timm's Python `random` calls, not the distribution), and applies the ops
batched: per op slot, each op runs once on the images that drew it (index_select / index_copy).
Only the small per-image arguments are computed on the CPU; pixels stay on x's device.

Every op reproduces Pillow's arithmetic (tests/test_tensor_policy.py checks each against timm's
PIL op, image for image): the LUT ops in integers, the enhance blends in float32 as Pillow's C
code, the affine ops with Pillow's own bilinear / bicubic (a = -1) sampling in float64, pixel
centres at +0.5, edge pixels replicated inside the image and the fill colour outside it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from PIL import Image
from timm.data import auto_augment as timm_aa

from optbench.recipe import TORCHVISION_POLICIES, Recipe
from optbench.train import augment

RESAMPLE = ("bilinear", "bicubic")  # what `PolicyDraws.resample` indexes
_PIL_RESAMPLE = {Image.BILINEAR: "bilinear", Image.BICUBIC: "bicubic"}
AFFINE_OPS = (
    "Rotate",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "TranslateXRel",
    "TranslateYRel",
)


@dataclass(frozen=True)
class PolicyOp:
    """One entry of a policy's table: timm's op `name`, applied with probability `prob` at
    magnitude `magnitude` (0-10 scale), its argument computed by the level rule `level`
    (timm's name for it; "PosterizePycls" for pycls's floor of 1 bit)."""

    name: str
    prob: float
    magnitude: float
    level: str


@dataclass(frozen=True)
class TensorPolicy:
    """A timm / pycls auto-augment policy as data (module docstring)."""

    kind: str  # "auto" (AutoAugment) or "rand" (RandAugment)
    choices: tuple[tuple[PolicyOp, ...], ...]  # auto: the sub-policies; rand: 1-op entries
    num_layers: int  # ops per image: a sub-policy's length (auto), timm's n (rand)
    choice_weights: tuple[float, ...] | None  # rand: weighted choice without replacement
    magnitude_std: float  # 0: none; inf: uniform in [0, magnitude]
    magnitude_max: float | None  # the magnitude's upper clip (None: 10)
    translate_const: float | None  # TranslateX/Y: pixels at magnitude 10
    translate_pct: float  # TranslateXRel/YRel: fraction of the size at magnitude 10
    resample: tuple[str, ...]  # the affine ops' filter; two names: drawn per op (uniform)
    fill: tuple[int, ...]  # per channel, outside the image after an affine op

    @property
    def op_names(self) -> tuple[str, ...]:
        """The distinct ops of the table, in table order (what `PolicyDraws.op` indexes)."""
        return tuple(dict.fromkeys(op.name for entry in self.choices for op in entry))

    def __call__(
        self, x: torch.Tensor, generator: torch.Generator, return_draws: bool = False
    ) -> tuple[torch.Tensor, PolicyDraws | None]:
        """Augment a uint8 batch (N, C, H, W) on its own device, each image with its own
        draws; also the draws if `return_draws` (else None)."""
        if x.dtype != torch.uint8 or x.dim() != 4 or x.shape[1] != len(self.fill):
            raise ValueError(
                f"the policy takes uint8 images (N, {len(self.fill)}, H, W), not "
                f"{tuple(x.shape)} {x.dtype}"
            )
        draws = draw(self, len(x), generator)
        return apply(self, x, draws), (draws if return_draws else None)


@dataclass(frozen=True)
class PolicyDraws:
    """What a policy drew for a batch of N images, per image and op slot (N, L). Entries of
    ops that were not applied: op -1, magnitude and arg NaN, resample -1."""

    op_names: tuple[str, ...]
    choice: torch.Tensor  # auto: (N,) sub-policy; rand: (N, L) op choice (index into choices)
    op: torch.Tensor  # (N, L) long, index into op_names
    magnitude: torch.Tensor  # (N, L) float64, after noise and clipping
    arg: torch.Tensor  # (N, L) float64, the op's argument (NaN: the op takes none)
    resample: torch.Tensor  # (N, L) long, index into RESAMPLE for affine ops


# --------------------------------------------------------------------------- building


def tensor_policy(
    recipe_policy_name: str, img_size: int, in_chans: int = 3, fill: tuple[int, ...] | None = None
) -> TensorPolicy:
    """The recipe's timm / pycls policy (`recipe.auto_augment`: "pycls_v0", a timm config
    string) as a TensorPolicy, read from the timm object `augment.timm_policy` builds for it
    (same table, hyper-parameters, fill and resampling). `fill` overrides the fill colour."""
    if recipe_policy_name == "none" or recipe_policy_name in TORCHVISION_POLICIES:
        raise ValueError(
            f"auto_augment {recipe_policy_name!r} has no tensor policy here: 'none' needs none, "
            "torchvision's already run on tensors (augment.build_policy)"
        )
    transform = augment.timm_policy(recipe_policy_name, in_chans, img_size)
    policy = from_timm(transform, name=recipe_policy_name)
    if fill is not None:
        fill = (fill,) if isinstance(fill, int) else tuple(fill)
        if len(fill) != in_chans:
            raise ValueError(f"fill {fill} has {len(fill)} values for {in_chans} channels")
        policy = dataclasses.replace(policy, fill=fill)
    return policy


def build_tensor_policy(recipe: Recipe, in_chans: int, img_size: int) -> TensorPolicy | None:
    """The recipe's policy for the tensor pipeline, or None when it has none (`none`) or it is
    torchvision's (those take tensors already)."""
    if recipe.auto_augment == "none" or recipe.auto_augment in TORCHVISION_POLICIES:
        return None
    return tensor_policy(recipe.auto_augment, img_size, in_chans)


def _level_rule(op, name: str) -> str:
    if op.level_fn is augment._pycls_posterize_level:
        return "PosterizePycls"
    if op.level_fn is not timm_aa.LEVEL_TO_ARG[op.name]:
        raise ValueError(f"policy {name!r}: op {op.name} has a level function timm does not")
    return op.name


def _one(values: set, what: str, name: str):
    if len(values) != 1:
        raise ValueError(f"policy {name!r}: its ops differ in {what} ({sorted(map(str, values))})")
    return values.pop()


def from_timm(transform, name: str = "timm") -> TensorPolicy:
    """A TensorPolicy holding exactly what a timm AutoAugment or RandAugment object holds."""
    if isinstance(transform, timm_aa.AutoAugment):
        kind, choices = "auto", [list(sub) for sub in transform.policy]
        num_layers = _one({len(sub) for sub in choices}, "sub-policy length", name)
        weights = None
    elif isinstance(transform, timm_aa.RandAugment):
        kind, choices, num_layers = "rand", [[op] for op in transform.ops], transform.num_layers
        weights = transform.choice_weights
        weights = None if weights is None else tuple(float(w) for w in weights)
    else:
        raise ValueError(f"policy {name!r} is neither timm's AutoAugment nor RandAugment")
    ops = [op for entry in choices for op in entry]
    for op in ops:
        if op.name not in OPS:
            raise ValueError(f"policy {name!r}: op {op.name} has no tensor version")
    resample = _one({op.kwargs["resample"] for op in ops}, "resampling", name)
    resample = resample if isinstance(resample, (tuple, list)) else (resample,)
    if any(r not in _PIL_RESAMPLE for r in resample):
        raise ValueError(f"policy {name!r}: resampling {resample} is not bilinear / bicubic")
    fill = _one({op.kwargs["fillcolor"] for op in ops}, "fill", name)
    hparams = ops[0].hparams
    return TensorPolicy(
        kind=kind,
        choices=tuple(
            tuple(PolicyOp(op.name, op.prob, op.magnitude, _level_rule(op, name)) for op in e)
            for e in choices
        ),
        num_layers=num_layers,
        choice_weights=weights,
        magnitude_std=_one({op.magnitude_std for op in ops}, "magnitude_std", name),
        magnitude_max=_one({op.magnitude_max for op in ops}, "magnitude_max", name),
        translate_const=hparams.get("translate_const"),
        translate_pct=hparams.get("translate_pct", 0.45),
        resample=tuple(_PIL_RESAMPLE[r] for r in resample),
        fill=(fill,) if isinstance(fill, int) else tuple(fill),
    )


# --------------------------------------------------------------------------- drawing


def _negate(v: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    return torch.where(flip, -v, v)  # timm's _randomly_negate


def _int(v: torch.Tensor) -> torch.Tensor:
    return torch.trunc(v)  # Python's int() of a float


# Level -> argument, vectorized; each as timm's (or pycls's) level function computes it.
LEVELS: dict[str, Callable] = {
    "Rotate": lambda m, flip, p: _negate(m / 10 * 30.0, flip),
    "Posterize": lambda m, flip, p: _int(m / 10 * 4),
    "PosterizeIncreasing": lambda m, flip, p: 4 - _int(m / 10 * 4),
    "PosterizeOriginal": lambda m, flip, p: _int(m / 10 * 4) + 4,
    "PosterizePycls": lambda m, flip, p: _int(m / 10 * 4).clamp(min=1),
    "Solarize": lambda m, flip, p: _int(m / 10 * 256).clamp(max=256),
    "SolarizeIncreasing": lambda m, flip, p: 256 - _int(m / 10 * 256).clamp(max=256),
    "SolarizeAdd": lambda m, flip, p: _int(m / 10 * 110).clamp(max=128),
    **{
        op: lambda m, flip, p: m / 10 * 1.8 + 0.1
        for op in ("Color", "Contrast", "Brightness", "Sharpness")
    },
    **{
        f"{op}Increasing": lambda m, flip, p: (1.0 + _negate(m / 10 * 0.9, flip)).clamp(min=0.1)
        for op in ("Color", "Contrast", "Brightness", "Sharpness")
    },
    "ShearX": lambda m, flip, p: _negate(m / 10 * 0.3, flip),
    "ShearY": lambda m, flip, p: _negate(m / 10 * 0.3, flip),
    "TranslateX": lambda m, flip, p: _negate(m / 10 * float(p.translate_const), flip),
    "TranslateY": lambda m, flip, p: _negate(m / 10 * float(p.translate_const), flip),
    "TranslateXRel": lambda m, flip, p: _negate(m / 10 * p.translate_pct, flip),
    "TranslateYRel": lambda m, flip, p: _negate(m / 10 * p.translate_pct, flip),
}


def _choose(policy: TensorPolicy, n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image: the choice (auto: sub-policy (N,); rand: ops (N, L)) and the index of each
    slot's op in the flat table `[op for entry in choices for op in entry]` (N, L)."""
    k, layers = len(policy.choices), policy.num_layers
    if policy.kind == "auto":
        sub = torch.randint(k, (n,), generator=g)
        return sub, sub[:, None] * layers + torch.arange(layers)
    if policy.choice_weights is None:  # numpy's choice(ops, n, replace=True)
        picks = torch.randint(k, (n, layers), generator=g)
    else:  # numpy's choice(ops, n, replace=False, p=weights)
        weights = torch.tensor(policy.choice_weights, dtype=torch.float64).expand(n, k)
        picks = torch.multinomial(weights, layers, replacement=False, generator=g)
    return picks, picks


def draw(policy: TensorPolicy, n: int, g: torch.Generator) -> PolicyDraws:
    """Everything the policy decides for n images, from the CPU generator g."""
    flat = [op for entry in policy.choices for op in entry]
    names = policy.op_names
    choice, slot = _choose(policy, n, g)
    shape, f64 = slot.shape, torch.float64
    applies = torch.rand(shape, generator=g, dtype=f64)
    noise = (
        torch.rand(shape, generator=g, dtype=f64)
        if math.isinf(policy.magnitude_std)
        else torch.randn(shape, generator=g, dtype=f64)
    )
    flip = torch.rand(shape, generator=g, dtype=f64) > 0.5
    resample = torch.randint(len(policy.resample), shape, generator=g)

    prob = torch.tensor([op.prob for op in flat], dtype=f64)[slot]
    magnitude = torch.tensor([float(op.magnitude) for op in flat], dtype=f64)[slot]
    applied = (prob >= 1.0) | (applies <= prob)  # timm: skip if random() > prob
    if math.isinf(policy.magnitude_std):  # random.uniform(0, m)
        magnitude = noise * magnitude
    elif policy.magnitude_std > 0:  # random.gauss(m, mstd)
        magnitude = magnitude + noise * policy.magnitude_std
    upper = policy.magnitude_max or 10.0
    magnitude = magnitude.clamp(max=upper).clamp(min=0.0)

    arg = torch.full(shape, math.nan, dtype=f64)
    for rule in dict.fromkeys(op.level for op in flat):
        if rule in LEVELS:
            rows = torch.tensor([op.level == rule for op in flat])[slot]
            arg = torch.where(rows, LEVELS[rule](magnitude, flip, policy), arg)
    op = torch.tensor([names.index(o.name) for o in flat])[slot]
    affine = torch.tensor([o.name in AFFINE_OPS for o in flat])[slot]
    chosen = torch.tensor([RESAMPLE.index(r) for r in policy.resample])[resample]
    return PolicyDraws(
        op_names=names,
        choice=choice,
        op=torch.where(applied, op, -1),
        magnitude=torch.where(applied, magnitude, math.nan),
        arg=torch.where(applied, arg, math.nan),
        resample=torch.where(applied & affine, chosen, -1),
    )


def apply(policy: TensorPolicy, x: torch.Tensor, draws: PolicyDraws) -> torch.Tensor:
    """Apply the drawn ops slot by slot; in each slot every op runs once, on the images that
    drew it. Indices are found on the CPU (no device sync), then moved to x's device."""
    out = x.clone()
    for slot in range(draws.op.shape[1]):
        ops = draws.op[:, slot]
        for k in ops[ops >= 0].unique().tolist():
            rows = (ops == k).nonzero().squeeze(1)
            idx = to_device(rows, x.device)
            result = apply_op(
                draws.op_names[k],
                out.index_select(0, idx),
                draws.arg[rows, slot],
                draws.resample[rows, slot],
                policy.fill,
            )
            out.index_copy_(0, idx, result)
    return out


# --------------------------------------------------------------------------- pixel ops


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small CPU tensor (indices, per-image arguments) on `device`. To CUDA through pinned
    memory without blocking: a plain copy would wait for the GPU's queued work each time, a
    host sync per op; torch's pinned-memory cache keeps the buffer until the copy is done."""
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def apply_op(
    name: str,
    x: torch.Tensor,
    arg: torch.Tensor,
    resample: torch.Tensor,
    fill: tuple[int, ...],
) -> torch.Tensor:
    """timm's op `name` on uint8 images (n, C, H, W), image i with argument arg[i] (CPU
    float64; ignored by ops without one) and, for affine ops, filter RESAMPLE[resample[i]]."""
    return OPS[name](x, arg, resample, fill)


def _per_image(v: torch.Tensor, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return to_device(v.to(dtype), x.device).view(-1, 1, 1, 1)


def _blend(degenerate: torch.Tensor, x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Pillow's Image.blend(degenerate, x, factor), per image: float32 arithmetic, truncated,
    clipped when extrapolating (ImageEnhance's enhance)."""
    alpha = _per_image(factor, x, torch.float32)
    lo = degenerate.float()
    mixed = lo + alpha * (x.float() - lo)
    return mixed.clamp(0.0, 255.0).trunc().to(torch.uint8)


def _grey(x: torch.Tensor) -> torch.Tensor:
    """Pillow's convert("L") (ITU-R 601-2 luma, 16-bit fixed point, rounded), (n, 1, H, W)."""
    if x.shape[1] == 1:
        return x
    r, g, b = x.to(torch.int32).unbind(1)
    return ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).to(torch.uint8)[:, None]


def _lut_ops(x: torch.Tensor, lut: torch.Tensor) -> torch.Tensor:
    """Map every (image, channel) through its own 256-entry table lut (n*C, 256)."""
    n, c, h, w = x.shape
    flat = x.reshape(n * c, h * w).long()
    return lut.gather(1, flat).to(torch.uint8).reshape(n, c, h, w)


def auto_contrast(x, arg, resample, fill):
    """ImageOps.autocontrast: each channel's [min, max] stretched to [0, 255]."""
    n, c, h, w = x.shape
    flat = x.reshape(n * c, h * w)
    lo, hi = flat.amin(1).double(), flat.amax(1).double()
    # full(255).div(d), not 255.0 / d: torch computes the latter as 255 x (1 / d), which is
    # not Python's correctly rounded quotient
    span = (hi - lo).clamp(min=1.0)
    scale = torch.full_like(span, 255.0).div(span)
    offset = -lo * scale
    ix = torch.arange(256, dtype=torch.float64, device=x.device)
    lut = (ix * scale[:, None] + offset[:, None]).trunc().clamp(0, 255).long()
    lut = torch.where((hi > lo)[:, None], lut, ix.long())
    return _lut_ops(x, lut)


def equalize(x, arg, resample, fill):
    """ImageOps.equalize, per channel, in Pillow's integer arithmetic."""
    n, c, h, w = x.shape
    flat = x.reshape(n * c, h * w).long()
    hist = torch.zeros(n * c, 256, dtype=torch.long, device=x.device)
    hist.scatter_add_(1, flat, torch.ones_like(flat))
    last = hist.gather(1, flat.amax(1, keepdim=True)).squeeze(1)  # count of the top value
    step = (h * w - last) // 255
    before = hist.cumsum(1) - hist
    lut = (step[:, None] // 2 + before) // step.clamp(min=1)[:, None]
    keep = ((hist > 0).sum(1) <= 1) | (step == 0)
    lut = torch.where(keep[:, None], torch.arange(256, device=x.device), lut.clamp(max=255))
    return _lut_ops(x, lut)


def invert(x, arg, resample, fill):
    return 255 - x


def posterize(x, arg, resample, fill):
    """Keep the top `arg` bits (0 bits: black, as `augment._posterize`)."""
    bits = _per_image(arg, x, torch.long)
    mask = 256 - torch.pow(2, 8 - bits.clamp(0, 8))
    return x & mask.to(torch.uint8)


def solarize(x, arg, resample, fill):
    """ImageOps.solarize: values >= threshold inverted."""
    return torch.where(x < _per_image(arg, x, torch.long), x, 255 - x)


def solarize_add(x, arg, resample, fill):
    """timm's solarize_add: values below 128 get `arg` added (capped at 255)."""
    added = (x.to(torch.int16) + _per_image(arg, x, torch.int16)).clamp(max=255).to(torch.uint8)
    return torch.where(x < 128, added, x)


def color(x, arg, resample, fill):
    return _blend(_grey(x).expand_as(x), x, arg)


def contrast(x, arg, resample, fill):
    """ImageEnhance.Contrast: blend with the grey image of the rounded mean luma."""
    n, _, h, w = x.shape
    mean = _grey(x).reshape(n, -1).sum(1).double() / (h * w)
    degenerate = (mean + 0.5).trunc().to(torch.uint8).view(n, 1, 1, 1).expand_as(x)
    return _blend(degenerate, x, arg)


def brightness(x, arg, resample, fill):
    return _blend(torch.zeros_like(x), x, arg)


def sharpness(x, arg, resample, fill):
    """ImageEnhance.Sharpness: blend with ImageFilter.SMOOTH (3x3 kernel 1 1 1 / 1 5 1 /
    1 1 1 over 13, rounded; the border pixels kept)."""
    h, w = x.shape[-2:]
    v = x.to(torch.int32)
    total = 4 * v[..., 1:-1, 1:-1]
    for dy in range(3):
        for dx in range(3):
            total = total + v[..., dy : h - 2 + dy, dx : w - 2 + dx]
    smooth = x.clone()
    smooth[..., 1:-1, 1:-1] = ((2 * total + 13) // 26).to(torch.uint8)
    return _blend(smooth, x, arg)


# The affine ops: Pillow's Image.transform(size, AFFINE, (a, b, c, d, e, f)) maps output pixel
# centre (x + .5, y + .5) to input point (a x' + b y' + c, d x' + e y' + f).


def _lerp(a, b, d):
    return a + (b - a) * d  # Pillow's BILINEAR


def _cubic(v1, v2, v3, v4, d):  # Pillow's BICUBIC: cubic convolution with a = -1
    p1 = v2
    p2 = -v1 + v3
    p3 = 2 * (v1 - v2) + v3 - v4
    p4 = -v1 + v2 - v3 + v4
    return p1 + d * (p2 + d * (p3 + d * p4))


_FILTERS = {"bilinear": ((0, 1), _lerp), "bicubic": ((-1, 0, 1, 2), _cubic)}


def _taps(img: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The pixels at flat indices, as int16: the first pass's differences stay exact integers
    (as in Pillow, where they are ints) and cost a quarter of float64's memory traffic."""
    n, c = img.shape[:2]
    return img.reshape(n, c, -1).gather(2, index[:, None].expand(n, c, -1)).to(torch.int16)


def _sample(img: torch.Tensor, u: torch.Tensor, v: torch.Tensor, resample: str, axes: str):
    """Pillow's bilinear / bicubic filter at input points (u, v) (already minus 0.5), edge
    pixels replicated: (n, C, H*W) float64. An axis not in `axes` is known to fall on pixel
    centres (a shear or translation along the other axis): its weights would be (1, 0, ...)
    exactly, so its pass is skipped, with the same result."""
    h, w = img.shape[-2:]
    offsets, combine = _FILTERS[resample]

    def grid(coord: torch.Tensor, size: int, moves: bool):
        if not moves:
            return [coord.long()], None
        base = coord.floor()
        return [(base + o).clamp(0, size - 1).long() for o in offsets], (coord - base)[:, None]

    xs, dx = grid(u, w, "x" in axes)
    ys, dy = grid(v, h, "y" in axes)
    rows = []
    for yy in ys:
        taps = [_taps(img, yy * w + xx) for xx in xs]
        rows.append(taps[0] if dx is None else combine(*taps, dx))
    return rows[0] if dy is None else combine(*rows, dy)


def _warp(x: torch.Tensor, matrix: torch.Tensor, resample: str, axes: str, fill: tuple[int, ...]):
    n, c, h, w = x.shape
    a = to_device(matrix, x.device)[:, :, None]  # (n, 6, 1): float64
    cols = torch.arange(w, dtype=torch.float64, device=x.device).repeat(h)[None] + 0.5
    rows = torch.arange(h, dtype=torch.float64, device=x.device).repeat_interleave(w)[None] + 0.5
    u = a[:, 0] * cols + a[:, 1] * rows + a[:, 2]  # (n, H*W), as Pillow's affine_transform
    v = a[:, 3] * cols + a[:, 4] * rows + a[:, 5]
    inside = ((u >= 0) & (u < w) & (v >= 0) & (v < h))[:, None]
    values = _sample(x, u - 0.5, v - 0.5, resample, axes)
    values = values.clamp(0.0, 255.0).trunc().to(torch.uint8)
    colour = to_device(torch.tensor(fill, dtype=torch.uint8), x.device).view(1, c, 1)
    return torch.where(inside, values, colour).reshape(n, c, h, w)


# On the CPU the float64 sampling runs on chunks of about this many values, which stay in
# cache (measured: bicubic at 224 px took 3x longer per image in chunks of 16 images than of 1).
CPU_CHUNK_VALUES = 2**18


def _affine(matrix_of: Callable, axes: str = "xy") -> Callable:
    """An affine op from a function (arg (n,) float64, H, W) -> Pillow's matrices (n, 6);
    `axes`: the axes whose sample points move off the pixel centres."""

    def op(x, arg, resample, fill):
        out = x.clone()
        matrix = matrix_of(arg, *x.shape[-2:])
        # the identity (magnitude 0: v0's Rotate @ 0, ShearY @ 0) gives each pixel back exactly
        moves = (matrix != _matrix(1)).any(1)
        chunk = len(x) if x.is_cuda else max(1, CPU_CHUNK_VALUES // x[0].numel())
        for k, name in enumerate(RESAMPLE):
            rows = ((resample == k) & moves).nonzero().squeeze(1)
            for part in rows.split(chunk) if len(rows) else ():
                idx = to_device(part, x.device)
                out[idx] = _warp(x.index_select(0, idx), matrix[part], name, axes, fill)
        return out

    return op


def _matrix(n: int, **entries: torch.Tensor) -> torch.Tensor:
    m = torch.tensor([1.0, 0, 0, 0, 1.0, 0], dtype=torch.float64).repeat(n, 1)
    for i, key in enumerate("abcdef"):
        if key in entries:
            m[:, i] = entries[key]
    return m


def _rotation(degrees: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """Image.rotate's matrix (about the centre, counter-clockwise, coefficients rounded to 15
    decimals), from Python's math per image: a few scalars each, exactly as Pillow has them."""
    out = []
    cx, cy = w / 2.0, h / 2.0
    for deg in degrees.tolist():
        angle = -math.radians(deg % 360.0)
        cos, sin = round(math.cos(angle), 15), round(math.sin(angle), 15)
        a, b, d, e = cos, sin, round(-math.sin(angle), 15), cos
        out.append([a, b, a * -cx + b * -cy + 0.0 + cx, d, e, d * -cx + e * -cy + 0.0 + cy])
    return torch.tensor(out, dtype=torch.float64).reshape(-1, 6)


OPS: dict[str, Callable] = {
    "AutoContrast": auto_contrast,
    "Equalize": equalize,
    "Invert": invert,
    "Posterize": posterize,
    "PosterizeIncreasing": posterize,
    "PosterizeOriginal": posterize,
    "Solarize": solarize,
    "SolarizeIncreasing": solarize,
    "SolarizeAdd": solarize_add,
    "Color": color,
    "ColorIncreasing": color,
    "Contrast": contrast,
    "ContrastIncreasing": contrast,
    "Brightness": brightness,
    "BrightnessIncreasing": brightness,
    "Sharpness": sharpness,
    "SharpnessIncreasing": sharpness,
    "Rotate": _affine(_rotation),
    "ShearX": _affine(lambda f, h, w: _matrix(len(f), b=f), "x"),
    "ShearY": _affine(lambda f, h, w: _matrix(len(f), d=f), "y"),
    "TranslateX": _affine(lambda px, h, w: _matrix(len(px), c=px), "x"),
    "TranslateY": _affine(lambda px, h, w: _matrix(len(px), f=px), "y"),
    "TranslateXRel": _affine(lambda pct, h, w: _matrix(len(pct), c=pct * w), "x"),
    "TranslateYRel": _affine(lambda pct, h, w: _matrix(len(pct), f=pct * h), "y"),
}

"""The tensor policy's draws (`draw`) and their application (`apply`): everything a
tensor_policy.TensorPolicy (`policy` below; not imported, which would be a cycle) decides for a batch, per image and op slot, from one CPU `torch.Generator` (so
the draws do not depend on the device), in fixed-size blocks per batch (the stream differs
from timm's Python `random` calls, not the distribution), in timm's `AugmentOp` order: the
choice, whether each op applies, its magnitude (Gaussian noise of std `mstd`, or uniform in
[0, m] for an infinite one, clipped to [0, mmax or 10]), the sign of its argument, and the
affine ops' filter where timm draws it. Then each op runs once per slot on the images that
drew it (index_select / index_copy; tensor_ops.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from optbench.data.tensor_ops import AFFINE_OPS, RESAMPLE, apply_op, to_device


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


def _choose(policy, n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
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


def draw(policy, n: int, g: torch.Generator) -> PolicyDraws:
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


def apply(policy, x: torch.Tensor, draws: PolicyDraws) -> torch.Tensor:
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

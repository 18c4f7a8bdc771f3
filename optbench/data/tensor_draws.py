"""The tensor policy's draws (`draw`) and their application (`apply`): everything a
tensor_policy.TensorPolicy (`policy` below; not imported, which would be a cycle) decides for a
batch, per image and op slot, from one CPU `torch.Generator` (so the draws do not depend on the
device), in fixed-size blocks per batch (the stream differs from timm's Python `random` calls,
not the distribution), in timm's `AugmentOp` order: the choice, whether each op applies, its
magnitude (Gaussian noise of std `mstd`, or uniform in [0, m] for an infinite one, clipped to
[0, mmax or 10]), the sign of its argument, and the affine ops' filter where timm draws it. The
arithmetic on the draws is the host's (numpy, a few small arrays per batch); then every slot
runs on the images that drew each kind of op, a fixed number of tensor operations per slot
(tensor_ops.apply_plan).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np
import torch

from optbench.data.tensor_ops import (
    AFFINE_OPS,
    RESAMPLE,
    apply_plan,
    op_kind,
    plan_batch,
    plan_to_device,
)


@dataclass(frozen=True)
class PolicyDraws:
    """What a policy drew for a batch of N images, per image and op slot (N, L). Entries of
    ops that were not applied: op -1, magnitude and arg NaN, resample -1."""

    op_names: tuple[str, ...]
    # numpy arrays: the host's
    choice: np.ndarray  # auto: (N,) sub-policy; rand: (N, L) op choice (index into choices)
    op: np.ndarray  # (N, L) int64, index into op_names
    magnitude: np.ndarray  # (N, L) float64, after noise and clipping
    arg: np.ndarray  # (N, L) float64, the op's argument (NaN: the op takes none)
    resample: np.ndarray  # (N, L) int64, index into RESAMPLE for affine ops


# Level -> argument, as timm's (or pycls's) level functions compute it, in their order of
# operations: t = (magnitude / 10) * scale, truncated (integer rules), capped at `cap`; then
# offset + sign * t (sign -1 for the "Increasing" rules' 4 - t, 256 - t; the sign drawn for
# the signed ones, timm's _randomly_negate), at least `floor`.
@dataclass(frozen=True)
class LevelRule:
    scale: float | str  # a number, or the policy's attribute holding it
    integer: bool = False
    cap: float = math.inf
    offset: float = 0.0
    sign: float = 1.0
    signed: bool = False
    floor: float = -math.inf


_ENHANCE = LevelRule(1.8, offset=0.1)
_ENHANCE_INCREASING = LevelRule(0.9, offset=1.0, signed=True, floor=0.1)
LEVELS: dict[str, LevelRule] = {
    "Rotate": LevelRule(30.0, signed=True),
    "Posterize": LevelRule(4, integer=True),
    "PosterizeIncreasing": LevelRule(4, integer=True, offset=4, sign=-1.0),
    "PosterizeOriginal": LevelRule(4, integer=True, offset=4),
    "PosterizePycls": LevelRule(4, integer=True, floor=1),
    "Solarize": LevelRule(256, integer=True, cap=256),
    "SolarizeIncreasing": LevelRule(256, integer=True, cap=256, offset=256, sign=-1.0),
    "SolarizeAdd": LevelRule(110, integer=True, cap=128),
    **{op: _ENHANCE for op in ("Color", "Contrast", "Brightness", "Sharpness")},
    **{
        f"{op}Increasing": _ENHANCE_INCREASING
        for op in ("Color", "Contrast", "Brightness", "Sharpness")
    },
    "ShearX": LevelRule(0.3, signed=True),
    "ShearY": LevelRule(0.3, signed=True),
    "TranslateX": LevelRule("translate_const", signed=True),
    "TranslateY": LevelRule("translate_const", signed=True),
    "TranslateXRel": LevelRule("translate_pct", signed=True),
    "TranslateYRel": LevelRule("translate_pct", signed=True),
}


def level_args(
    rules: list[str], entry: np.ndarray, magnitude: np.ndarray, flip: np.ndarray, policy
) -> np.ndarray:
    """The arguments (float64) of ops whose level rules are rules[entry] at `magnitude` with
    sign draws `flip` (arrays of entry's shape); NaN for ops without a level rule (they take
    no argument)."""
    none = LevelRule(math.nan)
    table = [LEVELS.get(rule, none) for rule in rules]

    def column(field):
        values = [getattr(rule, field) for rule in table]
        if field == "scale":
            values = [float(getattr(policy, v)) if isinstance(v, str) else v for v in values]
        dtype = bool if field in ("integer", "signed") else np.float64
        return np.array(values, dtype=dtype)[entry]

    t = (magnitude / 10) * column("scale")
    t = np.minimum(np.where(column("integer"), np.trunc(t), t), column("cap"))
    sign = np.where(column("signed") & flip, -1.0, column("sign"))
    return np.maximum(column("offset") + sign * t, column("floor"))


_BUFFERS = threading.local()  # per thread: {(shape, dtype): (tensor, its numpy view)}


def _random(fill, shape: tuple[int, ...], dtype) -> np.ndarray:
    """A numpy array of `shape` filled by torch's generator (`fill(tensor)`, a tensor method:
    torch.rand, randn, randint(k) are uniform_(), normal_(), random_(0, k) on the tensor they
    make): the numbers a torch draw of that shape gives. One operation per draw: the tensor is
    made once per shape and thread and reused, its numbers copied out on the host."""
    buffers = _BUFFERS.__dict__.setdefault("buffers", {})
    key = (shape, np.dtype(dtype).str)
    if key not in buffers:
        array = np.empty(shape, dtype=dtype)
        buffers[key] = (torch.from_numpy(array), array)
    tensor, array = buffers[key]
    fill(tensor)
    return array.copy()


def _choose(policy, n: int, g: torch.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Per image: the choice (auto: sub-policy (N,); rand: ops (N, L)) and the index of each
    slot's op in the flat table `[op for entry in choices for op in entry]` (N, L)."""
    k, layers = len(policy.choices), policy.num_layers
    if policy.kind == "auto":
        sub = _random(lambda t: t.random_(0, k, generator=g), (n,), np.int64)
        return sub, sub[:, None] * layers + np.arange(layers)
    if policy.choice_weights is None:  # numpy's choice(ops, n, replace=True)
        picks = _random(lambda t: t.random_(0, k, generator=g), (n, layers), np.int64)
    else:  # numpy's choice(ops, n, replace=False, p=weights)
        weights = torch.tensor(policy.choice_weights, dtype=torch.float64).expand(n, k)
        picks = torch.multinomial(weights, layers, replacement=False, generator=g).numpy()
    return picks, picks


def draw(policy, n: int, g: torch.Generator) -> PolicyDraws:
    """Everything the policy decides for n images, from the CPU generator g: the random numbers
    from g, in blocks per batch; the arithmetic on them on the host (numpy)."""
    flat = [op for entry in policy.choices for op in entry]
    names = policy.op_names
    choice, slot = _choose(policy, n, g)
    shape = slot.shape
    applies = _random(lambda t: t.uniform_(generator=g), shape, np.float64)
    if math.isinf(policy.magnitude_std):
        noise = _random(lambda t: t.uniform_(generator=g), shape, np.float64)
    else:
        noise = _random(lambda t: t.normal_(generator=g), shape, np.float64)
    flip = _random(lambda t: t.uniform_(generator=g), shape, np.float64) > 0.5
    resample = _random(lambda t: t.random_(0, len(policy.resample), generator=g), shape, np.int64)

    prob = np.array([op.prob for op in flat])[slot]
    magnitude = np.array([float(op.magnitude) for op in flat])[slot]
    applied = (prob >= 1.0) | (applies <= prob)  # timm: skip if random() > prob
    if math.isinf(policy.magnitude_std):  # random.uniform(0, m)
        magnitude = noise * magnitude
    elif policy.magnitude_std > 0:  # random.gauss(m, mstd)
        magnitude = magnitude + noise * policy.magnitude_std
    upper = policy.magnitude_max or 10.0
    magnitude = np.clip(magnitude, None, upper).clip(0.0)

    arg = level_args([op.level for op in flat], slot, magnitude, flip, policy)
    op = np.array([names.index(o.name) for o in flat])[slot]
    affine = np.array([o.name in AFFINE_OPS for o in flat])[slot]
    chosen = np.array([RESAMPLE.index(r) for r in policy.resample])[resample]
    return PolicyDraws(
        op_names=names,
        choice=choice,
        op=np.where(applied, op, -1),
        magnitude=np.where(applied, magnitude, math.nan),
        arg=np.where(applied, arg, math.nan),
        resample=np.where(applied & affine, chosen, -1),
    )


def apply(policy, x: torch.Tensor, draws: PolicyDraws) -> torch.Tensor:
    """Apply the drawn ops slot by slot, each slot with a fixed number of tensor operations
    (tensor_ops.apply_plan); what each image drew is turned into each slot's images and
    parameters on the host (tensor_ops.plan_batch), which reach x's device in one copy per
    dtype and batch, without a host sync."""
    kinds = slot_kinds(policy)
    plan = plan_batch(
        draws.op_names,
        draws.op,
        draws.arg,
        draws.resample,
        tuple(x.shape[1:]),
        policy.resample,
        kinds,
        x.device.type,
    )
    return apply_plan(x, plan_to_device(plan, x.device), kinds, policy.fill, policy.resample)


def slot_kinds(policy) -> tuple[frozenset[str], ...]:
    """Per op slot, the `op_kind`s its images can draw: AutoAugment's slot s runs the s-th op
    of a sub-policy, RandAugment's any op of its table."""
    if policy.kind == "auto":
        return tuple(
            frozenset(op_kind(entry[s].name) for entry in policy.choices)
            for s in range(policy.num_layers)
        )
    every = frozenset(op_kind(entry[0].name) for entry in policy.choices)
    return (every,) * policy.num_layers

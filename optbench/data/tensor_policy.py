"""timm's and pycls's auto-augment policies as data, applied per sample to uint8 batches on any
device (the tensor pipeline's policy; `augment.timm_policy` is the PIL one it must equal).

A `TensorPolicy` is the policy's table, read from the very timm object `augment.timm_policy`
builds for the recipe's name (DALI auto_aug style: data, not code):
- AutoAugment (`kind="auto"`: "pycls_v0", "v0", "original-mstd0.5", ...): each image draws one
  sub-policy uniformly, then applies each of its ops with the op's probability;
- RandAugment (`kind="rand"`: "rand-m9-mstd0.5-inc1", ...): each image draws `num_layers` ops
  uniformly with replacement (numpy's `choice`, timm without weights), or, with timm's choice
  weights, without replacement; each is applied with probability `p`.
`policy(x, generator)` draws for the whole batch (tensor_draws.py) and applies the ops batched
(tensor_ops.py: Pillow's arithmetic, op for op), a fixed number of tensor operations per batch
whatever its size (`aten_ops` counts them). Only the small per-image arguments are computed on
the host; pixels stay on x's device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
from PIL import Image
from timm.data import auto_augment as timm_aa

from optbench.data import augment
from optbench.data.tensor_draws import PolicyDraws, apply, draw
from optbench.data.tensor_ops import OPS
from optbench.spec.recipe import TORCHVISION_POLICIES, Recipe

_PIL_RESAMPLE = {Image.BILINEAR: "bilinear", Image.BICUBIC: "bicubic"}


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


def missing_ops(recipe_policy_name: str) -> tuple[str, ...]:
    """The ops of a timm / pycls policy that have no tensor version (none: the tensor pipeline
    can run it), in table order: `3a`'s Desaturate and GaussianBlurRand."""
    transform = augment.timm_policy(recipe_policy_name)
    names = dict.fromkeys(op.name for op in augment._ops(transform))
    return tuple(n for n in names if n not in OPS)


def aten_ops(run: Callable[[], object]) -> tuple[int, int]:
    """The aten operations one `run()` issues, counted by torch.profiler on the CPU: (the ops
    it calls; those plus the ops they call inside them, as issue 66 counted the per-sample
    policy's 6,801). Call it after a first run, which makes the per-shape constants."""
    counts = aten_ops_by_name(run).values()
    return sum(calls for calls, _ in counts), sum(nested for _, nested in counts)


def aten_ops_by_name(run: Callable[[], object]) -> dict[str, tuple[int, int]]:
    """`aten_ops` per operation name ("aten::" left out), most frequent (with the ops inside)
    first: {name: (calls, all)}."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    ops = [e for e in prof.events() if e.name.startswith("aten::")]
    counts: dict[str, list[int]] = {}
    for e in ops:
        count = counts.setdefault(e.name.removeprefix("aten::"), [0, 0])
        count[0] += e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")
        count[1] += 1
    return {name: tuple(c) for name, c in sorted(counts.items(), key=lambda kv: -kv[1][1])}

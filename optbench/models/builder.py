"""What every optbench model shares: its timm pretrained cfg (default input, classes and evaluation
crop; no weights), the one builder that applies that cfg, and the names of the weight inits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

from timm.models import build_model_with_cfg
from torch import nn

WeightInit = Literal["reference", "timm"]
WEIGHT_INITS: tuple[str, ...] = get_args(WeightInit)


def check_weight_init(weight_init: str) -> None:
    """Raise ValueError unless `weight_init` names an init ("reference" or "timm")."""
    if weight_init not in WEIGHT_INITS:
        raise ValueError(f"weight_init must be one of {WEIGHT_INITS}, got {weight_init!r}")


def zoo_cfg(
    img_size: int,
    num_classes: int,
    in_chans: int = 3,
    *,
    test_size: int | None = None,
    fixed_input_size: bool = True,
    interpolation: str = "bicubic",
) -> dict:
    """A timm pretrained cfg that records a model's default input, classes and evaluation crop.

    `img_size` is the training size. Evaluation resizes the shorter side to `test_size` and
    centre-crops `img_size` (timm's convention: crop_pct = train / test); without a test_size the
    whole image is used (crop_pct 1). `fixed_input_size` tells `optbench.models.create_model`
    (and timm) that the model is built for one size and takes img_size.
    """
    return dict(
        input_size=(in_chans, img_size, img_size),
        num_classes=num_classes,
        crop_pct=img_size / (test_size or img_size),
        interpolation=interpolation,
        fixed_input_size=fixed_input_size,
        mean=(0.5,) * in_chans,
        std=(0.5,) * in_chans,
        license="mit",
    )


def build(
    model_cls: type[nn.Module], variant: str, cfg: dict, pretrained: bool, **kwargs
) -> nn.Module:
    """Build `variant` from its architecture `cfg`; kwargs (num_classes, img_size...) override it,
    and the defaults come from the variant's pretrained cfg."""
    if pretrained:
        raise ValueError("optbench models have no pretrained weights")
    return build_model_with_cfg(model_cls, variant, pretrained=False, **{**cfg, **kwargs})


def square_size(img_size: int | Sequence[int]) -> int:
    """The side of a square input: timm passes img_size as (H, W) from a pretrained cfg."""
    if isinstance(img_size, int):
        return img_size
    h, w = img_size
    if h != w:
        raise ValueError(f"optbench models take square inputs, got img_size {tuple(img_size)}")
    return int(h)

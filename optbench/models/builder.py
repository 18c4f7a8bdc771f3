"""What every optbench model shares: its timm pretrained cfg (default input and classes; no
weights), the one builder that applies that cfg, and the names of the weight inits."""

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


def zoo_cfg(img_size: int, num_classes: int, in_chans: int = 3) -> dict:
    """A timm pretrained cfg that only records a model's default input and classes.

    `fixed_input_size` tells `optbench.models.create_model` (and timm) that the model takes img_size.
    """
    return dict(
        input_size=(in_chans, img_size, img_size),
        num_classes=num_classes,
        fixed_input_size=True,
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

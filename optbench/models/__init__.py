"""The model zoo. Importing this package registers optbench's models with timm.

`create_model` is timm's: any registered optbench model or any timm model name works.
builder.py holds the timm cfg and builder the zoo shares; zoo.py lists the zoo and its defaults;
complexity.py counts flops, params and activations of any model.
"""

from __future__ import annotations

import timm
from torch import nn

# Importing these modules registers their models with timm.
from optbench.models import dhvt, stem_ablation, vit  # noqa: F401


def is_model(name: str) -> bool:
    """True if timm (with optbench's models registered) can build `name`."""
    return timm.is_model(name)


def takes_img_size(name: str) -> bool:
    """True if `name` is built for one input size and takes `img_size` (ViTs, all optbench
    models); False for models that accept any size and no such argument (ResNet, RegNetY)."""
    cfg = timm.get_pretrained_cfg(name)
    return bool(cfg is not None and cfg.fixed_input_size)


def create_model(
    name: str, *, num_classes: int, in_chans: int, img_size: int, **kwargs
) -> nn.Module:
    """Build `name` for a dataset: optbench models and timm models take the same arguments.
    `kwargs` go to the model (e.g. drop_path_rate)."""
    size = dict(img_size=img_size) if takes_img_size(name) else {}
    return timm.create_model(name, num_classes=num_classes, in_chans=in_chans, **size, **kwargs)

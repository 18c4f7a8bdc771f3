"""The model zoo. Importing this package registers optbench's models with timm.

`create_model` is timm's: any registered optbench model or any timm model name works.
"""

from __future__ import annotations

import timm
from torch import nn

from optbench.models import vit  # noqa: F401  (registers the ViT_P / ViT_C family)


def is_model(name: str) -> bool:
    """True if timm (with optbench's models registered) can build `name`."""
    return timm.is_model(name)


def create_model(name: str, *, num_classes: int, in_chans: int, img_size: int) -> nn.Module:
    """Build `name` for a dataset: optbench models and timm models take the same arguments."""
    return timm.create_model(name, num_classes=num_classes, in_chans=in_chans, img_size=img_size)

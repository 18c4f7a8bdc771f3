"""The model zoo. Importing this package registers optbench's models with timm.

`create_model` builds any registered optbench model or any timm model by name, for a dataset and
with a weight init. builder.py holds what the zoo's models share (their timm cfg, builder and init
names); vit.py, stem_ablation.py, dhvt.py and regnet.py are the model families; zoo.py lists the
zoo and its defaults; complexity.py counts flops, params and activations of any model.
"""

from __future__ import annotations

import timm
from torch import nn

# Importing these modules registers their models with timm.
from optbench.models import dhvt, regnet, stem_ablation, vit  # noqa: F401
from optbench.models.builder import WeightInit, check_weight_init


def is_model(name: str) -> bool:
    """True if timm (with optbench's models registered) can build `name`."""
    return timm.is_model(name)


def model_names() -> list[str]:
    """Every name `create_model` builds: optbench's models and timm's."""
    return timm.list_models()


def is_optbench_model(name: str) -> bool:
    """True if `name` is one of optbench's own models (not a model of timm's)."""
    return timm.is_model(name) and timm.models.model_entrypoint(name).__module__.startswith(
        "optbench."
    )


def takes_img_size(name: str) -> bool:
    """True if `name` is built for one input size and takes `img_size` (ViTs, optbench's ViTs and
    DHVTs); False for models that accept any size and no such argument (ResNet, RegNetY)."""
    cfg = timm.get_pretrained_cfg(name)
    return bool(cfg is not None and cfg.fixed_input_size)


def create_model(
    name: str,
    *,
    num_classes: int,
    in_chans: int,
    img_size: int,
    weight_init: WeightInit = "reference",
    **kwargs,
) -> nn.Module:
    """Build `name` for a dataset: optbench models and timm models take the same arguments.

    weight_init "reference" starts a model as its reference code does: pycls for the paper's ViTs
    and RegNetYs, the official code for DHVT, timm for timm's models. "timm" gives optbench's
    ViTs optbench's earlier timm-style init and is the same as "reference" for every other model.
    `kwargs` go to the model (e.g. drop_path_rate).
    """
    check_weight_init(weight_init)
    size = dict(img_size=img_size) if takes_img_size(name) else {}
    init = dict(weight_init=weight_init) if is_optbench_model(name) else {}
    return timm.create_model(
        name, num_classes=num_classes, in_chans=in_chans, **size, **init, **kwargs
    )

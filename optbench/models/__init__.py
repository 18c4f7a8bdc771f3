"""The model zoo: its names, and `create_model`, which builds any optbench or timm model by name
for a dataset and with a weight init.

Importing this package is cheap: torch and timm load when a model is built or a name outside
the zoo is looked up. The models register with timm's registry as soon as timm is imported
(see optbench/__init__.py), so `timm.create_model("vit_c_4gf")` works too.

- `builder.py`: what the zoo's models share (their timm cfg, builder, init names, timm's
  classifier API).
- The families: `vit.py` (ViT_P and ViT_C), `stem_ablation.py` (stems S1-S4), `dhvt.py` (DHVT),
  `regnet.py` (RegNetY).
- A model of the user's own is registered with timm by a module the study imports
  (optbench/user_code.py, which refuses one that takes a name already registered):
  `model_origin` tells whose code a name builds, `registered_by` lists what a module adds.
- `zoo.py`: the zoo described (defaults, complexity, throughput; `optbench models`).
- `complexity.py`: flops, params and activations of any model; `cache.py`: those counts and
  default inputs cached on disk.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

    from optbench.models.builder import WeightInit

# Every optbench model, in display order: ViTs, stem ablations, DHVTs, RegNetYs. Kept here as
# plain names so that checking a study needs neither torch nor timm; tests/test_models.py checks
# that it is exactly what the families register.
ZOO: tuple[str, ...] = (
    *("vit_p_w64_16px", "vit_c_w64_16px"),
    *(f"vit_{stem}_{gf}gf" for gf in (1, 4, 18, 36, 72) for stem in "pc"),
    *(f"vit_{stem}_w{width}_32px" for width in (192, 384) for stem in "pc"),
    *(f"vit_s{i}_4gf" for i in (1, 2, 3, 4)),
    *(f"vit_s{i}_w64_16px" for i in (1, 2)),
    "dhvt_w64_16px",
    *(f"dhvt_{size}_cifar_p{p}" for p in (4, 2) for size in ("tiny", "small")),
    *(
        f"dhvt_{size}_{data}_p16"
        for data in ("imagenet", "domainnet")
        for size in ("tiny", "small")
    ),
    *("regnety_1gf", "regnety_4gf", "regnety_16gf"),
)


FAMILIES = ("optbench.models.vit", "optbench.models.stem_ablation", "optbench.models.dhvt",
            "optbench.models.regnet")  # fmt: skip


def register_zoo() -> None:
    """Register optbench's models with timm: importing their modules does it (once)."""
    for name in FAMILIES:
        module = sys.modules.get(name)
        if module is not None and getattr(module.__spec__, "_initializing", False):
            # timm was first imported by this very family module (`from optbench.models.vit
            # import ...` before timm): it registers its own models as its import ends, and the
            # next create_model (which calls this again) the others.
            return
        importlib.import_module(name)


def is_model(name: str) -> bool:
    """True if timm (with optbench's models registered) can build `name`."""
    if name in ZOO:
        return True
    import timm

    register_zoo()
    return timm.is_model(name)


def model_origin(name: str) -> str | None:
    """Whose code `name` builds, as the model-count cache (cache.py) keys it: "" for optbench's
    and timm's own models (the cache's fingerprint covers their code; without timm imported, no
    module of the user's has registered anything) and for a name unknown here (nothing to count);
    "@MODULE:DIGEST" for a model registered by a module of the user's (a study's `imports`): its
    top-level module and that module's source digest (user_code.py), so that counts made under
    one module's code are never read under another's or a built-in's, the same name or not;
    None for such a model whose module has no source file to digest (never cached)."""
    if "timm" not in sys.modules:
        return ""
    import timm

    register_zoo()
    if not timm.is_model(name):
        return ""
    top = timm.models.model_entrypoint(name).__module__.partition(".")[0]
    if top in ("timm", "optbench"):
        return ""
    from optbench.user_code import source_digest, source_files

    module = sys.modules.get(top)
    if module is None or not source_files(module):
        return None
    return f"@{top}:{source_digest(module)}"


def registered_by(modules: Sequence[str]) -> list[str]:
    """The model names that `modules` (imported) or their submodules registered with timm,
    sorted: what a study's `imports` add to the zoo."""
    import timm

    register_zoo()
    owners = tuple(modules)
    return [
        name
        for name in timm.list_models()
        if (module := timm.models.model_entrypoint(name).__module__) in owners
        or module.startswith(tuple(f"{owner}." for owner in owners))
    ]


def model_names() -> list[str]:
    """Every name `create_model` builds: optbench's models and timm's."""
    import timm

    return sorted({*ZOO, *timm.list_models()})  # timm's, and the zoo even if not registered yet


def is_optbench_model(name: str) -> bool:
    """True if `name` is one of optbench's own models (not a model of timm's)."""
    return name in ZOO


def takes_img_size(name: str) -> bool:
    """True if `name` is built for one input size and takes `img_size` (ViTs, optbench's ViTs and
    DHVTs); False for models that accept any size and no such argument (ResNet, RegNetY)."""
    import timm

    register_zoo()
    cfg = timm.get_pretrained_cfg(name)
    return bool(cfg is not None and cfg.fixed_input_size)


def input_multiple(name: str) -> int:
    """What the side of `name`'s input must be a multiple of: the model's own patch size (the
    zoo's transformers' `patch_size`, which their stems' strides multiply to; timm's
    `patch_embed.patch_size` where it refuses other sizes), 1 for a model that takes any size
    (RegNetY, ResNet). Read from the model built on torch's meta device: no weights are made."""
    import timm
    import torch

    register_zoo()
    with torch.device("meta"):
        model = timm.create_model(name)
    size = getattr(model, "patch_size", None)
    embed = getattr(model, "patch_embed", None)
    if size is None and getattr(embed, "strict_img_size", False):
        size = None if getattr(embed, "dynamic_img_pad", False) else embed.patch_size
    if isinstance(size, tuple | list):  # timm's (h, w): the zoo's inputs are square
        size = max(size)
    return int(size or 1)


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
    import timm

    from optbench.models.builder import check_weight_init

    check_weight_init(weight_init)
    size = dict(img_size=img_size) if takes_img_size(name) else {}
    init = dict(weight_init=weight_init) if is_optbench_model(name) else {}
    return timm.create_model(
        name, num_classes=num_classes, in_chans=in_chans, **size, **init, **kwargs
    )

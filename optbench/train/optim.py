"""Optimizer, weight-decay groups and lr schedule of a trial (timm's and torch's implementations).

Weight decay (explicit, see `weight_decay_groups`): never on normalization gains and biases
(every parameter with at most one dimension, and every `*.bias`), as in the paper; parameters
whose names match a `recipe.wd_exclude` glob (e.g. "*pos_embed", "*cls_token", "*head_embed*")
are excluded too. A model's own `no_weight_decay()` hint is ignored on purpose: what is decayed
is a recipe setting, visible in the study, not a model detail.

Optimizers: the paper's AdamW (betas and eps from the recipe) and SGD (momentum from the
recipe, 0.9 by default, dampening 0; `recipe.nesterov` for Nesterov), built with timm's
`create_optimizer_v2` with fused kernels on CUDA and foreach kernels elsewhere; any other name
of timm's registry (spec/optimizers.py) with `create_optimizer_v2` over the same groups, its
`recipe.optimizer_args` and timm's defaults for the rest (the hybrids' fallback is timm's own:
Muon routes parameters by shape, Kron preconditions them; the trial's config records it).
`registry_table` writes timm's registry as the torch-free table spec/timm_optimizers.json.

Schedule (`LrSchedule`, a pure function of the step, so resuming needs no state): three rules,
`recipe.schedule`, each one reference code's; `min_lr` and `warmup_factor` are fractions of the
peak lr (`lr_used`) in all three:
- `cosine`: timm's CosineLRScheduler counted in iterations: linear warmup from
  warmup_factor x peak over `recipe.warmup_for(epochs)` epochs, then a half cosine over the
  remaining steps down to min_lr x peak. Stepped every iteration (`schedule_step: iteration`,
  step k reads the schedule after k+1 iterations) or held over each epoch at the value of the
  epoch's middle (`schedule_step: epoch`).
- `pycls`: pycls's `get_epoch_lr`, once per epoch e = 0..E-1: the cosine
  peak x [(1 - min_lr) x (1 + cos(pi e / E)) / 2 + min_lr] spans the whole run, and during the
  first W warmup epochs it is multiplied by warmup_factor x (1 - e / W) + e / W.
- `deit`: timm's CosineLRScheduler counted in epochs as DeiT's main.py (DHVT's official code)
  drives it: linear warmup from warmup_factor x peak over W epochs, the cosine over the whole run
  (warmup not a prefix) to min_lr x peak, and `scheduler.step(e)` called after epoch e, so
  epoch e trains at the schedule's value at max(e - 1, 0).
"""

from __future__ import annotations

import math
from fnmatch import fnmatchcase

from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler
from torch import nn
from torch.optim import Optimizer

from optbench.spec.optimizers import PAPER_OPTIMIZERS, optimizer_kwargs, registry_entry
from optbench.trial.config import TrainConfig


def is_decayed(name: str, param: nn.Parameter, exclude: tuple[str, ...]) -> bool:
    """Whether weight decay applies to one named parameter."""
    if param.ndim <= 1 or name.endswith(".bias"):
        return False  # norm gains, biases and other 1-D parameters: never
    return not any(fnmatchcase(name, pattern) for pattern in exclude)


def weight_decay_groups(model: nn.Module, wd: float, exclude: tuple[str, ...]) -> list[dict]:
    """Two parameter groups: decayed (weight_decay=wd) and not (weight_decay=0), each with the
    names of its parameters under "names" (for tests and inspection)."""
    groups = {True: {"params": [], "names": [], "weight_decay": wd}}
    groups[False] = {"params": [], "names": [], "weight_decay": 0.0}
    for name, param in model.named_parameters():
        if param.requires_grad:
            group = groups[is_decayed(name, param, exclude)]
            group["params"].append(param)
            group["names"].append(name)
    return [g for g in (groups[True], groups[False]) if g["params"]]


def build_optimizer(model: nn.Module, cfg: TrainConfig, *, fused: bool = False) -> Optimizer:
    """The trial's optimizer over `weight_decay_groups`. AdamW or SGD: the paper's, `fused` for
    CUDA (foreach kernels otherwise); any other: timm's, with its recipe.optimizer_args."""
    recipe = cfg.recipe
    groups = [
        {k: v for k, v in g.items() if k != "names"}
        for g in weight_decay_groups(model, cfg.wd, recipe.wd_exclude)
    ]
    if cfg.optimizer not in PAPER_OPTIMIZERS:
        args = optimizer_kwargs(recipe.optimizer_args.get(cfg.optimizer, {}))
        return create_optimizer_v2(
            groups, opt=cfg.optimizer, lr=cfg.lr_used, weight_decay=cfg.wd, **args
        )
    kernel = {"fused": True} if fused else {"foreach": True}
    if cfg.optimizer == "adamw":
        opt, kwargs = "adamw", {"betas": recipe.betas, "eps": recipe.eps}
    else:  # timm: "sgd" is Nesterov SGD, "momentum" heavy-ball SGD
        opt, kwargs = ("sgd" if recipe.nesterov else "momentum"), {"momentum": recipe.momentum}
    return create_optimizer_v2(
        groups, opt=opt, lr=cfg.lr_used, weight_decay=cfg.wd, **kwargs, **kernel
    )


def pycls_epoch_lr(epoch: int, cfg: TrainConfig) -> float:
    """pycls's `get_epoch_lr` (cosine policy) for 0-based `epoch`, at peak lr `cfg.lr_used`."""
    r = cfg.recipe
    cosine = 0.5 * (1.0 + math.cos(math.pi * epoch / cfg.epochs))
    lr = cfg.lr_used * ((1.0 - r.min_lr) * cosine + r.min_lr)
    warmup = r.warmup_for(cfg.epochs)
    if epoch < warmup:
        progress = epoch / warmup
        lr *= r.warmup_factor * (1.0 - progress) + progress
    return lr


class _Written:
    """Where timm's schedulers write the lr they compute (an optimizer's `param_groups`, one
    group): the schedule's own, so that no optimizer's lr is set, or read, as a side effect."""

    def __init__(self, lr: float):
        self.param_groups = [{"lr": lr}]


class LrSchedule:
    """The lr of each optimizer step of a trial, by `recipe.schedule` (module docstring): `lr`.
    A stepper sets it into its optimizer (stepper.py) or hands it to the population's."""

    def __init__(self, cfg: TrainConfig, steps_per_epoch: int):
        self.cfg, self.steps_per_epoch = cfg, steps_per_epoch
        recipe, peak = cfg.recipe, cfg.lr_used
        self._written = optimizer = _Written(peak)
        warmup = recipe.warmup_for(cfg.epochs)
        self.timm = None
        if recipe.schedule == "cosine":
            total = cfg.epochs * steps_per_epoch
            warmup_steps = round(warmup * steps_per_epoch)  # < total: TrainConfig checks
            self.timm = CosineLRScheduler(
                optimizer,
                t_initial=total - warmup_steps,
                lr_min=recipe.min_lr * peak,
                warmup_t=warmup_steps,
                warmup_lr_init=recipe.warmup_factor * peak,
                warmup_prefix=True,
                t_in_epochs=False,
            )
        elif recipe.schedule == "deit":
            self.timm = CosineLRScheduler(
                optimizer,
                t_initial=cfg.epochs,
                lr_min=recipe.min_lr * peak,
                warmup_t=warmup,
                warmup_lr_init=recipe.warmup_factor * peak,
                warmup_prefix=False,
                t_in_epochs=True,
            )

    def lr(self, step: int) -> float:
        """The lr that optimizer step `step` (0-based, over the whole run) takes."""
        recipe, epoch = self.cfg.recipe, step // self.steps_per_epoch
        if recipe.schedule == "pycls":
            return pycls_epoch_lr(epoch, self.cfg)
        if recipe.schedule == "deit":
            self.timm.step(max(epoch - 1, 0))
        elif recipe.schedule_step == "epoch":
            self.timm.step_update((epoch + 0.5) * self.steps_per_epoch)
        else:
            self.timm.step_update(step + 1)
        return self._written.param_groups[0]["lr"]


# --- timm's optimizer registry as a torch-free table (spec/timm_optimizers.json) -------------


def registry_table() -> dict[str, dict]:
    """The installed timm's optimizer registry (timm.optim.list_optimizers) as the table
    spec/timm_optimizers.json holds: per name, its entry as spec/optimizers.py's
    `registry_entry` reads one (the class, each argument a study may set with its default, or
    why it is unsupported)."""
    from timm.optim import list_optimizers
    from timm.optim._optim_factory import default_registry

    return {
        name: registry_entry(default_registry.get_optimizer_info(name))
        for name in list_optimizers()
    }


def optimizer_table_text() -> str:
    """spec/timm_optimizers.json's text for the installed timm: its version and registry_table
    (tests compare it with the file; `python -m optbench.train.optim` writes it)."""
    import json

    import timm

    table = {"timm_version": timm.__version__, "optimizers": registry_table()}
    return json.dumps(table, indent=2, allow_nan=False) + "\n"


if __name__ == "__main__":
    from optbench.spec.timm_optimizers import TABLE_PATH

    TABLE_PATH.write_text(optimizer_table_text(), encoding="utf-8")

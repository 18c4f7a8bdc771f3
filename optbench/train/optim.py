"""Optimizer, weight-decay groups and lr schedule of a trial (timm's and torch's implementations).

Weight decay (explicit, see `weight_decay_groups`): never on normalization gains and biases
(every parameter with at most one dimension, and every `*.bias`), as in the paper; parameters
whose names match a `recipe.wd_exclude` glob (e.g. "*pos_embed", "*cls_token", "*head_embed*")
are excluded too. A model's own `no_weight_decay()` hint is ignored on purpose: what is decayed
is a recipe setting, visible in the study, not a model detail.

Optimizers: AdamW (betas and eps from the recipe) and SGD (momentum from the recipe, 0.9 by
default; `recipe.nesterov` for Nesterov), built with timm's `create_optimizer_v2` with fused
kernels on CUDA and foreach kernels elsewhere.

Schedule: linear warmup from 0 for `recipe.warmup_for(epochs)` epochs, then half-cosine decay
to min_lr (timm's CosineLRScheduler). It is stepped every iteration (`schedule_step:
iteration`, the default) or held constant over each epoch at the value of the epoch's middle
(`schedule_step: epoch`); `schedule_position` says where each step reads the schedule.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler
from torch import nn
from torch.optim import Optimizer

from optbench.train.config import TrainConfig


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
    """AdamW or SGD over `weight_decay_groups`; `fused` for CUDA (foreach kernels otherwise)."""
    recipe = cfg.recipe
    groups = [
        {k: v for k, v in g.items() if k != "names"}
        for g in weight_decay_groups(model, cfg.wd, recipe.wd_exclude)
    ]
    kernel = {"fused": True} if fused else {"foreach": True}
    if cfg.optimizer == "adamw":
        opt, kwargs = "adamw", {"betas": recipe.betas, "eps": recipe.eps}
    else:  # timm: "sgd" is Nesterov SGD, "momentum" heavy-ball SGD
        opt, kwargs = ("sgd" if recipe.nesterov else "momentum"), {"momentum": recipe.momentum}
    return create_optimizer_v2(
        groups, opt=opt, lr=cfg.lr_used, weight_decay=cfg.wd, **kwargs, **kernel
    )


def build_schedule(
    optimizer: Optimizer, cfg: TrainConfig, steps_per_epoch: int
) -> CosineLRScheduler:
    """Linear warmup from 0, then half-cosine decay to min_lr (normalized like lr), counted in
    iterations. Before each step the loop calls
    `schedule.step_update(schedule_position(...))`."""
    total = cfg.epochs * steps_per_epoch
    warmup = round(cfg.recipe.warmup_for(cfg.epochs) * steps_per_epoch)  # < total: TrainConfig
    return CosineLRScheduler(
        optimizer,
        t_initial=total - warmup,
        lr_min=cfg.recipe.min_lr * cfg.batch_size / cfg.ref_batch,
        warmup_t=warmup,
        warmup_lr_init=0.0,
        warmup_prefix=True,
        t_in_epochs=False,
    )


def schedule_position(cfg: TrainConfig, step: int, steps_per_epoch: int) -> float:
    """Where on the schedule (in iterations) optimizer step `step` (0-based) takes its lr:
    per iteration, after step+1 iterations (the first warmup step is not wasted at lr 0); per
    epoch, at the middle of the step's epoch (constant over the epoch)."""
    if cfg.recipe.schedule_step == "epoch":
        return (step // steps_per_epoch + 0.5) * steps_per_epoch
    return step + 1

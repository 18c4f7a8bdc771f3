"""Optimizer and lr schedule of a trial, built from timm's implementations.

Weight decay is not applied to normalization gains and biases (timm's 1-D parameter filter),
as in the paper. SGD is timm's "momentum" (heavy ball, not Nesterov).
"""

from __future__ import annotations

from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler
from torch import nn
from torch.optim import Optimizer

from optbench.train.config import TrainConfig

_TIMM_NAMES = {"adamw": "adamw", "sgd": "momentum"}


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> Optimizer:
    kwargs = {"betas": cfg.recipe.betas} if cfg.optimizer == "adamw" else {}
    return create_optimizer_v2(
        model,
        opt=_TIMM_NAMES[cfg.optimizer],
        lr=cfg.lr_used,
        weight_decay=cfg.wd,
        momentum=cfg.recipe.momentum,
        filter_bias_and_bn=True,
        **kwargs,
    )


def build_schedule(
    optimizer: Optimizer, cfg: TrainConfig, steps_per_epoch: int
) -> CosineLRScheduler:
    """Linear warmup from 0, then half-cosine decay to min_lr; stepped once per iteration
    with `schedule.step_update(step)`."""
    total = cfg.epochs * steps_per_epoch
    warmup = round(cfg.recipe.warmup_epochs * steps_per_epoch)  # < total: TrainConfig checks
    return CosineLRScheduler(
        optimizer,
        t_initial=total - warmup,
        lr_min=cfg.recipe.min_lr * cfg.batch_size / cfg.ref_batch,
        warmup_t=warmup,
        warmup_lr_init=0.0,
        warmup_prefix=True,
        t_in_epochs=False,
    )

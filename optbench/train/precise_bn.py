"""Precise BatchNorm statistics (pycls's BN.USE_PRECISE_STATS, `recipe.precise_bn_images`).

Before each evaluation, the running mean and variance of every BatchNorm layer are recomputed
from `precise_bn_images` training images: the mean over batches of each batch's mean and
(unbiased) variance, computed in training mode. This is what pycls's
`compute_precise_bn_stats` does (momentum 1 and an average over batches) and what torch's
`swa_utils.update_bn` computes (momentum None, a cumulative average over equal batches), which
does the work here. The images are the first int(images / batch) batches (at least one, at most
an epoch) of the epoch just trained, with fresh per-image augmentation and without mixup, as
pycls's training loader gives them (pycls mixes batches in the training loop, not the loader).
The forward passes run in float32, as pycls's. Under DDP each process normalizes its own share
and the statistics are averaged over processes afterwards, as pycls's all-reduce does. Models
without BatchNorm are left alone at no cost.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.optim.swa_utils import update_bn

from optbench.train.distributed import DistContext


def precise_bn_batches(images: int, batch_size: int, steps_per_epoch: int) -> int:
    """How many (global) batches give about `images` images: pycls's int(images / batch),
    at least one and at most an epoch."""
    return max(1, min(steps_per_epoch, images // batch_size))


def has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


@torch.no_grad()
def recompute_bn_stats(model: nn.Module, inputs: Iterable[torch.Tensor], dist: DistContext) -> None:
    """Replace every BatchNorm layer's running statistics by their average over `inputs`
    (model inputs, already augmented and normalized); average them over processes under DDP."""
    update_bn(inputs, model)
    if dist.enabled:
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                dist.sum_(m.running_mean).div_(dist.world)
                dist.sum_(m.running_var).div_(dist.world)

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

from collections.abc import Callable, Iterable

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim.swa_utils import update_bn

from optbench.train.distributed import DistContext


def precise_bn_batches(images: int, batch_size: int, steps_per_epoch: int) -> int:
    """How many (global) batches give about `images` images: pycls's int(images / batch),
    at least one and at most an epoch."""
    return max(1, min(steps_per_epoch, images // batch_size))


def has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, _BatchNorm) for m in model.modules())


@torch.no_grad()
def recompute_bn_stats(model: nn.Module, inputs: Iterable[torch.Tensor], dist: DistContext) -> None:
    """Replace every BatchNorm layer's running statistics by their average over `inputs`
    (model inputs, already augmented and normalized); average them over processes under DDP."""
    update_bn(inputs, model)
    if dist.enabled:
        for m in model.modules():
            if isinstance(m, _BatchNorm):
                dist.sum_(m.running_mean).div_(dist.world)
                dist.sum_(m.running_var).div_(dist.world)


@torch.no_grad()
def recompute_stacked_bn_stats(
    model: nn.Module,
    buffers: dict[str, torch.Tensor],
    inputs: Iterable[torch.Tensor],
    forward: Callable[[torch.Tensor], object],
) -> None:
    """`recompute_bn_stats` for the stacked BatchNorm buffers of a population (population.py):
    `forward(x)` runs `model` (training mode) on `buffers`, which it updates in place. torch's
    update_bn sets momentum None, which makes BatchNorm average with weight 1 / batches seen
    (read from `num_batches_tracked`, a per-member tensor here that cannot become that Python
    number under vmap); setting momentum 1 / j for the j-th batch gives the same weights."""
    norms = {n: m for n, m in model.named_modules() if isinstance(m, _BatchNorm)}
    if not norms:
        return
    for name in norms:  # BatchNorm's reset_running_stats, per member
        buffers[f"{name}.running_mean"].zero_()
        buffers[f"{name}.running_var"].fill_(1)
        buffers[f"{name}.num_batches_tracked"].zero_()
    momenta = {m: m.momentum for m in norms.values()}
    was_training = model.training
    model.train()
    for j, x in enumerate(inputs, start=1):
        for m in norms.values():
            m.momentum = 1.0 / float(j)
        forward(x)
    for m, momentum in momenta.items():
        m.momentum = momentum
    model.train(was_training)

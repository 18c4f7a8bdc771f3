"""What an epoch's end measures: first, if the recipe asks, precise BatchNorm statistics of the
model and its EMA (precise_bn.py); then the top-1 and top-5 error of both on the whole
validation split (`evaluate`, summed over every rank).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import torch
from torch import nn

from optbench.train.augment import BatchAugment
from optbench.train.batches import TrainBatches
from optbench.train.build import TrialParts
from optbench.train.compute import Compute
from optbench.train.config import TrainConfig
from optbench.train.precise_bn import has_batchnorm, precise_bn_batches, recompute_bn_stats
from optbench.train.seeding import derive_seed, seed_step


@torch.no_grad()
def count_errors(
    logits_of: Callable[[torch.Tensor], torch.Tensor],
    batches: TrainBatches,
    augment: BatchAugment,
    compute: Compute,
) -> torch.Tensor:
    """(wrong@1, wrong@5, images) over the whole validation split (all ranks), of the logits
    `logits_of(inputs)` gives: (batch, classes), or (members, batch, classes) for a population
    (population.py), whose counts are then (members, 3)."""
    counts = None
    k = min(5, batches.num_classes)
    for x, y in batches.val():
        with compute.autocast():
            logits = logits_of(compute.layout(augment.normalize(x)))
        top = logits.topk(k, dim=-1).indices
        hit = top == y[:, None]
        wrong1, wrong5 = (~hit[..., 0]).sum(-1), (~hit.any(-1)).sum(-1)
        batch = torch.stack([wrong1, wrong5, torch.full_like(wrong1, len(y))], dim=-1).double()
        counts = batch if counts is None else counts + batch
    compute.dist.sum_(counts)
    return counts


def error_percent(counts: torch.Tensor) -> tuple[float, float]:
    """Top-1 and top-5 error in percent of one model's (wrong@1, wrong@5, images)."""
    wrong1, wrong5, n = counts.tolist()
    return 100.0 * wrong1 / n, 100.0 * wrong5 / n


def evaluate(
    model: nn.Module, batches: TrainBatches, augment: BatchAugment, compute: Compute
) -> tuple[float, float]:
    """Top-1 and top-5 error in percent over the whole validation split (all ranks)."""
    model.eval()
    return error_percent(count_errors(model, batches, augment, compute))


def precise_bn_inputs(
    batches: TrainBatches, augment: BatchAugment, cfg: TrainConfig, compute: Compute, epoch: int
) -> Iterator[torch.Tensor]:
    """The inputs precise BN averages over after `epoch`: the epoch's first batches, freshly
    augmented per image (seeded by their position), without mixup (precise_bn.py)."""
    n = precise_bn_batches(cfg.recipe.precise_bn_images, cfg.batch_size, len(batches))
    stream = batches.train(epoch, 0, stream="precise-bn")
    for b, (x, _) in enumerate(itertools.islice(stream, n)):
        seed_step(derive_seed(cfg.seed, "precise-bn", epoch, b, compute.dist.rank), compute.device)
        yield compute.layout(augment.inputs(x))


def evaluate_epoch(parts: TrialParts, cfg: TrainConfig, compute: Compute, epoch: int) -> dict:
    """The metrics line's errors after `epoch`: raw_top1/5, ema_top1/5 (with an EMA) and
    val_error, the one the recipe reports."""
    models = {"raw": parts.model}
    if parts.ema is not None:
        models["ema"] = parts.ema.module
    if cfg.recipe.precise_bn_images:  # each model that has BatchNorm, each over the same images
        for model in models.values():
            if has_batchnorm(model):
                inputs = precise_bn_inputs(parts.batches, parts.augment, cfg, compute, epoch)
                recompute_bn_stats(model, inputs, compute.dist)
    line = {}
    for kind, model in models.items():
        line[f"{kind}_top1"], line[f"{kind}_top5"] = evaluate(
            model, parts.batches, parts.augment, compute
        )
    line["val_error"] = line[cfg.recipe.report.split("_")[0] + "_top1"]
    return line

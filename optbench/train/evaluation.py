"""What an epoch's end measures, for each of a Stepper's K >= 1 members (stepper.py) alike
(`evaluate_members`): first, if the recipe asks, precise BatchNorm statistics of the raw weights
and of the EMA (precise_bn.py: `recompute_members_bn`); then the top-1 and top-5 error of both
on the whole validation split (`member_errors`, `count_errors`, summed over every rank under
DDP). The cost plan times the same two steps (train/measure.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import torch

from optbench.data.augment import BatchAugment
from optbench.data.batches import TrainBatches
from optbench.data.seeding import derive_seed, seed_step
from optbench.train.compute import Compute
from optbench.train.precise_bn import has_batchnorm, precise_bn_batches
from optbench.train.stepper import Stepper
from optbench.trial.config import TrainConfig


@torch.no_grad()
def count_errors(
    logits_of: Callable[[torch.Tensor], torch.Tensor],
    batches: TrainBatches,
    augment: BatchAugment,
    compute: Compute,
) -> torch.Tensor:
    """(wrong@1, wrong@5, images) over the whole validation split (all ranks), of the logits
    `logits_of(inputs)` gives: (batch, classes), or (members, batch, classes), whose counts are
    then (members, 3)."""
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


def precise_bn_inputs(
    batches: TrainBatches, augment: BatchAugment, cfg: TrainConfig, compute: Compute, epoch: int
) -> Iterator[torch.Tensor]:
    """The inputs precise BN averages over after `epoch`: the epoch's first batches, freshly
    augmented per image (seeded by their position), without mixup (precise_bn.py)."""
    n = precise_bn_batches(cfg.recipe.precise_bn_images, cfg.batch_size, len(batches))
    stream = batches.train(epoch, 0, stream="precise-bn")
    for b, (x, _) in enumerate(itertools.islice(stream, n)):
        x = x.to(compute.device, non_blocking=True)  # a loader's batches come on the host
        seed_step(derive_seed(cfg.seed, "precise-bn", epoch, b, compute.dist.rank), compute.device)
        yield compute.layout(augment.inputs(x))


def weight_kinds(stepper: Stepper) -> list[str]:
    """The weights an epoch's end evaluates: the raw ones, and the EMA where there is one."""
    return ["raw"] if stepper.ema is None else ["raw", "ema"]


def recompute_members_bn(
    stepper: Stepper, compute: Compute, epoch: int, limit: int | None = None
) -> int:
    """Precise BN of each kind of weights after `epoch`, where the recipe asks for it and the
    model has BatchNorm; the batches it averages each over (0: none), at most `limit` (the
    cost plan's measurement, train/measure.py)."""
    cfg, parts = stepper.cfgs[0], stepper.parts
    if not (cfg.recipe.precise_bn_images and has_batchnorm(parts.model)):
        return 0
    n = precise_bn_batches(cfg.recipe.precise_bn_images, cfg.batch_size, len(parts.batches))
    for kind in weight_kinds(stepper):  # each over the same images
        inputs = precise_bn_inputs(parts.batches, parts.augment, cfg, compute, epoch)
        stepper.recompute_bn(kind, itertools.islice(inputs, limit))
    return n if limit is None else min(n, limit)


def member_errors(
    stepper: Stepper, compute: Compute, batches: TrainBatches | None = None
) -> dict[str, list[tuple[float, float]]]:
    """Each kind of weights' (top-1, top-5) error per member on the validation split of
    `batches` (default: the trial's own)."""
    parts = stepper.parts
    errors = {}
    for kind in weight_kinds(stepper):
        counts = count_errors(
            stepper.logits_of(kind), batches or parts.batches, parts.augment, compute
        )
        errors[kind] = [error_percent(c) for c in counts]
    return errors


def evaluate_members(stepper: Stepper, compute: Compute, epoch: int) -> list[dict]:
    """Each member's metrics line errors after `epoch`: raw_top1/5, ema_top1/5 (with an EMA)
    and val_error, the one the recipe reports."""
    cfg = stepper.cfgs[0]
    recompute_members_bn(stepper, compute, epoch)
    errors = member_errors(stepper, compute)
    lines = []
    for k in range(len(stepper.cfgs)):
        line = {}
        for kind in errors:
            line[f"{kind}_top1"], line[f"{kind}_top5"] = errors[kind][k]
        line["val_error"] = line[f"{cfg.recipe.reported_weights}_top1"]
        lines.append(line)
    return lines

"""What the members of a training program share, built from the first one's config
(`build_parts`): its batches (data/batches.py), the model (optbench's timm registry), batched
augmentation (data/augment.py) and the loss; and the model as the steps call it (`for_training`: DDP
across processes, torch.compile). Each stepper (stepper.py, population.py) adds its own
optimizer, lr schedules and EMA.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from timm.loss import SoftTargetCrossEntropy
from torch import nn

from optbench.data.augment import BatchAugment, uses_pil_policy
from optbench.data.batches import (
    DeviceBatches,
    FolderBatches,
    PreparedBatches,
    Shard,
    TrainBatches,
    loader_workers,
)
from optbench.data.datasets import (
    DeviceData,
    FolderData,
    load_dataset,
    model_input,
    split_samples,
)
from optbench.data.input_plan import InputPlan, input_plan
from optbench.data.tensor_folder import TensorFolderBatches, device_policy
from optbench.models import create_model
from optbench.spec.catalogue import CATALOGUE
from optbench.train.compute import Compute
from optbench.trial.config import TrainConfig
from optbench.trial.timing import PartClock


@dataclass
class TrialParts:
    """What the members of a program share. `model` is the bare model: a solo trial's weights
    (checkpointed and evaluated; `for_training(model)` is what its steps call), a population's
    structure (population.py stacks the weights)."""

    batches: TrainBatches
    model: nn.Module
    augment: BatchAugment
    criterion: nn.Module


# The dataset (in memory, and its copy on the device; or an image dataset listed) of this
# process's last trial: a warm worker (executors/local.py, a SLURM job of several trials) reads
# it once for the trials of a cell.
# Read only: the batches index it, nothing writes into it.
# `warm`: whether the last call found the dataset already read (the trial's timing records it).
_warm: dict = {"key": None, "data": None, "device": None, "on_device": None, "warm": False}


def warm_dataset(cfg: TrainConfig, compute: Compute) -> DeviceData | FolderData:
    """The trial's dataset: the process's last one where it is the same, else read
    (load_dataset): a dataset held in memory (data/datasets.py's DeviceData), or an image
    dataset's folders or shard index with every split's images listed (FolderData.listed), so
    its batches, this trial's and the later ones', find them listed."""
    images = CATALOGUE[cfg.dataset.name].format == "images"
    # an image dataset's input size is its model's where dataset.img_size sets none (models of
    # one size share it); its listing is kept while its folders are as they were listed
    sized = model_input(cfg.model) if images and cfg.dataset.img_size is None else None
    state = _folders_state(cfg.dataset.root) if images else ()
    key = (cfg.dataset.model_dump_json(), sized, state)
    _warm["warm"] = _warm["key"] == key and state is not None
    if not _warm["warm"]:
        data = load_dataset(cfg.dataset, cfg.model, compute.data_cache)
        if images:
            data = replace(data, listed={s: split_samples(data, s) for s in ("train", "val")})
        _warm.update(key=key, data=data, device=None, on_device=None)
    return _warm["data"]


def _folders_state(root: Path | str | None) -> tuple[int, ...] | None:
    """The modification times of an image dataset's folder and of the folders two levels below
    it (its splits and their class folders; a shards' folder holds its shards): an image or
    shard added, removed or renamed there changes one, so a listing kept by a long-lived
    process (a notebook's runs, the debug executor's driver) is not read stale. One stat per
    folder, not per image; None where there is no folder to read (load_dataset says why)."""

    def folders_in(path) -> list[os.DirEntry]:
        with os.scandir(path) as entries:
            return sorted((e for e in entries if e.is_dir()), key=lambda e: e.name)

    if root is None:
        return None
    try:
        stamps = [os.stat(root).st_mtime_ns]
        for split in folders_in(root):
            stamps.append(split.stat().st_mtime_ns)
            stamps += [c.stat().st_mtime_ns for c in folders_in(split.path)]
    except OSError:
        return None
    return tuple(stamps)


def warm_on_device(data: DeviceData, device: torch.device) -> DeviceData:
    """`data` on `device`: copied there once for the trials of this process (warm_dataset's)."""
    if _warm["data"] is not data:
        return data.to(device)
    if _warm["device"] != device:
        _warm.update(device=device, on_device=data.to(device))
    return _warm["on_device"]


def build_batches(
    cfg: TrainConfig, compute: Compute, pipeline: str = "pil"
) -> tuple[TrainBatches, InputPlan]:
    """The trial's batches through `pipeline` (data/batches.py) and its input plan
    (data/input_plan.py: "auto" resolved; the batches of class folders and the batched
    augmentation read it), computed once here. Input workers: compute.workers, by default the
    trial's share of the cores (loader_workers), for every pipeline that has workers."""
    if cfg.batch_size % compute.dist.world:
        raise ValueError(
            f"batch_size {cfg.batch_size} is not divisible by {compute.dist.world} processes"
        )
    mixing = cfg.recipe.mixup_alpha > 0 or cfg.recipe.cutmix_alpha > 0
    if mixing and (cfg.batch_size // compute.dist.world) % 2:
        raise ValueError(
            "mixup/CutMix pair each image with the batch reversed: the batch per process must be even"
        )
    data = warm_dataset(cfg, compute)
    shard = Shard(compute.dist.rank, compute.dist.world)
    workers = compute.workers if compute.workers is not None else loader_workers()
    common = dict(seed=cfg.seed, shard=shard)
    plan = input_plan(cfg.recipe, data, pipeline, compute.device.type)
    pipeline = plan.pipeline
    batches: TrainBatches
    if isinstance(data, DeviceData) and pipeline == "pil" and uses_pil_policy(cfg.recipe):
        batches = PreparedBatches(
            data, cfg.batch_size, cfg.recipe, device=compute.device, workers=workers, **common
        )
    elif isinstance(data, DeviceData):  # the policy, if any, runs on the device (BatchAugment)
        batches = DeviceBatches(
            warm_on_device(data, compute.device),
            cfg.batch_size,
            repeated_aug=cfg.recipe.repeated_aug,
            pipeline=pipeline,
            **common,
        )
    elif pipeline == "tensor":
        batches = TensorFolderBatches(
            data, cfg.batch_size, cfg.recipe, device=compute.device, readers=workers, plan=plan,
            **common,
        )  # fmt: skip
    else:
        batches = FolderBatches(
            data, cfg.batch_size, cfg.recipe, device=compute.device, workers=workers, plan=plan,
            **common,
        )  # fmt: skip
    if len(batches) == 0:
        raise ValueError(
            f"batch_size {cfg.batch_size} exceeds the {batches.num_train} training images"
        )
    return batches, plan


def new_model(cfg: TrainConfig, num_classes: int, in_chans: int, img_size: int) -> nn.Module:
    """The trial's model for data of this shape, initialized from its seed, on the CPU."""
    torch.manual_seed(cfg.seed)
    # The recipe decides stochastic depth: drop_path 0 means none, whatever the model's own
    # default (DHVT's is 0.1).
    return create_model(
        cfg.model,
        num_classes=num_classes,
        in_chans=in_chans,
        img_size=img_size,
        drop_path_rate=cfg.recipe.drop_path,
        weight_init=cfg.recipe.weight_init,
    )


def syncs_batchnorm(compute: Compute) -> bool:
    """Whether BatchNorm becomes SyncBatchNorm: across DDP processes on CUDA (torch's
    SyncBatchNorm runs on CUDA only; with gloo on the CPU each process normalizes its share)."""
    return compute.dist.enabled and compute.device.type == "cuda"


def build_model(cfg: TrainConfig, batches: TrainBatches, compute: Compute) -> nn.Module:
    model = new_model(cfg, batches.num_classes, batches.in_chans, batches.img_size)
    if syncs_batchnorm(compute):
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = model.to(compute.device)
    if compute.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def build_parts(
    cfg: TrainConfig, compute: Compute, pipeline: str = "pil", clock: PartClock | None = None
) -> TrialParts:
    """The parts; the batches' seconds go to `clock`'s "data" part (trial/timing.py)."""
    recipe = cfg.recipe
    with clock.part("data") if clock is not None else nullcontext():
        batches, plan = build_batches(cfg, compute, pipeline)
    if clock is not None:
        clock.warm_data = _warm["warm"]
    model = build_model(cfg, batches, compute)
    augment = BatchAugment(
        recipe,
        num_classes=batches.num_classes,
        mean=plan.mean,
        std=plan.std,
        device=compute.device,
        in_chans=batches.in_chans,
        img_size=batches.img_size,
        geometric=batches.geometric_on_device,
        pca_lighting=batches.pca_lighting,
        device_policy=(
            device_policy(recipe, batches.in_chans, batches.img_size)
            if plan.policy_per_sample and batches.geometric_on_device
            else None
        ),
    )
    criterion = (
        SoftTargetCrossEntropy()
        if augment.soft_targets
        else nn.CrossEntropyLoss(label_smoothing=recipe.label_smoothing)
    )
    return TrialParts(batches=batches, model=model, augment=augment, criterion=criterion)


# Compiled versions a worker keeps of one model code (a model structure and input size each).
COMPILED_VERSIONS = 64


def for_training(model: nn.Module, compute: Compute) -> nn.Module:
    """The model as the optimizer steps call it: wrapped in DDP across processes, compiled if
    asked. Wrap after restoring a checkpoint into `model` (DDP broadcasts rank 0's weights)."""
    trained = model
    if compute.dist.enabled:
        ids = [compute.device.index] if compute.device.type == "cuda" else None
        trained = nn.parallel.DistributedDataParallel(model, device_ids=ids)
    if compute.compile:
        # static shapes: TorchDynamo keeps compiled code across a worker's trials, and its
        # automatic dynamic would compile a later trial at another input size with symbolic
        # sizes; static, each size's graph is the one a fresh process compiles
        trained = torch.compile(trained, dynamic=False)
        # every ViT shares one forward (models/builder.py): TorchDynamo's default of 8 compiled
        # versions of it would train a worker's ninth (model, input size) uncompiled
        limit = torch._dynamo.config.recompile_limit
        torch._dynamo.config.recompile_limit = max(limit, COMPILED_VERSIONS)
    return trained

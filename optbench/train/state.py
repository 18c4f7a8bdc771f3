"""A trial's position and what it has measured so far (`TrialState`), and how that, with the
model, the EMA and the optimizer, is saved to OUT/checkpoint.pt (`save_state`, rank 0 only) and
restored from it (`restore_state`; `check_resumable` finds what it would refuse before a trial
starts). The file itself is written atomically by checkpoint.py, at
each epoch end and when a stop signal arrives (signals.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch
from torch import nn
from torch.optim import Optimizer

from optbench.data.datasets import dataset_info
from optbench.train.checkpoint import load_checkpoint, restoring, save_checkpoint
from optbench.train.distributed import DistContext
from optbench.train.ema import WeightAverage
from optbench.train.optim import build_optimizer
from optbench.train.parts import new_model
from optbench.trial.config import TrainConfig


@dataclass
class TrialState:
    """Where a trial is and what it has measured so far (saved in checkpoints as "progress")."""

    epoch: int = 0  # completed epochs
    batch: int = 0  # completed batches of the running epoch (non-zero only mid-epoch)
    loss_sum: float = 0.0  # of the running epoch's completed batches
    epoch_s: float = 0.0  # of the running epoch so far
    epoch_wait_s: float = 0.0  # of which getting input (epoch.py: StepClock.waited_s)
    train_s: float = 0.0  # of all completed epochs
    wait_s: float = 0.0  # of which waiting for input
    images: int = 0  # images stepped through in completed epochs (global)
    history: list[dict] = field(default_factory=list)  # one metrics line per completed epoch

    def after_epoch(self, line: dict, seconds: float, images: int, wait_s: float) -> TrialState:
        """The position at the start of the next epoch, once this one measured `line`."""
        return TrialState(
            epoch=self.epoch + 1,
            train_s=self.train_s + seconds,
            wait_s=self.wait_s + wait_s,
            images=self.images + images,
            history=[*self.history, line],
        )


class Trained(Protocol):
    """What a checkpoint holds besides the position (stepper.SoloStepper has these)."""

    model: nn.Module
    optimizer: Optimizer
    ema: WeightAverage | None


def restore_state(
    path: Path, cfg: TrainConfig, trained: Trained, root: Path | None = None
) -> TrialState:
    """Load the checkpoint at `path` into `trained` and return its position; a fresh start when
    there is none. A checkpoint that cannot be read, or of another config, or that does not fit
    `trained`, is refused (checkpoint.CheckpointError) and kept. No link below `root` is
    followed."""
    saved = load_checkpoint(path, cfg.model_dump(mode="json"), root)
    if saved is None:
        return TrialState()
    with restoring(path):
        return _restore(saved, trained.model, trained.optimizer, trained.ema)


def check_resumable(path: Path, cfg: TrainConfig) -> None:
    """What restore_state would refuse in `path`, found before the trial starts (`optbench
    train --resume`, which then exits with 2 and writes nothing, where a refusal inside the
    trial is a failed result): the checkpoint is restored into a model, an optimizer and an
    EMA built for `cfg` on the CPU. CheckpointError naming the file; reads only."""
    saved = load_checkpoint(path, cfg.model_dump(mode="json"))
    if saved is None:
        return
    shape = dataset_info(cfg.dataset, cfg.model)
    model = new_model(cfg, shape.num_classes, shape.in_chans, shape.img_size)
    ema = WeightAverage(model, cfg, steps_per_epoch=1) if cfg.recipe.ema else None
    with restoring(path):
        _restore(saved, model, build_optimizer(model, cfg), ema)


def _restore(
    saved: dict, model: nn.Module, optimizer: Optimizer, ema: WeightAverage | None
) -> TrialState:
    """Load a checkpoint into a trial's parts; what torch raises for a key or tensor that does
    not fit is turned into CheckpointError by the caller (checkpoint.restoring)."""
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    _optimizer_fits(optimizer)
    if ema is not None:
        ema.load_state_dict(saved["ema"])
    return TrialState(**saved["progress"])


def _optimizer_fits(optimizer: Optimizer) -> None:
    """Each loaded state tensor (momentum, running averages) has its parameter's shape: torch's
    load_state_dict checks only how many parameters there are, and a misfit would crash the
    trial's first step as a failure that deletes the checkpoint."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            for name, value in optimizer.state.get(param, {}).items():
                if torch.is_tensor(value) and value.ndim and value.shape != param.shape:
                    raise ValueError(
                        f"optimizer state {name!r} of shape {tuple(value.shape)} for a "
                        f"parameter of shape {tuple(param.shape)}"
                    )


def save_state(
    path: Path,
    cfg: TrainConfig,
    trained: Trained,
    state: TrialState,
    dist: DistContext,
    root: Path | None = None,
) -> None:
    """Write the checkpoint at `state` (rank 0 only: every rank holds the same state)."""
    if dist.is_main:
        save_checkpoint(
            path,
            {
                "config": cfg.model_dump(mode="json"),
                "model": trained.model.state_dict(),
                "ema": trained.ema.state_dict() if trained.ema is not None else None,
                "optimizer": trained.optimizer.state_dict(),
                "progress": state.__dict__,
            },
            root,
        )

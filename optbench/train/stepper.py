"""What the one training loop (loop.py, epoch.py, evaluation.py) trains: a `Stepper`, K >= 1
members that share their batches, augmentation, loss and model structure (parts.py) and step
together. `SoloStepper` is one trial (K = 1; DDP and torch.compile as compute.py asks, its
checkpoint OUT/checkpoint.pt, state.py); population.py's `PopulationStepper` is K members in one
batched program. The loop calls the same methods, in the same order, on both.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from optbench.train.compute import Compute
from optbench.train.ema import WeightAverage
from optbench.train.optim import LrSchedule, build_optimizer
from optbench.train.parts import TrialParts, build_parts, for_training
from optbench.train.precise_bn import recompute_bn_stats
from optbench.train.state import TrialState, restore_state, save_state
from optbench.trial.config import TrainConfig
from optbench.trial.timing import PartClock


class Stepper(Protocol):
    """K >= 1 members (configs equal but for lr and wd) stepping through one program.

    `weights` is the module whose state the EMA averages (`ema.after_step(weights, ...)`);
    `optimizer.zero_grad(set_to_none=True)` clears every member's gradients; `active[k]` is
    False for a member that has ended (diverged, or done before the program started): its
    weights are no longer updated."""

    cfgs: list[TrainConfig]
    parts: TrialParts
    schedules: list[LrSchedule]  # member k's lr schedule
    optimizer: torch.optim.Optimizer
    ema: WeightAverage | None
    weights: nn.Module
    active: list[bool]

    def begin(self, resume: bool) -> list[TrialState]:
        """Each member's position: from the checkpoint if `resume` (fresh where there is none),
        ready to step."""
        ...

    def train(self) -> None:
        """Put the model in training mode."""
        ...

    def losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """(K,): each member's loss on the batch (inputs laid out, compute.layout)."""
        ...

    def update(self, lrs: list[float]) -> None:
        """Every active member's optimizer step, member k at lr `lrs[k]`."""
        ...

    def recompute_bn(self, kind: str, inputs) -> None:
        """Precise BatchNorm statistics of the `kind` ("raw" or "ema") weights over `inputs`."""
        ...

    def logits_of(self, kind: str) -> Callable[[torch.Tensor], torch.Tensor]:
        """The `kind` weights in evaluation mode, as inputs -> (K, batch, classes) logits."""
        ...

    def save(self, states: list[TrialState]) -> None:
        """Checkpoint every member at `states`."""
        ...

    def member_weights(self, k: int) -> nn.Module | dict[str, torch.Tensor]:
        """Member k's weights (a module or its state dict), for its digest."""
        ...


class SoloStepper:
    """One trial (Stepper with K = 1): its own optimizer, lr schedule and EMA over the model;
    the steps call the model as `for_training` wraps it (DDP, torch.compile), which `begin`
    does once the checkpoint is restored: before it, the stepper refuses to train."""

    def __init__(
        self,
        cfg: TrainConfig,
        compute: Compute,
        pipeline: str,
        checkpoint: Path,
        root: Path | None = None,
        clock: PartClock | None = None,
    ):
        self.cfgs, self.compute = [cfg], compute
        self.checkpoint, self.root = checkpoint, root
        self.parts = build_parts(cfg, compute, pipeline, clock)
        self.weights = self.model = self.parts.model
        self.trained: nn.Module | None = None  # the model as the steps call it, from begin()
        self.optimizer = build_optimizer(self.model, cfg, fused=compute.fused)
        steps_per_epoch = len(self.parts.batches)
        self.schedules = [LrSchedule(cfg, steps_per_epoch)]
        self.ema = WeightAverage(self.model, cfg, steps_per_epoch) if cfg.recipe.ema else None
        self.active = [True]

    def begin(self, resume: bool) -> list[TrialState]:
        cfg = self.cfgs[0]
        state = restore_state(self.checkpoint, cfg, self, self.root) if resume else TrialState()
        # wrapped after the restore: DDP broadcasts rank 0's weights (build.for_training)
        self.trained = for_training(self.model, self.compute)
        return [state]

    def _begun(self) -> nn.Module:
        if self.trained is None:  # the bare model would train, unwrapped and unrestored
            raise RuntimeError("SoloStepper: begin() before training")
        return self.trained

    def train(self) -> None:
        self._begun().train()

    def losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.parts.criterion(self._begun()(x), y).reshape(1)

    def update(self, lrs: list[float]) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lrs[0]
        self.optimizer.step()

    def _module(self, kind: str) -> nn.Module:
        return self.model if kind == "raw" else self.ema.module

    def recompute_bn(self, kind: str, inputs) -> None:
        recompute_bn_stats(self._module(kind), inputs, self.compute.dist)

    def logits_of(self, kind: str) -> Callable[[torch.Tensor], torch.Tensor]:
        model = self._module(kind)
        model.eval()
        return lambda x: model(x)[None]

    def save(self, states: list[TrialState]) -> None:
        save_state(self.checkpoint, self.cfgs[0], self, states[0], self.compute.dist, self.root)

    def member_weights(self, k: int) -> nn.Module:
        return self.model

"""The exponential moving average (EMA) of a trial's weights, by `recipe.ema_rule`.

The average covers the model's whole state dict, BatchNorm buffers included (integer buffers
such as `num_batches_tracked` are copied), and is kept by timm's ModelEmaV3; the rules differ in
when it is updated and with what weight:

- `horizon`: every step; a plain copy during warmup, then decay 1 - 1 / (ema_horizon x the
  schedule's steps): the time constant is a fixed fraction of the run whatever the dataset size.
  0.078 is the fraction pycls's rule gives on ImageNet-1k (1e-5 x 1.28M images = 12.8 time
  constants per run).
- `pycls`: pycls's `update_model_ema`: after the optimizer step of every iteration whose index
  within its epoch is a multiple of ema_period (0, 32, 64, ... of each epoch),
  ema <- (1 - alpha) ema + alpha model with alpha = min(1, ema_alpha x batch / epochs x
  ema_period) (batch: the global batch, pycls's TRAIN.BATCH_SIZE); alpha = 1 (a copy) during
  the warmup epochs. Note that alpha x updates per run = ema_alpha x (training images): on a
  dataset much smaller than ImageNet the average barely moves after warmup.
- `decay`: DeiT's ModelEma as DHVT's official code uses it: every step, fixed decay ema_decay,
  from the initial weights (no warmup copy).
"""

from __future__ import annotations

import torch
from timm.utils.model_ema import ModelEmaV3
from torch import nn

from optbench.trial.config import TrainConfig


def pycls_ema_alpha(cfg: TrainConfig) -> float:
    """pycls's EMA weight after warmup: min(1, EMA_ALPHA x batch / MAX_EPOCH x period)."""
    r = cfg.recipe
    return min(1.0, r.ema_alpha * cfg.batch_size / cfg.epochs * r.ema_period)


class WeightAverage:
    """The recipe's EMA of `model`; call `after_step` after every optimizer step."""

    def __init__(self, model: nn.Module, cfg: TrainConfig, steps_per_epoch: int):
        self.cfg, self.rule = cfg, cfg.recipe.ema_rule
        self.warmup_epochs = cfg.recipe.warmup_for(cfg.epochs)
        decay = cfg.recipe.ema_decay if self.rule == "decay" else 0.0
        warmup_steps = 0
        if self.rule == "horizon":
            total = cfg.epochs * steps_per_epoch
            decay = max(0.0, 1.0 - 1.0 / (cfg.recipe.ema_horizon * total))
            warmup_steps = round(self.warmup_epochs * steps_per_epoch)
        self.ema = ModelEmaV3(model, decay=decay, update_after_step=warmup_steps)

    @property
    def module(self) -> nn.Module:
        """The averaged model (what evaluation runs)."""
        return self.ema.module

    def after_step(self, model: nn.Module, epoch: int, batch: int, step: int) -> None:
        """Update after optimizer step `step` (0-based over the run), batch `batch` of `epoch`."""
        if self.rule == "horizon":
            self.ema.update(model, step=step + 1)  # decay 0 (a copy) up to the warmup's end
        elif self.rule == "decay":
            self.ema.update(model)
        elif batch % self.cfg.recipe.ema_period == 0:
            if epoch < self.warmup_epochs:
                self.ema.set(model)
            else:
                with torch.no_grad():
                    self.ema.apply_update_(model, decay=1.0 - pycls_ema_alpha(self.cfg))

    def state_dict(self) -> dict:
        return self.ema.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.ema.load_state_dict(state)

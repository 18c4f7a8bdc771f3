"""A trial's position and what it has measured so far (`_Progress`), and how that, with the
model, the EMA and the optimizer, is saved to OUT/checkpoint.pt (`save_state`, rank 0 only) and
restored from it (`restore_state`). The file itself is written atomically by checkpoint.py, at
each epoch end and when a stop signal arrives (signals.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from optbench.train.build import TrialParts
from optbench.train.checkpoint import load_checkpoint, save_checkpoint
from optbench.train.config import TrainConfig
from optbench.train.distributed import DistContext


@dataclass
class _Progress:
    """Where a trial is and what it has measured so far (saved in checkpoints)."""

    epoch: int = 0  # completed epochs
    batch: int = 0  # completed batches of the running epoch (non-zero only mid-epoch)
    loss_sum: float = 0.0  # of the running epoch's completed batches
    epoch_s: float = 0.0  # of the running epoch so far
    train_s: float = 0.0  # of all completed epochs
    images: int = 0  # images stepped through in completed epochs (global)
    history: list[dict] = field(default_factory=list)  # one metrics line per completed epoch

    def after_epoch(self, line: dict, seconds: float, images: int) -> _Progress:
        """The position at the start of the next epoch, once this one measured `line`."""
        return _Progress(
            epoch=self.epoch + 1,
            train_s=self.train_s + seconds,
            images=self.images + images,
            history=[*self.history, line],
        )


def restore_state(path: Path, cfg: TrainConfig, parts: TrialParts) -> _Progress:
    """Load the checkpoint at `path` into `parts` and return its position; a fresh start when
    there is none. A checkpoint of another config is refused."""
    state = load_checkpoint(path)
    if state is None:
        return _Progress()
    if state["config"] != cfg.model_dump(mode="json"):
        raise ValueError(f"{path} belongs to a different trial config; remove it to restart")
    parts.model.load_state_dict(state["model"])
    parts.optimizer.load_state_dict(state["optimizer"])
    if parts.ema is not None:
        parts.ema.load_state_dict(state["ema"])
    return _Progress(**state["progress"])


def save_state(
    path: Path, cfg: TrainConfig, parts: TrialParts, progress: _Progress, dist: DistContext
) -> None:
    """Write the checkpoint at `progress` (rank 0 only: every rank holds the same state)."""
    if dist.is_main:
        save_checkpoint(
            path,
            {
                "config": cfg.model_dump(mode="json"),
                "model": parts.model.state_dict(),
                "ema": parts.ema.state_dict() if parts.ema is not None else None,
                "optimizer": parts.optimizer.state_dict(),
                "progress": progress.__dict__,
                "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state()},
            },
        )

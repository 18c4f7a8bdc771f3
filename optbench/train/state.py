"""A trial's position and what it has measured so far (`TrialState`), and how that, with the
model, the EMA and the optimizer, is saved to OUT/checkpoint.pt (`save_state`, rank 0 only) and
restored from it (`restore_state`). The file itself is written atomically by checkpoint.py, at
each epoch end and when a stop signal arrives (signals.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from optbench.train.build import TrialParts
from optbench.train.checkpoint import load_checkpoint, restoring, save_checkpoint
from optbench.train.config import TrainConfig
from optbench.train.distributed import DistContext


@dataclass
class TrialState:
    """Where a trial is and what it has measured so far (saved in checkpoints as "progress")."""

    epoch: int = 0  # completed epochs
    batch: int = 0  # completed batches of the running epoch (non-zero only mid-epoch)
    loss_sum: float = 0.0  # of the running epoch's completed batches
    epoch_s: float = 0.0  # of the running epoch so far
    epoch_wait_s: float = 0.0  # of which waiting for input (epoch.InputClock)
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


def restore_state(
    path: Path, cfg: TrainConfig, parts: TrialParts, root: Path | None = None
) -> TrialState:
    """Load the checkpoint at `path` into `parts` and return its position; a fresh start when
    there is none. A checkpoint that cannot be read, or of another config, or that does not fit
    `parts`, is refused (checkpoint.CheckpointError) and kept. No link below `root` is followed."""
    saved = load_checkpoint(path, cfg.model_dump(mode="json"), root)
    if saved is None:
        return TrialState()
    with restoring(path):
        parts.model.load_state_dict(saved["model"])
        parts.optimizer.load_state_dict(saved["optimizer"])
        if parts.ema is not None:
            parts.ema.load_state_dict(saved["ema"])
        return TrialState(**saved["progress"])


def save_state(
    path: Path,
    cfg: TrainConfig,
    parts: TrialParts,
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
                "model": parts.model.state_dict(),
                "ema": parts.ema.state_dict() if parts.ema is not None else None,
                "optimizer": parts.optimizer.state_dict(),
                "progress": state.__dict__,
            },
            root,
        )

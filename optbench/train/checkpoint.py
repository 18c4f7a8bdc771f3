"""A trial's checkpoint: everything needed to continue it exactly, written atomically.

One file, OUT/checkpoint.pt, replaced (write to a temporary file, fsync, rename) at each epoch
end and when a stop signal arrives. It holds the model, the EMA model, the optimizer, the
schedule, the position (completed epochs and, mid-epoch, completed batches of the running
epoch, with the running loss sum and timing) and the per-epoch history of errors, plus the
global RNG states for completeness. Data order and augmentation need no saved generator: they
are derived from (seed, epoch, step) (seeding.py).
"""

from __future__ import annotations

from pathlib import Path

import torch

from optbench.train.results import atomic_open

CHECKPOINT_FILE = "checkpoint.pt"
FORMAT = 1


def save_checkpoint(path: Path, state: dict) -> None:
    """torch.save `state` to `path` atomically: a reader sees the old file or the new one."""
    with atomic_open(path, "wb") as f:
        torch.save({"format": FORMAT, **state}, f)


def load_checkpoint(path: Path) -> dict | None:
    """The checkpoint at `path`, or None if there is none."""
    if not path.is_file():
        return None
    state = torch.load(path, map_location="cpu", weights_only=False)
    if state.get("format") != FORMAT:
        raise ValueError(f"{path}: checkpoint format {state.get('format')}, expected {FORMAT}")
    return state

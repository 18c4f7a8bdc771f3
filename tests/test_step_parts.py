"""bench/step_parts.py's reading of torch's sync debug mode (used on CUDA only, so tested here on
the warnings it reads): each sync counted at the line that made it, the busiest lines first."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import step_parts  # noqa: E402

SYNC = "called a synchronizing CUDA operation"  # c10/cuda/CUDAFunctions.cpp's TORCH_WARN


def caught(message: str, filename: str, lineno: int) -> warnings.WarningMessage:
    return warnings.WarningMessage(message, UserWarning, filename, lineno)


def test_syncs_are_counted_at_their_lines_busiest_first():
    steps, epochs = 30, 3
    records = (
        [caught(SYNC, "/x/optbench/data/augment.py", 127) for _ in range(steps)]
        + [caught(SYNC, "/x/optbench/train/epoch.py", 197) for _ in range(epochs)]
        + [caught("TypedStorage is deprecated", "/x/torch/storage.py", 1)]  # not a sync
    )
    assert step_parts.sync_sites(records) == {"augment.py:127": steps, "epoch.py:197": epochs}

"""Where every random draw of a trial comes from: a seed derived from the trial's seed and a
position, never a generator carried from one step to the next. The data order comes from
(seed, epoch) and per-image transforms of class-folder datasets from (seed, epoch, image)
(batches.py); before every optimizer step the global generators are reseeded from (seed, step,
rank) (`seed_step`), which fixes that step's augmentation, mixup and stochastic depth. A trial is
therefore a pure function of its config on the CPU (same config -> same `digest`), and resuming
from any step replays the rest exactly.
"""

from __future__ import annotations

import hashlib
import random

import numpy as np
import torch


def derive_seed(*parts: object) -> int:
    """A 63-bit seed determined by `parts` (e.g. (seed, "order", epoch)); stable across runs."""
    blob = repr(parts).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "little") >> 1


def seed_step(seed: int, device: torch.device) -> None:
    """Reseed the global generators that augmentation, mixup and drop path draw from: the CPU's
    and `device`'s torch generators, numpy's and Python's. (Only these: torch.manual_seed would
    also visit every other backend, ~100 us a step.)"""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.manual_seed(seed)  # the current device's generator
    np.random.seed(seed % 2**32)
    random.seed(seed)

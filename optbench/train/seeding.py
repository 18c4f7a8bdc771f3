"""Where every random draw of a trial comes from: a seed derived from the trial's seed and a
position (epoch, step, image, rank), never a generator carried from one step to the next. So a
trial is a pure function of its config on the CPU, and resuming from any position replays the
rest exactly.
"""

from __future__ import annotations

import hashlib


def derive_seed(*parts: object) -> int:
    """A 63-bit seed determined by `parts` (e.g. (seed, "order", epoch)); stable across runs."""
    blob = repr(parts).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "little") >> 1

"""The worker half of a study's locks (run/locks.py tells both halves): `.workers.lock` in the
study folder, which each local worker holds shared for its whole life (`hold_worker_lock`) so
that a driver taking over the study waits for the workers of a dead one. Here, beside safefs,
so that a worker takes it without importing the driver's package.
"""

from __future__ import annotations

import fcntl
from pathlib import Path

from optbench import safefs

WORKERS_LOCK = ".workers.lock"


def open_lock(path: Path) -> int:
    """A lock file in the study folder, opened through safefs (a link or a FIFO is refused)."""
    return safefs.open_rw(path, path.parent)


def hold_worker_lock(study_dir: Path) -> int:
    """Take `.workers.lock` shared for the rest of this worker's life (returns its fd)."""
    fd = open_lock(study_dir / WORKERS_LOCK)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd

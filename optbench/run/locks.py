"""Who may write into a study folder: one driver, and only the workers it started.

Two lock files in the study folder (flock, released by the kernel when a process dies):
- `.lock`: the driver (`optbench run`) holds it exclusively for its whole run; a second driver
  fails at once. It holds the driver's pid and a token naming this run (`driver_lock` yields
  it); `running_driver` reads it only while a driver holds the lock (`optbench status`).
- `.workers.lock`: each local worker holds it shared for its whole life (optbench/worker_lock.py,
  which the workers import without this package). A driver that takes over a study first waits
  until nobody holds it: workers of a driver that was killed (they stop within seconds of its
  death, see executors/local.py) may still be writing a checkpoint, and the same trial must
  never train twice in one folder.

Both are opened through safefs: a symbolic link, a FIFO, a device or a folder in their place is
refused in one line (exit 2), never followed or waited on (an open of a FIFO blocks until its
other end is opened).
"""

from __future__ import annotations

import fcntl
import os
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from optbench import safefs
from optbench.errors import UsageError
from optbench.worker_lock import WORKERS_LOCK
from optbench.worker_lock import open_lock as _open_lock

DRIVER_LOCK = ".lock"
# How long a new driver waits for the workers of a dead one: they stop within one optimizer step
# and a checkpoint write of their driver's death.
WORKERS_EXIT_S = 120.0
# `optbench status` takes the driver lock shared for an instant to see whether a driver holds
# it: a driver starting in that instant tries again for this long before it gives up.
TAKE_S = 1.0
MAX_LOCK_BYTES = 200


@contextmanager
def driver_lock(study_dir: Path, on_wait: Callable[[str], None] = print) -> Iterator[str]:
    """Hold the study for this driver: fail if another driver holds it, wait (up to
    WORKERS_EXIT_S) for workers of an earlier driver to exit. Yields this run's token."""
    study_dir.mkdir(parents=True, exist_ok=True)
    fd = _open_lock(study_dir / DRIVER_LOCK)
    try:
        deadline = time.monotonic() + TAKE_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise UsageError(
                        f"{study_dir}: another optbench run is driving this study"
                    ) from None
                time.sleep(0.05)
        token = secrets.token_hex(8)
        os.ftruncate(fd, 0)
        try:
            os.write(fd, f"{os.getpid()} {token}".encode())
        except OSError as err:  # a full disk: os.write's error names no file (docs/faults.md)
            raise OSError(err.errno, err.strerror, str(study_dir / DRIVER_LOCK)) from None
        _wait_for_workers(study_dir, on_wait)
        yield token
    finally:
        os.close(fd)


def running_driver(study_dir: Path) -> str | None:
    """The token of the driver run that holds the study's lock now, None if no driver runs.
    Reads only (the lock is taken shared for an instant, never created; a link is refused)."""
    try:
        f = safefs.open_file(study_dir / DRIVER_LOCK, study_dir)
    except (OSError, UsageError):
        return None  # unreadable, a link or not a regular file: none of ours
    if f is None:
        return None  # no driver ever ran here
    with f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # a driver holds it: read its token
            words = f.read(MAX_LOCK_BYTES).decode(errors="replace").split()
            return words[1] if len(words) == 2 else None
        return None  # nobody held it (released as the file closes)


def _wait_for_workers(study_dir: Path, on_wait: Callable[[str], None]) -> None:
    path = study_dir / WORKERS_LOCK
    if safefs.stat(path, study_dir) is None:
        return
    fd = _open_lock(path)
    try:
        deadline = time.monotonic() + WORKERS_EXIT_S
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return  # nobody else writes here; released at once for this run's workers
            except BlockingIOError:
                pass
            if time.monotonic() > deadline:
                raise UsageError(
                    f"{path}: worker processes of an earlier run still write into this study "
                    f"after {WORKERS_EXIT_S:.0f} s; end them and run again"
                )
            if not told:
                on_wait("waiting for the workers of an earlier run to exit ...")
                told = True
            time.sleep(0.2)
    finally:
        os.close(fd)  # releases the exclusive lock taken above

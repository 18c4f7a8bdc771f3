"""A trial's checkpoint: everything needed to continue it exactly, written atomically, read
without running anything it contains.

One file, OUT/checkpoint.pt, replaced (write to a temporary file, fsync, rename) at each epoch
end and when a stop signal arrives. It holds the model, the EMA model, the optimizer, the
position (completed epochs and, mid-epoch, completed batches of the running
epoch, with the running loss sum and timing) and the per-epoch history of errors: tensors and
plain dicts, lists, numbers and strings only, so it loads with `torch.load(weights_only=True)`,
which unpickles nothing else (a crafted file cannot run code). No generator state is saved:
every random draw, and the learning rate, is derived from (seed, position) (data/seeding.py,
optim.py). What goes into it, and back into a trial, is state.py's.

A checkpoint that cannot be read, is not one of ours, or belongs to another configuration is
refused with `CheckpointError` (one line: the path and why) and left where it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from optbench import safefs
from optbench.errors import UsageError
from optbench.trial.results import config_difference

CHECKPOINT_FILE = "checkpoint.pt"
FORMAT = 2  # 2: no pickled RNG states (loadable with weights_only=True)
KEYS = ("config", "model", "ema", "optimizer", "progress")


class CheckpointError(UsageError):
    """A checkpoint that cannot be resumed from; the file is kept."""


def save_checkpoint(path: Path, state: dict, root: Path | None = None) -> None:
    """torch.save `state` to `path` atomically: a reader sees the old file or the new one. A
    failed write (disk full) raises the OSError behind it, naming `path`. No link below `root`
    (default: the checkpoint's folder) is followed."""
    with safefs.atomic_open(path, root or path.parent, "wb") as f:
        try:
            torch.save({"format": FORMAT, **state}, f)
        except RuntimeError as err:  # torch reports a failed write as "unexpected pos"
            if isinstance(err.__context__, OSError):
                raise err.__context__ from None
            raise


def _why(err: BaseException) -> str:
    first = (str(err).strip().splitlines() or [""])[0]
    return f"{type(err).__name__}: {first[:120]}" if first else type(err).__name__


def load_checkpoint(
    path: Path, config: dict | None = None, root: Path | None = None
) -> dict | None:
    """The checkpoint at `path`, or None if there is none. With `config` (the trial's config as
    JSON), one of another configuration is refused naming the difference. No link below `root`
    (default: the checkpoint's folder) is followed."""
    refuse = f"{path}: not a checkpoint optbench can resume from"
    keep = "it is left in place; remove it to restart the trial"
    try:
        f = safefs.open_file(path, root or path.parent)
    except safefs.UnsafePath:
        raise CheckpointError(f"{refuse} (not a regular file); {keep}") from None
    except OSError as err:
        raise CheckpointError(f"{refuse} ({err.strerror}); {keep}") from None
    if f is None:
        return None
    try:
        with f:
            state = torch.load(f, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file is refused the same way
        raise CheckpointError(f"{refuse} ({_why(err)}); {keep}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"{refuse} (format {found}, expected {FORMAT}); {keep}")
    missing = [k for k in KEYS if k not in state]
    if missing or not isinstance(state["config"], dict):
        raise CheckpointError(f"{refuse} (lacks {missing or ['config']}); {keep}")
    if config is not None and state["config"] != config:
        raise CheckpointError(
            f"{path}: the checkpoint of another configuration "
            f"({config_difference(config, state['config'])}); {keep}"
        )
    return state


@contextmanager
def restoring(path: Path) -> Iterator[None]:
    """Wrap the restore of a loaded checkpoint: a tensor or key that does not fit the model,
    optimizer or schedule is a CheckpointError naming `path`."""
    try:
        yield
    except (RuntimeError, KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
        raise CheckpointError(
            f"{path}: does not fit this trial ({_why(err)}); it is left in place; "
            "remove it to restart the trial"
        ) from None

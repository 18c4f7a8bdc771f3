"""Per-trial TensorBoard event files, for watching curves while a study trains: each epoch's
metrics line (metrics.jsonl, the source of truth) also goes to an event file in the trial's
folder, one scalar per numeric key, at step = epoch. `tensorboard --logdir results/<study>`
then shows every trial as a run named by its folder.

Optional: written only when the `tensorboard` package is installed (`pip install
'optbench[tensorboard]'`), through torch's own writer (torch.utils.tensorboard); without it
nothing is written and nothing fails. Offline: event files are plain files, no server.
The writer opens its files by path, so a trial folder that is a link is refused first
(safefs.check), as every other write in a study folder refuses one.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from optbench import safefs

EVENT_FILES = "events.out.tfevents.*"


def available() -> bool:
    """Whether event files can be written here (the tensorboard package is installed)."""
    return importlib.util.find_spec("tensorboard") is not None


class EpochEvents:
    """Writes epoch metrics lines to an event file in `out_dir` (nothing without tensorboard);
    UnsafePath if `out_dir` is a link, or passes through one, below `root` (default `out_dir`)."""

    def __init__(self, out_dir: Path, root: Path | None = None):
        self._writer, self._files = None, Path(out_dir) / EVENT_FILES
        if available():
            safefs.check(out_dir, root or out_dir)
            from torch.utils.tensorboard import SummaryWriter

            _quiet_writer_threads()
            with self._naming():
                self._writer = SummaryWriter(log_dir=str(out_dir))

    def write(self, line: dict) -> None:
        """One epoch's numeric values (not `epoch` itself), flushed so they show at once."""
        if self._writer is None:
            return
        with self._naming():
            for key, value in line.items():
                if key != "epoch" and type(value) in (int, float):
                    self._writer.add_scalar(key, value, global_step=line["epoch"])
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            with self._naming():
                writer.close()

    @contextmanager
    def _naming(self) -> Iterator[None]:
        """A failed write (a full disk) names the event files: tensorboard's writer raises its
        thread's OSError, which names no file."""
        try:
            yield
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(self._files)) from None


def _quiet_writer_threads() -> None:
    """Keep tensorboard's writer thread from printing the traceback of a failed write (a full
    disk): the thread also keeps the error for the trial's next flush, which raises it, naming
    the files (EpochEvents._naming), so the user gets one line, not that line and 20 more.
    Other threads' errors go to the hook that was there before; installed once."""
    previous = threading.excepthook
    if getattr(previous, "quiets_tensorboard", False):
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        from_writer = type(args.thread).__module__.startswith("tensorboard.")
        if not (from_writer and issubclass(args.exc_type, OSError)):
            previous(args)

    hook.quiets_tensorboard = True
    threading.excepthook = hook

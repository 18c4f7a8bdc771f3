"""Where a trial's epoch metrics lines go besides metrics.jsonl (the source of truth,
trial/results.py): `epoch_sinks` builds one trial's sinks, the single place a solo trial and every
population member get theirs from (driver.Members). Each sink has `write(line)` (an epoch's metrics
line, on the main process only) and `close()`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from optbench.trackers.tensorboard import EpochEvents
from optbench.trial.config import TrainConfig


class _Callback:
    """A caller's `on_epoch(line)` (the CLI's progress line) as a sink."""

    def __init__(self, on_epoch: Callable[[dict], None]):
        self.write = on_epoch

    def close(self) -> None:
        pass


class EpochSinks:
    """One trial's sinks, written in order."""

    def __init__(self, sinks: list):
        self.sinks = sinks

    def write(self, line: dict) -> None:
        for sink in self.sinks:
            sink.write(line)

    def close(self) -> None:
        with ExitStack() as stack:  # every sink is closed, even after one fails
            for sink in reversed(self.sinks):
                stack.callback(sink.close)


def epoch_sinks(
    cfg: TrainConfig,
    out_dir: Path,
    root: Path | None = None,
    on_epoch: Callable[[dict], None] | None = None,
) -> EpochSinks:
    """The sinks of the trial `cfg` in `out_dir` (no link below `root` followed): TensorBoard
    events where tensorboard is installed (tensorboard.py), then `on_epoch` if given. A new
    sink is one more entry here (`cfg` is for those that record the trial's settings)."""
    sinks: list = [EpochEvents(out_dir, root)]
    if on_epoch is not None:
        sinks.append(_Callback(on_epoch))
    return EpochSinks(sinks)

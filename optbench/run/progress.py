"""What `optbench run` shows while it runs, and what `optbench status` shows of trials in progress.

`StudyProgress` counts trial states per cell (a trial is "running" once its executor says it
started: a worker took it, or SLURM runs its job), keeps the best error per cell, and reads the
epochs of running trials from their metrics.jsonl, a line per finished epoch. From those timings
it estimates the time left (`eta_s`) and tells a stalled trial (`stalled_s`, defined once here):
a running trial whose metrics file has not grown for STALL_EPOCHS times its median epoch time,
and at least STALL_FLOOR_S. Two views print it: `LiveView`, a table redrawn in place
(a terminal), and `EventLog`, one line per event and a summary line every few minutes (a log
file, sbatch's output, a pipe).
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.table import Table

from optbench import safefs
from optbench.run.console import TextTable
from optbench.trial.config import mixed_pipelines_note
from optbench.trial.results import METRICS_FILE, read_metrics

if TYPE_CHECKING:
    from optbench.store.database import StoredTrial

STATES = ("finished", "diverged", "failed", "running", "pending")
SUMMARY_EVERY_S = 180.0  # a log's summary line, every this many seconds
READ_EVERY_S = 2.0  # running trials' metrics files are read at most this often
MAX_TRIAL_ROWS = 12  # running trials listed in the live view
# A trial is stalled after this many times its median epoch (training) time without a new
# metrics line: a line's interval also holds the evaluation and the checkpoint write (a few
# percent to a third of the training time) and a shared machine can halve the pace, so a
# healthy trial stays within 2.6x; 4x leaves margin and still flags a frozen worker within a
# few epochs' time.
STALL_EPOCHS = 4.0
# ... and never before this many seconds: a shared file system shows a file's modification
# time up to 60 s late (NFS's attribute cache), and a trial of one-second epochs that waits
# for a slow disk or a busy core a few seconds is not stalled.
STALL_FLOOR_S = 120.0


@dataclass(frozen=True)
class TrialEpochs:
    """A trial's finished epochs, read from its metrics.jsonl (a line per epoch)."""

    done: int = 0
    epoch_s: tuple[float, ...] = ()
    last_error: float | None = None  # the validation error of the last epoch (percent)
    updated: float | None = None  # the file's modification time (seconds since the epoch)
    images_per_s: float | None = None  # of the last epoch
    input_wait: float | None = None  # of the last epoch: its fraction waiting for input


def read_trial_epochs(out_dir: Path, root: Path | None = None) -> TrialEpochs:
    """The epochs in `out_dir`/metrics.jsonl so far (train.results.read_metrics, partial: a
    line a worker is still writing is left out, and a file that is not metrics, a link below
    `root` (default `out_dir`) or a FIFO reads as none)."""
    path = Path(out_dir) / METRICS_FILE
    root = Path(root or out_dir)
    try:
        found = safefs.stat(path, root)
    except (safefs.UnsafePath, OSError):
        return TrialEpochs()
    if found is None:
        return TrialEpochs()
    updated = found.st_mtime
    lines = read_metrics(Path(out_dir), root, partial=True)
    seconds = tuple(
        float(s) for line in lines if isinstance(s := line.get("epoch_s"), int | float) and s
    )
    errors = [line.get("val_error") for line in lines]
    last = lines[-1] if lines else {}
    return TrialEpochs(
        len(lines),
        seconds,
        errors[-1] if errors else None,
        updated,
        last.get("images_per_s"),
        last.get("input_wait"),
    )


def idle_s(epochs: TrialEpochs, since: float | None, now: float) -> float | None:
    """Seconds since a running trial last made progress: its metrics file's last write (a line
    per epoch; a worker writes it when the trial starts, too) or its start (`since`, time.time),
    whichever is later; None where neither is known."""
    known = [t for t in (epochs.updated, since) if t is not None]
    return max(0.0, now - max(known)) if known else None


def stalled_s(epochs: TrialEpochs, since: float | None, now: float) -> float | None:
    """How long a running trial has been stalled: its idle time (`idle_s`) once that passes
    STALL_EPOCHS x its median epoch time and STALL_FLOOR_S, else None (also before its first
    epoch: there is no pace to compare with yet; executor.stall_timeout_s still applies)."""
    idle = idle_s(epochs, since, now)
    if idle is None or not epochs.epoch_s:
        return None
    limit = max(STALL_EPOCHS * statistics.median(epochs.epoch_s), STALL_FLOOR_S)
    return idle if idle >= limit else None


def stalled_words(seconds: float) -> str:
    """'stalled 4 min' (or '45 s' under a minute)."""
    return f"stalled {seconds // 60:.0f} min" if seconds >= 60 else f"stalled {seconds:.0f} s"


def time_left_s(epochs: TrialEpochs, total: int, since: float | None, now: float) -> float | None:
    """A running trial's time left at its own pace (wall seconds per epoch since its start:
    start-up, training and evaluation), None before its first epoch."""
    if not epochs.done or since is None or epochs.updated is None:
        return None
    per_epoch = max(epochs.updated - since, 0.0) / epochs.done
    return max(0.0, (total - epochs.done) * per_epoch - (now - epochs.updated))


def clock(seconds: float) -> str:
    """1:05, 12:30, 2:03:04."""
    s = max(0, round(seconds))
    hours, rest = divmod(s, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def cell_label(item: StoredTrial) -> str:
    c = item.trial.cell
    return f"{c.model}/{c.optimizer}/{c.epochs}ep"


def trial_label(item: StoredTrial) -> str:
    return f"{cell_label(item)} sample {item.trial.sample} seed {item.trial.seed}"


@dataclass
class StudyProgress:
    """How far a study is: trial states per cell, best errors, epochs of running trials, and an
    estimate of the time left. `flops_of(model)` (forward multiply-adds per image, or None) lets
    the estimate cover cells whose trials have not timed an epoch yet."""

    trials: list[StoredTrial]
    running: set[str] = field(default_factory=set)  # keys of trials that started and not ended
    started: float = field(default_factory=time.monotonic)
    ran: int = 0  # trials that ended in this invocation
    slots: int = 0  # the most trials seen running at once
    epochs: dict[str, TrialEpochs] = field(default_factory=dict)  # running trials' epochs
    started_at: dict[str, float] = field(default_factory=dict)  # running trials' start (time.time)
    flops_of: Callable[[str], float | None] | None = None
    _read_at: float = field(default=float("-inf"), init=False, repr=False)

    # --- events -----------------------------------------------------------------------------------

    def start(self, key: str) -> None:
        self.running.add(key)
        self.started_at[key] = time.time()  # wall clock: compared with metrics files' mtimes
        self.slots = max(self.slots, len(self.running))

    def end(self, key: str) -> None:
        self.running.discard(key)
        self.epochs.pop(key, None)
        self.started_at.pop(key, None)
        self.ran += 1

    def queued(self, key: str) -> None:
        """The trial's job went back to the queue (SLURM requeued it): not running for now."""
        self.running.discard(key)
        self.epochs.pop(key, None)
        self.started_at.pop(key, None)

    def read_epochs(self, force: bool = False) -> None:
        """Read the running trials' metrics files (at most every READ_EVERY_S seconds)."""
        now = time.monotonic()
        if not force and now - self._read_at < READ_EVERY_S:
            return
        self._read_at = now
        by_key = {item.trial.key: item for item in self.trials}
        self.epochs = {
            key: read_trial_epochs(by_key[key].trial.out_dir, by_key[key].trial.job.root)
            for key in self.running
            if key in by_key
        }

    # --- what is known --------------------------------------------------------------------------

    def state(self, item: StoredTrial) -> str:
        if item.status == "pending" and item.trial.key in self.running:
            return "running"
        return item.status

    def counts(self) -> dict[tuple, Counter]:
        out: dict[tuple, Counter] = {}
        for item in self.trials:
            c = item.trial.cell
            out.setdefault((c.model, c.optimizer, c.epochs), Counter())[self.state(item)] += 1
        return out

    def best_errors(self) -> dict[tuple, float]:
        """The lowest final error of each cell's finished trials (cells with one)."""
        best: dict[tuple, float] = {}
        for item in self.trials:
            error = _attr(item, "final_error") if item.status == "finished" else None
            c = item.trial.cell
            key = (c.model, c.optimizer, c.epochs)
            if error is not None and error < best.get(key, math.inf):
                best[key] = error
        return best

    def epoch_seconds(self) -> dict[tuple, float]:
        """Median wall seconds per epoch of each cell's trials: a trial's whole time (its start,
        training and evaluation) over its epochs. A running trial's is the time from its start
        to its metrics file's last line, an ended one's its recorded wall time."""
        timings: dict[tuple, list[float]] = {}
        for item in self.trials:
            key, c = item.trial.key, item.trial.cell
            epochs = self.epochs.get(key)
            if epochs is not None and epochs.done and key in self.started_at:
                seconds = (epochs.updated - self.started_at[key]) / epochs.done
            elif item.is_result and _attr(item, "wall_s") and _attr(item, "epochs_run"):
                seconds = _attr(item, "wall_s") / _attr(item, "epochs_run")
            else:
                continue
            timings.setdefault((c.model, c.optimizer, c.epochs), []).append(max(seconds, 0.0))
        return {cell: statistics.median(s) for cell, s in timings.items() if s}

    def idle_s(self, key: str, now: float) -> float | None:
        """Seconds since the running trial `key` last made progress (module `idle_s`)."""
        return idle_s(self.epochs.get(key, TrialEpochs()), self.started_at.get(key), now)

    def stalled(self, now: float) -> dict[str, float]:
        """The running trials that are stalled (module `stalled_s`): key -> seconds."""
        found = {
            key: stalled_s(self.epochs.get(key, TrialEpochs()), self.started_at.get(key), now)
            for key in self.running
        }
        return {key: s for key, s in found.items() if s is not None}

    def eta_s(self) -> float | None:
        """Seconds until every pending trial has ended, or None before the first timed epoch.

        Each pending trial needs its remaining epochs at its cell's wall seconds per epoch; a cell
        not timed yet is estimated from the timed ones by forward multiply-adds per image (all
        cells of a study train on the same images). The work is spread over as many slots as
        trials were seen running at once, and no estimate is shorter than the longest trial.
        """
        timed = self.epoch_seconds()
        if not timed:
            return None
        per_model = self._seconds_per_flop(timed)
        left = []
        for item in self.trials:
            if item.status != "pending":
                continue
            c = item.trial.cell
            seconds = timed.get((c.model, c.optimizer, c.epochs))
            if seconds is None:
                flops = self._flops(c.model) if per_model else None
                seconds = flops * per_model if flops else statistics.median(timed.values())
            done = self.epochs.get(item.trial.key, TrialEpochs()).done
            left.append(max(c.epochs - done, 0) * seconds)
        if not left:
            return 0.0
        return max(sum(left) / max(self.slots, 1), max(left))

    def _seconds_per_flop(self, timed: dict[tuple, float]) -> float | None:
        """Seconds per epoch per forward multiply-add, over the timed cells (None without counts)."""
        pairs = [(s, self._flops(cell[0])) for cell, s in timed.items()]
        pairs = [(s, f) for s, f in pairs if f]
        return sum(s for s, _ in pairs) / sum(f for _, f in pairs) if pairs else None

    def _flops(self, model: str) -> float | None:
        if self.flops_of is None:
            return None
        try:
            return self.flops_of(model)
        except Exception:  # noqa: BLE001 - an estimate: a model that cannot be counted has none
            return None

    # --- views ------------------------------------------------------------------------------------

    def table(self, title: str) -> Table:
        """Counts and best error per cell; the caption says elapsed time and time left."""
        table = TextTable(title=title)
        for col in ("model", "optimizer", "epochs", *STATES, "best error"):
            table.add_column(col, justify="left" if col in ("model", "optimizer") else "right")
        best = self.best_errors()
        for key, c in self.counts().items():
            error = f"{best[key]:.2f}%" if key in best else "–"
            table.add_row(key[0], key[1], str(key[2]), *(str(c[s]) for s in STATES), error)
        return table

    def caption(self) -> str:
        """Elapsed time and time left; no estimate while a running trial is stalled (its
        trial would not end in the time left)."""
        elapsed = f"elapsed {clock(time.monotonic() - self.started)}"
        stalled = self.stalled(time.time())
        if stalled:
            longest = stalled_words(max(stalled.values())).removeprefix("stalled ")
            return (
                f"{elapsed}, time left unknown: {len(stalled)} trial(s) stalled (no progress "
                f"for up to {longest}; docs/faults.md)"
            )
        eta = self.eta_s()
        left = "after the first epoch" if eta is None else clock(eta)
        return f"{elapsed}, time left {left}"

    def running_table(self) -> Table | None:
        """The running trials: epochs done, last validation error, seconds per epoch, and the
        time left at the trial's pace or how long it has been stalled."""
        running = [item for item in self.trials if item.trial.key in self.running]
        if not running:
            return None
        table = TextTable(title="running")
        for col in ("trial", "epoch", "val error", "s/epoch", "left"):
            table.add_column(col, justify="left" if col == "trial" else "right")
        now = time.time()
        for item in running[:MAX_TRIAL_ROWS]:
            key, total = item.trial.key, item.trial.cell.epochs
            epochs = self.epochs.get(key, TrialEpochs())
            left = left_cell(epochs, total, self.started_at.get(key), now)
            table.add_row(trial_label(item), *epoch_cells(epochs, total), left)
        if len(running) > MAX_TRIAL_ROWS:
            table.caption = f"and {len(running) - MAX_TRIAL_ROWS} more"
        return table

    def summary(self) -> str:
        """One line: trials done by state, running, pending, elapsed and time left."""
        c = Counter(self.state(item) for item in self.trials)
        done = c["finished"] + c["diverged"]
        return (
            f"{done} of {len(self.trials)} trials done ({c['finished']} finished, "
            f"{c['diverged']} diverged), {c['failed']} failed, {c['running']} running, "
            f"{c['pending']} pending; {self.caption()}"
        )


def epoch_cells(epochs: TrialEpochs, total: int) -> tuple[str, str, str]:
    """(epoch k/N, last validation error, median seconds per epoch) of one trial."""
    error = "–" if epochs.last_error is None else f"{epochs.last_error:.2f}%"
    seconds = f"{statistics.median(epochs.epoch_s):.1f}" if epochs.epoch_s else "–"
    return f"{epochs.done}/{total}", error, seconds


def left_cell(epochs: TrialEpochs, total: int, since: float | None, now: float) -> str:
    """A running trial's 'left' cell: 'stalled N min' (stalled_s), else its time left."""
    stalled = stalled_s(epochs, since, now)
    if stalled is not None:
        return stalled_words(stalled)
    left = time_left_s(epochs, total, since, now)
    return "–" if left is None else clock(left)


INPUT_BOUND = 0.2  # a trial waiting more than this fraction of its training time is input-bound


def input_notes(stored: list[StoredTrial]) -> list[str]:
    """One line per cell whose results came through more than one input pipeline, and one line
    if recorded trials waited for input more than INPUT_BOUND of their training time."""
    notes, pipelines = [], {}
    for item in stored:
        if item.is_result and (p := _attr(item, "pipeline")):
            pipelines.setdefault(item.trial.cell_id, Counter())[p] += 1
    notes += filter(None, (mixed_pipelines_note(c, n) for c, n in pipelines.items()))
    waits = [
        w for item in stored if item.is_result and (w := _attr(item, "input_wait")) is not None
    ]
    slow = [w for w in waits if w > INPUT_BOUND]
    if slow:
        notes.append(
            f"input is the bottleneck: {len(slow)} of {len(waits)} trials waited for input over "
            f"{INPUT_BOUND:.0%} of their training time (median {statistics.median(slow):.0%}); "
            "on a GPU set dataset.pipeline: tensor, on the CPU give each trial more cores "
            "(fewer executor.workers) (docs/datasets.md)"
        )
    return notes


def _attr(item: StoredTrial, name: str):
    return item.record.user_attrs.get(name) if item.record is not None else None


class LiveView:
    """The terminal's view: the cell table and the running trials, redrawn in place."""

    def __init__(self, progress: StudyProgress, title: str):
        self.progress, self.title = progress, title

    def render(self) -> Group:
        self.progress.read_epochs()
        table = self.progress.table(self.title)
        table.caption = self.progress.caption()
        running = self.progress.running_table()
        return Group(table, running) if running is not None else Group(table)


class EventLog:
    """The view for a file or a pipe: a line per trial that starts, ends or is retried, and a
    summary line every `every_s` seconds, each stamped with the time since the run started."""

    def __init__(self, progress: StudyProgress, console: Console, every_s: float = SUMMARY_EVERY_S):
        self.progress, self.console, self.every_s = progress, console, every_s
        self._summary_at = time.monotonic()

    def _line(self, text: str) -> None:
        stamp = clock(time.monotonic() - self.progress.started)
        self.console.print(f"[{stamp}] {text}", markup=False, highlight=False, soft_wrap=True)

    def retried(self, item: StoredTrial, retries: int) -> None:
        self._line(f"retry {trial_label(item)}: attempt {item.attempts} of {retries + 1}")

    def started(self, item: StoredTrial) -> None:
        self._line(f"started {trial_label(item)}")

    def ended(self, item: StoredTrial) -> None:
        wall = _attr(item, "wall_s")
        took = f" in {clock(wall)}" if wall else ""
        if item.status == "finished":
            what = f"finished, error {_attr(item, 'final_error'):.2f}%"
        elif item.status == "diverged":
            what = f"diverged at epoch {_attr(item, 'diverged_epoch')}"
        else:
            what = f"failed (attempt {item.attempts}): {_attr(item, 'message')}"
        self._line(f"{trial_label(item)} {what}{took}")

    def tick(self) -> None:
        """Print the summary line when it is due."""
        if time.monotonic() - self._summary_at >= self.every_s:
            self._summary_at = time.monotonic()
            self.progress.read_epochs(force=True)
            self._line(self.progress.summary())

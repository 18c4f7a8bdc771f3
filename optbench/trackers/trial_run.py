"""A trial's tracker run (MLflow or W&B, backends.py), written by the worker that trains
the trial, never on the training step's path (`TrialTracker`).

A background thread opens the run (importing the tracker library there), then logs each epoch's
line from metrics.jsonl, the source of truth, when told an epoch ended (`epoch_ended`, from
train/run_trial.py's per-epoch hook) and every POLL_S seconds (a population's members,
train/population.py), and at the trial's end its status, error and final numbers (`end`). The
training thread only puts a word on a queue.

No duplicates: the run's id and the last epoch it holds are kept in the trial folder
(tracking.RUN_FILE) after each write, so a resumed or retried trial continues the same run and
logs only the epochs after that one. (A retry that starts again from epoch 1 therefore keeps the
run's first values for the epochs it had logged: equal on the CPU, where a trial is a pure
function of its config.) A finished trial is not run again, so it logs nothing again.

A tracker that fails (not installed in the worker, a store that cannot be written, a server
that does not answer within END_WAIT_S at the end) costs one warning line on stderr and its run,
never the trial.
"""

from __future__ import annotations

import queue
import re
import sys
import threading
from pathlib import Path

from optbench.provenance import provenance
from optbench.trackers.backends import (
    TrackerRun,
    Tracking,
    one_line,
    open_run,
    read_run_file,
    write_run_file,
)
from optbench.trial.config import TrainConfig, TrialResult
from optbench.trial.results import read_metrics

POLL_S = 10.0  # how often the thread reads metrics.jsonl without being told
END_WAIT_S = 60.0  # how long a trial's end waits for its run's last writes
STOP_WAIT_S = 10.0  # the same for a stopped trial (the worker has EXIT_GRACE_S to exit)
_SYNC = object()
# One tracker opens its run at a time in a process: a population's trackers would otherwise
# import mlflow from several threads at once, which its import-time cycles do not survive.
_OPENING = threading.Lock()


class TrialTracker:
    """The tracker run of the trial in `out_dir` (nothing where `tracking` is None)."""

    def __init__(
        self, cfg: TrainConfig, out_dir: Path, root: Path | None, tracking: Tracking | None
    ):
        self._queue: queue.Queue | None = None
        self._limit: float | None = None  # set by end(): how long wait() waits
        if tracking is None:
            return
        # root: the study folder (<study>/trials/<key>), the run's experiment or project
        self.cfg, self.out_dir, self.root, self.tracking = cfg, out_dir, root or out_dir, tracking
        self._queue = queue.Queue()
        self._thread = threading.Thread(
            target=self._run, args=(self._queue,), name="optbench-tracker", daemon=True
        )
        self._thread.start()

    def epoch_ended(self) -> None:
        """metrics.jsonl has a new line: log it (in the thread)."""
        if self._queue is not None:
            self._queue.put(_SYNC)

    def end(self, result: TrialResult | None, wait: bool = True) -> None:
        """The trial ended with `result` (None: it stopped, to be resumed): log what is left and
        close the run; `wait` for it (up to END_WAIT_S, STOP_WAIT_S), or later (`wait`)."""
        if self._queue is None:
            return
        self._queue.put(result)
        self._queue, self._limit = None, END_WAIT_S if result is not None else STOP_WAIT_S
        if wait:
            self.wait()

    def wait(self) -> None:
        """Wait for an ended run's last writes (a population's other members train meanwhile)."""
        if self._limit is None:
            return
        self._thread.join(self._limit)
        if self._thread.is_alive():
            self._warn(f"gave up waiting for {self.tracking.kind} after {self._limit:g} s")
        self._limit = None

    def _run(self, messages: queue.Queue) -> None:
        try:
            run, logged = self._open()
            while True:
                try:
                    message = messages.get(timeout=POLL_S)
                except queue.Empty:
                    message = _SYNC
                logged = self._sync(run, logged)
                if message is not _SYNC:
                    run.end(message and message.status, _summary(message))
                    return
        except Exception as err:  # noqa: BLE001 - the tracker's failure is never the trial's
            self._warn(one_line(err))

    def _open(self) -> tuple[TrackerRun, int]:
        run_id, logged = read_run_file(self.out_dir, self.root, self.tracking)
        with _OPENING:
            run = open_run(self.tracking, self.root, run_id, self._meta())
        logged = logged if run.run_id == run_id else 0  # a new run holds no epoch yet
        write_run_file(self.out_dir, self.root, self.tracking, run.run_id, logged)
        return run, logged

    def _sync(self, run: TrackerRun, logged: int) -> int:
        """Log the lines of metrics.jsonl after epoch `logged`; the last epoch logged."""
        new = [
            m for m in read_metrics(self.out_dir, self.root, partial=True) if m["epoch"] > logged
        ]
        if not new:
            return logged
        run.log(new)
        logged = new[-1]["epoch"]
        write_run_file(self.out_dir, self.root, self.tracking, run.run_id, logged)
        return logged

    def _meta(self) -> dict:
        """The run's name (the trial's key), group (its cell), tags and params."""
        parts = self.out_dir.relative_to(self.root).parts
        key = "/".join(parts[1:]) if parts[:1] == ("trials",) else self.out_dir.name
        cell = parts[1] if len(parts) == 3 else ""
        found = re.fullmatch(r"s(\d+)-seed(\d+)", parts[-1]) if parts else None
        cfg = self.cfg
        tags = {
            "study": self.root.name,
            "cell": cell,
            "key": key,
            "model": cfg.model,
            "optimizer": cfg.optimizer,
            "epochs": str(cfg.epochs),
            "seed": str(cfg.seed),
            "sample": str(int(found.group(1))) if found else "",
            **{k: str(v) for k, v in provenance().items()},
        }
        params = dict(_flat(cfg.model_dump(mode="json")), lr_used=cfg.lr_used)
        return {"name": key, "group": cell, "job": "trial", "tags": tags, "params": params}

    def _warn(self, why: str) -> None:
        print(
            f"optbench: {self.tracking.kind} tracking of {self.out_dir} stopped: {why}",
            file=sys.stderr,
            flush=True,
        )


def _flat(data: dict, prefix: str = "") -> dict:
    """{"recipe.ema": ..., ...}: nested settings as dotted keys (tracker params are flat)."""
    out = {}
    for k, v in data.items():
        if isinstance(v, dict):
            out |= _flat(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def _summary(result: TrialResult | None) -> dict:
    """What a run ends with: the trial's status, error and final numbers (None: stopped)."""
    if result is None:
        return {"status": "stopped"}
    fields = ("status", "message", "final_error", "best_error", "epochs_run", "diverged_epoch")
    named = {k: getattr(result, k) for k in fields if getattr(result, k) is not None}
    if "message" in named:
        named["error"] = named.pop("message")
    return named

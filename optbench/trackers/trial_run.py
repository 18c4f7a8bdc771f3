"""A trial's tracker run (MLflow or W&B, backends.py), written from the trial's own files
(`RunWriter`): by the worker that trains the trial, off the training thread (`TrialTracker`),
and by the driver for a run that an outage left incomplete (repair.py).

RunWriter: open the run (or continue the one whose id tracker.json holds), log the lines of
metrics.jsonl, the source of truth, after the last epoch the run holds, and end it with the
trial's status, error and final numbers. tracker.json (backends.RUN_FILE) records the run's id,
the last epoch it holds and whether it ended, after each write, so a resumed or retried trial
continues the same run and logs only the epochs after that one, and a run whose file says it
ended is complete. (A retry that starts again from epoch 1 therefore keeps the run's first
values for the epochs it had logged: equal on the CPU, where a trial is a pure function of its
config.) A writer holds the trial folder's LOCK_FILE while it writes: the driver never
completes a run that a worker still writes.

TrialTracker: a background thread opens the run (importing the tracker library there), then logs
each epoch when told one ended (`epoch_ended`, from train/loop.py's per-epoch hook) and every
POLL_S seconds (a population's members), and the end (`end`). The training thread only puts a
word on a queue. A trial's end waits at most END_WAIT_S for its thread (a population's members
share that wait); a thread still writing then is left behind with a warning and stops after its
current write.

A tracker that fails (not installed in the worker, a store that cannot be written, a server that
does not answer: MLflow's HTTP retries and timeout are bounded, backends.tracker_env) costs one
warning line on stderr in optbench's words (`incomplete_line`), never the trial, and the next
`optbench run` completes the run from the trial's files (repair.py).
"""

from __future__ import annotations

import fcntl
import os
import queue
import re
import sys
import threading
import time
from pathlib import Path

from optbench import safefs
from optbench.provenance import provenance
from optbench.spec.tracking import Tracking
from optbench.trackers.backends import (
    TrackerRun,
    describe_failure,
    new_run_id,
    open_run,
    read_run_file,
    write_run_file,
)
from optbench.trial.config import TrainConfig, TrialResult
from optbench.trial.results import read_metrics

POLL_S = 10.0  # how often the thread reads metrics.jsonl without being told
END_WAIT_S = 10.0  # the most a trial's end (or stop) waits for its run's last writes
LOCK_FILE = ".tracker.lock"  # in a trial folder: held by whoever writes its run
_SYNC = object()
# One tracker opens its run at a time in a process: a population's trackers would otherwise
# import mlflow from several threads at once, which its import-time cycles do not survive.
_OPENING = threading.Lock()


class RunWriter:
    """Writes the tracker run of the trial in `out_dir` (below the study folder `root`) from its
    files: `open`, `sync`, `end`, each recorded in tracker.json; `lock` first, `close` last."""

    def __init__(self, cfg: TrainConfig, out_dir: Path, root: Path, tracking: Tracking):
        self.cfg, self.out_dir, self.root, self.tracking = cfg, out_dir, root, tracking
        self.run: TrackerRun | None = None
        self.logged = 0
        self._lock: int | None = None

    @property
    def key(self) -> str:
        """The trial's key (<cell id>/s<sample>-seed<seed>), or its folder's name."""
        parts = self.out_dir.relative_to(self.root).parts
        return "/".join(parts[1:]) if parts[:1] == ("trials",) else self.out_dir.name

    def lock(self, wait: bool) -> bool:
        """Take the trial folder's LOCK_FILE (`wait`ing for it, or not: False if another
        process holds it)."""
        fd = safefs.open_rw(self.out_dir / LOCK_FILE, self.root)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock = fd
        return True

    def close(self) -> None:
        """Release the lock (the run itself stays as its last write left it)."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def open(self) -> None:
        """Continue the run whose id tracker.json holds, or start one (nothing logged yet),
        its id recorded first where the tracker lets us choose it (a stop while it opens)."""
        held = read_run_file(self.out_dir, self.root, self.tracking)
        run_id = held.run_id or new_run_id(self.tracking)
        if held.run_id is None and run_id is not None:
            write_run_file(self.out_dir, self.root, self.tracking, run_id, 0)
        with _OPENING:
            self.run = open_run(self.tracking, self.root, run_id, self._meta())
        self.logged = held.logged if self.run.run_id == held.run_id else 0
        self._record(ended=False)

    def sync(self) -> None:
        """Log the lines of metrics.jsonl after the last epoch the run holds."""
        new = [
            m
            for m in read_metrics(self.out_dir, self.root, partial=True)
            if m["epoch"] > self.logged
        ]
        if new:
            self.run.log(new)
            self.logged = new[-1]["epoch"]
            self._record(ended=False)

    def end(self, result: TrialResult | None) -> None:
        """End the run with `result`'s status and numbers (None: stopped, to be resumed)."""
        self.run.end(result and result.status, _summary(result))
        self._record(ended=result is not None)

    def _record(self, ended: bool) -> None:
        write_run_file(self.out_dir, self.root, self.tracking, self.run.run_id, self.logged, ended)

    def _meta(self) -> dict:
        """The run's name (the trial's key), group (its cell), tags and params."""
        parts = self.out_dir.relative_to(self.root).parts
        cell = parts[1] if len(parts) == 3 else ""
        found = re.fullmatch(r"s(\d+)-seed(\d+)", parts[-1]) if parts else None
        cfg = self.cfg
        tags = {
            "study": self.root.name,
            "cell": cell,
            "key": self.key,
            "model": cfg.model,
            "optimizer": cfg.optimizer,
            "epochs": str(cfg.epochs),
            "seed": str(cfg.seed),
            "sample": str(int(found.group(1))) if found else "",
            **{k: str(v) for k, v in provenance(cfg.imports).items()},
        }
        params = dict(_flat(cfg.model_dump(mode="json")), lr_used=cfg.lr_used)
        return {"name": self.key, "group": cell, "job": "trial", "tags": tags, "params": params}


def incomplete_line(tracking: Tracking, key: str, why: str) -> str:
    """The one warning line of a trial run left incomplete."""
    return (
        f"optbench: the {tracking.kind} run of trial {key} is incomplete: {why}; the next "
        "`optbench run` completes it from the trial's files"
    )


class TrialTracker:
    """The tracker run of the trial in `out_dir` (nothing where `tracking` is None), written
    by a background thread (module docstring)."""

    def __init__(
        self, cfg: TrainConfig, out_dir: Path, root: Path | None, tracking: Tracking | None
    ):
        self._queue: queue.Queue | None = None
        self._deadline: float | None = None  # set by end(): until when wait() waits
        if tracking is None:
            return
        # root: the study folder (<study>/trials/<key>), the run's experiment or project
        self.writer = RunWriter(cfg, out_dir, root or out_dir, tracking)
        self._warned = threading.Lock()  # held once the trial's one warning is out
        self._left = False  # the trial no longer waits: the thread stops at its next write
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
        close the run; `wait` for it (at most END_WAIT_S from now), or later (`wait`)."""
        if self._queue is None:
            return
        self._queue.put(result)
        self._queue, self._deadline = None, time.monotonic() + END_WAIT_S
        if wait:
            self.wait()

    def wait(self) -> None:
        """Wait for an ended run's last writes until END_WAIT_S after its end (a population's
        other members train meanwhile); a thread still writing then is left behind."""
        if self._deadline is None:
            return
        self._thread.join(max(0.0, self._deadline - time.monotonic()))
        self._deadline = None
        if self._thread.is_alive():
            self._left = True
            what = self.writer.tracking.kind
            self._warn(f"{what} did not finish writing within {END_WAIT_S:g} s of the trial's end")

    def _run(self, messages: queue.Queue) -> None:
        writer = self.writer
        try:
            writer.lock(wait=True)
            writer.open()
            while True:
                try:
                    message = messages.get(timeout=POLL_S)
                except queue.Empty:
                    message = _SYNC
                if self._left:
                    return
                writer.sync()
                if message is not _SYNC:
                    if not self._left:
                        writer.end(message)
                    return
        except Exception as err:  # noqa: BLE001 - the tracker's failure is never the trial's
            self._warn(describe_failure(err, writer.tracking))
        finally:
            writer.close()

    def _warn(self, why: str) -> None:
        """The trial's one warning line (a later one is not printed)."""
        if self._warned.acquire(blocking=False):
            line = incomplete_line(self.writer.tracking, self.writer.key, why)
            print(line, file=sys.stderr, flush=True)


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

"""The driver's submit and follow phases: hand the pending trials' jobs to the executor
(`submit`), then record each trial as its job ends (`follow`), marking in the store the trials
a worker runs (what `optbench status` counts as running) and ending, with
executor.stall_timeout_s, a trial that made no progress for that long (`end_stalled`).
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field

from rich.console import Console
from rich.live import Live

from optbench import safefs
from optbench.errors import StorageUnavailable
from optbench.executors.protocol import Executor
from optbench.run.attempts import holds_its_result, record_end
from optbench.run.progress import EventLog, LiveView, StudyProgress
from optbench.store.database import Store, StoredTrial
from optbench.trial.jobs import Job
from optbench.trial.results import ERROR_LOG, RESULT_FILE


def submit(
    executor: Executor,
    jobs: list[Job],
    todo: dict[str, StoredTrial],
    log: EventLog,
    retries: int,
    console: Console,
) -> None:
    """Hand the jobs of the pending trials (plan.jobs) to the executor, each pending trial's
    folder cleared first of a result file that is not its attempt's (attempts.whose: another
    configuration's or attempt's, or an invalid one); a population's members that are done keep
    theirs."""
    for item in todo.values():
        if item.attempts > 1:
            log.retried(item, retries)
    for item in todo.values():
        if not holds_its_result(item):
            safefs.remove(item.trial.out_dir / RESULT_FILE, item.trial.job.root)
    console.print(executor.submit(jobs), markup=False, highlight=False)


@dataclass
class Following:
    """What `follow` needs beside the trials: this driver run's token (locks.driver_lock), with
    which it marks the trials its workers run, and executor.stall_timeout_s (None: off)."""

    run: str
    stall_timeout_s: float | None = None
    ended: set[str] = field(default_factory=set)  # trials ended for a stall, not yet recorded


def follow(
    store: Store,
    executor: Executor,
    todo: dict[str, StoredTrial],
    progress: StudyProgress,
    view: LiveView | None,
    log: EventLog,
    console: Console,
    following: Following,
) -> None:
    """Record each trial as its job ends, until none is left (`todo` empties); mark in the
    store the trials that run (and those SLURM requeued), and end stalled ones (end_stalled).
    Ctrl-C, or a storage that stops answering, stops the jobs where they die with the driver
    and leaves them running where they outlive it (SLURM: the next run follows them)."""
    outlive = executor.jobs_outlive_driver
    try:
        with (
            Live(view.render(), console=console, refresh_per_second=2, transient=False)
            if view
            else nullcontext()
        ) as display:
            while todo:
                for event in executor.poll(timeout=0.5):
                    item = todo.get(event.key)
                    if item is None:
                        continue
                    if event.kind == "running":
                        progress.start(event.key)
                        store.mark_running(item, following.run, progress.started_at[event.key])
                        if not view:
                            log.started(item)
                        continue
                    if event.kind == "queued":  # SLURM requeued it: not running, not stalled
                        progress.queued(event.key)
                        store.mark_running(item, None)
                        continue
                    record_end(store, item, event.message)
                    following.ended.discard(event.key)
                    progress.end(event.key)
                    del todo[event.key]
                    if not view or item.status == "failed":  # a failure shows on a terminal too
                        log.ended(item)
                if following.stall_timeout_s is not None:
                    end_stalled(executor, todo, progress, following)
                if view:
                    display.update(view.render())
                else:
                    log.tick()
    except (KeyboardInterrupt, StorageUnavailable) as stop:  # the storage's error says which
        executor.close(cancel=not outlive)  # cluster jobs keep running: Ctrl-C detaches
        left = "still queued or running" if outlive else "left"
        console.print(
            f"stopped: {progress.ran} trial(s) recorded, {len(todo)} {left}; "
            "run the same command to resume"
        )
        if isinstance(stop, KeyboardInterrupt):
            stop.said = True  # run_study says nothing more
        raise
    except BaseException:  # e.g. a full disk: stop the workers (they checkpoint) first
        executor.close(cancel=not outlive)
        raise


def end_stalled(
    executor: Executor,
    todo: dict[str, StoredTrial],
    progress: StudyProgress,
    following: Following,
) -> None:
    """End, through the executor, each running trial that made no progress (progress.idle_s:
    no new metrics line, or since its start) for executor.stall_timeout_s; its error.log says
    why in one line, and its job's end is recorded as a failed attempt with that line (retried
    like any failure)."""
    progress.read_epochs()
    now, limit = time.time(), following.stall_timeout_s
    for key in sorted(progress.running - following.ended):
        idle = progress.idle_s(key, now)
        if idle is None or idle < limit or key not in todo:
            continue
        why = f"stalled: no progress for {idle:.0f} s (executor.stall_timeout_s is {limit:g})"
        for ended in executor.end(key, why):  # the job's trials: a population's members too
            following.ended.add(ended)
            if ended in todo:
                job = todo[ended].trial.job
                safefs.write_text(job.out_dir / ERROR_LOG, job.root, why + "\n")

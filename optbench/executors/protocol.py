"""What every executor is: the `Executor` protocol the driver (optbench/run/driver.py) talks to.

An executor runs jobs (optbench/trial/jobs.py: a `TrialJob` or a `PopulationJob`, plain
picklable data) somewhere and reports `JobEvent`s; it never touches the study database.
The worker's only output is the trial's result file (see optbench.trial.results); the executor
only says that a job ended, and the driver alone reads that file. A job that ends without
writing one is "lost" (its process died; the event's message says how, where known). The
commands that run no trial (`optbench status`, `optbench cancel`) ask an executor too:
`status` and `cancel`. Every executor's worker imports the study's own modules first
(`import_study_code`), so that one it cannot import is one line in each trial's error.log.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from optbench import safefs
from optbench.errors import UsageError
from optbench.spec.schema import ExecutorSettings
from optbench.trial.jobs import Job, PopulationJob, TrialJob, members_of
from optbench.trial.results import ERROR_LOG
from optbench.user_code import import_modules


def described(jobs: Sequence[Job]) -> str:
    """'N trial(s)', and how many populations train them where there are any."""
    trials = sum(len(job.keys) for job in jobs)
    groups = sum(isinstance(job, PopulationJob) for job in jobs)
    return f"{trials} trial(s)" + (f" ({groups} population(s) among them)" if groups else "")


def import_study_code(jobs: Sequence[Job]) -> None:
    """In a worker, before its trials start: import the study's own modules (`imports:`) that
    `jobs` name. The driver imported them, but a worker is another process, perhaps on another
    machine, with its own environment (docs/extending.md: what a cluster's workers need). One
    that cannot be imported here is one line in each trial's error.log, naming the module, the
    host and the Python that could not import it, and raises that UsageError."""
    names = list(
        dict.fromkeys(n for job in jobs for t in members_of(job) for n in t.config.imports)
    )
    where = f"a worker on {socket.gethostname()} ({sys.executable}): imports"
    try:
        import_modules(names, where)
    except UsageError as err:
        for trial in (t for job in jobs for t in members_of(job)):
            safefs.make_dirs(trial.out_dir, trial.root)
            safefs.write_text(trial.out_dir / ERROR_LOG, trial.root, f"{err}\n")
        raise


@dataclass(frozen=True)
class JobEvent:
    """What happened to a trial's job: it runs, it ended (the driver reads the result file), it
    was lost (ended without one; `message` says how), or it went back to the queue (SLURM
    requeued it after a time limit or a preemption: it runs again later)."""

    key: str
    kind: Literal["running", "ended", "lost", "queued"]
    message: str | None = None


@dataclass(frozen=True)
class JobTime:
    """A job that ran to its end, by the cluster's accounting (`optbench status`): its trials'
    keys, its elapsed seconds, and its wait in the queue (submitted to started; None unknown)."""

    keys: list[str]
    elapsed_s: float
    queue_s: float | None = None


class Executor(Protocol):
    """Everything the driver (run/driver.py: run_study) asks of an executor."""

    # True where jobs keep running when the driver stops (SLURM): Ctrl-C and --detach then leave
    # them running, and the next run follows them again. False: stopping the driver stops them.
    jobs_outlive_driver: bool

    def settle(self, jobs: Sequence[TrialJob]) -> list[JobEvent]:
        """End events of those of `jobs` whose job ended while no driver followed it; the driver
        records them before it runs anything. None where jobs die with the driver."""

    def submit(self, jobs: Sequence[Job]) -> str:
        """Start running `jobs` (returns without waiting for them). Returns one line for the
        user saying what it did: how many trials run where (SLURM: how many it submitted and how
        many it follows that were already queued or running)."""

    def poll(self, timeout: float) -> list[JobEvent]:
        """Events since the last poll, waiting up to `timeout` seconds for at least one."""

    def close(self, cancel: bool) -> None:
        """Release resources; with cancel, stop every job that has not ended."""

    def end(self, key: str, why: str) -> list[str]:
        """Stop the job that runs trial `key` (the driver found it stalled): its trials then end
        as lost with `why` as their message. Returns the keys of the trials that job runs
        (a population's members, a SLURM job's other trials), [] if no job of it runs."""

    def status(self) -> tuple[set[str], str | None]:
        """Without a driver (`optbench status`): the keys of the study's trials whose job runs
        now, and one line about its jobs for the user (None: nothing to say)."""

    def cancel(self) -> tuple[list[str], bool]:
        """Without a driver (`optbench cancel`): stop the study's jobs that may still run. The
        lines to print (what was done), and whether every job could be stopped."""

    def job_times(self) -> list[JobTime]:
        """Without a driver (`optbench status`, the cost plan's comparison): each of the study's
        latest jobs that ran to its end; [] where there is none or accounting does not answer."""

    @staticmethod
    def threads_per_trial(settings: ExecutorSettings) -> int:
        """The torch threads one CPU trial gets where this executor runs it (`settings`: the
        study's executor block), asked before any executor exists: `--measure` times a trial
        with them."""


class DiesWithDriver:
    """What executors whose jobs stop with the driver (local, debug) answer about jobs no driver
    follows: there are none."""

    jobs_outlive_driver = False

    def settle(self, jobs: Sequence[TrialJob]) -> list[JobEvent]:
        return []

    def status(self) -> tuple[set[str], str | None]:
        return set(), None

    def cancel(self) -> tuple[list[str], bool]:
        return ["no job of this study is queued or running (only SLURM jobs outlive a run)"], True

    def end(self, key: str, why: str) -> list[str]:
        return []  # the debug executor runs its job in the driver: it cannot end it

    def job_times(self) -> list[JobTime]:
        return []  # a worker's trials are timed by their wall_s alone

"""Run trials on this machine: a pool of worker processes, or inline for debugging.

Workers are spawned (not forked: torch's thread pools do not survive a fork), each limited to
`threads` torch threads so that workers x threads never exceeds the cores. Workers ignore
SIGINT: Ctrl-C reaches the driver, which stops the pool and leaves the database consistent.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from optbench.launch.base import JobEvent, TrialJob


def usable_cores() -> int:
    """Cores this process may use (affinity masks and cgroup-limited SLURM steps included)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def split_cores(n_jobs: int, workers: int | str, cores: int) -> tuple[int, int]:
    """(worker processes, torch threads per worker) for `n_jobs` jobs on `cores` cores."""
    n = cores if workers == "auto" else int(workers)
    n = max(1, min(n, n_jobs))
    return n, max(1, cores // n)


def _init_worker(threads: int) -> None:
    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(threads)


def run_job(job: TrialJob) -> str:
    """Worker entry point: train one trial into its folder; returns its status."""
    from optbench.train.loop import run_trial

    return run_trial(job.config, job.out_dir).status


class LocalLauncher:
    """A process pool on this machine."""

    def __init__(self, workers: int, threads: int):
        self.workers, self.threads = workers, threads
        self._pool = ProcessPoolExecutor(
            workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(threads,),
        )
        self._futures: dict[Future, TrialJob] = {}
        self._seen_running: set[str] = set()

    def submit(self, jobs: Sequence[TrialJob]) -> None:
        for job in jobs:
            self._futures[self._pool.submit(run_job, job)] = job

    def poll(self, timeout: float) -> list[JobEvent]:
        done, _ = wait(self._futures, timeout=timeout, return_when=FIRST_COMPLETED)
        events = []
        for fut in done:
            job = self._futures.pop(fut)
            try:
                fut.result()
                events.append(JobEvent(job.key, "ended"))
            except BrokenProcessPool:
                events.append(JobEvent(job.key, "lost", "worker process died (out of memory?)"))
            except Exception as err:  # noqa: BLE001 - reported, the driver decides
                events.append(JobEvent(job.key, "lost", f"{type(err).__name__}: {err}"))
        for fut, job in self._futures.items():
            if fut.running() and job.key not in self._seen_running:
                self._seen_running.add(job.key)
                events.append(JobEvent(job.key, "running"))
        return events

    def close(self, cancel: bool) -> None:
        if cancel:
            # ProcessPoolExecutor cannot stop a running task; terminating its workers is the
            # only way (Python 3.14 adds terminate_workers() for exactly this).
            for proc in list(getattr(self._pool, "_processes", {}).values()):
                proc.terminate()
        self._pool.shutdown(wait=True, cancel_futures=cancel)


class InlineLauncher:
    """Runs each job in this process when polled (the `debug` executor: breakpoints work)."""

    def __init__(self) -> None:
        self._queue: list[TrialJob] = []

    def submit(self, jobs: Sequence[TrialJob]) -> None:
        self._queue.extend(jobs)

    def poll(self, timeout: float) -> list[JobEvent]:
        if not self._queue:
            return []
        job = self._queue.pop(0)
        run_job(job)
        return [JobEvent(job.key, "ended")]

    def close(self, cancel: bool) -> None:
        self._queue.clear()

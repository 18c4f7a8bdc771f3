"""Run trials on this machine: a pool of worker processes, or inline for debugging.

Workers are spawned (not forked: torch's thread pools do not survive a fork), each limited to
`threads` torch threads so that workers x threads never exceeds the cores. On a machine with
GPUs, each worker owns one GPU (CUDA_VISIBLE_DEVICES set before CUDA starts). Workers ignore
SIGINT: Ctrl-C reaches the driver, which terminates the workers (SIGTERM: each trial writes its
checkpoint first) and leaves the database consistent; the next run resumes the trials from
their checkpoints.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from optbench.executors.base import JobEvent, TrialJob


def usable_cores() -> int:
    """Cores this process may use (affinity masks and cgroup-limited SLURM steps included)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def split_cores(n_jobs: int, workers: int | str, cores: int, gpus: int = 0) -> tuple[int, int]:
    """(worker processes, torch threads per worker) for `n_jobs` jobs on `cores` cores: one
    worker per core, or per GPU where there are GPUs, unless `workers` says otherwise."""
    n = (gpus or cores) if workers == "auto" else int(workers)
    if gpus:
        n = min(n, gpus)
    n = max(1, min(n, n_jobs))
    return n, max(1, cores // n)


_started = None  # in a worker: the queue on which it says which trial it starts


def _init_worker(threads: int, gpu_ids, started) -> None:
    global _started
    if gpu_ids is not None:  # before torch touches CUDA: this worker sees one GPU
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu_ids.get())
    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(threads)
    _started = started


def run_job(job: TrialJob) -> str:
    """Worker entry point: train one trial into its folder (resuming from its checkpoint if an
    earlier run was stopped); returns its status."""
    import torch

    from optbench.train.loop import run_trial

    if _started is not None:  # the pool marks queued jobs "running" too early; this is the start
        _started.put(job.key)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return run_trial(job.config, job.out_dir, device, resume=True, distributed=False).status


def _start_pool(workers: int, threads: int, gpus: int, started) -> ProcessPoolExecutor:
    ctx = multiprocessing.get_context("spawn")
    gpu_ids = None
    if gpus:
        gpu_ids = ctx.Queue()
        for i in range(workers):
            gpu_ids.put(i)
    return ProcessPoolExecutor(
        workers, mp_context=ctx, initializer=_init_worker, initargs=(threads, gpu_ids, started)
    )


class LocalExecutor:
    """A process pool on this machine, sized when jobs are submitted: one worker per core, or
    one per GPU where there are GPUs, unless `workers` says how many."""

    jobs_outlive_driver = False

    def __init__(self, workers: int | str = "auto"):
        self._workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._futures: dict[Future, TrialJob] = {}
        self._started = None  # keys of the jobs workers start, as they start them

    def settle(self, jobs: Sequence[TrialJob]) -> list[JobEvent]:
        return []  # workers die with the driver

    def submit(self, jobs: Sequence[TrialJob]) -> str:
        if self._pool is None:  # sized for the first batch of jobs
            import torch

            gpus = torch.cuda.device_count()
            n, threads = split_cores(len(jobs), self._workers, usable_cores(), gpus)
            self._started = multiprocessing.get_context("spawn").SimpleQueue()
            self._pool = _start_pool(n, threads, gpus, self._started)
            self._where = f"{n} GPU worker(s)" if gpus else f"{n} worker(s) x {threads} thread(s)"
        for job in jobs:
            self._futures[self._pool.submit(run_job, job)] = job
        return f"{len(jobs)} trial(s) to run on {self._where}"

    def poll(self, timeout: float) -> list[JobEvent]:
        done, _ = wait(self._futures, timeout=timeout, return_when=FIRST_COMPLETED)
        started = []
        while self._started is not None and not self._started.empty():
            started.append(self._started.get())
        ended = []
        for fut in done:
            job = self._futures.pop(fut)
            try:
                fut.result()
                ended.append(JobEvent(job.key, "ended"))
            except BrokenProcessPool:
                ended.append(JobEvent(job.key, "lost", "worker process died (out of memory?)"))
            except Exception as err:  # noqa: BLE001 - reported, the driver decides
                ended.append(JobEvent(job.key, "lost", f"{type(err).__name__}: {err}"))
        # A worker that ended a job may have started the next one before this poll: say the
        # ends of jobs started earlier first, then each new job's start (and end, if it ended
        # too), so that the running count never exceeds the workers.
        by_key = {event.key: event for event in ended}
        return [
            *(event for event in ended if event.key not in started),
            *(e for key in started for e in (JobEvent(key, "running"), by_key.get(key)) if e),
        ]

    def close(self, cancel: bool) -> None:
        if self._pool is None:
            return
        if cancel:
            # ProcessPoolExecutor cannot stop a running task; terminating its workers is the
            # only way (Python 3.14 adds terminate_workers() for exactly this).
            for proc in list(getattr(self._pool, "_processes", {}).values()):
                proc.terminate()
        self._pool.shutdown(wait=True, cancel_futures=cancel)


class InlineExecutor:
    """Runs each job in this process when polled (the `debug` executor: breakpoints work): one
    poll says the next job starts, the next runs it to its end."""

    jobs_outlive_driver = False

    def __init__(self) -> None:
        self._queue: list[TrialJob] = []
        self._next: TrialJob | None = None

    def settle(self, jobs: Sequence[TrialJob]) -> list[JobEvent]:
        return []  # jobs run inside the driver

    def submit(self, jobs: Sequence[TrialJob]) -> str:
        self._queue.extend(jobs)
        return f"{len(jobs)} trial(s) to run in this process, one by one (debug)"

    def poll(self, timeout: float) -> list[JobEvent]:
        if self._next is None:
            if not self._queue:
                return []
            self._next = self._queue.pop(0)
            return [JobEvent(self._next.key, "running")]
        job, self._next = self._next, None
        run_job(job)
        return [JobEvent(job.key, "ended")]

    def close(self, cancel: bool) -> None:
        self._queue.clear()
        self._next = None

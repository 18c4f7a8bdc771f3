"""Run trials on this machine: a pool of worker processes, or inline for debugging.

The pool. Each worker is a spawned process (not forked: torch's thread pools do not survive a
fork) that trains one trial at a time, handed to it over its own pipe, and says when it starts
and ends one. The driver therefore knows which trial each worker runs, so:
- a worker that dies (killed, out of memory) costs only its own trial: that trial is "lost" (a
  failed attempt), a new worker takes its place, the other workers carry on, and the trials
  that had not started are not charged;
- a worker whose own write fails (to its driver's pipe: an I/O error) is no trial's failure:
  it exits with WORKER_IO_EXIT, no traceback, and the driver stops in one line (WriteError),
  charging no trial;
- workers never outlive the driver: each asks the kernel for SIGTERM when the driver dies
  (Linux's PR_SET_PDEATHSIG) and also watches its parent's pid (any platform); on SIGTERM a
  running trial writes its checkpoint at the next optimizer step and the worker exits;
- each worker holds the study's `.workers.lock` (run/locks.py) until it exits, so a new driver
  never trains a trial that an old worker is still writing.

Threads. Each worker runs `threads` torch threads, a function of the study's `workers` setting
and of the machine only (cores // workers), never of how many trials remain: results depend on
the thread count, so the first and the last trials of a study train alike. On a machine with
GPUs each worker owns one GPU (CUDA_VISIBLE_DEVICES set before CUDA starts). Workers ignore
SIGINT: Ctrl-C reaches the driver, which terminates the workers (SIGTERM: each trial writes its
checkpoint first); the next run resumes the trials from their checkpoints.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path

from optbench.errors import DISK_FAULTS, UsageError, WriteError
from optbench.executors.protocol import DiesWithDriver, JobEvent, described, import_study_code
from optbench.host import cuda_device_count, freeze_at_exit, training_device, usable_cores
from optbench.spec.schema import ExecutorSettings
from optbench.trial.jobs import Job

PR_SET_PDEATHSIG = 1  # linux/prctl.h
WATCH_S = 1.0  # how often a worker checks that its driver is alive
EXIT_GRACE_S = 30.0  # after the driver's death: time to checkpoint before a hard exit
START_FAILURES = 3  # workers dying before they are ready, in a row, before the queue is failed
# A worker's exit code where a write of its own (to its driver's pipe, its lock) failed: EX_IOERR
# of sysexits.h. The driver stops in one line; no trial is charged for it.
WORKER_IO_EXIT = 74


def pool_size(workers: int | str, cores: int, gpus: int = 0) -> tuple[int, int]:
    """(worker processes, torch threads per worker) of the study's `workers` setting on this
    machine: one worker per core, or per GPU where there are GPUs, unless `workers` says how
    many; the threads split the cores among them. Raises UsageError where `workers` exceeds
    the cores (or GPUs): more workers only oversubscribe them, and each holds a model and its
    data in memory."""
    limit, unit = (gpus, "GPUs") if gpus else (cores, "usable cores")
    if workers == "auto":
        n = limit
    else:
        n = int(workers)
        if not 1 <= n <= limit:
            raise UsageError(
                f"executor.workers (or --workers): {n} must be between 1 and {limit}, the "
                f"{unit} of this machine (one worker per {unit.split()[-1][:-1]})"
            )
    return n, max(1, cores // n)


def split_cores(n_jobs: int, workers: int | str, cores: int, gpus: int = 0) -> tuple[int, int]:
    """(workers started, threads per worker) for `n_jobs` trials: no more workers than trials,
    and the threads of `pool_size`, whatever `n_jobs` is."""
    n, threads = pool_size(workers, cores, gpus)
    return max(1, min(n, n_jobs)), threads


# --- the worker process -------------------------------------------------------------------------


def _die_with(driver_pid: int) -> None:
    """SIGTERM this process when the driver dies: the kernel's parent-death signal on Linux,
    and a thread that watches the parent pid everywhere (and covers a driver that died before
    prctl ran). After SIGTERM a running trial checkpoints and the process exits; if it has not
    within EXIT_GRACE_S, it exits hard (checkpoint writes are atomic)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == driver_pid:
            time.sleep(WATCH_S)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(EXIT_GRACE_S)
        os._exit(1)

    threading.Thread(target=watch, name="driver-watch", daemon=True).start()


def _worker_main(
    conn: Connection, threads: int, gpu: int | None, driver_pid: int, study_dir: Path | None
) -> None:
    """A worker's life (`_serve`). A write of its own that fails (its first one, "ready" to the
    driver, say: an I/O error) is no trial's failure and no traceback: it tells the driver in
    one line where it still can, and exits with WORKER_IO_EXIT, which stops the driver."""
    try:
        _serve(conn, threads, gpu, driver_pid, study_dir)
    except OSError as err:
        where = err.filename or f"worker process {os.getpid()}'s pipe to the driver"
        try:
            conn.send(("fault", None, f"{where}: cannot write: {err.strerror or err}"))
        except OSError:
            pass  # the driver reads the exit code
        raise SystemExit(WORKER_IO_EXIT) from None


def _serve(
    conn: Connection, threads: int, gpu: int | None, driver_pid: int, study_dir: Path | None
) -> None:
    """Take the study's worker lock, then run the jobs sent over `conn` until None (or the
    driver's end of the pipe closes)."""
    from optbench.trial import timing

    timing.process_started()  # the process's start, recorded with its first trial
    freeze_at_exit()
    _die_with(driver_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if gpu is not None:  # before torch touches CUDA: this worker sees one GPU
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    if study_dir is not None:
        from optbench.worker_lock import hold_worker_lock

        hold_worker_lock(study_dir)  # held until this process exits
    t0 = time.perf_counter()
    import torch

    from optbench.train.run_trial import run_job

    timing.imports_took(time.perf_counter() - t0)
    torch.set_num_threads(threads)
    device = training_device()  # the GPU CUDA_VISIBLE_DEVICES left this worker, if any
    conn.send(("ready", None, None))
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        for key in job.keys:
            conn.send(("running", key, None))
        try:
            import_study_code([job])  # one it cannot import: its line in each error.log
            run_job(job, device)
            kind, message = "ended", None
        except OSError as err:
            kind = "fault" if err.errno in DISK_FAULTS else "lost"
            message = str(WriteError.from_os(err))
        except Exception as err:  # noqa: BLE001 - reported, the driver decides
            kind, message = "lost", f"{type(err).__name__}: {err}"
        for key in job.keys:  # a fault is said once; the driver stops at the first
            conn.send((kind, key, message))
            if kind == "fault":
                break


# --- the driver's side --------------------------------------------------------------------------


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: Connection
    ready: bool = False
    job: Job | None = None
    started: bool = False  # the worker said it started `job`
    ending: str | None = None  # why the driver killed it (a stall): its trials' message


@dataclass
class _Pool:
    threads: int
    gpus: list[int | None]  # one slot per worker
    workers: dict[int, _Worker] = field(default_factory=dict)  # slot -> worker


def _death(process) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        oom = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"worker process {process.pid} died: killed by {name}{oom}"
    return f"worker process {process.pid} died (exit code {code})"


class LocalExecutor(DiesWithDriver):
    """A pool of worker processes on this machine, started when jobs are submitted: one worker
    per core, or one per GPU where there are GPUs, unless `workers` says how many (at most the
    cores or GPUs). With `study_dir`, workers hold its worker lock (run/locks.py)."""

    def __init__(self, workers: int | str = "auto", study_dir: Path | None = None):
        self._workers = workers
        self._study_dir = study_dir
        self._pool: _Pool | None = None
        self._queue: deque[Job] = deque()
        self._fault: str | None = None
        self._start_failures = 0
        self._ctx = multiprocessing.get_context("spawn")

    @staticmethod
    def threads_per_trial(settings: ExecutorSettings) -> int:
        """A worker's share of this machine's cores (`pool_size`, as without GPUs)."""
        return pool_size(settings.workers, usable_cores())[1]

    def submit(self, jobs: Sequence[Job]) -> str:
        self._queue.extend(jobs)
        if self._pool is None:
            gpus = cuda_device_count()
            n, threads = split_cores(len(self._queue), self._workers, usable_cores(), gpus)
            self._pool = _Pool(threads, [i if gpus else None for i in range(n)])
            self._where = f"{n} GPU worker(s)" if gpus else f"{n} worker(s) x {threads} thread(s)"
        for slot in range(len(self._pool.gpus)):
            if slot not in self._pool.workers:
                self._start(slot)
        return f"{described(jobs)} to run on {self._where}"

    def _start(self, slot: int) -> None:
        pool = self._pool
        here, there = self._ctx.Pipe()
        process = self._ctx.Process(
            target=_worker_main,
            args=(there, pool.threads, pool.gpus[slot], os.getpid(), self._study_dir),
            name=f"optbench-worker-{slot}",
        )
        process.start()
        there.close()
        pool.workers[slot] = _Worker(process, here)

    def _dispatch(self) -> None:
        if self._fault is not None:  # the driver stops at its next poll: nothing more starts
            return
        for worker in self._pool.workers.values():
            if worker.ready and worker.job is None and self._queue:
                job = self._queue.popleft()
                try:
                    worker.conn.send(job)
                except OSError:  # it just died (its sentinel says so): the job waits
                    self._queue.appendleft(job)
                    continue
                worker.job, worker.started = job, False

    def poll(self, timeout: float) -> list[JobEvent]:
        """Events since the last poll. Raises WriteError once a worker could not write (disk
        full): the driver stops; that trial stays unrecorded and is not charged."""
        if self._fault is not None:
            raise WriteError(self._fault)
        if self._pool is None:
            return []
        self._dispatch()
        by_handle = {}
        for slot, w in self._pool.workers.items():
            by_handle[w.conn] = by_handle[w.process.sentinel] = (slot, w)
        events: list[JobEvent] = []
        for handle in wait(list(by_handle), timeout):
            slot, worker = by_handle[handle]
            if self._pool.workers.get(slot) is not worker:
                continue  # already replaced through its other handle
            events += self._drain(worker)
            if not worker.process.is_alive():
                events += self._replace(slot, worker)
        self._dispatch()
        return events

    def _drain(self, worker: _Worker) -> list[JobEvent]:
        events = []
        try:
            while worker.conn.poll():
                kind, key, message = worker.conn.recv()
                if kind == "ready":
                    worker.ready, self._start_failures = True, 0
                elif kind == "running":
                    worker.started = True
                    events.append(JobEvent(key, "running"))
                elif kind == "fault":
                    self._fault = self._fault or message
                    worker.job = None
                else:
                    events.append(JobEvent(key, kind, message))
                    if worker.job is not None and key == worker.job.keys[-1]:
                        worker.job = None  # a population's last member: the worker is free
        except (EOFError, OSError):
            worker.process.join(5)  # the pipe closed: the process is ending
        return events

    def _replace(self, slot: int, worker: _Worker) -> list[JobEvent]:
        """A worker died: its trial is lost if it had started (else it goes back to the queue)
        and a new worker takes the slot while there are jobs."""
        worker.process.join()
        worker.conn.close()
        del self._pool.workers[slot]
        events = []
        why = worker.ending or _death(worker.process)
        if worker.process.exitcode == WORKER_IO_EXIT and self._fault is None:
            self._fault = f"{why}: a write to its driver failed (an I/O error)"
        if self._fault is not None:  # the driver stops: its trial is not charged
            if worker.job is not None:
                self._queue.appendleft(worker.job)
            return events
        if worker.job is not None:
            if worker.started:
                events += [JobEvent(key, "lost", why) for key in worker.job.keys]
            else:
                self._queue.appendleft(worker.job)  # never started: not charged
        if not worker.ready:
            self._start_failures += 1
        if self._start_failures >= START_FAILURES:  # workers cannot start at all
            lost = f"{why} before it was ready"
            events += [JobEvent(key, "lost", lost) for j in self._queue for key in j.keys]
            self._queue.clear()
        elif self._queue:
            self._start(slot)
        return events

    def end(self, key: str, why: str) -> list[str]:
        """Kill (SIGKILL: a stopped or hung process acts on nothing else) the worker that runs
        trial `key`; its death is then reported as its job's trials lost with `why`, and a new
        worker takes its place. Its trial resumes from its last epoch's checkpoint when retried."""
        if self._pool is None:
            return []
        for worker in self._pool.workers.values():
            if worker.job is not None and worker.started and key in worker.job.keys:
                worker.ending = why
                worker.process.kill()
                return list(worker.job.keys)
        return []

    def close(self, cancel: bool) -> None:
        """Stop the workers: idle ones are told to exit; with `cancel`, busy ones get SIGTERM
        (their trial checkpoints first). Waits for them, then kills any that hang."""
        if self._pool is None:
            return
        workers = list(self._pool.workers.values())
        for w in workers:
            if cancel and w.job is not None:
                w.process.terminate()
            try:  # a worker that outlives its SIGTERM (its checkpoint failed) reads this next
                w.conn.send(None)
            except OSError:
                pass
        deadline = time.monotonic() + EXIT_GRACE_S
        for w in workers:
            w.process.join(max(0.1, deadline - time.monotonic()))
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
            w.conn.close()
        self._pool.workers.clear()
        self._queue.clear()


class InlineExecutor(DiesWithDriver):
    """Runs each job in this process when polled (the `debug` executor: breakpoints work): one
    poll says the next job starts, the next runs it to its end."""

    def __init__(self) -> None:
        self._queue: list[Job] = []
        self._next: Job | None = None

    @staticmethod
    def threads_per_trial(settings: ExecutorSettings) -> int:
        """Every core: a trial runs alone, in the driver."""
        return usable_cores()

    def submit(self, jobs: Sequence[Job]) -> str:
        self._queue.extend(jobs)
        return f"{described(jobs)} to run in this process, one by one (debug)"

    def poll(self, timeout: float) -> list[JobEvent]:
        if self._next is None:
            if not self._queue:
                return []
            self._next = self._queue.pop(0)
            return [JobEvent(key, "running") for key in self._next.keys]
        job, self._next = self._next, None
        try:
            from optbench.train.run_trial import run_job

            run_job(job, training_device())
        except OSError:
            raise  # disk full: the driver stops with one line (write_faults_as_one_line)
        except Exception as err:  # noqa: BLE001 - e.g. another config's result in its folder
            return [JobEvent(key, "lost", f"{type(err).__name__}: {err}") for key in job.keys]
        return [JobEvent(key, "ended") for key in job.keys]

    def close(self, cancel: bool) -> None:
        self._queue.clear()
        self._next = None

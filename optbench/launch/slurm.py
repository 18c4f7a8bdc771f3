"""Run trials as SLURM jobs through submitit: job arrays, live follow, reattach, honest states.

Submission: pending trials are grouped `trials_per_job` to a job and submitted as job arrays, split
so that no array index reaches the cluster's MaxArraySize. Every submitted trial gets one line in
`<folder>/jobs.jsonl` (trial key -> SLURM job id, config hash, log path): the driver writes that
file, workers never do, and it outlives the driver, so a later `optbench run` reattaches to jobs
that are still queued or running instead of submitting them twice.

Following: one `sacct` call for all jobs (submitit's watcher), at most every `poll_s` seconds.
A job that ends without the trial's result file is reported "lost" with its SLURM state (FAILED,
TIMEOUT, CANCELLED, OUT_OF_MEMORY, NODE_FAIL, ...) and its log path; the driver records it as a
failed trial, and the next `optbench run` retries it. Jobs that ended while no driver followed
them are settled by the next run before it plans (`settle_ended`): it records how they ended
(a crash keeps its own message), then retries the failures in that same run.

Preemption and time limits: the job's callable (`TrialBatch`) implements submitit's checkpoint
protocol, so on SIGUSR2 submitit requeues the job; a requeued job (also `scontrol requeue`) runs
the same trials again, each resuming from its checkpoint (`run_trial(resume=True)`), and skips
trials whose result file it already wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import submitit

from optbench.errors import UsageError
from optbench.executors.base import JobEvent, TrialJob
from optbench.spec import SlurmSettings, StudySpec
from optbench.train.config import TrainConfig
from optbench.train.results import read_result

JOBS_FILE = "jobs.jsonl"
DEFAULT_MAX_ARRAY_SIZE = 1001  # SLURM's own default
# sacct states of a job that may still run (submitit's list, plus the transient ones).
ACTIVE_STATES = frozenset(
    {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED",
     "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT", "PREEMPTED", "UNKNOWN"}
)  # fmt: skip
VANISH_S = 300.0  # a job sacct has not known for this long is gone (purged, other cluster)


# --- cluster facts ------------------------------------------------------------------------------


def max_array_size() -> int:
    """The cluster's MaxArraySize (array indices must stay below it), from `scontrol show config`."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "config"], capture_output=True, text=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise UsageError(
            f"executor slurm: cannot reach SLURM (`scontrol show config`): {err}"
        ) from None
    match = re.search(r"^MaxArraySize\s*=\s*(\d+)", out, re.MULTILINE)
    return int(match.group(1)) if match else DEFAULT_MAX_ARRAY_SIZE


def chunks(items: Sequence, size: int) -> list[list]:
    """`items` cut into consecutive lists of at most `size`."""
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def base_state(sacct_state: str) -> str:
    """ "CANCELLED by 0" -> "CANCELLED"; "" (not in sacct yet) -> "UNKNOWN"."""
    return (sacct_state.split() or ["UNKNOWN"])[0].upper()


def sbatch_parameters(settings: SlurmSettings, job_name: str) -> dict:
    """submitit SlurmExecutor parameters for one trial's job."""
    params: dict = {
        "job_name": job_name,
        "time": settings.time_min,
        "nodes": settings.nodes,
        "ntasks_per_node": settings.tasks,
        "cpus_per_task": settings.cpus_per_task,
        "array_parallelism": settings.array_parallelism,
        "signal_delay_s": settings.signal_delay_s,
        "setup": list(settings.setup),
        # Requeue must be allowed for preemption to resume rather than fail; flags may override.
        "additional_parameters": {"requeue": True, **settings.sbatch},
    }
    optional = {
        "partition": settings.partition,
        "account": settings.account,
        "qos": settings.qos,
        "constraint": settings.constraint,
        "gpus_per_node": settings.gpus_per_node or None,
        "mem": f"{round(settings.mem_gb * 1024)}MB" if settings.mem_gb else None,
    }
    params.update({k: v for k, v in optional.items() if v is not None})
    return params


# --- the job's callable -----------------------------------------------------------------------


class TrialBatch:
    """What a SLURM job runs: its trials one after another, in every task of the job (the DDP
    ranks of one trial; optbench.train.distributed reads SLURM's variables).

    Picklable plain data. Stops: the trial catches SIGUSR2 and SIGTERM, checkpoints at the current
    step and delivers the signal again to submitit's handler. On SIGUSR2 (SLURM's warning before
    the time limit) that handler calls `checkpoint` and requeues this job. On SIGTERM (SLURM
    itself requeues, preempts or cancels the job) it only logs, and the trial raises
    `TrialInterrupted`: exit, SLURM does the rest. After a requeue the same batch runs again;
    trials resume from their checkpoints, and those that already wrote their result return it
    untouched."""

    def __init__(self, jobs: Sequence[TrialJob]):
        self.jobs = list(jobs)

    def __call__(self) -> list[str]:
        import torch

        from optbench.train.loop import TrialInterrupted, run_trial

        # task/none and some clusters do not bind CPUs: keep torch within the task's share.
        torch.set_num_threads(int(os.environ.get("SLURM_CPUS_PER_TASK", "1")))
        device = "cuda" if torch.cuda.is_available() else "cpu"
        statuses = []
        for job in self.jobs:
            try:
                result = run_trial(job.config, job.out_dir, device=device, resume=True)
            except TrialInterrupted as stop:  # checkpoint written; SLURM ends or requeues us
                raise SystemExit(128 + stop.signum) from None
            statuses.append(result.status)
        return statuses

    def checkpoint(self, *args, **kwargs) -> submitit.helpers.DelayedSubmission:
        """submitit's hook before it requeues the job: run the same trials again."""
        return submitit.helpers.DelayedSubmission(TrialBatch(self.jobs))


# --- the record of submitted jobs ---------------------------------------------------------------


def config_hash(config: TrainConfig) -> str:
    return hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:16]


@dataclass(frozen=True)
class JobRecord:
    """One submitted trial: which SLURM job runs it and where its log is."""

    key: str
    job_id: str
    config: str  # config_hash of the trial's TrainConfig
    log: str
    submitted: float
    ended: str | None = None  # the final state, once reported to a driver (then it recorded it)


def read_records(folder: Path) -> dict[str, JobRecord]:
    """The latest record per trial key (later lines win: a resubmission replaces a record)."""
    path = Path(folder) / JOBS_FILE
    if not path.is_file():
        return {}
    records = {}
    for line in path.read_text().splitlines():
        if line.strip():
            rec = JobRecord(**json.loads(line))
            records[rec.key] = rec
    return records


def append_records(folder: Path, records: Iterable[JobRecord]) -> None:
    lines = "".join(json.dumps(asdict(r)) + "\n" for r in records)
    with open(Path(folder) / JOBS_FILE, "a") as f:
        f.write(lines)
        f.flush()


def sacct_states(job_ids: Iterable[str]) -> dict[str, str]:
    """Base state of each job id (e.g. "123_4"), from one forced sacct call for all of them."""
    watcher = submitit.SlurmJob.watcher
    ids = sorted(set(job_ids))
    for job_id in ids:
        watcher.register_job(job_id)
    watcher.update()
    states = {}
    for job_id in ids:
        state = watcher.get_state(job_id, mode="cache")
        if state == "UNKNOWN" and "_" in job_id:
            # An array cancelled before its elements were split out shows only as "<array id>".
            state = watcher.get_state(job_id.split("_")[0], mode="cache")
        states[job_id] = base_state(state)
    return states


def cancel_jobs(job_ids: Iterable[str]) -> None:
    ids = sorted(set(job_ids))
    if ids:
        subprocess.run(["scancel", *ids], check=False, capture_output=True, timeout=60)


def followed_jobs(
    folder: Path, jobs: Sequence[TrialJob] | None = None
) -> dict[str, tuple[JobRecord, str]]:
    """Trial key -> (its job record, that job's sacct state), for the trials whose job end no
    driver has recorded yet (queued, running, or ended while nobody watched); with `jobs`, only
    theirs, and only where the record is for the same config."""
    records = {k: r for k, r in read_records(folder).items() if r.ended is None}
    if jobs is not None:
        wanted = {j.key: config_hash(j.config) for j in jobs}
        records = {k: r for k, r in records.items() if wanted.get(k) == r.config}
    if not records:
        return {}
    states = sacct_states(r.job_id for r in records.values())
    return {key: (rec, states[rec.job_id]) for key, rec in records.items()}


def end_event(folder: Path, job: TrialJob, rec: JobRecord, state: str) -> JobEvent:
    """The event for a trial whose job ended, noted in jobs.jsonl as reported."""
    append_records(folder, [replace(rec, ended=state)])
    result = read_result(job.out_dir)
    if result is not None and result.config == job.config:
        return JobEvent(job.key, "ended")  # finished, diverged, or crashed with its own message
    if state == "UNKNOWN":
        why = f"SLURM job {rec.job_id} vanished (sacct does not know it)"
    elif state == "COMPLETED":
        why = f"SLURM job {rec.job_id} completed without writing the result file"
    else:
        why = f"SLURM job {rec.job_id} {state}"
    return JobEvent(job.key, "lost", f"{why}; log: {rec.log}")


def settle_ended(folder: Path, jobs: Sequence[TrialJob]) -> list[JobEvent]:
    """End events of those of `jobs` whose recorded job ended while no driver followed it (the
    driver was detached, interrupted or killed). `optbench run` records them before it plans, so
    that such a trial's result is recorded and a failure retried in that same run."""
    by_key = {j.key: j for j in jobs}
    return [
        end_event(folder, by_key[key], rec, state)
        for key, (rec, state) in followed_jobs(folder, jobs).items()
        if state not in ACTIVE_STATES
    ]


# --- the executor --------------------------------------------------------------------------


@dataclass
class _Tracked:
    record: JobRecord
    job: TrialJob
    first_seen: float
    running: bool = False


class SlurmExecutor:
    """The SLURM executor behind `optbench run` (see optbench.executors.base.Executor)."""

    jobs_outlive_driver = True  # the driver may detach (Ctrl-C, --detach); a later run reattaches

    def __init__(self, settings: SlurmSettings, folder: Path, job_name: str):
        self.settings = settings
        self.folder = Path(folder).resolve()
        self.job_name = job_name
        self._tracked: dict[str, _Tracked] = {}  # trial key -> its job
        self._events: list[JobEvent] = []
        self._last_sacct = float("-inf")
        self.submitted = 0
        self.reattached = 0

    def _executor(self) -> submitit.SlurmExecutor:
        executor = submitit.SlurmExecutor(
            folder=self.folder / "%j", max_num_timeout=self.settings.max_requeues
        )
        executor.update_parameters(**sbatch_parameters(self.settings, self.job_name))
        return executor

    def settle(self, jobs: Sequence[TrialJob]) -> list[JobEvent]:
        return settle_ended(self.folder, jobs)

    def submit(self, jobs: Sequence[TrialJob]) -> str:
        """Reattach trials whose recorded job is still queued or running; report those whose
        recorded job has ended since `settle_ended` looked; submit the rest as job arrays."""
        self.folder.mkdir(parents=True, exist_ok=True)
        known = followed_jobs(self.folder, jobs)
        now = time.monotonic()
        fresh = []
        for job in jobs:
            if job.key not in known:
                fresh.append(job)
                continue
            rec, state = known[job.key]
            if state in ACTIVE_STATES:
                self._tracked[job.key] = _Tracked(rec, job, now)
                self.reattached += 1
            else:  # ended a moment ago: report it honestly; the next run retries a failure
                self._events.append(end_event(self.folder, job, rec, state))
        self._submit_new(fresh)
        return f"SLURM; jobs and logs in {self.folder}"

    def _submit_new(self, jobs: Sequence[TrialJob]) -> None:
        if not jobs:
            return
        executor = self._executor()
        batches = chunks(jobs, self.settings.trials_per_job)
        for array in chunks(batches, max_array_size()):
            with executor.batch():
                handles = [executor.submit(TrialBatch(batch)) for batch in array]
            now = time.monotonic()
            new = []
            for handle, batch in zip(handles, array, strict=True):
                for job in batch:
                    rec = JobRecord(
                        job.key, handle.job_id, config_hash(job.config),
                        str(handle.paths.stderr), time.time(),
                    )  # fmt: skip
                    new.append(rec)
                    self._tracked[job.key] = _Tracked(rec, job, now)
            append_records(self.folder, new)  # recorded before anything else can go wrong
            self.submitted += len(new)

    def poll(self, timeout: float) -> list[JobEvent]:
        """Events since the last poll. Asks sacct at most every `poll_s` seconds; sleeps up to
        `timeout` seconds waiting for that moment."""
        if self._events or not self._tracked:
            events, self._events = self._events, []
            return events
        wait = self._last_sacct + self.settings.poll_s - time.monotonic()
        if wait > 0:
            time.sleep(min(wait, max(timeout, 0.0)))
            if wait > timeout:
                return []
        self._last_sacct = time.monotonic()
        states = sacct_states(t.record.job_id for t in self._tracked.values())
        now = time.monotonic()
        events = []
        for key, tracked in list(self._tracked.items()):
            state = states[tracked.record.job_id]
            ended = state not in ACTIVE_STATES
            if state == "UNKNOWN" and now - tracked.first_seen > VANISH_S:
                ended = True
            if not ended:
                result = read_result(tracked.job.out_dir)
                if result is not None and result.config == tracked.job.config:
                    ended = True  # one of several trials of a job that is still running
            if ended:
                events.append(end_event(self.folder, tracked.job, tracked.record, state))
                del self._tracked[key]
            elif state == "RUNNING" and not tracked.running:
                tracked.running = True
                events.append(JobEvent(key, "running"))
        return events

    def job_ids(self) -> set[str]:
        return {t.record.job_id for t in self._tracked.values()}

    def close(self, cancel: bool) -> None:
        """With cancel, scancel every job still followed; without, leave them running (detach)."""
        if cancel:
            cancel_jobs(self.job_ids())
        self._tracked.clear()


# --- study-level entry points (optbench run / cancel / status) ------------------------------


def job_folder(spec: StudySpec) -> Path:
    """Where a study's job scripts, logs and jobs.jsonl live (a shared file system)."""
    return spec.executor.slurm.folder or spec.study_dir / "slurm"


def cancel_study_jobs(folder: Path) -> list[str]:
    """scancel every recorded job of a study that may still run; returns their ids."""
    active = {rec.job_id for rec, state in followed_jobs(folder).values() if state in ACTIVE_STATES}
    cancel_jobs(active)
    return sorted(active)


def slurm_summary(spec: StudySpec) -> str:
    """One line for `optbench status`: the SLURM states of trials not recorded yet."""
    folder = job_folder(spec)
    counts = Counter(state for _, state in followed_jobs(folder).values())
    if not counts:
        return f"SLURM: no job of this study is queued or running (job files in {folder})"
    parts = ", ".join(f"{n} {state}" for state, n in counts.most_common())
    return f"SLURM: trials not recorded yet: {parts} (job files in {folder}); `optbench run` follows them"

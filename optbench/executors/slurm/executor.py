"""`SlurmExecutor`: the Executor protocol (executors/protocol.py) on SLURM. It submits trials as job
arrays (journaled first, journal.py), follows their states (client.py) and says when a job
ended (ends.py); it reattaches to a study's jobs that outlived an earlier driver.
"""

from __future__ import annotations

import itertools
import secrets
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import submitit
from submitit.core.utils import FailedJobError, FailedSubmissionError

from optbench.errors import UsageError
from optbench.executors.protocol import JobEvent, JobTime
from optbench.executors.slurm.client import (
    ACTIVE_STATES,
    Survey,
    chunks,
    cluster_slots,
    error_line,
    max_array_size,
    scancel,
    survey,
)
from optbench.executors.slurm.ends import end_event, result_written, settle_ended
from optbench.executors.slurm.job import JOB_STEP_CODE, TrialBatch
from optbench.executors.slurm.journal import (
    COMMENT_TAG,
    JobRecord,
    Submission,
    append_lines,
    append_records,
    config_hash,
    followed_jobs,
)
from optbench.executors.slurm.study import cancel_study_jobs, completed_job_times, jobs_status
from optbench.plan.costs import round_jobs
from optbench.spec.schema import ExecutorSettings, SlurmSettings
from optbench.trial.jobs import Job, TrialJob, members_of

# states of a job that ran and waits again (requeued after a time limit, preempted, suspended):
# its trial is not running, so it is not stalled either
WAITING_AGAIN = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED"})
VANISH_S = 300.0  # a job neither sacct nor squeue has known for this long is gone (purged)
NOTE_EVERY_S = 300.0  # while SLURM does not answer, the follower says so at most this often


def sbatch_parameters(settings: SlurmSettings, job_name: str) -> dict:
    """submitit SlurmExecutor parameters for one trial's job."""
    extra = dict(settings.sbatch)
    params: dict = {
        "job_name": job_name,
        "time": settings.time_min,
        "nodes": settings.nodes,
        "ntasks_per_node": settings.tasks,
        "cpus_per_task": settings.cpus_per_task,
        "array_parallelism": settings.array_parallelism,
        "signal_delay_s": settings.signal_delay_s,
        "setup": list(settings.setup),
        "comment": str(extra.pop("comment", "")),  # the submission's token is added to it
        # Requeue must be allowed for preemption to resume rather than fail; flags may override.
        "additional_parameters": {"requeue": True, **extra},
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


@dataclass
class _Tracked:
    record: JobRecord
    job: TrialJob
    first_seen: float
    running: bool = False
    ending: str | None = None  # why the driver cancelled it (a stall): its end's message


@dataclass
class _Trouble:
    """While SLURM does not answer: since when, and when the follower last said so."""

    since: float | None = None
    said: float = float("-inf")
    lines: list[str] = field(default_factory=list)


class SlurmExecutor:
    """The SLURM executor behind `optbench run` (see optbench.executors.protocol.Executor). `notify`
    prints a line for the user while it follows jobs (SLURM not answering, and answering again)."""

    jobs_outlive_driver = True  # the driver may detach (Ctrl-C, --detach); a later run reattaches

    def __init__(
        self,
        settings: SlurmSettings,
        folder: Path,
        job_name: str,
        notify: Callable[[str], None] = print,
        fill_slots: bool = False,
    ):
        self.settings = settings
        # trials_per_job was `auto` (resolved to the most a job holds): a round is cut into at
        # least as many jobs as SLURM runs at once (plan/costs.py: round_jobs)
        self.fill_slots = fill_slots
        self.folder = Path(folder).resolve()
        self.job_name = job_name
        self.notify = notify
        self._tracked: dict[str, _Tracked] = {}  # trial key -> its job
        self._events: list[JobEvent] = []
        self._last_sacct = float("-inf")
        self._trouble = _Trouble()
        self.submitted = 0
        self.reattached = 0

    @staticmethod
    def threads_per_trial(settings: ExecutorSettings) -> int:
        """A job's cpus_per_task (the job keeps torch within them: job.py)."""
        return settings.slurm.cpus_per_task

    def _executor(self) -> submitit.SlurmExecutor:
        # The job step holds SIGUSR2 back until submitit can handle it (JOB_STEP_CODE).
        python = f"{shlex.quote(sys.executable)} -u -S -c {shlex.quote(JOB_STEP_CODE)}"
        executor = submitit.SlurmExecutor(
            folder=self.folder / "%j", max_num_timeout=self.settings.max_requeues, python=python
        )
        executor.update_parameters(**sbatch_parameters(self.settings, self.job_name))
        return executor

    def settle(self, jobs: Sequence[TrialJob]) -> list[JobEvent]:
        return settle_ended(self.folder, jobs)

    def submit(self, jobs: Sequence[Job]) -> str:
        """Reattach trials whose recorded job may still run; report those whose recorded job has
        ended since `settle_ended` looked; submit the rest as job arrays."""
        self.folder.mkdir(parents=True, exist_ok=True)
        trials = [m for job in jobs for m in members_of(job)]
        known, found = followed_jobs(self.folder, trials, persist=True)
        self._say_trouble(found)
        now = time.monotonic()
        fresh = []
        for job in jobs:  # a population is followed member by member, submitted as one
            if any(m.key not in known for m in members_of(job)):
                fresh.append(job)
                continue
            for member in members_of(job):
                rec, state = known[member.key]
                if state in ACTIVE_STATES:
                    self._tracked[member.key] = _Tracked(rec, member, now)
                    self.reattached += 1
                else:  # ended a moment ago: report it honestly; it is retried like any failure
                    self._events.append(end_event(self.folder, member, rec, state))
        self._submit_new(fresh)
        # A reattaching run submits nothing: say what was submitted and what is followed.
        return (
            f"SLURM: {self.submitted} trial(s) submitted, {self.reattached} already queued or "
            f"running and followed; jobs and logs in {self.folder}"
        )

    def _submit_new(self, jobs: Sequence[Job]) -> None:
        if not jobs:
            return
        executor = self._executor()
        comment = executor.parameters["comment"]
        # "auto" is resolved from the cost plan where a study makes its executor
        # (executors._slurm_executor); left unresolved it is a trial per job
        per_job = self.settings.trials_per_job
        most = 1 if per_job == "auto" else per_job  # populations count as one
        if self.fill_slots:
            sizes = round_jobs(len(jobs), self.slots(self.settings), most)
            ends = list(itertools.accumulate(sizes))
            batches = [list(jobs[end - size : end]) for size, end in zip(sizes, ends, strict=True)]
        else:
            batches = chunks(jobs, most)
        for array in chunks(batches, max_array_size()):
            trials = [[m for job in batch for m in members_of(job)] for batch in array]
            intent = Submission(
                secrets.token_hex(8),
                [[m.key for m in batch] for batch in trials],
                {m.key: config_hash(m.config) for batch in trials for m in batch},
                time.time(),
            )
            append_lines(self.folder, [asdict(intent)])  # before sbatch: see adopt_interrupted
            executor.update_parameters(comment=f"{comment} {COMMENT_TAG}{intent.token}".strip())
            try:
                with executor.batch():
                    handles = [executor.submit(TrialBatch(batch)) for batch in array]
            except (FailedJobError, FailedSubmissionError) as err:
                raise UsageError(
                    f"executor slurm: sbatch refused the jobs: {error_line('sbatch', str(err))}"
                ) from None
            now = time.monotonic()
            new = []
            for handle, batch in zip(handles, trials, strict=True):
                for job in batch:
                    rec = JobRecord(
                        job.key, handle.job_id, config_hash(job.config),
                        str(handle.paths.stderr), time.time(), submission=intent.token,
                    )  # fmt: skip
                    new.append(rec)
                    self._tracked[job.key] = _Tracked(rec, job, now)
            append_records(self.folder, new)
            self.submitted += len(new)

    @staticmethod
    def slots(s: SlurmSettings) -> int:
        """How many jobs SLURM runs at once for a study of settings `s`: its array_parallelism,
        or fewer where the partition holds fewer jobs of its shape (cluster_slots; unknown:
        array_parallelism)."""
        fitting = cluster_slots(s.partition, s.cpus_per_task * s.tasks, s.gpus_per_node, s.nodes)
        return min(s.array_parallelism, fitting or s.array_parallelism)

    def _say_trouble(self, found: Survey) -> None:
        """Say once per NOTE_EVERY_S that SLURM does not answer, and once that it is back."""
        now, trouble = time.monotonic(), self._trouble
        if found.problem is None:
            if trouble.since is not None:
                self.notify(f"SLURM answers again (after {now - trouble.since:.0f} s)")
            self._trouble = _Trouble()
            return
        if trouble.since is None:
            trouble.since = now
        if now - trouble.said >= NOTE_EVERY_S:
            trouble.said = now
            self.notify(
                f"{found.problem}; following {len(self._tracked)} job(s), none resubmitted "
                f"while it may still run (said again every {NOTE_EVERY_S / 60:.0f} min while this lasts)"
            )

    def poll(self, timeout: float) -> list[JobEvent]:
        """Events since the last poll. Asks SLURM at most every `poll_s` seconds; sleeps up to
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
        found = survey(t.record.job_id for t in self._tracked.values())
        self._say_trouble(found)
        now = time.monotonic()
        events = []
        for key, tracked in list(self._tracked.items()):
            state = found.states[tracked.record.job_id]
            ended = state not in ACTIVE_STATES
            if state == "UNKNOWN" and now - tracked.first_seen > VANISH_S:
                ended = True  # neither sacct nor squeue has known it for VANISH_S
            if not ended and result_written(tracked.job):
                ended = True  # one of several trials of a job that is still running
            if ended:
                event = end_event(self.folder, tracked.job, tracked.record, state)
                if event.kind == "lost" and tracked.ending:
                    event = JobEvent(key, "lost", tracked.ending)
                events.append(event)
                del self._tracked[key]
            elif state == "RUNNING" and not tracked.running:
                tracked.running = True
                events.append(JobEvent(key, "running"))
            elif state in WAITING_AGAIN and tracked.running:
                tracked.running = False
                events.append(JobEvent(key, "queued"))
        return events

    def end(self, key: str, why: str) -> list[str]:
        """scancel the job (or job-array element) that runs trial `key`: its trials, and the
        other trials of that job (trials_per_job), end as lost saying why."""
        tracked = self._tracked.get(key)
        if tracked is None:
            return []
        job_id = tracked.record.job_id
        keys = [k for k, t in self._tracked.items() if t.record.job_id == job_id]
        for k in keys:
            self._tracked[k].ending = (
                why if k == key else f"SLURM job {job_id} cancelled: its trial {key} {why}"
            )
        scancel({job_id})
        return keys

    def job_ids(self) -> set[str]:
        return {t.record.job_id for t in self._tracked.values()}

    def close(self, cancel: bool) -> None:
        """With cancel, scancel every job still followed; without, leave them running (detach)."""
        if cancel:
            scancel(self.job_ids())
        self._tracked.clear()

    def status(self) -> tuple[set[str], str | None]:
        """The study's trials whose job runs now, and a line with its jobs' SLURM states."""
        return jobs_status(self.folder)

    def cancel(self) -> tuple[list[str], bool]:
        """scancel the study's recorded jobs that may still run: what SLURM did, and whether
        every cancel succeeded."""
        return cancel_study_jobs(self.folder)

    def job_times(self) -> list[JobTime]:
        """The study's latest jobs that completed, with sacct's elapsed time."""
        return completed_job_times(self.folder)

"""Run trials as SLURM jobs through submitit: job arrays, live follow, reattach, honest states.

Submission is journaled in `<folder>/jobs.jsonl`, which only the driver writes and which outlives
it. Before each sbatch the driver appends the submission's intent (a token and the trials of
each array element); the jobs carry `optbench:<token>` in their --comment; after sbatch it
appends one line per trial (trial key -> SLURM job id, config hash, log path). A driver killed
between the two leaves an intent without job lines: the next `optbench run` (and `status`,
`cancel`) finds that submission's jobs in squeue by their comment and adopts them. So a later
run reattaches to every job that is still queued or running instead of submitting it twice.
Arrays are split so that no index reaches the cluster's MaxArraySize.

Job states come from one `sacct` call for all jobs, at most every `poll_s` seconds, and from
`squeue` where sacct cannot tell. sacct *failing* (accounting down) is not sacct *not knowing*
a job: the states then come from squeue, which lists queued, running and recently ended jobs; a
job it no longer lists has ended (how, only sacct can say: state "ENDED"); when neither answers,
every job may still run ("UNREACHABLE"). A job is declared vanished only when both answer
without it for VANISH_S. While SLURM does not answer, the executor says so once per NOTE_EVERY_S
and keeps following; no trial whose job may still run is reported ended, so none is resubmitted.

A job that ends without the trial's result file is reported "lost" with its SLURM state and log
path (a time limit is named as such, with the limit and the requeues used); the driver records
it as a failed trial and retries it. Jobs that ended while no driver followed them are settled
by the next run before it plans (`settle_ended`), so their failures are retried in that run.

Preemption and time limits: the job's callable (`TrialBatch`) implements submitit's checkpoint
protocol, so on SIGUSR2 submitit requeues the job (at most `max_requeues` times for time
limits); a requeued job runs the same trials again, each resuming from its checkpoint. SLURM
may send SIGUSR2 at any moment, also while the job's Python still starts, imports and unpickles
the job, before submitit's handler exists, when the signal's default action would kill the job
with nothing saved or requeued. So the job step's Python (JOB_STEP_CODE) blocks SIGUSR2 first
thing, before site-packages are even set up, and `TrialBatch` unblocks it once submitit's
handler is in place: a signal that came meanwhile is delivered then, and requeues the job. What
remains unguarded is the interpreter's own start (tens of milliseconds).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import submitit
from submitit.core.utils import FailedJobError, FailedSubmissionError, JobPaths

from optbench.errors import UsageError
from optbench.executors.base import JobEvent, TrialJob
from optbench.spec import SlurmSettings, StudySpec
from optbench.train.config import TrainConfig
from optbench.train.results import read_result

JOBS_FILE = "jobs.jsonl"
DEFAULT_MAX_ARRAY_SIZE = 1001  # SLURM's own default
COMMENT_TAG = "optbench:"  # + a submission's token: each job's --comment
# States of a job that may still run: sacct's and squeue's (submitit's list, plus the transient
# ones), "UNKNOWN" (neither sacct nor squeue lists it yet) and "UNREACHABLE" (neither answered).
ACTIVE_STATES = frozenset(
    {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED",
     "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT", "PREEMPTED", "UNKNOWN", "UNREACHABLE"}
)  # fmt: skip
ENDED = "ENDED"  # sacct failed and squeue no longer lists the job: it ended, how is not known
VANISH_S = 300.0  # a job neither sacct nor squeue has known for this long is gone (purged)
NOTE_EVERY_S = 300.0  # while SLURM does not answer, the follower says so at most this often
# What a job step's Python runs (`python -u -S -c JOB_STEP_CODE -u -m submitit.core._submit
# <folder>`: submitit appends its own arguments, the last is the job folder). -S: nothing runs
# before the block, not even site-packages' .pth files, which take a good part of a second.
JOB_STEP_CODE = (
    "import signal; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2}); "
    "import site, sys; site.main(); "
    "from submitit.core.submission import process_job; process_job(sys.argv[-1])"
)


# --- talking to SLURM ---------------------------------------------------------------------------


class SlurmCommandError(Exception):
    """A SLURM command failed (did not answer), as opposed to answering without a job."""

    def __init__(self, command: str, reason: str):
        super().__init__(f"{command} failed: {reason}")
        self.command, self.reason = command, reason


def error_line(command: str, stderr: str) -> str:
    """The last line of a SLURM command's error output, without its "<command>: error: "."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return re.sub(rf"^{command}: error: ", "", lines[-1]) if lines else ""


def slurm_command(*args: str, timeout: float = 60) -> str:
    """Run a SLURM client command; its output, or SlurmCommandError with its last error line."""
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as err:
        raise SlurmCommandError(args[0], str(err)) from None
    if proc.returncode != 0:
        reason = error_line(args[0], proc.stderr) or f"exit status {proc.returncode}"
        raise SlurmCommandError(args[0], reason)
    return proc.stdout


def max_array_size() -> int:
    """The cluster's MaxArraySize (array indices must stay below it), from `scontrol show config`."""
    try:
        out = slurm_command("scontrol", "show", "config", timeout=30)
    except SlurmCommandError as err:
        raise UsageError(
            f"executor slurm: cannot reach SLURM (`scontrol show config`): {err.reason}"
        ) from None
    match = re.search(r"^MaxArraySize\s*=\s*(\d+)", out, re.MULTILINE)
    return int(match.group(1)) if match else DEFAULT_MAX_ARRAY_SIZE


def chunks(items: Sequence, size: int) -> list[list]:
    """`items` cut into consecutive lists of at most `size`."""
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def base_state(sacct_state: str) -> str:
    """ "CANCELLED by 0" -> "CANCELLED"; "" (not in sacct yet) -> "UNKNOWN"."""
    return (sacct_state.split() or ["UNKNOWN"])[0].upper()


def sacct_states(job_ids: Iterable[str]) -> dict[str, str]:
    """Base state of each job id (e.g. "123_4") from one sacct call; "UNKNOWN" where sacct does
    not know the job. Raises SlurmCommandError when sacct fails (accounting down)."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    arrays = sorted({job_id.split("_")[0] for job_id in ids})
    out = slurm_command("sacct", "-X", "-o", "JobID,State", "--parsable2", "-j", ",".join(arrays))
    info = submitit.slurm.slurm.SlurmInfoWatcher().read_info(out)  # expands "7_[1-3]" ranges
    states = {}
    for job_id in ids:
        found = info.get(job_id) or info.get(job_id.split("_")[0])  # an array cancelled before
        states[job_id] = base_state(found["State"] if found else "")  # its elements split out
    return states


def squeue_jobs() -> dict[str, tuple[str, str]]:
    """Job id -> (state, comment) of this user's jobs that the controller still knows: queued,
    running, or ended less than MinJobAge ago. Raises SlurmCommandError when squeue fails."""
    out = slurm_command("squeue", "--me", "--noheader", "--array", "--states=all", "-o", "%i|%T|%k")
    jobs = {}
    for line in out.splitlines():
        job_id, state, comment = (line.split("|", 2) + ["", ""])[:3]
        jobs[job_id.strip()] = (base_state(state), comment)
    return jobs


@dataclass(frozen=True)
class Survey:
    """What SLURM says about some jobs: each one's state, and which source did not answer."""

    states: dict[str, str]
    sacct_error: str | None = None
    squeue_error: str | None = None

    @property
    def problem(self) -> str | None:
        """One line saying which of SLURM's sources failed, or None when they answered."""
        if self.sacct_error and self.squeue_error:
            return (
                f"SLURM does not answer (sacct: {self.sacct_error}; squeue: "
                f"{self.squeue_error}): every job may still run"
            )
        if self.sacct_error:
            return (
                f"SLURM accounting (sacct) is not answering ({self.sacct_error}): "
                "job states come from squeue meanwhile"
            )
        if self.squeue_error:
            return f"squeue is not answering ({self.squeue_error}): jobs sacct does not know yet may still run"
        return None


def survey(job_ids: Iterable[str]) -> Survey:
    """The state of each job: sacct's; squeue's where sacct does not know the job or failed."""
    ids = sorted(set(job_ids))
    sacct_error = None
    try:
        states = sacct_states(ids)
    except SlurmCommandError as err:
        states, sacct_error = dict.fromkeys(ids, "UNKNOWN"), err.reason
    unsure = [job_id for job_id in ids if states[job_id] == "UNKNOWN"]
    if not unsure:
        return Survey(states)
    try:
        listed = squeue_jobs()
    except SlurmCommandError as err:
        states.update(dict.fromkeys(unsure, "UNREACHABLE"))
        return Survey(states, sacct_error, err.reason)
    for job_id in unsure:
        if job_id in listed:
            states[job_id] = listed[job_id][0]
        elif sacct_error:
            states[job_id] = ENDED  # the controller lists every job that may still run
    return Survey(states, sacct_error)


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


# --- the job's callable -----------------------------------------------------------------------


class TrialBatch:
    """What a SLURM job runs: its trials one after another, in every task of the job (the DDP
    ranks of one trial; optbench.train.distributed reads SLURM's variables).

    Picklable plain data. Stops: the trial catches SIGUSR2 and SIGTERM, checkpoints at the current
    step and delivers the signal again to submitit's handler. On SIGUSR2 (SLURM's warning before
    the time limit) that handler calls `checkpoint` and requeues this job, or, once the job has
    used its requeues, ends it (the driver reads that as "ran out of time"). On SIGTERM (SLURM
    itself requeues, preempts or cancels the job) it only logs, and the trial raises
    `TrialInterrupted`: exit, SLURM does the rest. After a requeue the same batch runs again;
    trials resume from their checkpoints, and those that already wrote their result return it
    untouched."""

    def __init__(self, jobs: Sequence[TrialJob]):
        self.jobs = list(jobs)

    def __call__(self) -> list[str]:
        # JOB_STEP_CODE held SIGUSR2 back until submitit's handler was in place: a signal that
        # came meanwhile is delivered now, and that handler requeues the job.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR2})
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


# --- the journal of submitted jobs --------------------------------------------------------------


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
    submission: str | None = None  # the token of the submission that started the job


@dataclass(frozen=True)
class Submission:
    """An intent, journaled before sbatch: the trial keys of each element of one job array."""

    token: str  # the jobs' comment holds COMMENT_TAG + token
    batches: list[list[str]]
    configs: dict[str, str]  # trial key -> config hash
    time: float


def job_log(folder: Path, job_id: str) -> str:
    """Where submitit's job writes its first task's stderr."""
    return str(JobPaths(Path(folder) / "%j", job_id=job_id, task_id=0).stderr)


def read_journal(folder: Path) -> tuple[dict[str, JobRecord], list[Submission]]:
    """The latest record per trial key (later lines win: a resubmission replaces a record), and
    the submissions whose jobs were never recorded (their driver was killed around sbatch)."""
    path = Path(folder) / JOBS_FILE
    if not path.is_file():
        return {}, []
    records: dict[str, JobRecord] = {}
    intents: dict[str, Submission] = {}
    settled: set[str] = set()
    for line in path.read_text().splitlines():
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue  # empty, or cut short by a driver killed while writing it
        if "batches" in data:
            intents[data["token"]] = Submission(**data)
        elif "resolved" in data:
            settled.add(data["resolved"])
        else:
            rec = JobRecord(**data)
            records[rec.key] = rec
            settled.add(rec.submission)
    return records, [s for token, s in intents.items() if token not in settled]


def read_records(folder: Path) -> dict[str, JobRecord]:
    return read_journal(folder)[0]


def append_lines(folder: Path, items: Iterable[dict]) -> None:
    text = "".join(json.dumps(item) + "\n" for item in items)
    with open(Path(folder) / JOBS_FILE, "a") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())  # the journal must survive the driver


def append_records(folder: Path, records: Iterable[JobRecord]) -> None:
    append_lines(folder, (asdict(r) for r in records))


def adopt_interrupted(folder: Path, *, persist: bool) -> list[JobRecord]:
    """Records for the jobs of submissions that a killed driver never recorded, found in squeue
    by their comment; with `persist`, journaled (a submission that started no job is marked
    resolved). A job squeue no longer lists ended long ago: it runs nothing, and its result
    file, if any, is recorded from disk. Raises UsageError when squeue cannot tell."""
    _, interrupted = read_journal(folder)
    if not interrupted:
        return []
    try:
        listed = squeue_jobs()
    except SlurmCommandError as err:
        raise UsageError(
            f"executor slurm: a run was stopped while submitting jobs ({Path(folder) / JOBS_FILE}), "
            f"and squeue, which would tell whether they started, failed: {err.reason}; "
            "run again when SLURM answers"
        ) from None
    by_token: dict[str, list[str]] = {}
    for job_id, (_, comment) in listed.items():
        for token in re.findall(rf"{COMMENT_TAG}([0-9a-f]+)", comment):
            by_token.setdefault(token, []).append(job_id)
    adopted, resolved = [], []
    for sub in interrupted:
        for job_id in sorted(by_token.get(sub.token, [])):
            index = int(job_id.split("_")[1]) if "_" in job_id else 0  # an array of one: a job
            adopted += [
                JobRecord(key, job_id, sub.configs[key], job_log(folder, job_id), sub.time,
                          submission=sub.token)
                for key in sub.batches[index]
            ]  # fmt: skip
        if sub.token not in by_token:
            resolved.append({"resolved": sub.token})
    if persist:
        append_lines(folder, [*(asdict(r) for r in adopted), *resolved])
    return adopted


def followed_jobs(
    folder: Path, jobs: Sequence[TrialJob] | None = None, *, persist: bool = False
) -> tuple[dict[str, tuple[JobRecord, str]], Survey]:
    """Trial key -> (its job record, that job's state), for the trials whose job end no driver
    has recorded yet (queued, running, or ended while nobody watched), jobs of an interrupted
    submission included (journaled with `persist`); with `jobs`, only theirs, and only where the
    record is for the same config. Also the survey, which says if SLURM did not answer."""
    records = {**read_records(folder)}
    records.update({r.key: r for r in adopt_interrupted(folder, persist=persist)})
    records = {k: r for k, r in records.items() if r.ended is None}
    if jobs is not None:
        wanted = {j.key: config_hash(j.config) for j in jobs}
        records = {k: r for k, r in records.items() if wanted.get(k) == r.config}
    if not records:
        return {}, Survey({})
    found = survey(r.job_id for r in records.values())
    return {key: (rec, found.states[rec.job_id]) for key, rec in records.items()}, found


# --- how a job ended ----------------------------------------------------------------------------


def minutes(limit: str) -> str:
    """sacct's "[D-]HH:MM:SS" time limit as "N min" (as time_min is written)."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d+):(\d+)", limit.strip())
    if not match:
        return limit.strip() or "unknown"
    days, hours, mins, secs = (int(g or 0) for g in match.groups())
    return f"{days * 1440 + hours * 60 + mins + secs / 60:g} min"


def out_of_requeues(rec: JobRecord) -> bool:
    """Whether submitit ended the job because it timed out more often than max_requeues (it
    then raises in its signal handler and pickles that error as the job's outcome)."""
    path = JobPaths(Path(rec.log).parent, job_id=rec.job_id, task_id=0).result_pickle
    try:
        outcome = submitit.core.utils.pickle_load(path)
    except Exception:  # noqa: BLE001 - no outcome (killed, never started) or unreadable
        return False
    return outcome[0] == "error" and "timed-out too many times" in str(outcome[1])


def time_limit_reason(rec: JobRecord) -> str:
    """Why a trial's job ran out of time, with its limit and the requeues it used."""
    facts = "its time limit and requeues are unknown (sacct failed)"
    try:
        out = slurm_command(
            "sacct", "-D", "-X", "-n", "-P", "-o", "JobID,Timelimit", "-j", rec.job_id
        )
        runs = [line.split("|") for line in out.splitlines() if line.split("|")[0] == rec.job_id]
        if runs:
            facts = f"time limit {minutes(runs[-1][1])}, requeued {len(runs) - 1} time(s)"
    except SlurmCommandError:
        pass
    return (
        f"SLURM job {rec.job_id} ran out of time ({facts}); raise executor.slurm.time_min "
        "(or max_requeues, or lower trials_per_job): the next attempt resumes from the checkpoint"
    )


def lost_reason(rec: JobRecord, state: str) -> str:
    """Why a trial's job ended without the trial's result file, with where its log is."""
    job = f"SLURM job {rec.job_id}"
    if state == "UNKNOWN":
        why = f"{job} vanished (neither sacct nor squeue knows it)"
    elif state == ENDED:
        why = f"{job} ended while SLURM accounting was down (how is unknown)"
    elif state == "COMPLETED":
        why = f"{job} completed without writing the result file"
    elif state == "TIMEOUT" or (state == "FAILED" and out_of_requeues(rec)):
        why = time_limit_reason(rec)
    else:
        why = f"{job} {state}"
    if Path(rec.log).is_file():
        return f"{why}; log: {rec.log}"
    if state == "CANCELLED":
        return f"{why} before it started (no log)"
    return f"{why}; no log at {rec.log}"


def end_event(folder: Path, job: TrialJob, rec: JobRecord, state: str) -> JobEvent:
    """The event for a trial whose job ended, noted in jobs.jsonl as reported."""
    append_records(folder, [replace(rec, ended=state)])
    result = read_result(job.out_dir)
    if result is not None and result.config == job.config:
        return JobEvent(job.key, "ended")  # finished, diverged, or crashed with its own message
    return JobEvent(job.key, "lost", lost_reason(rec, state))


def settle_ended(folder: Path, jobs: Sequence[TrialJob]) -> list[JobEvent]:
    """End events of those of `jobs` whose recorded job ended while no driver followed it (the
    driver was detached, interrupted or killed). `optbench run` records them before it plans, so
    that such a trial's result is recorded and a failure retried in that same run."""
    by_key = {j.key: j for j in jobs}
    known, _ = followed_jobs(folder, jobs, persist=True)
    return [
        end_event(folder, by_key[key], rec, state)
        for key, (rec, state) in known.items()
        if state not in ACTIVE_STATES
    ]


# --- the executor --------------------------------------------------------------------------


@dataclass
class _Tracked:
    record: JobRecord
    job: TrialJob
    first_seen: float
    running: bool = False


@dataclass
class _Trouble:
    """While SLURM does not answer: since when, and when the follower last said so."""

    since: float | None = None
    said: float = float("-inf")
    lines: list[str] = field(default_factory=list)


class SlurmExecutor:
    """The SLURM executor behind `optbench run` (see optbench.executors.base.Executor). `notify`
    prints a line for the user while it follows jobs (SLURM not answering, and answering again)."""

    jobs_outlive_driver = True  # the driver may detach (Ctrl-C, --detach); a later run reattaches

    def __init__(
        self,
        settings: SlurmSettings,
        folder: Path,
        job_name: str,
        notify: Callable[[str], None] = print,
    ):
        self.settings = settings
        self.folder = Path(folder).resolve()
        self.job_name = job_name
        self.notify = notify
        self._tracked: dict[str, _Tracked] = {}  # trial key -> its job
        self._events: list[JobEvent] = []
        self._last_sacct = float("-inf")
        self._trouble = _Trouble()
        self.submitted = 0
        self.reattached = 0

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

    def submit(self, jobs: Sequence[TrialJob]) -> str:
        """Reattach trials whose recorded job may still run; report those whose recorded job has
        ended since `settle_ended` looked; submit the rest as job arrays."""
        self.folder.mkdir(parents=True, exist_ok=True)
        known, found = followed_jobs(self.folder, jobs, persist=True)
        self._say_trouble(found)
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
            else:  # ended a moment ago: report it honestly; it is retried like any failure
                self._events.append(end_event(self.folder, job, rec, state))
        self._submit_new(fresh)
        # A reattaching run submits nothing: say what was submitted and what is followed.
        return (
            f"SLURM: {self.submitted} trial(s) submitted, {self.reattached} already queued or "
            f"running and followed; jobs and logs in {self.folder}"
        )

    def _submit_new(self, jobs: Sequence[TrialJob]) -> None:
        if not jobs:
            return
        executor = self._executor()
        comment = executor.parameters["comment"]
        batches = chunks(jobs, self.settings.trials_per_job)
        for array in chunks(batches, max_array_size()):
            intent = Submission(
                secrets.token_hex(8),
                [[job.key for job in batch] for batch in array],
                {job.key: config_hash(job.config) for batch in array for job in batch},
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
            for handle, batch in zip(handles, array, strict=True):
                for job in batch:
                    rec = JobRecord(
                        job.key, handle.job_id, config_hash(job.config),
                        str(handle.paths.stderr), time.time(), submission=intent.token,
                    )  # fmt: skip
                    new.append(rec)
                    self._tracked[job.key] = _Tracked(rec, job, now)
            append_records(self.folder, new)
            self.submitted += len(new)

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
            scancel(self.job_ids())
        self._tracked.clear()


# --- study-level entry points (optbench run / cancel / status) ------------------------------


def job_folder(spec: StudySpec) -> Path:
    """Where a study's job scripts, logs and jobs.jsonl live (a shared file system)."""
    return spec.executor.slurm.folder or spec.study_dir / "slurm"


def has_jobs(spec: StudySpec) -> bool:
    """Whether the study has ever submitted to SLURM."""
    return (job_folder(spec) / JOBS_FILE).is_file()


@dataclass(frozen=True)
class Cancelled:
    """What scancel did: the jobs it cancelled, those that had already ended (with their
    state), and why it did not cancel the others."""

    cancelled: list[str]
    already_ended: dict[str, str]
    failed: dict[str, str]


def scancel(job_ids: Iterable[str]) -> Cancelled:
    """scancel the jobs; what SLURM did with each: scancel's errors, then squeue's states (scancel
    is silent about a job that had already ended)."""
    ids = sorted(set(job_ids))
    if not ids:
        return Cancelled([], {}, {})
    try:
        proc = subprocess.run(["scancel", *ids], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as err:
        return Cancelled([], {}, dict.fromkeys(ids, str(err)))
    failed = {}
    for line in proc.stderr.splitlines():  # "scancel: error: Kill job error on job id 5: <why>"
        match = re.search(r"job id (\S+): (.+)$", line)
        if match and match.group(1) in ids:
            failed[match.group(1)] = match.group(2).strip()
    if proc.returncode != 0 and not failed:  # no per-job line: nothing was cancelled
        reason = error_line("scancel", proc.stderr) or f"exit status {proc.returncode}"
        failed = dict.fromkeys(ids, reason)
    try:
        listed = squeue_jobs()
    except SlurmCommandError:
        listed = {}  # scancel answered: trust it
    ended = {
        i: listed[i][0]
        for i in ids
        if i not in failed and i in listed and listed[i][0] not in ACTIVE_STATES | {"CANCELLED"}
    }
    cancelled = [i for i in ids if i not in failed and i not in ended]
    return Cancelled(cancelled, ended, failed)


def cancel_study_jobs(folder: Path) -> tuple[list[str], bool]:
    """scancel every recorded job of a study that may still run. Returns the lines to print (what
    SLURM did) and whether every cancel succeeded."""
    known, found = followed_jobs(folder)
    if found.sacct_error and found.squeue_error:
        return [f"nothing cancelled: {found.problem}"], False
    active = {rec.job_id for rec, state in known.values() if state in ACTIVE_STATES - {"UNKNOWN"}}
    if not active:
        return ["no SLURM job of this study is queued or running"], True
    done = scancel(active)
    lines = []
    if done.cancelled:
        lines.append(f"cancelled {len(done.cancelled)} SLURM job(s): {' '.join(done.cancelled)}")
    lines += [
        f"SLURM job {i} had already ended ({state})" for i, state in done.already_ended.items()
    ]
    lines += [f"scancel failed for SLURM job {i}: {why}" for i, why in done.failed.items()]
    return lines, not done.failed


def slurm_status(spec: StudySpec) -> tuple[set[str], str]:
    """For `optbench status`: the trials whose job is running, and one line with the SLURM
    states of the trials not recorded yet."""
    folder = job_folder(spec)
    known, found = followed_jobs(folder)
    running = {key for key, (_, state) in known.items() if state == "RUNNING"}
    counts = Counter(state for _, state in known.values())
    note = f" ({found.problem})" if found.problem else ""
    if not counts:
        return (
            running,
            f"SLURM: no job of this study is queued or running (job files in {folder}){note}",
        )
    parts = ", ".join(f"{n} {state}" for state, n in counts.most_common())
    return running, (
        f"SLURM: trials not recorded yet: {parts} (job files in {folder}); "
        f"`optbench run` follows them{note}"
    )

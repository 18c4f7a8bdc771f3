"""The journal of a study's SLURM jobs, `<folder>/jobs.jsonl`: only the driver writes it, and it
outlives the driver. An intent (`Submission`) before each sbatch, a `JobRecord` per trial after;
a submission whose driver was killed in between is adopted from squeue by its comment.

It is read and appended through safefs below its folder: a link, a FIFO or a device in its
place is refused in one line, never followed or waited on. A line that is not a record, an
intent or a resolution of the types below (cut short by a killed driver, or not optbench's)
is skipped, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from pydantic import TypeAdapter
from submitit.core.utils import JobPaths

from optbench import safefs
from optbench.errors import UsageError
from optbench.executors.slurm.client import SlurmCommandError, Survey, squeue_jobs, survey
from optbench.trial.config import TrainConfig
from optbench.trial.jobs import TrialJob

JOBS_FILE = "jobs.jsonl"
# Two lines of ~300 bytes per attempt (its record, then its end): the largest study (10,000
# trials) with a few retries each takes tens of MB. A larger file is none of ours.
MAX_JOURNAL_BYTES = 256 << 20
COMMENT_TAG = "optbench:"  # + a submission's token: each job's --comment


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
    raw = safefs.read_bytes(Path(folder) / JOBS_FILE, folder, MAX_JOURNAL_BYTES)
    records: dict[str, JobRecord] = {}
    intents: dict[str, Submission] = {}
    settled: set[str | None] = set()
    for line in (raw or b"").splitlines():
        entry = _entry(line)
        if isinstance(entry, Submission):
            intents[entry.token] = entry
        elif isinstance(entry, JobRecord):
            records[entry.key] = entry
            settled.add(entry.submission)
        elif entry is not None:
            settled.add(entry)  # a resolved submission's token
    return records, [s for token, s in intents.items() if token not in settled]


_RECORD, _SUBMISSION = TypeAdapter(JobRecord), TypeAdapter(Submission)
# A SLURM job id as sbatch gives submitit one: a job, or an array's element. The logs are found
# from it (job_log), so a record naming another is not optbench's.
_JOB_ID = re.compile(r"[0-9]{1,20}(_[0-9]{1,10})?")


def _entry(line: bytes) -> JobRecord | Submission | str | None:
    """One journal line: a job record, a submission, or the token of a resolved submission;
    None for anything else (empty, cut short by a driver killed while writing it, not JSON,
    or not of these fields and types)."""
    try:
        data = json.loads(line)
        if not isinstance(data, dict):
            return None
        if "batches" in data:
            return _SUBMISSION.validate_python(data)
        if "resolved" in data:
            return data["resolved"] if isinstance(data["resolved"], str) else None
        record = _RECORD.validate_python(data)
        return record if _JOB_ID.fullmatch(record.job_id) else None
    except (ValueError, RecursionError):  # pydantic's ValidationError is a ValueError
        return None


def read_records(folder: Path) -> dict[str, JobRecord]:
    return read_journal(folder)[0]


def append_lines(folder: Path, items: Iterable[dict]) -> None:
    text = "".join(json.dumps(item) + "\n" for item in items)
    path = Path(folder) / JOBS_FILE
    try:
        with os.fdopen(safefs.open_rw(path, folder, append=True), "a") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # the journal must survive the driver
    except OSError as err:  # a full disk: a failed write's error names no file (docs/faults.md)
        raise OSError(err.errno, err.strerror, str(path)) from None


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

"""How a trial's SLURM job ended, said in words for the driver (a time limit with its limit and
the requeues used, a vanished job, a cancel), and the end events of jobs that ended while no
driver followed them. The executor only says that a job ended; the driver reads the result file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from optbench import safefs
from optbench.executors.protocol import JobEvent
from optbench.executors.slurm.client import ACTIVE_STATES, ENDED, SlurmCommandError, slurm_command
from optbench.executors.slurm.journal import JobRecord, append_records, followed_jobs, job_log
from optbench.trial.jobs import TrialJob
from optbench.trial.results import RESULT_FILE


def minutes(limit: str) -> str:
    """sacct's "[D-]HH:MM:SS" time limit as "N min" (as time_min is written)."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d+):(\d+)", limit.strip())
    if not match:
        return limit.strip() or "unknown"
    days, hours, mins, secs = (int(g or 0) for g in match.groups())
    return f"{days * 1440 + hours * 60 + mins + secs / 60:g} min"


# What submitit's job writes to its stderr when it timed out more often than max_requeues
# (core/job_environment.py raises it in the signal handler; the job logs it and its traceback).
OUT_OF_REQUEUES = b"Job not requeued because: timed-out too many times"
LOG_TAIL_BYTES = 64 << 10  # the message ends the log: the traceback follows it, nothing else


def out_of_requeues(folder: Path, rec: JobRecord) -> bool:
    """Whether submitit ended the job because it timed out more often than max_requeues, as the
    end of its stderr log says. The log is found from the job's id below `folder` and read as
    bytes through safefs; never the job's result pickle, which a file planted in a study folder
    could make run code as it is unpickled."""
    try:
        log = safefs.open_file(Path(job_log(folder, rec.job_id)), folder)
        if log is None:  # never started, or its log is gone
            return False
        with log:
            log.seek(max(0, os.fstat(log.fileno()).st_size - LOG_TAIL_BYTES))
            return OUT_OF_REQUEUES in log.read(LOG_TAIL_BYTES)
    except (OSError, safefs.UnsafePath):  # unreadable; a link, a FIFO, an id leaving `folder`
        return False


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


def lost_reason(folder: Path, rec: JobRecord, state: str) -> str:
    """Why a trial's job ended without the trial's result file, with where its log is."""
    job = f"SLURM job {rec.job_id}"
    if state == "UNKNOWN":
        why = f"{job} vanished (neither sacct nor squeue knows it)"
    elif state == ENDED:
        why = f"{job} ended while SLURM accounting was down (how is unknown)"
    elif state == "COMPLETED":
        why = f"{job} completed without writing the result file"
    elif state == "TIMEOUT" or (state == "FAILED" and out_of_requeues(folder, rec)):
        why = time_limit_reason(rec)
    else:
        why = f"{job} {state}"
    if Path(rec.log).is_file():
        return f"{why}; log: {rec.log}"
    if state == "CANCELLED":
        return f"{why} before it started (no log)"
    return f"{why}; no log at {rec.log}"


def result_written(job: TrialJob) -> bool:
    """Whether the trial's folder holds a result file (looked at without following a link; a
    trial folder that became a link counts too: the driver fails that trial, saying so)."""
    try:
        return safefs.stat(job.out_dir / RESULT_FILE, job.root) is not None
    except safefs.UnsafePath:
        return True


def end_event(folder: Path, job: TrialJob, rec: JobRecord, state: str) -> JobEvent:
    """The event for a trial whose job ended, noted in jobs.jsonl as reported."""
    append_records(folder, [replace(rec, ended=state)])
    if result_written(job):  # the driver reads it (and checks its config)
        return JobEvent(job.key, "ended")
    return JobEvent(job.key, "lost", lost_reason(folder, rec, state))


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

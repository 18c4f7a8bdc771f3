"""A study's SLURM jobs outside a run: where they live (`job_folder`), and what `optbench status`
and `optbench cancel` say of them (through SlurmExecutor.status, .job_times and .cancel).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from optbench.executors.protocol import JobTime
from optbench.executors.slurm.client import ACTIVE_STATES, SlurmCommandError, sacct_elapsed, scancel
from optbench.executors.slurm.journal import JOBS_FILE, followed_jobs, read_records
from optbench.spec.schema import StudySpec


def job_folder(spec: StudySpec) -> Path:
    """Where a study's job scripts, logs and jobs.jsonl live (a shared file system)."""
    return spec.executor.slurm.folder or spec.study_dir / "slurm"


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


def jobs_status(folder: Path) -> tuple[set[str], str | None]:
    """For `optbench status`: the trials whose job is running, and one line with the SLURM
    states of the trials not recorded yet (None where the study never submitted a job)."""
    if not (folder / JOBS_FILE).is_file():
        return set(), None
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
        f"{_next_run(counts)}{note}"
    )


def _next_run(counts: Counter) -> str:
    """What the next `optbench run` does with the trials of each state in `counts`: it follows
    the jobs still queued or running, and records those that ended (after `cancel`, say)."""
    active = sum(n for state, n in counts.items() if state in ACTIVE_STATES)
    ended = sum(counts.values()) - active
    if not ended:
        return "`optbench run` follows them"
    if not active:
        return "their jobs have ended, none is queued or running: `optbench run` records them"
    return (
        f"`optbench run` follows the {active} queued or running and records the {ended} whose "
        "job has ended"
    )


def completed_job_times(folder: Path) -> list[JobTime]:
    """For `optbench status`: each of the study's latest jobs (the latest record of each trial)
    that completed, with sacct's elapsed time and queue wait; [] where the study never submitted
    or sacct does not answer."""
    if not (folder / JOBS_FILE).is_file():
        return []
    keys: dict[str, list[str]] = {}
    for key, record in read_records(folder).items():
        keys.setdefault(record.job_id, []).append(key)
    try:
        found = sacct_elapsed(keys)
    except SlurmCommandError:
        return []
    return [
        JobTime(sorted(keys[job_id]), elapsed, queue_s)
        for job_id, (state, elapsed, queue_s) in sorted(found.items())
        if state == "COMPLETED"
    ]

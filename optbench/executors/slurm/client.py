"""SLURM's client commands as optbench runs them (sacct, squeue, scontrol, sinfo, scancel) and what
their answers mean: a job's state, which source failed (`Survey`), what scancel did
(`Cancelled`), how many jobs of a shape the partition holds at once (`cluster_slots`).
sacct *failing* (accounting down) is not sacct *not knowing* a job: see the package docstring.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import submitit

from optbench.errors import UsageError

DEFAULT_MAX_ARRAY_SIZE = 1001  # SLURM's own default
# States of a job that may still run: every squeue(1) state of a job that has or awaits an
# allocation (held, stopped or requeued ones too), PREEMPTED (jobs are submitted with --requeue),
# "UNKNOWN" (neither sacct nor squeue lists it yet) and "UNREACHABLE" (neither answered).
ACTIVE_STATES = frozenset(
    {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED",
     "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT", "PREEMPTED", "STOPPED",
     "RESV_DEL_HOLD", "SPECIAL_EXIT", "UNKNOWN", "UNREACHABLE"}
)  # fmt: skip
ENDED = "ENDED"  # sacct failed and squeue no longer lists the job: it ended, how is not known


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


def cluster_slots(partition: str | None, cpus: int, gpus: int = 0, nodes: int = 1) -> int | None:
    """How many jobs of `nodes` nodes, each taking `cpus` CPUs and `gpus` GPUs of a node, the
    partition (the default one where None) holds at once: its nodes' CPUs and GPUs (`sinfo`),
    whoever else uses them. None where sinfo does not answer or lists no node that fits one."""
    args = ["sinfo", "--noheader", "--Node", "-o", "%N|%c|%G"]
    try:
        out = slurm_command(*args, *(["-p", partition] if partition else []), timeout=30)
    except SlurmCommandError:
        return None
    per_node = {}  # a node in several partitions is listed once for each
    for line in out.splitlines():
        name, node_cpus, gres = (line.split("|") + ["", "", ""])[:3]
        if not node_cpus.strip().isdigit():
            continue
        fits = int(node_cpus) // cpus
        if gpus:
            match = re.search(r"gpu(?::[^:,(]+)?:(\d+)", gres)
            fits = min(fits, int(match.group(1)) // gpus if match else 0)
        per_node[name.strip()] = fits
    return sum(per_node.values()) // nodes or None


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


def sacct_elapsed(job_ids: Iterable[str]) -> dict[str, tuple[str, float, float | None]]:
    """(base state, elapsed seconds, queue wait seconds: Submit to Start, None where sacct has no
    times) of each job id that sacct knows, from one sacct call (the job's latest run: a
    requeued job's elapsed time is its last run's). Raises SlurmCommandError when sacct fails."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    arrays = sorted({job_id.split("_")[0] for job_id in ids})
    out = slurm_command(
        "sacct", "-X", "-o", "JobID,State,ElapsedRaw,Submit,Start", "--parsable2", "-j",
        ",".join(arrays),
    )  # fmt: skip
    info = submitit.slurm.slurm.SlurmInfoWatcher().read_info(out)
    found = {}
    for job_id in ids:
        row = info.get(job_id)
        if row is not None and row.get("ElapsedRaw", "").isdigit():
            queue_s = _seconds_between(row.get("Submit", ""), row.get("Start", ""))
            found[job_id] = (base_state(row["State"]), float(row["ElapsedRaw"]), queue_s)
    return found


def _seconds_between(earlier: str, later: str) -> float | None:
    """Seconds from one sacct timestamp to another; None where either is not a time ("Unknown",
    "None", absent)."""
    try:
        return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()
    except ValueError:
        return None


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

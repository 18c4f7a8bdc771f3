"""The SLURM executor's pieces that need no cluster: settings, array splitting, job records,
state mapping, and the job callable's skip-on-requeue."""

from __future__ import annotations

import io
import json
import os
import pickle
import shlex
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import optuna
import pytest
import submitit
import yaml
from cli_inprocess import tiny_config
from fifos import fifo_never_waited_on
from rich.console import Console
from typer.testing import CliRunner

from optbench.cli.app import app
from optbench.errors import SpecError, UsageError
from optbench.executors.local import InlineExecutor
from optbench.executors.slurm.client import (
    ACTIVE_STATES,
    base_state,
    chunks,
    max_array_size,
    sacct_states,
    survey,
)
from optbench.executors.slurm.ends import settle_ended
from optbench.executors.slurm.executor import SlurmExecutor, sbatch_parameters
from optbench.executors.slurm.job import TrialBatch
from optbench.executors.slurm.journal import (
    COMMENT_TAG,
    JOBS_FILE,
    JobRecord,
    append_records,
    config_hash,
    followed_jobs,
    read_journal,
    read_records,
)
from optbench.plan.trials import plan
from optbench.run.driver import run_study
from optbench.spec.schema import SlurmSettings, parse_spec
from optbench.store.database import Store
from optbench.trial.config import TrainConfig, TrialResult
from optbench.trial.jobs import TrialJob
from optbench.trial.results import write_result


class FakeSlurm:
    """SLURM's client commands as optbench.executors.slurm runs them (subprocess.run), answering
    from these attributes; None = the command fails as it does when its daemon is down."""

    def __init__(self, monkeypatch):
        self.sacct_out: str | None = "JobID|State\n"
        self.squeue_out: str | None = ""
        self.sacct_history = ""  # `sacct -D` lines: JobID|Timelimit, one per run of a job
        self.scancel: tuple[int, str] = (0, "")
        self.calls: list[list[str]] = []
        monkeypatch.setattr("optbench.executors.slurm.client.subprocess.run", self.run)

    def run(self, args, **kwargs):
        self.calls.append(list(args))
        if args[0] == "sacct" and "-D" in args:
            out, err = self.sacct_history, ""
        elif args[0] == "sacct":
            out, err = (
                self.sacct_out,
                "sacct: error: Problem talking to the database: Connection refused",
            )
        elif args[0] == "squeue":
            out, err = self.squeue_out, "slurm_load_jobs error: Unable to contact slurm controller"
        elif args[0] == "scancel":
            return subprocess.CompletedProcess(args, self.scancel[0], "", self.scancel[1])
        else:
            raise AssertionError(f"unexpected command {args}")
        if out is None:
            return subprocess.CompletedProcess(args, 1, "", err + "\n")
        return subprocess.CompletedProcess(args, 0, out, "")


def _config(**kw) -> TrainConfig:
    return tiny_config(**{"lr": 1e-3, "epochs": 1, "ref_batch": 128, **kw})


def test_slurm_settings_in_the_study_yaml(tiny_dict):
    tiny_dict["executor"] = {
        "kind": "slurm",
        "slurm": {"partition": "gpu", "gpus_per_node": 4, "time_min": 30, "mem_gb": 8,
                  "setup": ["module load cuda"], "sbatch": {"mail-type": "END"},
                  "trials_per_job": 3},
    }  # fmt: skip
    spec = parse_spec(tiny_dict)
    s = spec.executor.slurm
    assert spec.executor.kind == "slurm" and s.tasks == 4 and s.trials_per_job == 3
    params = sbatch_parameters(s, "tiny")
    assert params["partition"] == "gpu" and params["gpus_per_node"] == 4
    assert params["ntasks_per_node"] == 4 and params["time"] == 30 and params["mem"] == "8192MB"
    assert params["setup"] == ["module load cuda"]
    assert params["additional_parameters"] == {"requeue": True, "mail-type": "END"}
    assert "account" not in params and "qos" not in params


def test_the_jobs_a_partition_holds_at_once_are_counted_from_its_nodes_cpus_and_gpus(
    monkeypatch,
):
    from optbench.executors.slurm import client

    said = {
        "sinfo": "a|32|gpu:a100:4(S:0-1)\nb|32|gpu:a100:4(S:0-1)\nb|32|gpu:a100:4\nc|8|(null)\n"
    }

    def sinfo(*args, **kw):
        if said["sinfo"] is None:
            raise client.SlurmCommandError("sinfo", "Unable to contact slurm controller")
        return said["sinfo"]

    monkeypatch.setattr(client, "slurm_command", sinfo)
    assert client.cluster_slots(None, cpus=4) == 8 + 8 + 2  # node b listed in two partitions
    assert client.cluster_slots("gpu", cpus=4, gpus=1) == 4 + 4  # node c has no GPU
    assert client.cluster_slots(None, cpus=4, gpus=1, nodes=2) == 4
    assert client.cluster_slots(None, cpus=64) is None  # no node holds one: not known
    said["sinfo"] = None
    assert client.cluster_slots(None, cpus=1) is None


def test_unknown_slurm_key_names_the_field(tiny_dict):
    tiny_dict["executor"] = {"kind": "slurm", "slurm": {"gpus": 2}}
    with pytest.raises(SpecError, match=r"executor\.slurm\.gpus: unknown key"):
        parse_spec(tiny_dict)


def test_tasks_follow_gpus_unless_given():
    assert SlurmSettings().tasks == 1
    assert SlurmSettings(gpus_per_node=8).tasks == 8
    assert SlurmSettings(tasks_per_node=2).tasks == 2


@pytest.mark.parametrize(
    "n, size, lengths", [(6, 4, [4, 2]), (4, 4, [4]), (1, 1001, [1]), (0, 3, [])]
)
def test_chunks_keep_order_and_respect_the_limit(n, size, lengths):
    parts = chunks(list(range(n)), size)
    assert [len(p) for p in parts] == lengths
    assert [x for p in parts for x in p] == list(range(n))


def test_sacct_states_are_reduced_to_their_base():
    assert base_state("CANCELLED by 0") == "CANCELLED"
    assert base_state("") == "UNKNOWN"
    assert base_state("OUT_OF_MEMORY") == "OUT_OF_MEMORY"


# squeue(1), "JOB STATE CODES" (Slurm 22.05, Debian 12's), split by what the man page says of each
# state: "terminated" (or completed, cancelled, out of memory, revoked) ends a job; the others
# describe a job that has or awaits an allocation, so it may still run.
SQUEUE_TERMINATED = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
                     "OUT_OF_MEMORY", "PREEMPTED", "REVOKED", "TIMEOUT"}  # fmt: skip
SQUEUE_MAY_RUN = {"CONFIGURING", "COMPLETING", "PENDING", "RUNNING", "RESV_DEL_HOLD", "REQUEUE_FED",
                  "REQUEUE_HOLD", "REQUEUED", "RESIZING", "SIGNALING", "SPECIAL_EXIT", "STAGE_OUT",
                  "STOPPED", "SUSPENDED"}  # fmt: skip


def test_a_job_that_may_still_run_is_followed_in_every_state_squeue_documents():
    assert SQUEUE_MAY_RUN <= ACTIVE_STATES
    # PREEMPTED "terminated due to preemption", but optbench submits with --requeue, so SLURM
    # queues a preempted job again: it is followed, never resubmitted beside its requeue.
    assert SQUEUE_TERMINATED & ACTIVE_STATES == {"PREEMPTED"}
    assert ACTIVE_STATES - SQUEUE_MAY_RUN - SQUEUE_TERMINATED == {"UNKNOWN", "UNREACHABLE"}


def test_later_job_records_replace_earlier_ones(tmp_path: Path):
    a1 = JobRecord("cell/s000-seed0", "10_0", "h", "log0", 1.0)
    b = JobRecord("cell/s001-seed0", "10_1", "h", "log1", 1.0)
    a2 = JobRecord("cell/s000-seed0", "11", "h", "log2", 2.0)
    append_records(tmp_path, [a1, b])
    append_records(tmp_path, [a2])
    assert read_records(tmp_path) == {a1.key: a2, b.key: b}


def test_config_hash_changes_with_the_config():
    assert config_hash(_config()) == config_hash(_config())
    assert config_hash(_config()) != config_hash(_config(lr=2e-3))


def test_a_recorded_job_that_ended_without_a_result_is_reported_lost(tmp_path, monkeypatch):
    job = TrialJob("cell/s000-seed0", _config(), tmp_path / "trial")
    append_records(
        tmp_path, [JobRecord(job.key, "42_3", config_hash(job.config), "/logs/42_3.err", 0.0)]
    )
    monkeypatch.setattr(
        "optbench.executors.slurm.client.sacct_states",
        lambda ids: dict.fromkeys(ids, "OUT_OF_MEMORY"),
    )
    executor = SlurmExecutor(SlurmSettings(), tmp_path, "tiny")
    executor.submit([job])  # nothing new is submitted: the record matches
    [event] = executor.poll(0)
    assert event.kind == "lost" and "42_3 OUT_OF_MEMORY" in event.message
    assert "/logs/42_3.err" in event.message
    assert executor.submitted == 0 and executor.reattached == 0
    assert read_records(tmp_path)[job.key].ended == "OUT_OF_MEMORY"  # reported once


@pytest.mark.parametrize(
    ("states", "said"),
    [
        (["RUNNING", "PENDING"], "`optbench run` follows them"),
        # after `optbench cancel` (issue 43, item 10: it said "`optbench run` follows them")
        (["CANCELLED", "CANCELLED"], "their jobs have ended, none is queued or running: "),
        (["RUNNING", "CANCELLED"], "follows the 1 queued or running and records the 1 whose job"),
    ],
)
def test_status_says_run_follows_only_jobs_that_have_not_ended(tmp_path, monkeypatch, states, said):
    from optbench.executors.slurm.study import jobs_status

    ids = [f"42_{i}" for i in range(len(states))]
    append_records(
        tmp_path,
        [JobRecord(f"cell/s00{i}-seed0", j, "h", "/l.err", 0.0) for i, j in enumerate(ids)],
    )
    monkeypatch.setattr(
        "optbench.executors.slurm.client.sacct_states",
        lambda _: dict(zip(ids, states, strict=True)),
    )
    _, line = jobs_status(tmp_path)
    assert said in line, line
    assert ("follows them" in line) == ("CANCELLED" not in states), line


def test_a_job_whose_end_was_reported_is_resubmitted_as_a_new_attempt(tmp_path, monkeypatch):
    job = TrialJob("cell/s000-seed0", _config(), tmp_path / "trial")
    rec = JobRecord(job.key, "42_3", config_hash(job.config), "/logs/42_3.err", 0.0, ended="FAILED")
    append_records(tmp_path, [rec])
    monkeypatch.setattr(
        "optbench.executors.slurm.client.sacct_states", lambda ids: pytest.fail("no sacct needed")
    )
    submitted = []
    monkeypatch.setattr(SlurmExecutor, "_submit_new", lambda self, jobs: submitted.extend(jobs))
    executor = SlurmExecutor(SlurmSettings(), tmp_path, "tiny")
    executor.submit([job])
    assert submitted == [job] and executor.poll(0) == []


def _one_trial_with_a_job(tiny_dict: dict, job_id: str):
    """A one-trial study whose (planned) trial has a recorded SLURM job: spec, job, job folder."""
    tiny_dict["models"] = tiny_dict["models"][:1]
    tiny_dict["search"]["n_samples"] = 1
    spec = parse_spec(tiny_dict)
    [item] = Store(spec, create=True).prepare(plan(spec), retries=spec.executor.retries)
    job = item.trial.job
    folder = spec.study_dir / "slurm"
    folder.mkdir(parents=True)
    log = f"/l/{job_id}.err"
    append_records(folder, [JobRecord(job.key, job_id, config_hash(job.config), log, 0.0)])
    return spec, job, folder


@pytest.mark.slow
def test_a_job_that_crashed_unwatched_keeps_its_message_and_is_retried_by_the_next_run(
    tiny_dict, monkeypatch
):
    # A run submitted a trial and was detached; its job crashed (writing a failed result with
    # the crash's message) while no driver followed it. The next run records that failure as it
    # was and runs the retry at once, not one run later.
    spec, job, folder = _one_trial_with_a_job(tiny_dict, "42_0")
    crash = TrialResult(  # its worker names the attempt it ran, the first (run/attempts.py)
        status="failed", epochs=1, config=job.config, message="RuntimeError: boom", attempt=1
    )
    write_result(job.out_dir, crash)
    monkeypatch.setattr(
        "optbench.executors.slurm.client.sacct_states", lambda ids: dict.fromkeys(ids, "FAILED")
    )
    executor = InlineExecutor()
    executor.settle = partial(settle_ended, folder)  # SLURM's settle; the retry runs inline
    run_study(spec, executor, console=Console(file=io.StringIO()), live=False)

    [done] = Store(spec, create=False).read(plan(spec))
    assert done.status == "finished" and done.attempts == 2
    study = optuna.load_study(
        study_name=f"{spec.name}/{done.trial.cell_id}", storage=spec.storage_url
    )
    first, second = study.trials
    assert first.user_attrs["status"] == "failed"
    assert first.user_attrs["message"] == "RuntimeError: boom"  # its own words, not "no result"
    assert second.user_attrs["status"] == "finished"
    assert read_records(folder)[job.key].ended == "FAILED"  # reported once


def test_one_sacct_call_gives_every_jobs_state(monkeypatch):
    slurm = FakeSlurm(monkeypatch)
    slurm.sacct_out = (
        "JobID|State\n"
        "7_0|COMPLETED\n7_[1-2]|PENDING\n"
        "8|CANCELLED by 0\n"  # an array cancelled before its elements started
        "9|OUT_OF_MEMORY\n"
    )
    states = sacct_states(["7_0", "7_2", "8_1", "9", "10"])
    assert states == {"7_0": "COMPLETED", "7_2": "PENDING", "8_1": "CANCELLED",
                      "9": "OUT_OF_MEMORY", "10": "UNKNOWN"}  # fmt: skip
    [call] = slurm.calls
    assert call[0] == "sacct" and call[call.index("-j") + 1] == "10,7,8,9"


def test_without_slurm_a_slurm_run_is_a_usage_error_before_anything_is_written(
    tiny_dict, tmp_path, monkeypatch
):
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(tiny_dict))
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))
    with pytest.raises(UsageError, match="executor slurm: cannot reach SLURM"):
        max_array_size()
    result = CliRunner().invoke(app, ["run", str(study), "--executor", "slurm"])
    assert isinstance(result.exception, UsageError)  # main() turns it into exit code 2
    assert "cannot reach SLURM" in str(result.exception)
    detached = CliRunner().invoke(app, ["run", str(study), "--detach"])
    assert isinstance(detached.exception, UsageError) and "--detach" in str(detached.exception)
    assert not Path(tiny_dict["output"]).exists()


# --- time limits ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "time_min, delay, ok",
    # SLURM may send the signal up to 60 s before signal_delay_s (sbatch(1), --signal), and a job
    # needs a minute to start and train: time_min x 60 - delay - 60 must leave >= 60 s.
    [
        (1, 120, False),
        (1, 10, False),
        (2, 10, False),
        (3, 60, True),
        (3, 61, False),
        (60, 120, True),
    ],
)
def test_a_signal_delay_that_leaves_no_time_to_train_is_rejected(tiny_dict, time_min, delay, ok):
    tiny_dict["executor"] = {"slurm": {"time_min": time_min, "signal_delay_s": delay}}
    if ok:
        assert parse_spec(tiny_dict).executor.slurm.signal_delay_s == delay
        return
    with pytest.raises(SpecError) as err:
        parse_spec(tiny_dict, "study.yaml")
    [line] = str(err.value).splitlines()
    assert line.startswith("study.yaml: executor.slurm.signal_delay_s: ") and "time_min" in line


@pytest.mark.slow
def test_the_cli_rejects_it_with_exit_2_and_writes_nothing(tiny_dict, tmp_path):
    tiny_dict["executor"] = {"kind": "slurm", "slurm": {"time_min": 1, "signal_delay_s": 120}}
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(tiny_dict))
    proc = subprocess.run(
        [sys.executable, "-m", "optbench", "run", str(study)], capture_output=True, text=True
    )
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.splitlines()
    assert "executor.slurm.signal_delay_s" in line and "time_min" in line
    assert not Path(tiny_dict["output"]).exists()


def _timed_out_job(tmp_path, stderr_end: str) -> tuple[TrialJob, JobRecord]:
    job = TrialJob("cell/s000-seed0", _config(), tmp_path / "trial")
    log = tmp_path / "slurm" / "42_3" / "42_3_0_log.err"
    log.parent.mkdir(parents=True)
    log.write_text("x" * 100_000 + "\n" + stderr_end)  # the end of a long log
    return job, JobRecord(job.key, "42_3", config_hash(job.config), str(log), 0.0)


# The end of a job's stderr when submitit's USR2 handler ended it after max_requeues time-outs
# (the job then ends FAILED 1:0): its log line, then the traceback of the error it raises.
SUBMITIT_OUT_OF_REQUEUES = (
    "submitit INFO (2026-12-08 03:00:00,000) - Job not requeued because: timed-out too many "
    "times.\nsubmitit ERROR (2026-12-08 03:00:00,001) - Submitted job triggered an exception\n"
    "Traceback (most recent call last):\n  ...\nsubmitit.core.utils.UncompletedJobError: Job "
    "not requeued because: timed-out too many times.\n"
)


@pytest.mark.parametrize(
    "state, stderr_end",
    [
        ("FAILED", SUBMITIT_OUT_OF_REQUEUES),
        ("TIMEOUT", "..."),  # SLURM itself killed the job at its time limit
    ],
    ids=["out-of-requeues", "slurm-time-limit"],
)
def test_a_job_that_ran_out_of_time_says_so_with_limit_and_requeues(
    tmp_path, monkeypatch, state, stderr_end
):
    slurm = FakeSlurm(monkeypatch)
    slurm.sacct_out = f"JobID|State\n42_3|{state}\n"
    slurm.sacct_history = "42_3|00:10:00\n42_3|00:10:00\n42_3|00:10:00\n"  # ran 3 times
    job, rec = _timed_out_job(tmp_path, stderr_end)
    append_records(tmp_path / "slurm", [rec])
    executor = SlurmExecutor(SlurmSettings(), tmp_path / "slurm", "tiny", notify=lambda m: None)
    executor.submit([job])
    [event] = executor.poll(0)
    assert event.kind == "lost"
    assert "SLURM job 42_3 ran out of time (time limit 10 min, requeued 2 time(s))" in event.message
    assert "raise executor.slurm.time_min" in event.message and rec.log in event.message


def test_a_job_that_failed_otherwise_is_not_called_a_time_limit(tmp_path, monkeypatch):
    slurm = FakeSlurm(monkeypatch)
    slurm.sacct_out = "JobID|State\n42_3|FAILED\n"
    job, rec = _timed_out_job(tmp_path, "Traceback ...\nRuntimeError: CUDA error\n")
    append_records(tmp_path / "slurm", [rec])
    executor = SlurmExecutor(SlurmSettings(), tmp_path / "slurm", "tiny", notify=lambda m: None)
    executor.submit([job])
    [event] = executor.poll(0)
    assert event.message.startswith("SLURM job 42_3 FAILED; log: ")


class _Planted:
    """A pickle that leaves a file behind if it is ever unpickled."""

    def __init__(self, mark: Path):
        self.mark = mark

    def __reduce__(self):
        return (Path.touch, (self.mark,))


def test_a_failed_jobs_planted_result_pickle_is_never_unpickled(tmp_path, monkeypatch):
    # submitit's result pickle beside the log would say "timed-out too many times"; reading it
    # would run whatever a planted one asks. The end is told from the log's text alone.
    slurm = FakeSlurm(monkeypatch)
    slurm.sacct_out = "JobID|State\n42_3|FAILED\n"
    job, rec = _timed_out_job(tmp_path, "Traceback ...\nRuntimeError: CUDA error\n")
    mark = tmp_path / "unpickled"
    with open(Path(rec.log).parent / "42_3_0_result.pkl", "wb") as f:
        pickle.dump(("error", _Planted(mark)), f)
    append_records(tmp_path / "slurm", [rec])
    executor = SlurmExecutor(SlurmSettings(), tmp_path / "slurm", "tiny", notify=lambda m: None)
    executor.submit([job])
    [event] = executor.poll(0)
    assert event.message.startswith("SLURM job 42_3 FAILED; log: ")
    assert not mark.exists()


@pytest.mark.parametrize("job_id", ["../../elsewhere", "/tmp/x", "42;rm", "42_3/../../7"])
def test_a_journal_record_with_a_job_id_slurm_never_gives_is_not_optbenchs(tmp_path, job_id):
    # a job's logs are found from its id below the journal's folder: one that would lead out of
    # it is skipped as a line that is not a record, never followed
    job = TrialJob("cell/s000-seed0", _config(), tmp_path / "trial")
    append_records(tmp_path, [JobRecord(job.key, job_id, config_hash(job.config), "/l", 0.0)])
    assert read_records(tmp_path) == {}


def test_the_job_step_lets_a_held_back_usr2_through_once_submitits_handler_is_there():
    # slurm_job blocks SIGUSR2 before anything else; TrialBatch unblocks it first thing, so a
    # signal that arrived meanwhile reaches submitit's handler (which requeues the job).
    caught = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: caught.append(signum))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
    try:
        signal.raise_signal(signal.SIGUSR2)
        assert caught == []  # held back
        assert TrialBatch([])() == []
        assert caught == [signal.SIGUSR2]
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR2})
        signal.signal(signal.SIGUSR2, previous)


@pytest.mark.slurm_commands  # submitit's SlurmExecutor refuses to build without srun
def test_jobs_start_in_an_entry_that_holds_usr2_back_until_submitit_handles_it(tmp_path):
    from slow_unpickle import WaitsWhileUnpickled

    executor = SlurmExecutor(SlurmSettings(), tmp_path, "tiny")
    command = executor._executor()._submitit_command_str  # what srun runs in the job
    # Run it as a SLURM job step would and send SIGUSR2 while it unpickles the job, before
    # submitit's handler exists: the signal must wait, not kill the step (its default action).
    (tmp_path / "1").mkdir()
    delayed = submitit.helpers.DelayedSubmission(WaitsWhileUnpickled(tmp_path))
    delayed.dump(tmp_path / "1" / "1_submitted.pkl")
    env = {**os.environ, "SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "1", "SLURM_PROCID": "0",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}  # fmt: skip
    argv = [*shlex.split(command)[:-1], str(tmp_path / "%j")]
    step = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (tmp_path / "unpickling").exists():
        assert step.poll() is None and time.monotonic() < deadline, step.stderr.read()
        time.sleep(0.01)
    step.send_signal(signal.SIGUSR2)
    time.sleep(0.2)
    (tmp_path / "go").touch()
    assert step.wait(60) == 0  # ran to its end; the signal did not kill it (-12)
    assert submitit.core.utils.pickle_load(tmp_path / "1" / "1_0_result.pkl") == ("success", "ran")


# --- accounting outages -------------------------------------------------------------------------


def test_sacct_failing_is_not_sacct_not_knowing_the_job(monkeypatch):
    slurm = FakeSlurm(monkeypatch)
    slurm.sacct_out = None  # slurmdbd down
    slurm.squeue_out = "5|RUNNING|optbench:ab\n6|COMPLETED|\n"
    found = survey(["5", "6", "7"])
    # squeue answers for the jobs it lists; one it no longer lists has ended, how is unknown
    assert found.states == {"5": "RUNNING", "6": "COMPLETED", "7": "ENDED"}
    assert "sacct" in found.problem and "Connection refused" in found.problem

    slurm.squeue_out = None  # slurmctld down too: nobody can tell
    found = survey(["5", "7"])
    assert found.states == {"5": "UNREACHABLE", "7": "UNREACHABLE"}
    assert set(found.states.values()) <= ACTIVE_STATES

    slurm.sacct_out, slurm.squeue_out = "JobID|State\n", ""  # both answer: really unknown
    assert survey(["7"]).states == {"7": "UNKNOWN"}


def test_an_accounting_outage_never_ends_a_running_job_and_is_said_once(tmp_path, monkeypatch):
    monkeypatch.setattr("optbench.executors.slurm.executor.VANISH_S", 0.0)
    slurm = FakeSlurm(monkeypatch)
    slurm.sacct_out = None
    slurm.squeue_out = "42|RUNNING|\n"
    job = TrialJob("cell/s000-seed0", _config(), tmp_path / "trial")
    append_records(tmp_path, [JobRecord(job.key, "42", config_hash(job.config), "/l/42.err", 0.0)])
    said = []
    executor = SlurmExecutor(SlurmSettings(poll_s=2), tmp_path, "tiny", notify=said.append)
    executor.submit([job])  # reattaches through squeue: nothing resubmitted
    assert (executor.submitted, executor.reattached) == (0, 1)
    events = []
    for _ in range(4):
        executor._last_sacct = float("-inf")  # poll now
        events += executor.poll(0)
    assert [e.kind for e in events] == ["running"]
    outage = [line for line in said if "not answering" in line]
    assert len(outage) == 1 and "Problem talking to the database" in outage[0]
    assert not any("sacct: error" in line for line in said)  # its words, not its raw output

    slurm.sacct_out = "JobID|State\n42|RUNNING\n"  # accounting is back
    executor._last_sacct = float("-inf")
    assert executor.poll(0) == []
    assert said[-1].startswith("SLURM answers again")

    slurm.sacct_out, slurm.squeue_out = None, "42|COMPLETED|\n"  # down again; the job ends
    executor._last_sacct = float("-inf")
    [event] = executor.poll(0)
    assert event.kind == "lost" and "SLURM job 42 completed without writing" in event.message


def test_a_run_while_slurm_does_not_answer_resubmits_nothing(tiny_dict, monkeypatch):
    slurm = FakeSlurm(monkeypatch)
    slurm.sacct_out = slurm.squeue_out = None
    _, job, folder = _one_trial_with_a_job(tiny_dict, "42")
    assert settle_ended(folder, [job]) == []  # may still run: not settled
    monkeypatch.setattr(
        SlurmExecutor, "_submit_new", lambda self, jobs: jobs and pytest.fail("resubmitted")
    )
    executor = SlurmExecutor(SlurmSettings(), folder, "tiny", notify=lambda m: None)
    executor.submit([job])
    assert executor.reattached == 1


# --- cancel ---------------------------------------------------------------------------------------


def _study_with_jobs(tiny_dict, tmp_path, job_ids) -> Path:
    tiny_dict["executor"] = {"kind": "slurm"}
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(tiny_dict))
    spec = parse_spec(tiny_dict)
    folder = spec.study_dir / "slurm"
    folder.mkdir(parents=True)
    stored = Store(spec, create=True).prepare(plan(spec), retries=0)
    append_records(
        folder,
        [
            JobRecord(t.trial.key, job_id, config_hash(t.trial.config), "/l.err", 0.0)
            for t, job_id in zip(stored, job_ids, strict=False)
        ],
    )
    return study


def test_cancel_exits_1_and_says_why_when_scancel_fails(tiny_dict, tmp_path, monkeypatch):
    study = _study_with_jobs(tiny_dict, tmp_path, ["5", "6"])
    slurm = FakeSlurm(monkeypatch)
    slurm.sacct_out = "JobID|State\n5|RUNNING\n6|PENDING\n"
    slurm.scancel = (8, "scancel: error: Kill job error on job id 5: Unable to contact slurm "
                        "controller (connect failure)\nscancel: error: Kill job error on job id 6: "
                        "Unable to contact slurm controller (connect failure)\n")  # fmt: skip
    out = CliRunner().invoke(app, ["cancel", str(study)])
    assert out.exit_code == 1
    assert "cancelled" not in out.output
    assert out.output.count("Unable to contact slurm controller") == 2


def test_cancel_reports_what_slurm_did(tiny_dict, tmp_path, monkeypatch):
    study = _study_with_jobs(tiny_dict, tmp_path, ["5", "6"])
    slurm = FakeSlurm(monkeypatch)
    slurm.sacct_out = "JobID|State\n5|RUNNING\n6|RUNNING\n"
    slurm.squeue_out = "5|CANCELLED|\n6|COMPLETED|\n"  # 6 ended just before scancel
    out = CliRunner().invoke(app, ["cancel", str(study)])
    assert out.exit_code == 0, out.output
    assert "cancelled 1 SLURM job(s): 5" in out.output
    assert "SLURM job 6 had already ended (COMPLETED)" in out.output


def test_cancel_help_says_which_run_resubmits():
    text = " ".join(CliRunner().invoke(app, ["cancel", "--help"]).output.split())
    assert (
        "The next `optbench run` records the cancelled trials as failed attempts and resubmits"
        in text
    )


# --- journaled submission -------------------------------------------------------------------------


def _intent(folder: Path, token: str, batches: list[list[TrialJob]]) -> None:
    line = {"token": token, "batches": [[j.key for j in b] for b in batches],
            "configs": {j.key: config_hash(j.config) for b in batches for j in b}, "time": 1.0}  # fmt: skip
    with open(folder / JOBS_FILE, "a") as f:
        f.write(json.dumps(line) + "\n")


def test_jobs_of_a_submission_whose_driver_was_killed_are_found_and_adopted(tmp_path, monkeypatch):
    jobs = [
        TrialJob(f"cell/s00{i}-seed0", _config(lr=1e-3 * (i + 1)), tmp_path / str(i))
        for i in range(3)
    ]
    _intent(tmp_path, "a1b2", [[jobs[0]], [jobs[1], jobs[2]]])  # an array of 2 elements
    slurm = FakeSlurm(monkeypatch)
    slurm.squeue_out = (
        f"9_0|RUNNING|{COMMENT_TAG}a1b2\n9_1|PENDING|{COMMENT_TAG}a1b2\n8|RUNNING|x\n"
    )
    slurm.sacct_out = "JobID|State\n9_0|RUNNING\n9_1|PENDING\n"
    known, _ = followed_jobs(tmp_path)  # status / cancel: read only
    assert {k: r.job_id for k, (r, _) in known.items()} == {
        jobs[0].key: "9_0",
        jobs[1].key: "9_1",
        jobs[2].key: "9_1",
    }
    assert read_records(tmp_path) == {}

    monkeypatch.setattr(
        SlurmExecutor, "_submit_new", lambda self, jobs: jobs and pytest.fail("resubmitted")
    )
    executor = SlurmExecutor(SlurmSettings(), tmp_path, "tiny", notify=lambda m: None)
    executor.submit(jobs)
    assert executor.reattached == 3
    records, interrupted = read_journal(tmp_path)
    assert interrupted == [] and records[jobs[2].key].log.endswith("9_1/9_1_0_log.err")


def test_a_submission_that_started_no_job_is_submitted_again(tmp_path, monkeypatch):
    job = TrialJob("cell/s000-seed0", _config(), tmp_path / "trial")
    _intent(tmp_path, "c3d4", [[job]])
    slurm = FakeSlurm(monkeypatch)
    slurm.squeue_out = "8|RUNNING|optbench:ffff\n"
    submitted = []
    monkeypatch.setattr(SlurmExecutor, "_submit_new", lambda self, jobs: submitted.extend(jobs))
    SlurmExecutor(SlurmSettings(), tmp_path, "tiny", notify=lambda m: None).submit([job])
    assert submitted == [job]
    assert read_journal(tmp_path) == ({}, [])  # resolved: not looked up again


def test_an_interrupted_submission_is_not_guessed_at_while_squeue_fails(tmp_path, monkeypatch):
    job = TrialJob("cell/s000-seed0", _config(), tmp_path / "trial")
    _intent(tmp_path, "c3d4", [[job]])
    FakeSlurm(monkeypatch).squeue_out = None
    with pytest.raises(UsageError, match="stopped while submitting.*Unable to contact"):
        SlurmExecutor(SlurmSettings(), tmp_path, "tiny", notify=lambda m: None).submit([job])


def test_a_line_cut_short_by_a_killed_driver_is_skipped(tmp_path):
    rec = JobRecord("cell/s000-seed0", "10_0", "h", "log0", 1.0)
    append_records(tmp_path, [rec])
    with open(tmp_path / JOBS_FILE, "a") as f:
        f.write('{"key": "cell/s001-seed0", "job_id": "1')
    assert read_records(tmp_path) == {rec.key: rec}


NOT_OURS = [
    "[1, 2]",
    "5",
    '"text"',
    '{"batches": 3, "token": "t"}',
    '{"batches": [[1]], "token": "t", "configs": {}, "time": 1.0}',
    '{"key": 1, "job_id": "2", "config": "h", "log": "l", "submitted": 1.0}',
    '{"key": "k", "job_id": ["2"], "config": "h", "log": "l", "submitted": 1.0}',
    '{"key": "k"}',
    '{"resolved": 5}',
    "[" * 100_000,
]


def test_journal_lines_that_are_not_ours_are_skipped(tmp_path):
    rec = JobRecord("cell/s000-seed0", "10_0", "h", "log0", 1.0)
    append_records(tmp_path, [rec])
    with open(tmp_path / JOBS_FILE, "a") as f:
        f.write("".join(line + "\n" for line in NOT_OURS))
    assert read_journal(tmp_path) == ({rec.key: rec}, [])


def test_the_journal_is_never_followed_through_a_link_nor_waited_on_as_a_fifo(tmp_path):
    (tmp_path / "theirs").write_text("theirs\n")
    (tmp_path / JOBS_FILE).symlink_to(tmp_path / "theirs")
    rec = JobRecord("cell/s000-seed0", "10_0", "h", "log0", 1.0)
    for act in (lambda: read_journal(tmp_path), lambda: append_records(tmp_path, [rec])):
        with pytest.raises(UsageError, match=f"{JOBS_FILE}: a symbolic link"):
            act()
    assert (tmp_path / "theirs").read_text() == "theirs\n"
    (tmp_path / JOBS_FILE).unlink()
    with fifo_never_waited_on(tmp_path / JOBS_FILE):  # an open to append would wait for a reader
        with pytest.raises(UsageError, match="not a regular file"):
            append_records(tmp_path, [rec])
        with pytest.raises(UsageError, match="not a regular file"):
            read_journal(tmp_path)


# --- smaller points -----------------------------------------------------------------------------


def test_a_job_cancelled_while_pending_points_to_no_log(tmp_path, monkeypatch):
    slurm = FakeSlurm(monkeypatch)
    slurm.sacct_out = "JobID|State\n42|CANCELLED by 0\n"
    job = TrialJob("cell/s000-seed0", _config(), tmp_path / "trial")
    log = tmp_path / "42" / "42_0_log.err"  # never written: the job never started
    append_records(tmp_path, [JobRecord(job.key, "42", config_hash(job.config), str(log), 0.0)])
    executor = SlurmExecutor(SlurmSettings(), tmp_path, "tiny", notify=lambda m: None)
    executor.submit([job])
    [event] = executor.poll(0)
    assert event.message == "SLURM job 42 CANCELLED before it started (no log)"


def test_a_reattaching_run_says_it_submitted_nothing(tmp_path, monkeypatch):
    slurm = FakeSlurm(monkeypatch)
    slurm.sacct_out = "JobID|State\n42_0|RUNNING\n42_1|PENDING\n"
    jobs = [
        TrialJob(f"cell/s00{i}-seed0", _config(lr=1e-3 * (i + 1)), tmp_path / str(i))
        for i in range(2)
    ]
    append_records(
        tmp_path,
        [JobRecord(j.key, f"42_{i}", config_hash(j.config), "/l", 0.0) for i, j in enumerate(jobs)],
    )
    said = [SlurmExecutor(SlurmSettings(), tmp_path, "tiny", notify=pytest.fail).submit(jobs)]
    assert said == [
        f"SLURM: 0 trial(s) submitted, 2 already queued or running and followed; jobs and logs in {tmp_path.resolve()}"
    ]


def test_status_counts_trials_whose_job_runs_as_running(tiny_dict, tmp_path, monkeypatch):
    study = _study_with_jobs(tiny_dict, tmp_path, ["5", "6"])
    slurm = FakeSlurm(monkeypatch)
    slurm.sacct_out = "JobID|State\n5|RUNNING\n6|PENDING\n"
    out = CliRunner().invoke(app, ["status", str(study)], terminal_width=200)
    assert out.exit_code == 0, out.output
    rows = [line.split("│") for line in out.output.splitlines() if "vit_p_w64_16px" in line]
    # columns: model, optimizer, epochs, finished, diverged, failed, running, pending
    [row] = rows
    assert [c.strip() for c in row[4:9]] == ["0", "0", "0", "1", "1"]
    assert "1 RUNNING, 1 PENDING" in out.output


def test_a_stalled_trial_is_cancelled_by_its_array_element_and_ends_saying_why(
    tmp_path, monkeypatch
):
    # two trials in one job (trials_per_job 2), a third in another: the stalled trial's job is
    # scancelled, both its trials end lost saying why, the other job runs on
    slurm = FakeSlurm(monkeypatch)
    jobs = [TrialJob(f"cell/s00{i}-seed0", _config(), tmp_path / f"t{i}") for i in range(3)]
    records = [
        JobRecord(job.key, job_id, config_hash(job.config), f"/l/{job_id}.err", 0.0)
        for job, job_id in zip(jobs, ["7_0", "7_0", "7_1"], strict=True)
    ]
    append_records(tmp_path, records)
    slurm.sacct_out = "JobID|State\n7_0|RUNNING\n7_1|RUNNING\n"
    executor = SlurmExecutor(SlurmSettings(poll_s=2), tmp_path, "tiny", notify=print)
    executor.submit(jobs)
    executor._last_sacct = float("-inf")
    assert sorted(e.kind for e in executor.poll(0)) == ["running"] * 3

    why = "stalled: no progress for 300 s (executor.stall_timeout_s is 300)"
    assert executor.end(jobs[0].key, why) == [jobs[0].key, jobs[1].key]
    assert ["scancel", "7_0"] in slurm.calls
    slurm.sacct_out = "JobID|State\n7_0|CANCELLED\n7_1|RUNNING\n"
    executor._last_sacct = float("-inf")
    ended = {e.key: e for e in executor.poll(0)}
    assert set(ended) == {jobs[0].key, jobs[1].key}
    assert ended[jobs[0].key].kind == "lost" and ended[jobs[0].key].message == why
    assert ended[jobs[1].key].message == f"SLURM job 7_0 cancelled: its trial {jobs[0].key} {why}"


def test_a_requeued_job_is_not_running_until_it_runs_again(tmp_path, monkeypatch):
    # a time limit or a preemption puts a running job back in the queue: its trial is neither
    # running nor stalled meanwhile (the driver's stall clock starts again when it runs)
    slurm = FakeSlurm(monkeypatch)
    job = TrialJob("cell/s000-seed0", _config(), tmp_path / "trial")
    append_records(tmp_path, [JobRecord(job.key, "42", config_hash(job.config), "/l/42.err", 0.0)])
    executor = SlurmExecutor(SlurmSettings(poll_s=2), tmp_path, "tiny", notify=print)
    executor.submit([job])
    kinds = []
    for state in ("PENDING", "RUNNING", "RUNNING", "REQUEUED", "PENDING", "RUNNING"):
        slurm.sacct_out = f"JobID|State\n42|{state}\n"
        executor._last_sacct = float("-inf")
        kinds += [e.kind for e in executor.poll(0)]
    assert kinds == ["running", "queued", "running"]


def test_status_reads_each_completed_jobs_elapsed_time_from_sacct(tmp_path, monkeypatch):
    """The cost plan's job comparison (issue 43 item 9): each of the study's jobs that
    completed, with its trials and sacct's elapsed time; a failed job or a sacct that does not
    answer gives none."""
    from optbench.executors.protocol import JobTime
    from optbench.executors.slurm.study import completed_job_times

    slurm = FakeSlurm(monkeypatch)
    assert completed_job_times(tmp_path) == []  # never submitted: sacct not asked
    assert slurm.calls == []
    keys = [f"cell/s00{i}-seed0" for i in range(4)]
    records = [
        JobRecord(key, job_id, config_hash(_config()), f"/l/{job_id}.err", 0.0)
        for key, job_id in zip(keys, ["7_0", "7_0", "7_1", "8"], strict=True)
    ]
    append_records(tmp_path, records)
    slurm.sacct_out = (
        "JobID|State|ElapsedRaw|Submit|Start\n"
        "7_0|COMPLETED|95|2026-12-04T13:08:33|2026-12-04T13:09:03\n"
        "7_1|COMPLETED|50|2026-12-04T13:08:33|Unknown\n"
        "8|FAILED|3|2026-12-04T13:08:33|2026-12-04T13:08:34\n"
    )
    assert completed_job_times(tmp_path) == [
        JobTime(keys[:2], 95.0, 30.0),  # its queue wait: Submit to Start
        JobTime([keys[2]], 50.0, None),  # no start time: no wait
    ]
    [call] = [c for c in slurm.calls if c[0] == "sacct"]
    assert all(field in " ".join(call) for field in ("ElapsedRaw", "Submit", "Start"))
    slurm.sacct_out = None  # accounting down
    assert completed_job_times(tmp_path) == []

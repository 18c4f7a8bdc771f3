"""The SLURM executor's pieces that need no cluster: settings, array splitting, job records,
state mapping, and the job callable's skip-on-requeue."""

from __future__ import annotations

import io
from functools import partial
from pathlib import Path

import optuna
import pytest
import submitit
import yaml
from rich.console import Console
from typer.testing import CliRunner

from optbench.cli import app
from optbench.errors import SpecError, UsageError
from optbench.executors.base import TrialJob
from optbench.executors.local import InlineExecutor
from optbench.launch.slurm import (
    ACTIVE_STATES,
    JobRecord,
    SlurmExecutor,
    append_records,
    base_state,
    chunks,
    config_hash,
    max_array_size,
    read_records,
    sacct_states,
    sbatch_parameters,
    settle_ended,
)
from optbench.plan import plan
from optbench.runner import run_study
from optbench.spec import SlurmSettings, parse_spec
from optbench.store import Store
from optbench.train.config import TrainConfig, TrialResult
from optbench.train.results import write_result


def _config(**kw) -> TrainConfig:
    base = dict(model="vit_p_w64_16px", dataset={"name": "digits", "img_size": 16},
                optimizer="adamw", lr=1e-3, wd=0.05, epochs=1, batch_size=128, ref_batch=128,
                recipe={"warmup_epochs": 0})  # fmt: skip
    return TrainConfig(**{**base, **kw})


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
    assert {"PENDING", "RUNNING", "REQUEUED"} <= ACTIVE_STATES
    assert not {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY"} & ACTIVE_STATES


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
        "optbench.launch.slurm.sacct_states", lambda ids: dict.fromkeys(ids, "OUT_OF_MEMORY")
    )
    executor = SlurmExecutor(SlurmSettings(), tmp_path, "tiny")
    executor.submit([job])  # nothing new is submitted: the record matches
    [event] = executor.poll(0)
    assert event.kind == "lost" and "42_3 OUT_OF_MEMORY" in event.message
    assert "/logs/42_3.err" in event.message
    assert executor.submitted == 0 and executor.reattached == 0
    assert read_records(tmp_path)[job.key].ended == "OUT_OF_MEMORY"  # reported once


def test_a_job_whose_end_was_reported_is_resubmitted_as_a_new_attempt(tmp_path, monkeypatch):
    job = TrialJob("cell/s000-seed0", _config(), tmp_path / "trial")
    rec = JobRecord(job.key, "42_3", config_hash(job.config), "/logs/42_3.err", 0.0, ended="FAILED")
    append_records(tmp_path, [rec])
    monkeypatch.setattr(
        "optbench.launch.slurm.sacct_states", lambda ids: pytest.fail("no sacct needed")
    )
    submitted = []
    monkeypatch.setattr(SlurmExecutor, "_submit_new", lambda self, jobs: submitted.extend(jobs))
    executor = SlurmExecutor(SlurmSettings(), tmp_path, "tiny")
    executor.submit([job])
    assert submitted == [job] and executor.poll(0) == []


def test_a_job_that_crashed_unwatched_keeps_its_message_and_is_retried_by_the_next_run(
    tiny_dict, monkeypatch
):
    # A run submitted a trial and was detached; its job crashed (writing a failed result with
    # the crash's message) while no driver followed it. The next run records that failure as it
    # was and runs the retry at once, not one run later.
    tiny_dict["models"] = tiny_dict["models"][:1]
    tiny_dict["search"]["n_samples"] = 1
    spec = parse_spec(tiny_dict)
    [item] = Store(spec, create=True).prepare(plan(spec), retries=spec.executor.retries)
    job = item.trial.job
    folder = spec.study_dir / "slurm"
    folder.mkdir(parents=True)
    append_records(
        folder, [JobRecord(job.key, "42_0", config_hash(job.config), "/l/42_0.err", 0.0)]
    )
    crash = TrialResult(status="failed", epochs=1, config=job.config, message="RuntimeError: boom")
    write_result(job.out_dir, crash)
    monkeypatch.setattr(
        "optbench.launch.slurm.sacct_states", lambda ids: dict.fromkeys(ids, "FAILED")
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
    calls = []

    def fake_sacct(command, shell=False):
        calls.append(command)
        return (
            b"JobID|State|NodeList\n"
            b"7_0|COMPLETED|n1\n7_0.batch|COMPLETED|n1\n7_[1-2]|PENDING|None\n"
            b"8|CANCELLED by 0|None\n"  # an array cancelled before its elements started
            b"9|OUT_OF_MEMORY|n2\n"
        )

    monkeypatch.setattr(submitit.SlurmJob, "watcher", submitit.slurm.slurm.SlurmInfoWatcher())
    monkeypatch.setattr(submitit.core.core.subprocess, "check_output", fake_sacct)
    states = sacct_states(["7_0", "7_2", "8_1", "9", "10"])
    assert states == {"7_0": "COMPLETED", "7_2": "PENDING", "8_1": "CANCELLED",
                      "9": "OUT_OF_MEMORY", "10": "UNKNOWN"}  # fmt: skip
    assert len(calls) == 1 and calls[0][0] == "sacct"


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

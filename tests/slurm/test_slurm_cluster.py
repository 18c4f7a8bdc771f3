"""optbench's SLURM executor against a real cluster (`bash scripts/slurm-local.sh start`).

Tiny models on digits, 1-3 epochs: every job is a few seconds of training plus Python startup.
"""

from __future__ import annotations

import copy
import math
import os
import subprocess
import threading
import time
from pathlib import Path

import optuna
import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from optbench.cli import app
from optbench.executors import make_executor
from optbench.launch.slurm import (
    ACTIVE_STATES,
    followed_jobs,
    job_folder,
    read_records,
    sacct_states,
)
from optbench.plan import plan
from optbench.runner import run_study
from optbench.spec import StudySpec, load_spec, parse_spec
from optbench.store import Store
from optbench.train.loop import run_trial
from optbench.train.results import METRICS_FILE, read_result

pytestmark = pytest.mark.slurm


def _study(tiny: dict, *, models: int = 2, samples: int = 1, epochs: int = 1, **slurm) -> dict:
    data = copy.deepcopy(tiny)
    data["models"] = data["models"][:models]
    data["search"]["n_samples"] = samples
    data["epochs"] = epochs
    data["executor"] = {"kind": "slurm", "slurm": {"poll_s": 2, "time_min": 10, **slurm}}
    return data


def _spec(tiny: dict, **kw) -> StudySpec:
    return parse_spec(_study(tiny, **kw))


def _run(spec: StudySpec):  # what `optbench run` does with executor slurm
    return run_study(
        spec,
        make_executor(spec),
        console=Console(file=open(os.devnull, "w")),  # noqa: SIM115
        live=False,
    )


def _wait_for(what: str, check, timeout: float = 180.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}: last {value!r}")


def _epochs_logged(out_dir: Path) -> int:
    path = out_dir / METRICS_FILE
    return len(path.read_text().splitlines()) if path.is_file() else 0


def _scontrol_job(job_id: str) -> str:
    return subprocess.run(
        ["scontrol", "show", "job", job_id], capture_output=True, text=True
    ).stdout


def test_array_of_2_models_x_3_samples_completes_split_by_max_array_size(tiny_dict, slurm_cluster):
    spec = _spec(tiny_dict, models=2, samples=3, trials_per_job=2)  # 6 trials in 3 jobs
    _run(spec)

    frame = Store(spec, create=False).frame(plan(spec))
    assert len(frame) == 6 and (frame.status == "finished").all()
    assert frame.final_error.between(0, 100).all()
    records = read_records(job_folder(spec))
    job_ids = {r.job_id for r in records.values()}
    assert len(records) == 6 and len(job_ids) == 3
    arrays = {j.split("_")[0] for j in job_ids}
    assert len(arrays) == math.ceil(3 / slurm_cluster.max_array_size)  # CI: MaxArraySize=2
    indices = [int(j.split("_")[1]) for j in job_ids if "_" in j]  # an array of one is a plain job
    assert max(indices) < slurm_cluster.max_array_size
    # A trial is recorded as soon as its result is written; its job ends moments later.
    _wait_for("every job to complete", lambda: set(sacct_states(job_ids).values()) == {"COMPLETED"})


def test_a_job_killed_mid_trial_fails_honestly_and_the_next_run_resubmits_it(tiny_dict):
    spec = _spec(tiny_dict, models=1, epochs=3)
    [trial] = plan(spec)
    out_dir = trial.out_dir
    killed = []

    def kill_the_trial_process():
        _wait_for("the first epoch", lambda: _epochs_logged(out_dir) >= 1)
        [rec] = read_records(job_folder(spec)).values()
        pids = subprocess.run(
            ["scontrol", "listpids", rec.job_id], capture_output=True, text=True
        ).stdout
        # The job step's own task (step 0, local id 0): the Python process that trains.
        [pid] = [
            int(f[0]) for f in map(str.split, pids.splitlines()[1:]) if f[2] == "0" and f[3] == "0"
        ]
        os.kill(pid, 9)
        killed.append(rec.job_id)

    killer = threading.Thread(target=kill_the_trial_process, daemon=True)
    killer.start()
    _run(spec)
    killer.join()

    [failed] = Store(spec, create=False).read(plan(spec))
    assert killed and failed.status == "failed"
    message = failed.record.user_attrs["message"]
    assert f"SLURM job {killed[0]} FAILED" in message and "log: " in message
    assert Path(message.split("log: ")[1]).is_file()

    _run(spec)  # the next run resubmits the unfinished trial
    [done] = Store(spec, create=False).read(plan(spec))
    assert done.status == "finished" and done.attempts == 2
    [rec] = read_records(job_folder(spec)).values()
    assert rec.job_id != killed[0]


@pytest.mark.parametrize(
    "interrupt",
    [
        ["scontrol", "requeue"],  # preemption-like: SIGTERM, SLURM requeues the job
        ["scancel", "--signal=USR2"],  # what SLURM sends signal_delay_s before the time limit
    ],
    ids=["scontrol-requeue", "time-limit-signal"],
)
def test_an_interrupted_job_requeues_resumes_and_ends_like_an_uninterrupted_trial(
    tiny_dict, tmp_path, interrupt
):
    spec = _spec(tiny_dict, models=1, epochs=3)
    [trial] = plan(spec)
    out_dir, config = trial.out_dir, trial.config
    executor = make_executor(spec)
    executor.submit([trial.job])
    [job_id] = executor.job_ids()

    _wait_for("the first epoch", lambda: _epochs_logged(out_dir) >= 1)
    first_epoch = (out_dir / METRICS_FILE).read_text().splitlines()[0]
    subprocess.run([*interrupt, job_id], check=True)
    reference = run_trial(config, tmp_path / "uninterrupted")  # meanwhile, on this process
    ended = _wait_for(
        "the requeued job to end",
        lambda: [e for e in executor.poll(1.0) if e.kind != "running"],
        timeout=240,
    )

    assert [e.kind for e in ended] == ["ended"]
    result = read_result(out_dir)
    assert result.status == "finished" and result.digest == reference.digest
    assert result.final_error == reference.final_error
    assert "Restarts=1" in _scontrol_job(job_id)
    # Resumed, not restarted: epoch 1's line (its timing included) is the first run's.
    assert (out_dir / METRICS_FILE).read_text().splitlines()[0] == first_epoch


def test_a_gpu_request_is_scheduled_on_the_clusters_gpus(tiny_dict, slurm_cluster):
    if slurm_cluster.gpus < 1:
        pytest.skip("the cluster has no (fake) GPUs")
    spec = _spec(tiny_dict, models=1, gpus_per_node=1)
    _run(spec)

    [rec] = read_records(job_folder(spec)).values()
    tres = subprocess.run(
        ["sacct", "-j", rec.job_id, "-X", "-n", "-P", "-o", "AllocTRES"],
        capture_output=True,
        text=True,
    ).stdout
    assert "gres/gpu=1" in tres
    assert Store(spec, create=False).read(plan(spec))[0].status == "finished"


def test_detach_status_reattach_and_cancel(tiny_dict, tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(_study(tiny_dict, models=2, epochs=3)))
    spec = load_spec(study)
    cli = CliRunner()

    submitted = cli.invoke(app, ["run", str(study), "--detach"])
    assert submitted.exit_code == 0, submitted.output
    assert "2 trial(s) submitted" in submitted.output
    assert len(read_records(job_folder(spec))) == 2
    assert "SLURM: trials not recorded yet: 2 " in cli.invoke(app, ["status", str(study)]).output

    follower = make_executor(spec)  # what the next `optbench run` does first
    follower.submit([t.job for t in plan(spec)])
    assert (follower.submitted, follower.reattached) == (0, 2)
    assert len(read_records(job_folder(spec))) == 2

    cancelled = cli.invoke(app, ["cancel", str(study)])
    assert cancelled.exit_code == 0 and "cancelled 2 SLURM job(s)" in cancelled.output
    ended = lambda: all(s not in ACTIVE_STATES for _, s in followed_jobs(job_folder(spec)).values())  # noqa: E731
    _wait_for("both jobs to end", ended)
    # The next run records the cancelled jobs as failed attempts and runs the retries.
    follow = cli.invoke(app, ["run", str(study)])
    assert follow.exit_code == 0, follow.output
    assert "recorded 2 trial(s) whose job ended while no run followed" in follow.output
    for item in Store(spec, create=False).read(plan(spec)):
        assert item.status == "finished" and item.attempts == 2
        name = f"{spec.name}/{item.trial.cell_id}"
        cell = optuna.load_study(study_name=name, storage=spec.storage_url)
        [first] = [t for t in cell.trials if t.user_attrs["key"] == item.trial.key][:1]
        assert first.user_attrs["status"] == "failed" and "CANCELLED" in first.user_attrs["message"]


def test_a_2_task_job_trains_one_trial_with_ddp_on_cpu(tiny_dict):
    spec = _spec(tiny_dict, models=1, tasks_per_node=2)
    _run(spec)

    [item] = Store(spec, create=False).read(plan(spec))
    assert item.status == "finished"
    assert read_result(item.trial.out_dir).world_size == 2

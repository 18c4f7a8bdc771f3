"""optbench's SLURM executor against a real cluster (`bash scripts/slurm-local.sh start`).

Tiny models on digits, 1-3 epochs: every job is a few seconds of training plus Python startup.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
import yaml
from driver_process import MAIN, signal_at
from rich.console import Console
from typer.testing import CliRunner

from optbench.cli.app import app
from optbench.executors import make_executor
from optbench.executors.slurm.client import ACTIVE_STATES, sacct_states, squeue_jobs
from optbench.executors.slurm.journal import COMMENT_TAG, JOBS_FILE, followed_jobs, read_records
from optbench.executors.slurm.study import job_folder
from optbench.plan.trials import plan
from optbench.run.driver import run_study
from optbench.spec.schema import StudySpec, load_spec, parse_spec
from optbench.store.database import Store
from optbench.train.run_trial import run_trial
from optbench.trial.results import METRICS_FILE, read_result

# One cluster, some of whose tests stop its daemons: under pytest-xdist (--dist loadgroup) one
# worker runs these tests one after another while the others run the rest of the suite.
pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.xdist_group("slurm")]


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
    [item] = Store(spec, create=False).read(plan(spec))
    out_dir = item.trial.out_dir
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
    [item] = Store(spec, create=False).read(plan(spec))
    out_dir = item.trial.out_dir
    config = item.trial.config
    executor = make_executor(spec)
    executor.submit([item.trial.job])
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


def test_detach_status_reattach_and_cancel(tiny_dict, tmp_path, request):
    study = tmp_path / "study.yaml"
    # Both jobs run, held in their setup, until they are cancelled; the retries pass at once.
    release = tmp_path / "release"
    request.addfinalizer(release.touch)  # never a held job left behind
    hold = f"while [ ! -e {release} ]; do sleep 0.5; done"
    study.write_text(yaml.safe_dump(_study(tiny_dict, models=2, setup=[hold])))
    spec = load_spec(study)
    cli = CliRunner()

    submitted = cli.invoke(app, ["run", str(study), "--detach"])
    assert submitted.exit_code == 0, submitted.output
    assert "2 trial(s) submitted" in submitted.output
    assert len(read_records(job_folder(spec))) == 2
    states = re.search(
        r"SLURM: trials not recorded yet: (.*?) \(job files",
        " ".join(cli.invoke(app, ["status", str(study)]).output.split()),
    )
    # both trials, in whatever states SLURM has them now ("2 RUNNING" or "1 RUNNING, 1 PENDING")
    assert states and sum(int(n) for n in re.findall(r"(\d+) [A-Z_]+", states[1])) == 2, states

    follower = make_executor(spec)  # what the next `optbench run` does first
    follower.submit([t.job for t in plan(spec)])
    assert (follower.submitted, follower.reattached) == (0, 2)
    assert len(read_records(job_folder(spec))) == 2

    cancelled = cli.invoke(app, ["cancel", str(study)])
    assert cancelled.exit_code == 0 and "cancelled 2 SLURM job(s)" in cancelled.output

    def ended() -> bool:
        return all(s not in ACTIVE_STATES for _, s in followed_jobs(job_folder(spec))[0].values())

    _wait_for("both jobs to end", ended)
    release.touch()
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


# --- when the cluster misbehaves -------------------------------------------------------------------


def _optbench(*args: str, env: dict | None = None, timeout: float = 600):
    """`optbench ARGS` in its own process, as a user runs it: (exit status, stdout + stderr)."""
    proc = subprocess.run(
        [sys.executable, "-m", "optbench", *args],
        capture_output=True, text=True, timeout=timeout, env=env,
    )  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


def _study_file(tmp_path: Path, tiny: dict, **kw) -> tuple[Path, StudySpec]:
    data = _study(tiny, **kw)
    data["name"] = f"tiny-{uuid.uuid4().hex[:8]}"  # unique on a shared database server
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(data))
    return study, load_spec(study)


def _squeue_states(job_ids) -> dict[str, str]:
    out = subprocess.run(
        ["squeue", "-h", "-r", "-t", "all", "-o", "%i %T"], capture_output=True, text=True
    ).stdout
    states = dict(line.split() for line in out.splitlines())
    return {j: states.get(j, "") for j in job_ids}


def _step_pid(folder: Path) -> int | None:
    """The pid of a job step started in `folder` (its python, as srun runs it)."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        python = cmdline[0] == sys.executable.encode()  # not srun, whose arguments are the same
        if python and b"submitit.core._submit" in cmdline and str(folder).encode() in cmdline[-2]:
            return int(proc.name)
    return None


def _signal_mask(pid: int, field: str) -> int:
    """A signal mask of a process: SigBlk (blocked) or SigCgt (caught by a handler)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"^{field}:\s*([0-9a-f]+)", status, re.M).group(1), 16)


def test_usr2_while_a_job_starts_requeues_it_and_the_trial_still_finishes(tiny_dict):
    spec = _spec(tiny_dict, models=1, epochs=2)
    [item] = Store(spec, create=False).read(plan(spec))
    out_dir = item.trial.out_dir
    executor = make_executor(spec, notify=lambda line: None)
    executor.submit([item.trial.job])
    [job_id] = executor.job_ids()

    usr2 = 1 << (signal.SIGUSR2 - 1)
    deadline = time.monotonic() + 120
    while (pid := _step_pid(executor.folder)) is None or not _signal_mask(pid, "SigBlk") & usr2:
        assert time.monotonic() < deadline, "the job step never started, or never held SIGUSR2"
        time.sleep(0.002)
    # Python has started; it sets up site-packages, imports and unpickles the job next: no
    # handler of submitit's yet, the moment when SIGUSR2 used to kill the job.
    assert not _signal_mask(pid, "SigCgt") & usr2, "too late: submitit's handler is there"
    os.kill(pid, signal.SIGUSR2)  # what SLURM's --signal does, the moment the job starts

    ended = _wait_for(
        "the requeued job to end",
        # "queued": SLURM put it back in the queue (the requeue itself), not an end
        lambda: [e for e in executor.poll(1.0) if e.kind not in ("running", "queued")],
        timeout=300,
    )
    assert [e.kind for e in ended] == ["ended"], ended
    assert read_result(out_dir).status == "finished"
    assert "Restarts=1" in _scontrol_job(job_id)  # requeued, not killed


def test_a_trial_that_runs_out_of_time_says_so_and_keeps_its_progress(tiny_dict):
    spec = _spec(tiny_dict, models=1, epochs=300, max_requeues=1)
    [item] = Store(spec, create=False).read(plan(spec))
    out_dir = item.trial.out_dir
    shortened = []

    def shorten_the_time_limit():
        _wait_for("the first epoch", lambda: _epochs_logged(out_dir) >= 1)
        [rec] = read_records(job_folder(spec)).values()
        # 1 minute, 2 of which are before SLURM's warning (signal_delay_s 120): it signals at once
        subprocess.run(["scontrol", "update", f"JobId={rec.job_id}", "TimeLimit=1"], check=True)
        shortened.append(rec.job_id)

    thread = threading.Thread(target=shorten_the_time_limit, daemon=True)
    thread.start()
    _run(spec)
    thread.join()

    [failed] = Store(spec, create=False).read(plan(spec))
    assert shortened and failed.status == "failed"
    message = failed.record.user_attrs["message"]
    assert (
        f"SLURM job {shortened[0]} ran out of time (time limit 1 min, requeued 1 time(s))"
        in message
    )
    assert "raise executor.slurm.time_min" in message
    assert _epochs_logged(out_dir) >= 1 and (out_dir / "checkpoint.pt").is_file()


def test_an_accounting_outage_is_said_once_and_never_resubmits_a_running_trial(
    tiny_dict, tmp_path, request, slurm_daemons
):
    # The jobs wait in their setup until the following run first asks squeue about them (an
    # squeue first on its PATH releases them): however slowly that run starts, they still run.
    release = tmp_path / "release"
    request.addfinalizer(release.touch)  # never a held job left behind
    hold = f"while [ ! -e {release} ]; do sleep 0.5; done"
    real = subprocess.run(["which", "squeue"], capture_output=True, text=True).stdout.strip()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "squeue").write_text(f'#!/bin/bash\ntouch {release}\nexec {real} "$@"\n')
    (bindir / "squeue").chmod(0o755)
    releasing = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    study, spec = _study_file(tmp_path, tiny_dict, models=2, epochs=4, setup=[hold])
    code, out = _optbench("run", str(study), "--detach")
    assert code == 0, out
    ids = [r.job_id for r in read_records(job_folder(spec)).values()]
    _wait_for("both jobs to run", lambda: set(_squeue_states(ids).values()) == {"RUNNING"})

    slurm_daemons.stop("slurmdbd")
    try:
        assert subprocess.run(["sacct", "-j", ids[0]], capture_output=True).returncode != 0
        code, out = _optbench("run", str(study), env=releasing)  # follows through squeue
        assert code == 0, out

        # Restarting the cluster while a job runs and MaxArraySize was not given again: it
        # keeps the value and does not wait for an idle node (it never becomes idle here).
        busy = subprocess.run(
            ["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 60"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        conf = Path("/etc/slurm/slurm.conf").read_text()
        _wait_for("the busy job to run", lambda: _squeue_states([busy])[busy] == "RUNNING")
        slurm_daemons.start()
        assert Path("/etc/slurm/slurm.conf").read_text() == conf
        subprocess.run(["scancel", busy], check=True)
    finally:
        slurm_daemons.start("slurmdbd")

    assert out.count("SLURM accounting (sacct) is not answering") == 1, out
    assert "Problem talking to the database" in out
    assert "sacct: error" not in out and "Bypassing" not in out and "Traceback" not in out
    assert "0 trial(s) submitted, 2 already queued or running" in out
    for item in Store(spec, create=False).read(plan(spec)):
        assert item.status == "finished" and item.attempts == 1
        epochs = [json.loads(line)["epoch"] for line in (item.trial.out_dir / METRICS_FILE).open()]
        assert epochs == [1, 2, 3, 4]
    assert sorted(r.job_id for r in read_records(job_folder(spec)).values()) == sorted(ids)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_driver_killed_inside_submission_leaves_no_job_that_the_next_run_does_not_know(
    tiny_dict, tmp_path, when
):
    # An sbatch first on PATH that kills its caller, the driver, right before or right after the
    # real sbatch submits: the worst moments for the journal.
    real = subprocess.run(["which", "sbatch"], capture_output=True, text=True).stdout.strip()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sbatch").write_text(
        "#!/bin/bash\n"
        f"[[ {when} == before ]] && kill -9 $PPID && exit 1\n"
        f'out=$({real} "$@"); rc=$?; echo "$out"; kill -9 $PPID; exit $rc\n'
    )
    (bindir / "sbatch").chmod(0o755)
    study, spec = _study_file(tmp_path, tiny_dict, models=2)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    code, out = _optbench("run", str(study), "--detach", env=env)
    assert code == -9, out
    assert read_records(job_folder(spec)) == {}  # killed before it recorded a job
    journal = (job_folder(spec) / JOBS_FILE).read_text()
    [token] = re.findall(r'"token": "([0-9a-f]+)"', journal)
    started = [j for j, (_, c) in squeue_jobs().items() if f"{COMMENT_TAG}{token}" in c]
    assert len(started) == (2 if when == "after" else 0)  # one array of two

    for _ in range(2 if when == "after" else 1):  # an orphan's failure: retried by the next run
        code, out = _optbench("run", str(study))
        assert code == 0, out
    journaled = {json.loads(line).get("job_id") for line in (job_folder(spec) / JOBS_FILE).open()}
    assert set(started) <= journaled  # the orphans were adopted
    for item in Store(spec, create=False).read(plan(spec)):
        assert item.status == "finished"
        if when == "before":  # nothing had started: submitted once, by the next run
            assert item.attempts == 1
            continue
        # Killed before submitit moved the job pickles into place, the orphans fail (after
        # submitit's 60 s wait for them): followed, recorded as a failed attempt, then retried.
        assert item.attempts == 2
        name = f"{spec.name}/{item.trial.cell_id}"
        cell = optuna.load_study(study_name=name, storage=spec.storage_url)
        first = next(t for t in cell.trials if t.user_attrs["key"] == item.trial.key).user_attrs
        assert any(first["message"].startswith(f"SLURM job {j} FAILED") for j in started)


def test_cancel_while_the_controller_is_down_says_so_exits_1_and_cancels_nothing(
    tiny_dict, tmp_path, slurm_daemons
):
    # submitted held (sbatch --hold): a job that ran would finish its 1-epoch trial before the
    # cancel, which then has nothing to cancel (seen in CI on a quiet machine)
    study, spec = _study_file(tmp_path, tiny_dict, models=1, sbatch={"hold": True})
    assert _optbench("run", str(study), "--detach")[0] == 0
    job_ids = sorted({r.job_id for r in read_records(job_folder(spec)).values()})
    assert set(_squeue_states(job_ids).values()) == {"PENDING"}
    slurm_daemons.stop("slurmctld")
    try:
        code, out = _optbench("cancel", str(study))
    finally:
        slurm_daemons.start("slurmctld")
    assert code == 1, out
    assert "scancel failed for SLURM job" in out and "Unable to contact slurm controller" in out
    assert "cancelled" not in out
    subprocess.run(["scontrol", "release", *job_ids], check=True, capture_output=True)
    code, out = _optbench("run", str(study))
    assert code == 0, out
    [item] = Store(spec, create=False).read(plan(spec))
    assert item.status == "finished" and item.attempts == 1  # it was never cancelled


@pytest.mark.parametrize("storage", ["postgresql", "journal"])
def test_a_study_on_slurm_records_into_postgresql_or_a_journal_file(
    tiny_dict, tmp_path, storage, request
):
    url = (
        request.getfixturevalue("postgres_url")
        if storage == "postgresql"
        else f"journal://{tmp_path / 'journal.log'}"
    )
    study, spec = _study_file(tmp_path, {**tiny_dict, "storage": url}, models=1)
    code, out = _optbench("run", str(study))
    assert code == 0, out
    [item] = Store(spec, create=False).read(plan(spec))
    assert item.status == "finished" and item.attempts == 1


def test_a_storage_that_goes_down_while_following_is_one_line_and_nothing_is_lost(
    tiny_dict, tmp_path, private_postgres
):
    url = private_postgres.url
    # Enough epochs that the trials are still training when the server has stopped.
    study, spec = _study_file(tmp_path, {**tiny_dict, "storage": url}, models=2, epochs=8)
    log = open(tmp_path / "driver.log", "w")  # noqa: SIM115
    driver = subprocess.Popen(
        [sys.executable, "-m", "optbench", "run", str(study)], stdout=log, stderr=log
    )
    out_dirs = [t.trial.out_dir for t in Store(spec, create=False).read(plan(spec))]
    _wait_for("a first epoch", lambda: any(_epochs_logged(d) for d in out_dirs))
    private_postgres.stop()
    assert driver.wait(timeout=600) == 1
    out = (tmp_path / "driver.log").read_text()
    [line] = [line for line in out.splitlines() if "storage postgresql" in line]
    assert (
        line.startswith("error: storage postgresql://optbench:***@127.0.0.1:")
        and "is not answering" in line
    )
    assert url.split(":")[2].split("@")[0] not in out and "Traceback" not in out
    # The jobs run on: their results wait in the trial folders for the next run.
    _wait_for("both results", lambda: all(read_result(d) for d in out_dirs), timeout=300)
    private_postgres.start()
    code, out = _optbench("run", str(study))
    assert code == 0, out
    for item in Store(spec, create=False).read(plan(spec)):
        assert item.status == "finished" and item.attempts == 1  # recorded once, none rerun


def test_a_sequential_study_runs_its_rounds_as_arrays_detached_and_reattached(tiny_dict, tmp_path):
    # Two rounds whatever the data (alpha 1e-6: no look decides before the last): the first
    # `run --detach` submits round 1; the next `run --detach` records it, takes look 1 and
    # submits round 2; an attached `run` records that and takes the last look. Round 1 is the
    # smallest first look of claim a (4 samples of 2 models), round 2 one sample more each.
    data = _study(tiny_dict, models=2, samples=5)
    data["decide"] = {"claims": ["a"], "looks": [4, 5], "alpha": 1e-6}
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(data))
    spec = load_spec(study)
    cli = CliRunner()

    def jobs_ended() -> bool:
        return all(s not in ACTIVE_STATES for _, s in followed_jobs(job_folder(spec))[0].values())

    first = cli.invoke(app, ["run", str(study), "--detach"])
    assert first.exit_code == 0 and "8 trial(s) submitted" in first.output, first.output
    _wait_for("round 1's jobs to end", jobs_ended, timeout=600)
    second = cli.invoke(app, ["run", str(study), "--detach"])
    assert second.exit_code == 0, second.output
    assert "look 1 (4 of at most 5 samples)" in second.output
    assert "2 trial(s) submitted" in second.output
    _wait_for("round 2's jobs to end", jobs_ended, timeout=600)
    last = cli.invoke(app, ["run", str(study)])
    assert last.exit_code == 0 and "after 5 of at most 5 samples" in last.output, last.output
    assert [r["k"] for r in Store(spec, create=False).looks()] == [0, 1]
    stored = Store(spec, create=False).read(plan(spec))
    assert [s.status for s in stored] == ["finished"] * 10 and {s.attempts for s in stored} == {1}
    assert len(read_records(job_folder(spec))) == 10  # one job per trial, none submitted twice


# --- a detached sequential study whose driver is killed at random moments ------------------------

RECORD = "optbench.store.database:Store.record"  # a trial's result (or failure), into the store
# Where a `run --detach` driver may be killed, with the hook, before or after its call, and
# whether a run from a state (_detached_progress) still makes that call (each at most once).
DETACHED_MOMENTS = {
    "while catching up": ("optbench.run.driver:catch_up", False, lambda s: True),
    # a call for each result on disk not recorded: which one is drawn at random
    "while a result is recorded": (RECORD, False, lambda s: s.trained - s.recorded),
    "while a look is computed": ("optbench.run.rounds:claims_table", False, lambda s: s.due),
    "before a look is recorded": ("optbench.store.database:Store.record_look", False, lambda s: s.due),
    "after a look is recorded": ("optbench.store.database:Store.record_look", True, lambda s: s.due),
    "before round 2 is asked": (
        "optbench.store.database:Store.prepare", False, lambda s: s.between_rounds
    ),
    "after round 2 is asked": (
        "optbench.store.database:Store.prepare", True, lambda s: s.between_rounds
    ),
    "before submitting": (
        "optbench.executors.slurm.executor:SlurmExecutor.submit", False, lambda s: s.unfinished
    ),
    "after submitting": (
        "optbench.executors.slurm.executor:SlurmExecutor.submit", True, lambda s: s.unfinished
    ),
    # sbatch has returned, the job ids are not journaled: the next run adopts them by comment
    "sbatch done, its jobs not journaled": (
        "optbench.executors.slurm.executor:append_records", False, lambda s: s.unsubmitted
    ),
}  # fmt: skip
AT_RANDOM = "at a random time"
WINDOW = {  # a moment's rank: the narrower the window of states where it can land, the lower
    "while a result is recorded": -1,  # any run records them all
    "before round 2 is asked": 0,
    "after round 2 is asked": 0,
    "while a look is computed": 1,
    "before a look is recorded": 1,
    "after a look is recorded": 2,  # it closes its look's window
    "sbatch done, its jobs not journaled": 3,
}


# The sequential study below: looks at 4 and 5 samples of 2 models, round 1 its first 8 trials
ROUND_1_TRIALS, ALL_TRIALS = 8, 10


@dataclass(frozen=True)
class Progress:
    """Where the sequential study of ROUND_1_TRIALS + (ALL_TRIALS - ROUND_1_TRIALS) trials
    (looks at 4 and 5 samples) stands."""

    trained: int  # trials with a result file
    recorded: int  # trials whose result is recorded
    looks: int  # looks recorded
    journaled: int  # trials with a SLURM job in the journal
    active: bool  # a job of the study is queued or running (journaled or not)

    @property
    def asked(self) -> int:  # the trials the study asks for once the due look is taken
        first_round = self.looks == 0 and self.trained < ROUND_1_TRIALS
        return ROUND_1_TRIALS if first_round else ALL_TRIALS

    @property
    def due(self) -> bool:  # a run records every result on disk, then takes the look
        first = (self.looks, min(self.trained, ROUND_1_TRIALS)) == (0, ROUND_1_TRIALS)
        return first or (self.looks, self.trained) == (1, ALL_TRIALS)

    @property
    def between_rounds(self) -> bool:  # the next prepare asks for round 2, not yet submitted
        return self.asked == ALL_TRIALS and self.journaled < ALL_TRIALS and self.looks < 2

    @property
    def unfinished(self) -> bool:  # the run submits (or reattaches to) trials without results
        return self.trained < self.asked

    @property
    def unsubmitted(self) -> bool:  # the run calls sbatch
        return self.journaled < self.asked

    @property
    def complete(self) -> bool:
        return self.looks == 2 and self.recorded == ALL_TRIALS


def _jobs_active(spec: StudySpec) -> bool:
    """A job of the study is queued or running (journaled or not): one squeue/sacct query,
    cheap enough to poll while the jobs run (the store is not opened)."""
    return any(s in ACTIVE_STATES for _, s in followed_jobs(job_folder(spec))[0].values())


def _detached_progress(spec: StudySpec) -> Progress | None:
    """The study's Progress; None while its database holds a killed driver's unfinished write."""
    from optbench.errors import UnfinishedWrite

    trials = plan(spec)
    trained = sum(read_result(t.out_dir) is not None for t in trials)
    active = _jobs_active(spec)
    journaled = len(read_records(job_folder(spec)))
    try:
        store = Store(spec, create=False)
        recorded = sum(s.status == "finished" for s in store.read(trials))
        return Progress(trained, recorded, len(store.looks()), journaled, active)
    except UnfinishedWrite:
        return None


def _decision(spec: StudySpec) -> tuple[list[tuple], dict[str, str]]:
    """The study's looks and the weight digest of each finished trial."""
    store = Store(spec, create=False)
    looks = [
        (r["panel"], r["k"], r["n"], r["estimate"], r["low"], r["high"], r["outcome"])
        for r in store.looks()
    ]
    done = [s for s in store.read(plan(spec)) if s.status == "finished"]
    return looks, {s.trial.key: read_result(s.trial.out_dir).digest for s in done}


def _driver(study: Path, *args: str, hook: str = "") -> list[str]:
    return [sys.executable, "-c", f"{hook}\n{MAIN}", "run", str(study), *args]


@pytest.mark.timeout(1800)  # 12 min at load 11 here; 13 driver runs and their jobs
def test_a_detached_sequential_study_killed_at_random_moments_ends_as_an_uninterrupted_one(
    tiny_dict, tmp_path
):
    # `run --detach` again and again until the study is complete, 12 of the runs killed at a
    # moment drawn at random (seeded) from those still ahead: while it catches up, records a
    # result or a look, computes a look, asks for round 2, submits, or after a random delay;
    # SIGKILL mostly, SIGTERM for a quarter of the hooked ones. The reference is the same study
    # run uninterrupted in one process with a SLURM job's one thread (cpus_per_task 1), meanwhile.
    data = _study(tiny_dict, models=2, samples=5)
    data["decide"] = {"claims": ["a"], "looks": [4, 5], "alpha": 1e-6}  # two rounds: Progress
    reference = tmp_path / "reference" / "study.yaml"
    reference.parent.mkdir()
    reference_data = {**data, "executor": {"kind": "debug"}, "output": str(reference.parent)}
    reference.write_text(yaml.safe_dump(reference_data))
    one_thread = "import torch; torch.set_num_threads(1)"
    log = open(tmp_path / "reference.log", "w")  # noqa: SIM115
    uninterrupted = subprocess.Popen(_driver(reference, hook=one_thread), stdout=log, stderr=log)
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(data))
    spec = load_spec(study)

    start = time.monotonic()
    _optbench("status", str(study))
    run_s = time.monotonic() - start  # a detached run's start-up and a little work
    rng = random.Random(56)
    moments = [*DETACHED_MOMENTS, AT_RANDOM, AT_RANDOM]
    rng.shuffle(moments)
    # The moments with the narrowest windows first (round 2's prepare, then a look, then
    # sbatch), so that one study has room for all: rank, then the seeded order.
    moments.sort(key=lambda m: WINDOW.get(m, len(WINDOW)))
    runs = []
    while True:
        progress = _detached_progress(spec)
        if progress is None:  # a hot journal: only moments a run reaches before reading it
            ahead = {m: 1 for m in moments if m in ("while catching up", AT_RANDOM)}
        else:
            ahead = {m: int(DETACHED_MOMENTS[m][2](progress)) for m in moments if m != AT_RANDOM}
            ahead[AT_RANDOM] = int(not progress.complete)
        moment = next((m for m in moments if ahead.get(m)), None)
        if moment is None and progress is not None and progress.complete:
            assert not moments, f"the study is complete before these kills: {moments}"
            break
        if moment is None and progress is not None and progress.active:
            _wait_for("the study's jobs to end", lambda: not _jobs_active(spec), 600)
            continue
        if moment is None:  # a plain detached run: it records, looks and submits what is due
            code, out = _optbench("run", str(study), "--detach")
            assert code == 0 and "Traceback" not in out, out
            runs.append(f"{progress}: not killed")
            continue
        if moment == AT_RANDOM:
            delay = rng.uniform(0.2, 1.5) * run_s
            driver = subprocess.Popen(
                _driver(study, "--detach"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            try:
                driver.wait(timeout=delay)
                what = f"{moment}, {delay:.1f} s: it ended first"  # drawn again
            except subprocess.TimeoutExpired:
                driver.kill()
                moments.remove(moment)
                what = f"{moment}, {delay:.1f} s in"
            out = driver.communicate()[0].decode()
            assert "Traceback" not in out, out
        else:
            where, after, _ = DETACHED_MOMENTS[moment]
            call = rng.randint(1, ahead[moment])
            signum = signal.SIGTERM if rng.random() < 0.25 else signal.SIGKILL
            hook = signal_at(where, call, signum, after=after)
            killed = subprocess.run(_driver(study, "--detach", hook=hook), capture_output=True)
            out = (killed.stdout + killed.stderr).decode()
            if signum == signal.SIGTERM:  # it stops as on Ctrl-C, saying so (docs/faults.md)
                assert killed.returncode == 128 + signum, (moment, out)
                assert "run the same command to resume" in out, (moment, out)
            else:
                assert killed.returncode == -signum, (moment, call, out)
            moments.remove(moment)
            what = f"{moment}, call {call}, {signal.Signals(signum).name}"
        runs.append(f"{progress}: {what}")
    # the study is complete: an attached run has nothing to run and ends with the decision
    code, out = _optbench("run", str(study))
    assert code == 0 and "nothing to run" in out, out
    assert uninterrupted.wait(timeout=600) == 0, (tmp_path / "reference.log").read_text()
    expected = _decision(load_spec(reference))
    assert [look[1:3] for look in expected[0]] == [(0, 4), (1, 5)]
    assert len(expected[1]) == ALL_TRIALS
    assert _decision(spec) == expected  # the same decision at the same look, every weight
    complete = Counter()  # each trial recorded once: one complete optuna trial per key
    for cell_id in {t.cell_id for t in plan(spec)}:
        cell = optuna.load_study(study_name=f"{spec.name}/{cell_id}", storage=spec.storage_url)
        states = [t for t in cell.trials if t.state == optuna.trial.TrialState.COMPLETE]
        complete.update(t.user_attrs["key"] for t in states)
    assert complete == Counter({t.key: 1 for t in plan(spec)}), complete
    print(f"{len(runs)} detached runs:", *runs, sep="\n  ")

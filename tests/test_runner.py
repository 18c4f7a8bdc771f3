"""The driver: plan, run, record; resume without duplicates; never mix configurations."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import optuna
import pytest
import sqlalchemy
import yaml
from rich.console import Console

from optbench.errors import UsageError
from optbench.executors import make_executor
from optbench.executors.base import Executor
from optbench.executors.local import InlineExecutor, LocalExecutor, split_cores
from optbench.executors.slurm import SlurmExecutor
from optbench.plan import plan
from optbench.runner import _record_end, run_study
from optbench.spec import parse_spec
from optbench.storage_url import make_storage
from optbench.store import Store
from optbench.train.config import TrialResult
from optbench.train.loop import run_trial
from optbench.train.results import write_result


def _quiet() -> Console:
    return Console(file=open(os.devnull, "w"))  # noqa: SIM115


def _inline(spec, launched: list | None = None):
    executor = InlineExecutor()
    if launched is not None:  # note the size of each submission
        submit = executor.submit
        executor.submit = lambda jobs: launched.append(len(jobs)) or submit(jobs)
    return run_study(spec, executor, console=_quiet(), live=False)


def _finished_per_key(spec) -> Counter:
    storage = optuna.storages.RDBStorage(spec.storage_url)
    counts = Counter()
    for s in optuna.get_all_study_summaries(storage):
        for t in optuna.load_study(study_name=s.study_name, storage=storage).trials:
            if t.state.is_finished() and t.user_attrs.get("status") in ("finished", "diverged"):
                counts[t.user_attrs["key"]] += 1
    return counts


def _recorded(spec) -> int:
    if not (spec.study_dir / "study.db").exists():
        return 0
    return sum(s.is_result for s in Store(spec, create=False).read(plan(spec)))


def test_second_run_of_a_finished_study_runs_nothing(tiny_dict):
    spec = parse_spec(tiny_dict)
    launched: list[int] = []
    _inline(spec, launched)
    _inline(spec, launched)
    assert launched == [4]  # the second run submitted nothing
    frame = Store(spec, create=False).frame(plan(spec))
    assert len(frame) == 4 and (frame.status == "finished").all()
    assert frame.final_error.between(0, 100).all()
    assert set(_finished_per_key(spec).values()) == {1}


def test_results_already_on_disk_are_recorded_not_rerun(tiny_dict):
    spec = parse_spec(tiny_dict)
    trial = Store(spec, create=True).prepare(plan(spec), retries=0)[0].trial
    run_trial(trial.config, trial.out_dir)  # a worker finished, driver died
    launched: list[int] = []
    _inline(spec, launched)
    assert launched == [3]
    assert set(_finished_per_key(spec).values()) == {1}


def test_diverged_trials_are_results_and_the_study_carries_on(tiny_dict):
    data = copy.deepcopy(tiny_dict)
    data["optimizers"] = ["sgd"]
    data["search"]["ranges"] = {"sgd": {"lr": [1e5, 1e6], "wd": [1e-5, 1e-4]}}
    spec = parse_spec(data)
    _inline(spec)
    frame = Store(spec, create=False).frame(plan(spec))
    assert (frame.status == "diverged").all()
    assert frame.final_error.isna().all()
    launched: list[int] = []
    _inline(spec, launched)
    assert launched == []  # diverged is final


def test_failed_trials_are_retried_up_to_the_limit(tiny_dict):
    data = copy.deepcopy(tiny_dict)
    data["batch_size"] = 5000  # more than digits' 1437 training images: every trial crashes
    data["executor"] = {"retries": 1}
    spec = parse_spec(data)
    launched: list[int] = []
    for _ in range(3):
        _inline(spec, launched)
    assert launched == [4, 4]  # first attempt, one retry, then no more
    frame = Store(spec, create=False).frame(plan(spec))
    assert (frame.status == "failed").all()


def test_changed_configuration_makes_new_trials_never_mixes(tiny_dict):
    spec = parse_spec(tiny_dict)
    _inline(spec)
    changed = copy.deepcopy(tiny_dict)
    changed["recipe"]["label_smoothing"] = 0.0
    spec2 = parse_spec(changed)
    store2 = Store(spec2, create=False)
    assert {s.status for s in store2.read(plan(spec2))} == {"pending"}
    assert store2.unused_trials(plan(spec2)) == 4
    grown = copy.deepcopy(tiny_dict)
    grown["search"]["n_samples"] = 3  # more samples: same cells, old trials still count
    spec3 = parse_spec(grown)
    stored3 = Store(spec3, create=False).read(plan(spec3))
    assert Counter(s.status for s in stored3) == {"finished": 4, "pending": 2}


def test_a_reader_racing_the_databases_creation_waits_and_opens_it(tmp_path, monkeypatch):
    # optuna's schema setup is not atomic: a reader opening study.db while `optbench run` creates
    # it can hit the creator's half-made tables (seen: alembic_version UNIQUE failed).
    url = f"sqlite:///{tmp_path / 'study.db'}"
    calls = []

    class Racing(optuna.storages.RDBStorage):
        def __init__(self, u, **kw):
            calls.append(u)
            if len(calls) == 1:
                raise sqlalchemy.exc.IntegrityError("INSERT INTO alembic_version", (), Exception())
            super().__init__(u, **kw)

    monkeypatch.setattr(optuna.storages, "RDBStorage", Racing)
    storage = make_storage(url)
    assert calls == [url, url] and optuna.get_all_study_summaries(storage) == []


def test_a_result_file_of_another_configuration_is_never_recorded(tiny_dict):
    # The cell id does not hash where the data lives; a result file written for another root
    # (the data moved while a job ran) must not be taken as this trial's.
    spec = parse_spec(tiny_dict)
    store = Store(spec, create=True)
    item = store.prepare(plan(spec), retries=0)[0]
    other = item.trial.config.model_copy(update={"seed": 99})
    write_result(
        item.trial.out_dir,
        TrialResult(status="finished", final_error=1.0, epochs=1, config=other),
    )
    _record_end(store, item, None)
    [recorded] = [s for s in Store(spec, create=False).read(plan(spec)) if s.trial == item.trial]
    assert recorded.status == "failed"
    assert "result of another configuration" in recorded.record.user_attrs["message"]


def test_split_cores_never_oversubscribes():
    assert split_cores(32, "auto", 2) == (2, 1)
    assert split_cores(10, 3, 8) == (3, 2)
    assert split_cores(10, "auto", 16, gpus=4) == (4, 4)  # one worker per GPU
    with pytest.raises(UsageError, match="between 1 and 2, the GPUs"):
        split_cores(10, 8, 16, gpus=2)


@pytest.mark.parametrize(("workers", "cores", "threads"), [("auto", 8, 1), (2, 8, 4), (1, 2, 2)])
def test_threads_do_not_depend_on_how_many_trials_remain(workers, cores, threads):
    # results depend on the thread count: the last trial of a study trains like the first
    for n_jobs in range(1, 12):
        n, t = split_cores(n_jobs, workers, cores)
        assert t == threads and n == min(n_jobs, cores if workers == "auto" else workers)


def test_every_executor_has_what_the_driver_asks_of_one(tiny_dict, tmp_path):
    asked = set(Executor.__annotations__) | {
        name for name, value in vars(Executor).items() if callable(value) and name[0] != "_"
    }
    assert {"jobs_outlive_driver", "settle", "submit", "poll", "close"} <= asked
    slurm = SlurmExecutor(parse_spec(tiny_dict).executor.slurm, tmp_path, "tiny")
    for executor in (InlineExecutor(), LocalExecutor(), slurm):
        assert all(hasattr(executor, name) for name in asked), type(executor).__name__
    assert slurm.jobs_outlive_driver and not LocalExecutor().jobs_outlive_driver


def test_make_executor_builds_the_studys_kind_and_starts_nothing(tiny_dict):
    local = make_executor(parse_spec(tiny_dict), workers=1)
    assert isinstance(local, LocalExecutor) and local._pool is None  # no process until submit
    local.close(cancel=True)
    tiny_dict["executor"] = {"kind": "debug"}
    assert isinstance(make_executor(parse_spec(tiny_dict)), InlineExecutor)


def test_real_process_pool_runs_a_tiny_study(tiny_dict):
    spec = parse_spec(tiny_dict)
    progress = run_study(spec, make_executor(spec), console=_quiet(), live=False)
    assert progress.ran == 4
    assert set(_finished_per_key(spec).values()) == {1} and len(_finished_per_key(spec)) == 4


@pytest.mark.slow
def test_ctrl_c_then_resume_gives_each_trial_exactly_once(tmp_path, tiny_dict):
    data = copy.deepcopy(tiny_dict)
    data["epochs"] = 2
    data["search"]["n_samples"] = 2
    data["executor"] = {"workers": 1}
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(data))
    spec = parse_spec(data)
    # The driver is a terminal's foreground command here. A shell starts background jobs with
    # SIGINT ignored (nohup ... &), and Python then keeps ignoring it, so under such a CI
    # launcher Ctrl-C would not reach the driver at all: give it Python's own handler.
    foreground = (
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from optbench.cli import main; main()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", foreground, "run", str(study)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not _recorded(spec) and proc.poll() is None:
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()[1]  # still running: not crashed, not done
    assert _recorded(spec) < 4, "every trial was recorded before the SIGINT could be sent"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert 1 <= _recorded(spec) < 4
    resumed = subprocess.run(
        [sys.executable, "-m", "optbench", "run", str(study)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr
    counts = _finished_per_key(spec)
    assert len(counts) == 4 and set(counts.values()) == {1}

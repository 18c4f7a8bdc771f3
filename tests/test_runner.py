"""The driver: plan, run, record; resume without duplicates; never mix configurations."""

from __future__ import annotations

import copy
import os
from collections import Counter

import optuna
import pytest
import sqlalchemy
import yaml
from driver_process import ctrl_c_after_first_end, run_again, stoppable_study
from rich.console import Console

from optbench.errors import UsageError
from optbench.executors import make_executor
from optbench.executors.local import InlineExecutor, LocalExecutor, split_cores
from optbench.executors.protocol import Executor
from optbench.executors.slurm.executor import SlurmExecutor
from optbench.plan.trials import plan
from optbench.run.attempts import record_end
from optbench.run.driver import run_study
from optbench.spec.schema import parse_spec
from optbench.store.database import Store
from optbench.store.storage_url import make_storage
from optbench.train.run_trial import run_trial
from optbench.trial.config import TrialResult
from optbench.trial.results import write_result


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_results_already_on_disk_are_recorded_not_rerun(tiny_dict):
    spec = parse_spec(tiny_dict)
    trial = Store(spec, create=True).prepare(plan(spec), retries=0)[0].trial
    run_trial(trial.config, trial.out_dir)  # a worker finished, driver died
    launched: list[int] = []
    _inline(spec, launched)
    assert launched == [3]
    assert set(_finished_per_key(spec).values()) == {1}


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_changed_configuration_makes_new_trials_never_mixes(tiny_dict):
    spec = parse_spec(tiny_dict)
    _inline(spec)
    changed = copy.deepcopy(tiny_dict)
    changed["recipe"]["label_smoothing"] = 0.0
    spec2 = parse_spec(changed)
    store2 = Store(spec2, create=False)
    assert {s.status for s in store2.read(plan(spec2))} == {"pending"}
    assert store2.earlier_cells(plan(spec2)) == (4, 2)  # 2 models x 2 samples, kept apart
    grown = copy.deepcopy(tiny_dict)
    grown["search"]["n_samples"] = 3  # more samples: same cells, old trials still count
    spec3 = parse_spec(grown)
    stored3 = Store(spec3, create=False).read(plan(spec3))
    assert Counter(s.status for s in stored3) == {"finished": 4, "pending": 2}


EARLIER = (
    "note: {} trial(s) of {} earlier cell(s) of 'tiny' (configurations this study no longer "
    "plans) are in the study database, not shown and never mixed in"
)


@pytest.fixture
def earlier_cells(tiny_dict, tmp_path):
    """A store holding the tiny study's 2 cells x 2 samples (prepared, not trained), and study
    files beside it: the same study, one with a recipe setting changed (so every cell's hash
    changes) and one with a model dropped."""
    spec = parse_spec(tiny_dict)
    Store(spec, create=True).prepare(plan(spec), retries=0)
    changed = {**tiny_dict, "recipe": {**tiny_dict["recipe"], "label_smoothing": 0.0}}
    fewer = {**tiny_dict, "models": tiny_dict["models"][:1]}
    for name, data in (("same", tiny_dict), ("changed", changed), ("fewer", fewer)):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(data))
    return spec, parse_spec(changed)


def _earlier_notes(cli, *args: str) -> list[str]:
    code, out, err = cli(*args)
    assert code == 0, err
    return [line for line in out.splitlines() if "earlier cell" in line]


@pytest.mark.slow
def test_status_counts_the_trials_of_earlier_cells_in_one_line(earlier_cells, cli):
    # Trials under cells the study no longer plans are not shown, but said to be there.
    spec, changed = earlier_cells
    assert _earlier_notes(cli, "status", "same.yaml") == []
    assert _earlier_notes(cli, "status", "changed.yaml") == [EARLIER.format(4, 2)]
    assert _earlier_notes(cli, "status", "fewer.yaml") == [EARLIER.format(2, 1)]
    frame = Store(changed, create=False).frame(plan(changed))
    assert set(frame.cell_id).isdisjoint(t.cell_id for t in plan(spec))  # none mixed in


@pytest.mark.slow  # the report's imports (matplotlib, scipy) take ~10 s on a loaded 2-core VM
def test_report_counts_the_trials_of_earlier_cells_in_one_line(earlier_cells, cli):
    assert _earlier_notes(cli, "report", "changed.yaml", "--peak") == [EARLIER.format(4, 2)]


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
    storage = make_storage(url, writer=True)
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
    record_end(store, item, None)
    [recorded] = [s for s in Store(spec, create=False).read(plan(spec)) if s.trial == item.trial]
    assert recorded.status == "failed"
    assert "result of another configuration" in recorded.record.user_attrs["message"]


def test_split_cores_never_oversubscribes():
    # the promise, checked over a grid rather than restated: workers x threads never exceed the
    # cores, no worker idles for want of a trial, every core is used when the split is even,
    # and with GPUs there is one worker per GPU at most
    for cores in (1, 2, 3, 8, 16):
        for gpus in (0, 1, 2, 4):
            limit = gpus or cores
            for workers in ("auto", *range(1, limit + 1)):
                for n_jobs in (1, 2, 5, 40):
                    n, threads = split_cores(n_jobs, workers, cores, gpus)
                    assert 1 <= n <= min(n_jobs, limit) and threads >= 1
                    asked = limit if workers == "auto" else workers
                    assert n == min(n_jobs, asked)
                    if asked <= cores:
                        assert asked * threads <= cores < asked * (threads + 1)
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
    assert {"jobs_outlive_driver", "settle", "submit", "poll", "close", "status", "cancel"} <= asked
    slurm = SlurmExecutor(parse_spec(tiny_dict).executor.slurm, tmp_path, "tiny")
    for executor in (InlineExecutor(), LocalExecutor(), slurm):
        assert all(hasattr(executor, name) for name in asked), type(executor).__name__
    assert slurm.jobs_outlive_driver and not LocalExecutor().jobs_outlive_driver


def test_status_and_cancel_of_a_study_never_on_slurm_ask_an_executor_whose_jobs_died(tiny_dict):
    from optbench.executors import jobs_executor

    executor = jobs_executor(parse_spec(tiny_dict))
    assert not executor.jobs_outlive_driver
    assert executor.status() == (set(), None)
    lines, ok = executor.cancel()
    assert ok and lines == [
        "no job of this study is queued or running (only SLURM jobs outlive a run)"
    ]


def test_make_executor_builds_the_studys_kind_and_starts_nothing(tiny_dict):
    local = make_executor(parse_spec(tiny_dict), workers=1)
    assert isinstance(local, LocalExecutor) and local._pool is None  # no process until submit
    local.close(cancel=True)
    tiny_dict["executor"] = {"kind": "debug"}
    assert isinstance(make_executor(parse_spec(tiny_dict)), InlineExecutor)


@pytest.mark.slow
def test_real_process_pool_runs_a_tiny_study(tiny_dict):
    spec = parse_spec(tiny_dict)
    progress = run_study(spec, make_executor(spec), console=_quiet(), live=False)
    assert progress.ran == 4
    assert set(_finished_per_key(spec).values()) == {1} and len(_finished_per_key(spec)) == 4


@pytest.mark.slow
def test_ctrl_c_then_resume_gives_each_trial_exactly_once(tmp_path, tiny_dict):
    study, spec = stoppable_study(tiny_dict, tmp_path)
    # the driver presses Ctrl-C itself once it has recorded its first trial (driver_process.py)
    proc = ctrl_c_after_first_end(study, tmp_path)
    assert proc.returncode == 130, proc.stderr
    assert "stopped: 1 trial(s) recorded, 3 left" in " ".join(proc.stdout.split()), proc.stdout
    assert _recorded(spec) == 1  # the one recorded before the Ctrl-C, and no other
    resumed = run_again(study, tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    counts = _finished_per_key(spec)
    assert len(counts) == 4 and set(counts.values()) == {1}

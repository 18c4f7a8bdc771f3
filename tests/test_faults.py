"""Faults, made to happen for real: corrupt files on disk, a crafted checkpoint, kill -9 of the
driver and of a worker, a full file system (a tmpfs where root can mount one, and an injected
ENOSPC). Each time: nothing recorded is lost, nothing runs twice, the user gets one line."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import errno
import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
import torch
import yaml
from cli_inprocess import ONE_MODEL_STUDY, run_cli, tiny_config, train_args
from rich.console import Console
from services import needs_extra
from writing_driver import WritingExecutor

import optbench.train.epoch as epoch
import optbench.train.state as trial_state
from optbench.api import load_trials
from optbench.errors import UsageError
from optbench.executors.local import LocalExecutor
from optbench.executors.protocol import JobEvent
from optbench.plan.trials import plan
from optbench.run.driver import run_study
from optbench.spec.schema import parse_spec
from optbench.store.database import Store
from optbench.store.storage_url import OPTUNA_TABLES
from optbench.train.checkpoint import CHECKPOINT_FILE
from optbench.train.run_trial import run_job, run_trial
from optbench.train.signals import TrialInterrupted
from optbench.trial.config import TrainConfig, TrialResult
from optbench.trial.jobs import PopulationJob
from optbench.trial.results import RESULT_FILE, read_result, write_result

REPO = Path(__file__).resolve().parents[1]


def _quiet() -> Console:
    return Console(file=open(os.devnull, "w"))  # noqa: SIM115


def _attempts(spec) -> dict[str, list[tuple[str, str | None]]]:
    """key -> [(status, message)] of every recorded attempt, in order."""
    storage = optuna.storages.RDBStorage(spec.storage_url)
    out: dict[str, list] = {}
    for s in optuna.get_all_study_summaries(storage):
        for t in optuna.load_study(study_name=s.study_name, storage=storage).trials:
            a = t.user_attrs
            out.setdefault(a["key"], []).append((a.get("status", "pending"), a.get("message")))
    return out


def _valid_result_json(config: TrainConfig, **changes) -> bytes:
    data = json.loads(
        TrialResult(
            status="finished", final_error=7.0, best_error=6.0, epochs=1, config=config
        ).model_dump_json()
    )
    data.update(changes)
    return json.dumps(data).encode()


BAD_RESULTS = {
    "empty": b"",
    "null": b"null",
    "garbage": b"\xff\xfe\x00\x01garbage",
    "truncated": b'{"status": "finished", "final_error": 7.0, "epo',
    "a list": b"[1, 2, 3]",
    "wrong type": "final_error=low",
    "not a percentage": "final_error=250.0",
    "finished without an error": "final_error=None",
    "unknown status": "status=great",
}


def _bad_result(name: str, config: TrainConfig) -> bytes:
    bad = BAD_RESULTS[name]
    if isinstance(bad, bytes):
        return bad
    key, value = bad.split("=")
    return _valid_result_json(config, **{key: {"None": None}.get(value, _number(value))})


def _number(text: str):
    try:
        return float(text)
    except ValueError:
        return text


# --- 1. untrusted files are data ----------------------------------------------------------------


@pytest.mark.parametrize("bad", sorted(BAD_RESULTS))
@pytest.mark.slow
def test_an_invalid_result_file_is_a_failed_attempt_with_its_reason(one_model, bad):
    spec = parse_spec(one_model)
    trial = plan(spec)[0]
    executor = WritingExecutor(_bad_result(bad, trial.config))
    run_study(spec, executor, console=_quiet(), live=False)  # no traceback
    [(status, message)] = _attempts(spec)[trial.key]
    assert status == "failed"
    assert message.startswith(str(trial.out_dir / RESULT_FILE)) and "valid result" in message
    run_study(spec, WritingExecutor(), console=_quiet(), live=False)  # retried: one retry left
    assert [s for s, _ in _attempts(spec)[trial.key]] == ["failed", "finished"]


@pytest.mark.parametrize("bad", ["garbage", "wrong type", "symlink"])
@pytest.mark.slow
def test_an_invalid_result_left_on_disk_is_recorded_as_failed_and_retried_in_the_same_run(
    one_model, bad, tmp_path
):
    # A driver killed after a worker wrote its file: the next run reads it before anything runs.
    spec = parse_spec(one_model)
    item = Store(spec, create=True).prepare(plan(spec), retries=1)[0]
    path = item.trial.out_dir / RESULT_FILE
    path.parent.mkdir(parents=True)
    if bad == "symlink":
        target = tmp_path / "elsewhere.json"
        target.write_bytes(_valid_result_json(item.trial.config))
        path.symlink_to(target)
    else:
        path.write_bytes(_bad_result(bad, item.trial.config))
    progress = run_study(spec, WritingExecutor(), console=_quiet(), live=False)
    assert progress.ran == 1
    attempts = _attempts(spec)[item.trial.key]
    assert [s for s, _ in attempts] == ["failed", "finished"]
    assert str(path) in attempts[0][1]


# --- 1b. a result file belongs to one attempt -------------------------------------------------


def _result_file(item, **fields) -> Path:
    """Write a worker's result.json for `item`'s trial, as a worker of `fields["attempt"]`."""
    path = item.trial.out_dir / RESULT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_valid_result_json(item.trial.config, **fields))
    return path


def _finished_errors(spec, key: str) -> list[float]:
    storage = optuna.storages.RDBStorage(spec.storage_url)
    [summary] = optuna.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    return [t.value for t in study.trials if t.user_attrs["key"] == key and t.value is not None]


@pytest.mark.slow
def test_a_worker_records_the_attempt_it_ran_for(one_model):
    one_model["search"]["n_samples"] = 3
    trials = plan(parse_spec(one_model))
    solo = dataclasses.replace(trials[0].job, attempt=3)
    members = [
        dataclasses.replace(t.job, attempt=n) for t, n in zip(trials[1:], (1, 2), strict=True)
    ]
    for job in (solo, PopulationJob(tuple(members))):
        run_job(job, "cpu")
    assert [read_result(t.out_dir).attempt for t in trials] == [3, 1, 2]


def test_an_earlier_attempts_result_is_never_recorded_on_a_later_one(one_model):
    # attempt 1 failed; attempt 2 was created when the driver died; then attempt 1's job (a
    # straggler the driver gave up on) wrote a finished result: attempt 2 must not take it
    spec = parse_spec(one_model)
    store = Store(spec, create=True)
    [item] = store.prepare(plan(spec), retries=1)
    store.record(item, TrialResult(status="failed", epochs=1, config=item.trial.config), [])
    [item] = store.prepare(plan(spec), retries=1)
    assert item.attempts == 2 and item.status == "pending"
    _result_file(item, final_error=50.0, attempt=1)
    run_study(spec, WritingExecutor(), console=_quiet(), live=False)
    assert [s for s, _ in _attempts(spec)[item.trial.key]] == ["failed", "finished"]
    assert _finished_errors(spec, item.trial.key) == [7.0]  # attempt 2's own result


def test_a_workers_failure_left_on_disk_is_recorded_on_its_attempt(one_model):
    # a driver killed after a worker wrote a failed result: the next run records it on that
    # attempt (and retries it), rather than taking it for an earlier attempt's crash
    spec = parse_spec(one_model)
    [item] = Store(spec, create=True).prepare(plan(spec), retries=1)
    _result_file(item, status="failed", final_error=None, best_error=None, message="E", attempt=1)
    run_study(spec, WritingExecutor(), console=_quiet(), live=False)
    assert _attempts(spec)[item.trial.key] == [("failed", "E"), ("finished", None)]


def test_an_invalid_result_is_its_attempts_whatever_the_clock_of_the_host_that_wrote_it(
    one_model,
):
    # a worker on a host whose clock is an hour behind the driver's: its file's mtime is
    # before the attempt began, and it is still that attempt's
    spec = parse_spec(one_model)
    [item] = Store(spec, create=True).prepare(plan(spec), retries=1)
    path = item.trial.out_dir / RESULT_FILE
    path.parent.mkdir(parents=True)
    path.write_bytes(_bad_result("garbage", item.trial.config))
    an_hour_ago = time.time() - 3600
    os.utime(path, (an_hour_ago, an_hour_ago))
    run_study(spec, WritingExecutor(), console=_quiet(), live=False)
    attempts = _attempts(spec)[item.trial.key]
    assert [s for s, _ in attempts] == ["failed", "finished"] and str(path) in attempts[0][1]


def test_a_new_attempt_begins_in_a_folder_cleared_of_the_last_ones_file(one_model, monkeypatch):
    # attempt 1's invalid file is recorded as its failure; the folder is cleared before
    # attempt 2 exists, so a driver killed right after it created attempt 2 leaves nothing that
    # the next run could count against attempt 2 (retries: 1, so that would leave it failed)
    spec = parse_spec(one_model)
    trial = plan(spec)[0]
    run_study(spec, WritingExecutor(_bad_result("garbage", trial.config)), console=_quiet(),
              live=False)  # fmt: skip
    path = trial.out_dir / RESULT_FILE
    assert path.exists()  # attempt 1's, recorded as its failure

    def killed(*args):  # the first thing the driver does after Store.prepare
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(Store, "earlier_note", killed)
        with pytest.raises(KeyboardInterrupt):
            run_study(spec, WritingExecutor(), console=_quiet(), live=False)
    assert [s for s, _ in _attempts(spec)[trial.key]] == ["failed", "pending"]
    assert not path.exists()  # attempt 2 exists, in a cleared folder
    run_study(spec, WritingExecutor(), console=_quiet(), live=False)
    assert [s for s, _ in _attempts(spec)[trial.key]] == ["failed", "finished"]


class _FollowsJobsThatRun(WritingExecutor):
    """SLURM's way: a job that outlived its driver is followed again; its worker writes its
    own result.json, this executor only reports that it ended."""

    jobs_outlive_driver = True

    def poll(self, timeout):
        if not self.queue:
            return []
        return [JobEvent(self.queue.pop(0).key, "ended")]


@pytest.mark.slow  # trains a trial: over half a second here
def test_a_result_written_while_the_next_driver_prepares_is_recorded(one_model, monkeypatch):
    # the job of attempt 1 outlived its driver and writes its result after the next driver's
    # catch-up read the folder, before it hands out the jobs: that result is kept and recorded
    spec = parse_spec(one_model)
    [item] = Store(spec, create=True).prepare(plan(spec), retries=1)
    prepare_note = Store.earlier_note

    def job_writes_now(store, trials):
        _result_file(item, final_error=42.0, attempt=1)
        return prepare_note(store, trials)

    monkeypatch.setattr(Store, "earlier_note", job_writes_now)
    run_study(spec, _FollowsJobsThatRun(), console=_quiet(), live=False)
    assert _attempts(spec)[item.trial.key] == [("finished", None)]
    assert _finished_errors(spec, item.trial.key) == [42.0]


DB_FAULTS = [
    "garbage",
    "foreign sqlite",
    "truncated sqlite",
    "folder",
    "a table dropped",
    "a study twice",
]


def _bad_database(kind: str, path: Path, good: Path | None) -> None:
    if kind == "garbage":
        path.write_bytes(b"\x00not a database\xff" * 64)
    elif kind == "foreign sqlite":
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE notes (x TEXT)")
        con.commit()
        con.close()
    elif kind == "truncated sqlite":
        data = good.read_bytes()
        path.write_bytes(data[: len(data) // 3])
    elif kind == "a table dropped":  # optuna's RDBStorage would make it again, empty
        shutil.copy(good, path)
        con = sqlite3.connect(path)
        con.execute("DROP TABLE trials")
        con.commit()
        con.close()
    elif kind == "a study twice":  # an index of optuna's schema never made (issue 43, item 1)
        shutil.copy(good, path)
        con = sqlite3.connect(path)
        con.execute("DROP INDEX ix_studies_study_name")
        con.execute("INSERT INTO studies (study_name) SELECT study_name FROM studies")
        con.commit()
        con.close()
    else:
        path.mkdir()


@pytest.fixture(scope="module")
def a_study_database(tmp_path_factory) -> Path:
    """A real optbench study database (one recorded trial, no training)."""
    data = copy.deepcopy(ONE_MODEL_STUDY)
    data["output"] = str(tmp_path_factory.mktemp("db") / "results")
    data["search"]["n_samples"] = 1
    spec = parse_spec(data)
    run_study(spec, WritingExecutor(), console=_quiet(), live=False)
    return spec.study_dir / "study.db"


def test_the_tables_a_study_database_must_have_are_those_optuna_makes(a_study_database):
    con = sqlite3.connect(f"file:{a_study_database}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()
    assert tables == OPTUNA_TABLES


def _study_folder(study: dict, folder: Path, *, wal: bool = False) -> Path:
    """folder/study.yaml of `study` with its output in folder/results; its database path (its
    folder made; with `wal`, the file too: empty, in SQLite's WAL mode, which it keeps)."""
    db = folder / "results" / "tiny" / "study.db"
    db.parent.mkdir(parents=True)
    (folder / "study.yaml").write_text(yaml.safe_dump({**study, "output": "results"}))
    if wal:
        _to_wal(db)
    return db


def _to_wal(db: Path) -> None:
    """Put the SQLite database `db` (made if missing) in WAL mode, which it keeps."""
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    con.close()


# Every command that only reads a study's database, and the Python API's reader.
READERS = {
    "status": ["status", "study.yaml"],
    "report": ["report", "study.yaml"],
    "dry run": ["run", "study.yaml", "--dry-run"],
    "load_trials": None,
}


# ... and `optbench run`, which writes.
COMMANDS = {"run": ["run", "study.yaml"], **READERS}


def _exit_and_stderr(command: str, cwd: Path, monkeypatch, capsys) -> tuple[int, str]:
    """The exit code and stderr of a command of COMMANDS run in `cwd`; load_trials' UsageError as
    exit 2."""
    if COMMANDS[command] is not None:
        code, _, err = run_cli(COMMANDS[command], cwd, monkeypatch, capsys)
        return code, err
    monkeypatch.chdir(cwd)
    try:
        load_trials("study.yaml")
    except UsageError as err:
        return 2, f"error: {err}\n"
    return 0, ""


@pytest.mark.parametrize("kind", DB_FAULTS)
def test_an_invalid_study_database_is_one_line_and_never_touched(
    kind, one_model, tmp_path, monkeypatch, capsys, a_study_database
):
    db = _study_folder(one_model, tmp_path)
    _bad_database(kind, db, a_study_database)
    before = _as_left(tmp_path)
    for command in COMMANDS:
        code, err = _exit_and_stderr(command, tmp_path, monkeypatch, capsys)
        assert code == 2, (command, err)
        assert len(err.strip().splitlines()) == 1 and str(db) in err, err
    assert _as_left(tmp_path) == before  # not written, nothing else either


@pytest.mark.parametrize("reader", READERS)
def test_a_reader_of_a_wal_database_makes_no_file_beside_it(
    reader, one_model, tmp_path, monkeypatch, capsys, a_study_database
):
    # A WAL database that no process has open is whole in its file: SQLite's read-only
    # connections would still make its -wal and -shm files.
    db = _study_folder(one_model, tmp_path)
    shutil.copy(a_study_database, db)
    _to_wal(db)
    results = tmp_path / "results"
    before = _tree(results), _mtimes(results)
    code, err = _exit_and_stderr(reader, tmp_path, monkeypatch, capsys)
    assert code == 0, err
    assert (_tree(results), _mtimes(results)) == before  # (report writes its report)


def _killed_mid_write(good: Path, db: Path) -> None:
    """`db`: the study database `good` as a driver killed inside a write leaves it: pages of the
    write already in the file, SQLite's hot journal beside it (both copied while it was open)."""
    shutil.copy(good, db)
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("PRAGMA cache_size=1")  # the changed pages spill into the file before a commit
    con.execute("BEGIN")
    con.execute("UPDATE trial_user_attributes SET value_json = ?", (json.dumps("x" * 100_000),))
    left = {path: path.read_bytes() for path in (db, Path(f"{db}-journal"))}
    con.execute("ROLLBACK")
    con.close()
    for path, data in left.items():
        path.write_bytes(data)
    assert db.read_bytes() != good.read_bytes()


def _unfinished_write_line(db: Path) -> str:
    return (
        f"error: {db}: holds the unfinished write of a driver that was killed (SQLite's journal "
        "beside it); run `optbench run` to recover it"
    )


@pytest.mark.parametrize("reader", READERS)
def test_a_reader_names_a_killed_drivers_unfinished_write_and_recovers_nothing(
    reader, one_model, tmp_path, monkeypatch, capsys, a_study_database
):
    db = _study_folder(one_model, tmp_path)
    _killed_mid_write(a_study_database, db)
    before = _as_left(tmp_path)
    code, err = _exit_and_stderr(reader, tmp_path, monkeypatch, capsys)
    assert (code, err.strip().splitlines()) == (2, [_unfinished_write_line(db)])
    assert _as_left(tmp_path) == before


def _run_on(executor: WritingExecutor, cwd: Path, monkeypatch, capsys) -> tuple[int, str, str]:
    """`optbench run study.yaml` in `cwd`, its trials 'trained' by `executor`."""
    from optbench import executors

    monkeypatch.setattr(executors, "make_executor", lambda spec, **_: executor)
    return run_cli(["run", "study.yaml"], cwd, monkeypatch, capsys)


def test_run_rolls_a_killed_drivers_unfinished_write_back_and_loses_nothing(
    one_model, tmp_path, monkeypatch, capsys, a_study_database
):
    db = _study_folder(one_model, tmp_path)
    _killed_mid_write(a_study_database, db)
    executor = WritingExecutor()
    code, _, err = _run_on(executor, tmp_path, monkeypatch, capsys)
    assert code == 0, err
    assert executor.submitted == [] and not Path(f"{db}-journal").exists()
    [attempts] = _attempts(parse_spec({**one_model, "output": "results"})).values()
    assert attempts == [("finished", None)]  # the recorded trial, as it was before the write


KILLS = 20  # issue 32's acceptance: the driver killed at 20 points resumes 20 times of 20


def _killed_drivers(runs: dict[int, Path]) -> tuple[dict[int, int], str]:
    """For each n: the driver of runs[n]/study.yaml killed by SIGKILL just before its n-th
    database write, in a child process (tests/writing_driver.py; 0: never). Their exit codes,
    and what they printed."""
    args = [str(a) for n, folder in runs.items() for a in (n, folder)]
    driver = [sys.executable, str(REPO / "tests" / "writing_driver.py"), *args]
    proc = subprocess.run(driver, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    ends = [line.split() for line in proc.stdout.splitlines() if not line.startswith("writes")]
    return {int(n): int(code) for n, code in ends}, proc.stdout


def _kill_points(study: dict, folder: Path, kills: int) -> list[int]:
    """`kills` points spread over the database writes of a whole run of `study` (in `folder`),
    its first and last among them."""
    _study_folder(study, folder)
    codes, out = _killed_drivers({0: folder})
    assert codes == {0: 0}, out
    writes = int(out.split("writes: ")[1].split()[0])
    points = sorted({1 + (writes - 1) * i // (kills - 1) for i in range(kills)})
    assert len(points) == kills, writes
    return points


@pytest.mark.slow
@pytest.mark.parametrize("wal, kills", [(False, KILLS), (True, 5)], ids=["rollback", "WAL"])
def test_a_driver_killed_inside_a_database_write_resumes_with_nothing_lost_or_counted_twice(
    wal, kills, tmp_path, monkeypatch, capsys
):
    # The driver is killed inside its n-th write (of its schema, a trial, a result), for 20 n:
    # with SQLite's default rollback journal, most leave it hot beside a half-written file, the
    # first a half-made schema; in WAL mode the log holds the unfinished write. `status` touches
    # nothing; the same command then resumes.
    study = copy.deepcopy(ONE_MODEL_STUDY)
    folders = {n: tmp_path / f"kill-{n}" for n in _kill_points(study, tmp_path / "whole", kills)}
    dbs = {n: _study_folder(study, folder, wal=wal) for n, folder in folders.items()}
    codes, out = _killed_drivers(folders)
    assert codes == {n: -signal.SIGKILL for n in folders}, out
    hot = 0
    for n, folder in folders.items():
        recorded = folder / "recorded.txt"
        recorded = set(recorded.read_text().split()) if recorded.exists() else set()
        before = _as_left(folder)
        code, _, err = run_cli(["status", "study.yaml"], folder, monkeypatch, capsys)
        assert _as_left(folder) == before, n  # recovers nothing, writes nothing
        if code:
            assert (code, err.strip().splitlines()) == (2, [_unfinished_write_line(dbs[n])]), n
            hot += 1
        resumed_at = datetime.datetime.now()
        executor = WritingExecutor()
        code, _, err = _run_on(executor, folder, monkeypatch, capsys)
        assert code == 0, (n, err)
        trials = _recorded_trials(parse_spec({**study, "output": str(folder / "results")}))
        assert len(trials) == 2 and all(len(t) == 1 for t in trials.values()), n  # once each
        assert all(t[0].value == 7.0 for t in trials.values()), n
        assert not recorded & set(executor.submitted), n  # what was recorded is not run again
        assert all(trials[key][0].datetime_complete < resumed_at for key in recorded), n
    # A hot rollback journal stops a reader (the fault under test) after most kills; a WAL
    # reader reads the last commit past an unfinished one.
    assert hot == 0 if wal else hot >= kills // 2


def _recorded_trials(spec) -> dict[str, list[optuna.trial.FrozenTrial]]:
    """key -> every recorded attempt at it, in order."""
    storage = optuna.storages.RDBStorage(spec.storage_url)
    out: dict[str, list] = {}
    for s in optuna.get_all_study_summaries(storage):
        for t in optuna.load_study(study_name=s.study_name, storage=storage).trials:
            out.setdefault(t.user_attrs["key"], []).append(t)
    return out


# Journal files of JSON lines that are not optuna's operations.
JOURNAL_FAULTS = {
    "not an operation": '{"a": 1}\n',
    "an operation without its fields": '{"op_code": 0}\n',
    "an unknown operation": '{"op_code": 99, "worker_id": "w"}\n',
    "a wrong value": '{"op_code": 0, "worker_id": "w", "study_name": "s", "directions": [7]}\n',
}


@pytest.mark.parametrize("kind", JOURNAL_FAULTS)
def test_a_journal_of_lines_that_are_not_optunas_is_one_line_and_never_touched(
    kind, one_model, tmp_path, monkeypatch, capsys
):
    journal = tmp_path / "study.log"
    journal.write_text(JOURNAL_FAULTS[kind])
    _study_folder({**one_model, "storage": f"journal://{journal}"}, tmp_path)
    before = _as_left(tmp_path)
    for command in COMMANDS:
        code, err = _exit_and_stderr(command, tmp_path, monkeypatch, capsys)
        assert code == 2, (command, err)
        [line] = err.strip().splitlines()
        assert f"{journal}: not an optuna journal" in line, line
    assert _as_left(tmp_path) == before


def test_an_unfinished_append_to_a_journal_is_cut_by_the_next_run_and_nothing_is_lost(
    one_model, tmp_path, monkeypatch, capsys
):
    # A driver killed inside an append leaves an unterminated line. optuna skips it, but glues
    # its next append to it, and loses that operation.
    journal = tmp_path / "study.log"
    study = {**one_model, "storage": f"journal://{journal}"}
    _study_folder(study, tmp_path)
    assert _run_on(WritingExecutor(), tmp_path, monkeypatch, capsys)[0] == 0
    with open(journal, "ab") as f:
        f.write(b'{"op_code":6,"worker_id":"w","trial_id":0,"sta')
    before = _as_left(tmp_path)
    code, _, err = run_cli(["status", "study.yaml"], tmp_path, monkeypatch, capsys)
    assert code == 0 and _as_left(tmp_path) == before, err  # readers skip it, cut nothing
    study["seeds"] = [0, 1]  # a second trial: appends after the unfinished line
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({**study, "output": "results"}))
    code, _, err = _run_on(WritingExecutor(), tmp_path, monkeypatch, capsys)
    assert code == 0, err
    assert all(json.loads(line) for line in journal.read_bytes().splitlines())
    spec = parse_spec({**study, "output": str(tmp_path / "results")})
    stored = Store(spec, create=False).read(plan(spec))
    assert [(s.status, s.attempts) for s in stored] == [("finished", 1)] * 2


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` with its bytes (None for folders, the target for links)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = None
            else:
                out[rel] = p.read_bytes()
    return out


def _as_left(root: Path) -> tuple[dict, dict]:
    """What a reader must leave as it is below `root`: every path's bytes and modification time,
    but for a WAL database's index (-shm), which SQLite's readers write (docs/faults.md)."""
    tree, mtimes = _tree(root), _mtimes(root)
    return (
        {k: v for k, v in tree.items() if not k.endswith("-shm")},
        {k: v for k, v in mtimes.items() if not k.endswith("-shm")},
    )


def _mtimes(root: Path) -> dict[str, int]:
    """Every file under `root` with its modification time (ns): one written with the same
    bytes changes it too."""
    return {str(p.relative_to(root)): p.lstat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


# --- checkpoints ----------------------------------------------------------------------------------


def _train_args(out: Path, *extra: str) -> list[str]:
    return list(train_args("--threads", "1", *extra, out=str(out)))


class _RunsCode:
    """Unpickling this runs a shell command (what a crafted checkpoint can do)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _checkpoint_bytes(kind: str, tmp_path: Path) -> bytes:
    path = tmp_path / "made.pt"
    if kind == "runs code":
        torch.save({"format": 2, "config": _RunsCode(tmp_path / "pwned")}, path)
    elif kind == "another config":
        other = tiny_config(epochs=3).model_dump(mode="json")
        state = {"config": other, "model": {}, "ema": None, "optimizer": {}, "schedule": {}}
        torch.save({"format": 2, **state, "progress": {}}, path)
    elif kind == "old format with numpy state":
        import numpy as np

        torch.save({"format": 1, "rng": np.random.get_state()}, path)
    elif kind == "not a dict":
        torch.save([1, 2, 3], path)
    else:
        good = {"format": 2, "config": tiny_config().model_dump(mode="json")}
        torch.save({**good, "model": {"w": torch.zeros(1000)}}, path)
        data = path.read_bytes()
        return {"truncated": data[: len(data) // 2], "empty": b"", "garbage": b"\x80junk" * 50}[
            kind
        ]
    return path.read_bytes()


CHECKPOINT_FAULTS = [
    "runs code",
    "another config",
    "old format with numpy state",
    "not a dict",
    "truncated",
    "empty",
    "garbage",
]


@pytest.mark.parametrize("kind", CHECKPOINT_FAULTS)
@pytest.mark.slow
def test_train_resume_refuses_a_bad_checkpoint_in_one_line_and_keeps_it(
    kind, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "out"
    out.mkdir()
    (out / CHECKPOINT_FILE).write_bytes(_checkpoint_bytes(kind, tmp_path))
    before = _tree(tmp_path)
    code, _, err = run_cli(_train_args(out, "--resume"), tmp_path, monkeypatch, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert str(out / CHECKPOINT_FILE) in err
    if kind == "another config":
        assert "epochs: 2 here, 3 there" in err
    assert not (tmp_path / "pwned").exists()  # weights_only: the pickle ran nothing
    assert _tree(tmp_path) == before  # kept, and nothing written


@pytest.mark.parametrize("kind", ["runs code", "truncated", "another config"])
def test_a_worker_fails_the_attempt_on_a_bad_checkpoint_and_keeps_it(kind, tmp_path):
    out = tmp_path / "trial"
    out.mkdir()
    (out / CHECKPOINT_FILE).write_bytes(_checkpoint_bytes(kind, tmp_path))
    kept = (out / CHECKPOINT_FILE).read_bytes()
    result = run_trial(tiny_config(), out, resume=True)
    assert result.status == "failed" and str(out / CHECKPOINT_FILE) in result.message
    assert (out / CHECKPOINT_FILE).read_bytes() == kept
    assert not (tmp_path / "pwned").exists()


@pytest.fixture(scope="module")
def trained_state(tmp_path_factory) -> dict:
    """The checkpoint of the tiny trial `_train_args` trains (2 epochs), after its last epoch."""
    out = tmp_path_factory.mktemp("trained")
    assert run_trial(tiny_config(), out, keep_checkpoint=True).status == "finished"
    return torch.load(out / CHECKPOINT_FILE, weights_only=True)


def _first(tensors: dict) -> str:
    return next(k for k, v in tensors.items() if torch.is_tensor(v) and v.ndim)


def _misfit(state: dict, kind: str) -> dict:
    """The trained state, back at the end of its first epoch, with one misfit of `kind`."""
    state = copy.deepcopy(state)
    progress = state["progress"]
    state["progress"] = {**progress, "epoch": 1, "history": progress["history"][:1]}
    if kind == "a model tensor of another shape":
        state["model"][_first(state["model"])] = torch.zeros(3, 3)
    elif kind == "a model tensor missing":
        del state["model"][_first(state["model"])]
    elif kind == "an EMA tensor of another shape":
        state["ema"][_first(state["ema"])] = torch.zeros(3, 3)
    elif kind == "an optimizer state that is not one":
        state["optimizer"] = "adamw"
    else:  # torch's load_state_dict does not look at the shapes of an optimizer's state
        moments = state["optimizer"]["state"][0]
        moments[_first(moments)] = torch.zeros(3, 3)
    return state


MISFITS = [
    "a model tensor of another shape",
    "a model tensor missing",
    "an EMA tensor of another shape",
    "an optimizer state that is not one",
    "an optimizer state of another shape",
]


@pytest.mark.parametrize("kind", MISFITS)
@pytest.mark.slow
def test_train_resume_refuses_a_checkpoint_that_does_not_fit_in_one_line(
    kind, trained_state, tmp_path, monkeypatch, capsys
):
    # it was exit 1 and a failed result.json (issue 32): refused inside the trial, not before
    out = tmp_path / "out"
    out.mkdir()
    torch.save(_misfit(trained_state, kind), out / CHECKPOINT_FILE)
    before = _tree(tmp_path)
    code, stdout, err = run_cli(_train_args(out, "--resume"), tmp_path, monkeypatch, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and stdout == "", err
    assert f"{out / CHECKPOINT_FILE}: does not fit this trial" in err
    assert _tree(tmp_path) == before  # kept, and nothing written


@pytest.mark.slow
@pytest.mark.parametrize("kind", MISFITS)
def test_a_worker_fails_the_attempt_on_a_checkpoint_that_does_not_fit_and_keeps_it(
    kind, trained_state, tmp_path
):
    out = tmp_path / "trial"
    out.mkdir()
    torch.save(_misfit(trained_state, kind), out / CHECKPOINT_FILE)
    kept = (out / CHECKPOINT_FILE).read_bytes()
    result = run_trial(tiny_config(), out, resume=True)
    assert result.status == "failed", result
    assert f"{out / CHECKPOINT_FILE}: does not fit this trial" in result.message
    assert (out / CHECKPOINT_FILE).read_bytes() == kept


def test_train_resume_into_another_configurations_result_is_refused(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    write_result(
        out,
        TrialResult(status="finished", final_error=1.0, epochs=3, config=tiny_config(epochs=3)),
    )
    before = _tree(tmp_path)
    code, stdout, err = run_cli(_train_args(out, "--resume"), tmp_path, monkeypatch, capsys)
    assert code == 2 and "epochs: 2 here, 3 there" in err and "another configuration" in err
    assert len(err.strip().splitlines()) == 1 and stdout == ""  # no stale result printed
    assert _tree(tmp_path) == before


def test_a_crafted_configuration_is_named_in_a_short_line(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    out.mkdir()
    result = TrialResult(status="finished", final_error=7.0, epochs=2, config=tiny_config())
    crafted = json.loads(result.model_dump_json())
    crafted["config"]["model"] = "x" * 200_000  # another configuration, 200,000 characters long
    (out / RESULT_FILE).write_text(json.dumps(crafted))
    code, _, err = run_cli(_train_args(out, "--resume"), tmp_path, monkeypatch, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err[:300]
    assert "model: 'vit_p_w64_16px' here, 'xxx" in err and len(err) < 500, err[:300]


def test_a_real_checkpoint_loads_with_weights_only(tmp_path, monkeypatch):
    calls = {"n": 0}
    seed_step = epoch.seed_step

    def stop_at_step_3(seed, device):
        if calls["n"] == 3:
            os.kill(os.getpid(), signal.SIGUSR2)
        calls["n"] += 1
        seed_step(seed, device)

    monkeypatch.setattr(epoch, "seed_step", stop_at_step_3)
    previous = signal.signal(signal.SIGUSR2, lambda *a: None)
    try:
        with pytest.raises(TrialInterrupted):
            run_trial(tiny_config(), tmp_path)
    finally:
        signal.signal(signal.SIGUSR2, previous)
    state = torch.load(tmp_path / CHECKPOINT_FILE, weights_only=True)  # raises on any pickle
    assert state["progress"]["batch"] == 4 and "rng" not in state


@pytest.mark.slow
def test_links_planted_in_a_trial_folder_are_replaced_never_followed(tmp_path):
    out = tmp_path / "trial"
    out.mkdir()
    victims = []
    for name in ("metrics.jsonl", "error.log", RESULT_FILE, CHECKPOINT_FILE):
        victim = tmp_path / f"victim-{name}"
        victim.write_text("precious\n")
        (out / name).symlink_to(victim)
        victims.append(victim)
    crash = tiny_config(epochs=1).model_copy(update={"batch_size": 5000})
    assert run_trial(crash, out).status == "failed"  # writes error.log and result.json
    assert run_trial(tiny_config(epochs=1), out, keep_checkpoint=True).status == "finished"
    assert all(v.read_text() == "precious\n" for v in victims)
    assert not any((out / v.name.removeprefix("victim-")).is_symlink() for v in victims)


# --- 2. workers never outlive their driver ------------------------------------------------------


def _children(pid: int) -> set[int]:
    """Worker processes (spawned) whose parent is `pid`."""
    out = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and b"spawn_main" in cmd:
            out.add(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_until(condition, timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()


def _finished_counts(spec) -> Counter:
    return Counter(
        key
        for key, attempts in _attempts(spec).items()
        for status, _ in attempts
        if status in ("finished", "diverged")
    )


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_kill_9_of_the_driver_ends_its_workers_and_the_rerun_completes(tmp_path, one_model):
    one_model["search"]["n_samples"] = 2
    one_model["executor"] = {"workers": 2}
    one_model["output"] = str(tmp_path / "results")
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(one_model))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "optbench", "run", str(study)]
    driver = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    workers: set[int] = set()
    try:
        assert _wait_until(lambda: len(_children(driver.pid)) == 2, 120), "no workers started"
        workers = _children(driver.pid)
        driver.kill()
        driver.wait(10)
        # They exit within seconds: SIGTERM from the kernel, checkpoint at most one step.
        assert _wait_until(lambda: not any(_alive(p) for p in workers), 20), "orphans live"
    finally:
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    rerun = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr.decode()
    spec = parse_spec(one_model)
    assert set(_finished_counts(spec).values()) == {1} and len(_finished_counts(spec)) == 2


HOLD_WORKER_LOCK = """
import sys, time
from pathlib import Path
from optbench.worker_lock import hold_worker_lock
hold_worker_lock(Path(sys.argv[1]))
print("holding", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _orphan(study_dir: Path, seconds: float) -> subprocess.Popen:
    """A process that holds the study's worker lock like a worker of a dead driver."""
    study_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_WORKER_LOCK, str(study_dir), str(seconds)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "holding"
    return proc


@pytest.mark.slow
def test_a_new_driver_waits_for_the_workers_of_a_dead_one(one_model):
    spec = parse_spec(one_model)
    orphan = _orphan(spec.study_dir, 3)
    executor = WritingExecutor()
    started = []
    submit = executor.submit
    executor.submit = lambda jobs: started.append(orphan.poll()) or submit(jobs)
    run_study(spec, executor, console=_quiet(), live=False)
    assert started == [0]  # nothing was submitted before the orphan had exited


@pytest.mark.slow
def test_a_new_driver_gives_up_on_workers_that_do_not_exit(one_model, monkeypatch):
    import optbench.run.locks as locks
    from optbench.errors import UsageError

    spec = parse_spec(one_model)
    orphan = _orphan(spec.study_dir, 60)
    monkeypatch.setattr(locks, "WORKERS_EXIT_S", 1.0)
    try:
        with pytest.raises(UsageError, match="still write into this study"):
            run_study(spec, WritingExecutor(), console=_quiet(), live=False)
    finally:
        orphan.kill()
        orphan.wait()
    assert not (spec.study_dir / "trials").exists()


# --- 3. a dead worker costs only its own trial --------------------------------------------------


class KillsTheFirstWorker(LocalExecutor):
    """The local pool, with kill -9 of one worker while both workers train a trial."""

    killed: str | None = None

    def poll(self, timeout):
        events = super().poll(timeout)
        running = [w for w in self._pool.workers.values() if w.job is not None and w.started]
        if self.killed is None and len(running) == 2:
            os.kill(running[0].process.pid, signal.SIGKILL)
            self.killed = running[0].job.key
        return events


@pytest.mark.slow
def test_a_killed_worker_costs_only_its_own_trial(one_model):
    one_model["search"]["n_samples"] = 3
    one_model["executor"] = {"retries": 0}
    spec = parse_spec(one_model)
    executor = KillsTheFirstWorker(2, spec.study_dir)
    try:
        progress = run_study(spec, executor, console=_quiet(), live=False)
    finally:
        executor.close(cancel=True)
    attempts = _attempts(spec)
    assert executor.killed is not None and progress.ran == 3
    (status, message), *more = attempts[executor.killed]
    assert status == "failed" and "killed by SIGKILL" in message and not more
    others = [k for k in attempts if k != executor.killed]
    assert len(others) == 2
    for key in others:  # the other worker's trial and the one not started yet: first attempt
        assert [s for s, _ in attempts[key]] == ["finished"]


# --- 4. disk full ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_disk_full_in_a_trial_is_one_line_loses_nothing_and_the_same_command_completes(
    one_model, tmp_path, monkeypatch, capsys
):
    one_model["search"]["n_samples"] = 2
    one_model["epochs"] = 2  # a checkpoint after epoch 1 (none after the last: loop.py's cadence)
    one_model["executor"] = {"kind": "debug", "retries": 0}
    one_model["output"] = "results"
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(one_model))
    spec = parse_spec({**one_model, "output": str(tmp_path / "results")})
    save_checkpoint = trial_state.save_checkpoint
    folders = []

    def full_on_the_second_trial(path, state, root=None):
        folders.append(path.parent)
        if len({*folders}) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        save_checkpoint(path, state, root)

    monkeypatch.setattr(trial_state, "save_checkpoint", full_on_the_second_trial)
    code, _, err = run_cli(["run", "study.yaml"], tmp_path, monkeypatch, capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "checkpoint.pt: cannot write: No space left on device" in err
    first = _attempts(spec)
    assert sorted(s for a in first.values() for s, _ in a) == ["finished", "pending"]
    monkeypatch.setattr(trial_state, "save_checkpoint", save_checkpoint)  # space is back
    code, _, err = run_cli(["run", "study.yaml"], tmp_path, monkeypatch, capsys)
    assert code == 0, err
    after = _attempts(spec)  # the pending attempt ran: no attempt charged for the full disk
    assert sorted(s for a in after.values() for s, _ in a) == ["finished", "finished"]


@pytest.mark.slow
def test_a_database_that_cannot_be_written_is_one_line_and_the_result_is_kept(
    one_model, tmp_path, monkeypatch, capsys
):
    import sqlalchemy

    one_model["executor"] = {"kind": "debug"}
    one_model["output"] = "results"
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(one_model))
    spec = parse_spec({**one_model, "output": str(tmp_path / "results")})
    full = sqlite3.OperationalError("database or disk is full")

    tell_ = optuna.Study.tell

    def tell(self, trial, *args, **kwargs):  # the commit of a trial's end, as optuna reports it
        if kwargs.get("state") == optuna.trial.TrialState.PRUNED:  # sampling's draws (in memory)
            return tell_(self, trial, *args, **kwargs)
        raise optuna.exceptions.StorageInternalError("commit failed") from (
            sqlalchemy.exc.OperationalError("UPDATE", {}, full)
        )

    monkeypatch.setattr(optuna.Study, "tell", tell)
    code, _, err = run_cli(["run", "study.yaml"], tmp_path, monkeypatch, capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert f"{spec.study_dir / 'study.db'}: cannot read or write the study database" in err
    assert "database or disk is full" in err
    trial = plan(spec)[0]
    assert read_result(trial.out_dir).status == "finished"  # the result stays on disk
    monkeypatch.undo()
    code, out, err = run_cli(["run", "study.yaml"], tmp_path, monkeypatch, capsys)
    assert code == 0 and "recorded 1 result(s) found on disk" in out, err
    assert [s for s, _ in _attempts(spec)[trial.key]] == ["finished"]


def _enospc(*args, **kwargs):
    """A write on a full disk, as os.write and a file's write report it: no file named."""
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class _FullDiskFile(io.StringIO):
    write = staticmethod(_enospc)


class _FullDiskOs:
    """The os module, but its writes find the disk full."""

    write = staticmethod(_enospc)

    @staticmethod
    def fdopen(fd: int, *args, **kwargs) -> _FullDiskFile:
        os.close(fd)
        return _FullDiskFile()

    def __getattr__(self, name):
        return getattr(os, name)


NO_SPACE = "cannot write: No space left on device"


def test_a_full_disk_at_the_study_lock_names_it(one_model, tmp_path, monkeypatch, capsys):
    # it was "error: cannot write: No space left on device", no path (issue 32)
    import optbench.run.locks as locks

    one_model["output"] = "results"
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(one_model))
    monkeypatch.setattr(locks, "os", _FullDiskOs())
    code, _, err = run_cli(["run", "study.yaml"], tmp_path, monkeypatch, capsys)
    assert code == 1, err
    assert err.strip() == f"error: results/tiny/.lock: {NO_SPACE}"


def test_a_full_disk_at_the_slurm_journal_names_it(tmp_path, monkeypatch):
    from optbench.executors.slurm import journal

    monkeypatch.setattr(journal, "os", _FullDiskOs())
    with pytest.raises(OSError) as full:
        journal.append_lines(tmp_path, [{"job": 1}])
    assert full.value.filename == str(tmp_path / journal.JOBS_FILE)


def test_a_full_disk_at_the_tensorboard_events_is_one_line_naming_them(
    tmp_path, monkeypatch, capsys
):
    needs_extra("tensorboard", "tensorboard", "tensorboard")
    from tensorboard.summary.writer.record_writer import RecordWriter

    thread_errors = []  # what a thread's uncaught error would print (20 lines)
    monkeypatch.setattr(threading, "excepthook", thread_errors.append)
    monkeypatch.setattr(RecordWriter, "write", _enospc)  # in tensorboard's writer thread
    out = tmp_path / "out"
    code, _, err = run_cli(_train_args(out), tmp_path, monkeypatch, capsys)
    events = out / "events.out.tfevents.*"
    assert code == 1 and err.strip().splitlines()[-1] == f"error: {events}: {NO_SPACE}", err
    assert thread_errors == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("worker", "said"),
    [
        ("first_write_fails", "'s pipe to the driver: cannot write: Input/output error"),
        ("every_write_fails", " died (exit code 74): a write to its driver failed (an I/O error)"),
    ],
)
def test_a_workers_failed_first_write_is_one_line_and_charges_no_attempt(
    one_model, tmp_path, monkeypatch, capfd, worker, said
):
    # issue 43, item 7: it was a 48-line traceback (three workers' in a row), and the trial was
    # charged an attempt ("lost": the workers could not start)
    import failing_pipe

    import optbench.executors.local as local

    one_model["executor"] = {"kind": "local", "workers": 1, "retries": 1}
    one_model["output"] = "results"
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(one_model))
    spec = parse_spec({**one_model, "output": str(tmp_path / "results")})
    monkeypatch.setattr(local, "_worker_main", getattr(failing_pipe, worker))
    code, _, err = run_cli(["run", "study.yaml"], tmp_path, monkeypatch, capfd)
    assert code == 1 and len(err.strip().splitlines()) == 1, err  # the workers' stderr too
    assert err.startswith("error: worker process ") and said in err, err
    assert [s for a in _attempts(spec).values() for s, _ in a] == ["pending"]  # none charged


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    return done.returncode == 0


@pytest.mark.slow
def test_a_full_tmpfs_stops_the_run_in_one_line_and_the_same_command_completes_after(
    one_model, tmp_path, monkeypatch, capsys
):
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "1m"):  # room for the database, not for a checkpoint (~2.7 MB)
        pytest.skip("needs root and tmpfs to mount a small file system")
    try:
        one_model["executor"] = {"kind": "debug", "retries": 0}
        one_model["epochs"] = 2  # a checkpoint after epoch 1, none after the last
        one_model["output"] = str(disk / "results")
        (tmp_path / "study.yaml").write_text(yaml.safe_dump(one_model))
        spec = parse_spec(one_model)
        code, _, err = run_cli(["run", "study.yaml"], tmp_path, monkeypatch, capsys)
        assert code == 1 and len(err.strip().splitlines()) == 1, err
        assert "No space left on device" in err or "disk is full" in err
        assert str(disk) in err
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        code, _, err = run_cli(["run", "study.yaml"], tmp_path, monkeypatch, capsys)
        assert code == 0, err
        assert [s for a in _attempts(spec).values() for s, _ in a] == ["finished"]
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def _database_full_at(pages: int):
    """From now on every SQLite connection SQLAlchemy opens finds its database full once the file
    would grow past `pages` pages (SQLite's max_page_count: SQLITE_FULL, "database or disk is
    full", from SQLite's own pager, as a full disk gives it). Returns the listener, for
    sqlalchemy.event.remove (the space back)."""
    import sqlalchemy

    def full(dbapi_connection, _record) -> None:
        dbapi_connection.execute(f"PRAGMA max_page_count={pages}")

    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "connect", full)
    return full


def _schema(db: Path) -> tuple[set[str], list[tuple[str, int]]]:
    """The database's index names, and each study name with how many studies have it."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        indexes = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        names = con.execute("SELECT study_name, count(*) FROM studies GROUP BY study_name")
        return indexes, names.fetchall()
    finally:
        con.close()


# The pages of a new study database, all of them written while optuna makes its schema (28 with
# optuna 5.1); the study's first writes come after.
NEW_DATABASE_PAGES = 28


@pytest.mark.slow
def test_a_full_disk_while_the_study_database_is_made_is_one_line_and_never_leaves_it_half_made(
    one_model, tmp_path, monkeypatch, capsys, a_study_database
):
    # It was: the disk full between a table and its index, optuna's next try made the rest of
    # the tables but skipped the index of study names, the run said "recorded", and each later
    # run added a second study of each name (issue 43, item 1); a little later the full disk
    # was "not a usable study database", exit 2 (bad input).
    import sqlalchemy

    whole, _ = _schema(a_study_database)
    for pages in range(1, NEW_DATABASE_PAGES + 3):
        folder = tmp_path / f"full-at-{pages}"
        folder.mkdir()
        db = _study_folder(one_model, folder)
        full = _database_full_at(pages)
        try:
            code, _, err = _run_on(WritingExecutor(), folder, monkeypatch, capsys)
        finally:
            sqlalchemy.event.remove(sqlalchemy.engine.Engine, "connect", full)  # space is back
        if code:
            assert code == 1 and len(err.strip().splitlines()) == 1, (pages, err)
            assert f"{db}: " in err and "disk full" in err, (pages, err)
            code, out, err = run_cli(["status", "study.yaml"], folder, monkeypatch, capsys)
            assert code == 0 and "tiny: 0 of 1 trials done" in out, (pages, out, err)
        for _ in range(2):  # the next runs: the study made whole, each cell's study once
            code, _, err = _run_on(WritingExecutor(), folder, monkeypatch, capsys)
            assert code == 0, (pages, err)
        indexes, names = _schema(db)
        assert indexes == whole and [n for _, n in names] == [1], (pages, indexes, names)
        attempts = _attempts(parse_spec({**one_model, "output": str(folder / "results")}))
        assert list(attempts.values()) == [[("finished", None)]], pages  # none charged
        code, out, err = run_cli(["status", "study.yaml"], folder, monkeypatch, capsys)
        assert code == 0 and "tiny: 1 of 1 trials done" in out, (pages, out, err)


@pytest.mark.slow
def test_a_tmpfs_full_while_the_study_database_is_made_is_one_line_and_the_next_run_completes(
    one_model, tmp_path, monkeypatch, capsys, a_study_database
):
    # The same on a real full disk (the kernel's ENOSPC, in SQLite's journal or its file): a
    # file system filled to leave 0 to 40 pages free, then emptied.
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "2m"):
        pytest.skip("needs root and tmpfs to mount a small file system")
    whole, _ = _schema(a_study_database)
    try:
        for free in range(0, 41, 4):
            folder = disk / f"free-{free}"
            folder.mkdir()
            db = _study_folder(one_model, folder)
            room = os.statvfs(disk)
            filler = disk / "filler"
            filler.write_bytes(b"\0" * (room.f_bavail * room.f_frsize - free * 4096))
            code, _, err = _run_on(WritingExecutor(), folder, monkeypatch, capsys)
            filler.unlink()
            if code:
                assert code == 1 and len(err.strip().splitlines()) == 1, (free, err)
                assert "No space left on device" in err or f"{db}: " in err, (free, err)
                assert "disk full" in err or "No space" in err, (free, err)
                code, out, err = run_cli(["status", "study.yaml"], folder, monkeypatch, capsys)
                assert code == 0 and "tiny: 0 of 1 trials done" in out, (free, out, err)
            code, _, err = _run_on(WritingExecutor(), folder, monkeypatch, capsys)
            assert code == 0, (free, err)
            indexes, names = _schema(db)
            assert indexes == whole and [n for _, n in names] == [1], (free, indexes, names)
            shutil.rmtree(folder)
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


# --- 5. what a result depends on ----------------------------------------------------------------


@pytest.mark.slow
def test_a_result_records_threads_versions_and_device(tmp_path):
    import platform

    import numpy
    import timm

    torch.set_num_threads(2)  # not the autouse fixture's 1: the result must read it
    try:
        result = run_trial(tiny_config(epochs=1), tmp_path)
    finally:
        torch.set_num_threads(1)
    on_disk = json.loads((tmp_path / RESULT_FILE).read_text())
    assert on_disk["threads"] == 2 == result.threads
    assert on_disk["versions"] == {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "timm": timm.__version__,
        "numpy": numpy.__version__,
    }
    assert on_disk["device"].startswith("cpu")


@pytest.mark.slow
def test_pool_workers_run_the_threads_of_the_workers_setting_not_of_the_trials_left(
    one_model,
):
    from optbench.executors.local import usable_cores

    if usable_cores() < 2:
        pytest.skip("one core: one thread is also what all cores would give the last trial")
    spec = parse_spec(one_model)  # one trial left
    run_study(spec, LocalExecutor("auto", spec.study_dir), console=_quiet(), live=False)
    [trial] = plan(spec)
    # auto: one worker per core and so one thread each, however many trials remain
    assert read_result(trial.out_dir).threads == 1


# --- 6. a failure that repeats itself ---------------------------------------------------------------


class FailingExecutor(WritingExecutor):
    """Its 'workers' write a failed result whose message is the next of `messages` (and an
    error.log, as a crashed trial's worker does)."""

    def __init__(self, messages: list[str]):
        super().__init__()
        self.messages = iter(messages)

    def poll(self, timeout):
        if not self.queue:
            return []
        job = self.queue.pop(0)
        message = next(self.messages)
        failed = TrialResult(
            status="failed", epochs=1, config=job.config, message=message, attempt=job.attempt
        )  # a worker names its attempt (run/attempts.py: an unnumbered failure is an earlier one's)
        write_result(job.out_dir, failed)
        (job.out_dir / "error.log").write_text(f"Traceback ...\n{message}\n")
        return [JobEvent(job.key, "ended")]


@pytest.mark.slow
def test_a_failure_that_repeats_itself_is_not_retried_again(one_model, tmp_path):
    one_model["executor"] = {"retries": 5}
    spec = parse_spec(one_model)
    same = "UnreadableImage: /data/train/a/x.jpg: not a readable image (truncated)"
    console = Console(file=(log := (tmp_path / "log.txt")).open("w"), width=300)
    for _ in range(3):
        run_study(spec, FailingExecutor([same]), console=console, live=False)
    console.file.close()
    (attempts,) = _attempts(spec).values()
    assert attempts == [("failed", same)] * 2  # the third run tried it no more
    key = plan(spec)[0].key
    assert f"not retried: {key} failed twice the same way: {same}" in log.read_text()


class LosingExecutor(FailingExecutor):
    """Its jobs end without a result file, each with the next of `messages` (a killed, stalled
    or preempted job, as the driver learns of it)."""

    def poll(self, timeout):
        if not self.queue:
            return []
        return [JobEvent(self.queue.pop(0).key, "lost", next(self.messages))]


@pytest.mark.slow
def test_a_job_lost_the_same_way_twice_is_still_retried(one_model):
    # the cause (a stall, a preemption, a dead node) may not be the trial's: the limit decides
    one_model["executor"] = {"retries": 2}
    spec = parse_spec(one_model)
    same = "stalled: no progress for 300 s (executor.stall_timeout_s is 300)"
    for _ in range(4):
        run_study(spec, LosingExecutor([same]), console=_quiet(), live=False)
    (attempts,) = _attempts(spec).values()
    assert attempts == [("failed", same)] * 3  # the first try and both retries


@pytest.mark.slow
def test_failures_that_differ_are_retried_up_to_the_limit(one_model):
    one_model["executor"] = {"retries": 2}
    spec = parse_spec(one_model)
    for n in range(4):
        run_study(spec, FailingExecutor([f"RuntimeError: {n}"]), console=_quiet(), live=False)
    (attempts,) = _attempts(spec).values()
    assert [m for _, m in attempts] == ["RuntimeError: 0", "RuntimeError: 1", "RuntimeError: 2"]


@pytest.mark.slow
def test_run_exits_1_after_failed_trials_saying_how_many_and_where_the_logs_are(
    one_model, tmp_path, monkeypatch, capsys
):
    import optbench.executors

    one_model["search"]["n_samples"] = 2
    one_model["executor"] = {"retries": 0}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(one_model))
    messages = ["ValueError: first", "ValueError: second"]
    monkeypatch.setattr(
        optbench.executors, "make_executor", lambda *a, **k: FailingExecutor(messages)
    )
    code, out, _ = run_cli(["run", "study.yaml"], tmp_path, monkeypatch, capsys)
    logs = [t.out_dir / "error.log" for t in plan(parse_spec(one_model))]
    assert code == 1
    assert f"2 trial(s) failed; tracebacks in {logs[0]}, {logs[1]}" in out
    # the same command again: nothing left to run (no retries), and the study is still not whole
    code, out, _ = run_cli(["run", "study.yaml"], tmp_path, monkeypatch, capsys)
    assert code == 1 and "2 trial(s) failed" in out


# An attempt's recorded attribute edited into a value of another type than optbench writes it in
# (or into text that is not JSON): every reader and `run` stop with one line naming the trial.
DAMAGED_ATTEMPTS = {
    "not JSON": ("final_error", "{not json", "not JSON"),
    "an error as text": ("final_error", '"abc"', "final_error 'abc' is not a number"),
    "an error as an object": ("final_error", "{}", "final_error {} is not a number"),
    "threads as text": ("threads", '"x"', "threads 'x' is not a count"),
    "versions as a list": ("versions", "[1]", "versions [1] is not a mapping"),
    "metrics as text": ("metrics", '"x"', "metrics 'x' is not a list of epochs' metrics"),
}


@pytest.mark.parametrize("kind", DAMAGED_ATTEMPTS)
def test_a_damaged_attempt_record_is_one_line_and_never_touched(
    kind, tmp_path, monkeypatch, capsys, a_study_database
):
    key, value, why = DAMAGED_ATTEMPTS[kind]
    data = copy.deepcopy(ONE_MODEL_STUDY)
    data["search"]["n_samples"] = 1  # the cell a_study_database recorded
    db = _study_folder(data, tmp_path)
    shutil.copy(a_study_database, db)
    with sqlite3.connect(db) as con:
        changed = con.execute(
            "UPDATE trial_user_attributes SET value_json = ? WHERE key = ?", (value, key)
        ).rowcount
    assert changed == 1
    before = _as_left(tmp_path)
    for command in COMMANDS:
        code, err = _exit_and_stderr(command, tmp_path, monkeypatch, capsys)
        assert code == 2, (command, err)
        [line] = err.strip().splitlines()
        assert "in the study database is damaged" in line and why in line, line
        assert "restore the database from a copy" in line
    assert _as_left(tmp_path) == before  # not written, nothing else either

"""Stalled trials and what `optbench status` counts as running: a worker frozen for real
(SIGSTOP) is shown as stalled in the live view and `status --trials`, and with
executor.stall_timeout_s it is ended, recorded as failed with one line and retried; a trial a
live driver's worker runs counts as running, one of a dead driver's does not."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from rich.console import Console

import optbench.run.driver as driver
import optbench.run.progress as progress_module
from optbench.cli.terminal_tables import status_table, trials_table
from optbench.executors.local import LocalExecutor
from optbench.executors.protocol import JobEvent
from optbench.plan.trials import plan
from optbench.run.driver import run_study
from optbench.run.following import Following
from optbench.run.locks import driver_lock, running_driver
from optbench.run.progress import (
    STALL_EPOCHS,
    STALL_FLOOR_S,
    StudyProgress,
    TrialEpochs,
    stalled_s,
)
from optbench.spec.schema import parse_spec
from optbench.store.database import Store

REPO = Path(__file__).resolve().parents[1]


def _text(renderable) -> str:
    console = Console(file=io.StringIO(), width=250)
    console.print(renderable)
    return console.file.getvalue()


def _metrics(out_dir, seconds, written_at):
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = [{"epoch": i + 1, "epoch_s": s, "val_error": 50.0} for i, s in enumerate(seconds)]
    (out_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    os.utime(out_dir / "metrics.jsonl", (written_at, written_at))


# --- the definition -------------------------------------------------------------------------------


def test_stalled_means_several_epoch_times_and_at_least_the_floor_without_a_new_line():
    now = 10_000.0
    quick = (1.0, 1.0, 3.0)  # median 1 s: the floor decides
    slow_epoch = 2 * STALL_FLOOR_S  # k x median far above the floor: k decides

    def stalled(seconds, idle, since=None):
        return stalled_s(TrialEpochs(len(seconds), seconds, updated=now - idle), since, now)

    assert stalled(quick, STALL_FLOOR_S - 1) is None
    assert stalled(quick, STALL_FLOOR_S + 1) == pytest.approx(STALL_FLOOR_S + 1)
    assert stalled((slow_epoch,), (STALL_EPOCHS - 0.5) * slow_epoch) is None
    assert stalled((slow_epoch,), (STALL_EPOCHS + 0.5) * slow_epoch) is not None
    # progress is the later of the last line and the trial's start (a resumed trial's old file)
    assert stalled(quick, 10 * STALL_FLOOR_S, since=now - 5) is None
    # before its first epoch a trial has no pace: it is not judged (stall_timeout_s still is)
    assert stalled_s(TrialEpochs(), now - 10 * STALL_FLOOR_S, now) is None


def test_a_stalled_trial_replaces_the_time_left_in_the_live_view(tiny_dict):
    tiny_dict["epochs"] = 10
    stored = [s for s in map(_stored, plan(parse_spec(tiny_dict)))]
    healthy, frozen = stored[0], stored[1]
    progress = StudyProgress(stored)
    now = time.time()
    idle = STALL_FLOOR_S + 5 * 60
    for item in (healthy, frozen):
        progress.start(item.trial.key)
    progress.started_at[healthy.trial.key] = now - 60
    progress.started_at[frozen.trial.key] = now - idle - 30
    _metrics(healthy.trial.out_dir, [1.0] * 3, written_at=now - 1)
    progress.read_epochs(force=True)
    assert "time left" in progress.caption() and "stalled" not in progress.caption()

    # the frozen one wrote its third line long ago: "time left 0:22" would be a lie
    _metrics(frozen.trial.out_dir, [1.0] * 3, written_at=now - idle)
    progress.read_epochs(force=True)
    assert re.search(r"time left unknown: 1 trial\(s\) stalled .* 7 min", progress.caption())
    rows = _text(progress.running_table()).splitlines()
    (frozen_row,) = [r for r in rows if "sample 1 " in r]
    (healthy_row,) = [r for r in rows if "sample 0 " in r]
    assert _cells(frozen_row)[-1] == "stalled 7 min"
    assert re.fullmatch(r"\d+:\d\d", _cells(healthy_row)[-1])  # its own time left


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.split("│") if c.strip()]


def _stored(trial):
    from optbench.store.database import StoredTrial

    return StoredTrial(trial)


# --- the setting ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -5, "soon", 10**9, ".inf"])
def test_stall_timeout_must_be_a_positive_capped_number(cli, tiny_dict, tmp_path, bad):
    tiny_dict["executor"] = {"stall_timeout_s": bad}
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump(tiny_dict).replace("'.inf'", ".inf"))
    code, out, err = cli("status", str(study))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "executor.stall_timeout_s" in err
    assert not (tmp_path / "results").exists()


def test_stall_timeout_is_off_by_default(tiny_dict):
    assert parse_spec(tiny_dict).executor.stall_timeout_s is None


# --- what status counts as running ---------------------------------------------------------------


@pytest.mark.slow
def test_status_counts_a_trial_a_live_drivers_worker_runs_and_not_a_dead_drivers(one_model):
    spec = parse_spec(one_model)
    trials = plan(spec)
    assert running_driver(spec.study_dir) is None
    with driver_lock(spec.study_dir, on_wait=print) as run:
        assert running_driver(spec.study_dir) == run
        store = Store(spec, create=True)
        (item,) = store.prepare(trials, retries=0)
        # prepared, but no worker said it started it: pending
        assert _state_counts(spec) == {"running": 0, "pending": 1}
        store.mark_running(item, run, time.time())
        assert _state_counts(spec) == {"running": 1, "pending": 0}
        (row,) = [r for r in _text(trials_table(spec)).splitlines() if "sample 0" in r]
        assert _cells(row)[1] == "0/1" and _cells(row)[-1] == "–"  # before its first epoch
        _metrics(item.trial.out_dir, [1.0], written_at=time.time())
    # the driver is gone (killed: its workers died with it): its mark is not "running"
    assert running_driver(spec.study_dir) is None
    assert _state_counts(spec) == {"running": 0, "pending": 1}
    (row,) = [r for r in _text(trials_table(spec)).splitlines() if "sample 0" in r]
    assert _cells(row)[1] == "1/1" and _cells(row)[-1] == "not running"


def _state_counts(spec) -> dict[str, int]:
    table, _ = status_table(spec)
    header = [c.header for c in table.columns]
    cells = {h: str(col._cells[0]) for h, col in zip(header, table.columns, strict=True)}
    return {state: int(cells[state]) for state in ("running", "pending")}


# --- for real: a worker frozen by SIGSTOP ---------------------------------------------------------


class FreezesItsWorker(LocalExecutor):
    """The local pool, with SIGSTOP sent to the worker once its trial wrote its first epoch,
    and `optbench status`'s two tables looked at while it is frozen (the driver is this test)."""

    def __init__(self, spec, on_freeze=lambda: None):
        super().__init__(1, spec.study_dir)
        self.spec, self.frozen, self.seen, self.on_freeze = spec, None, [], on_freeze
        self.next_look = 0.0

    def poll(self, timeout):
        events = super().poll(timeout)
        for worker in self._pool.workers.values() if self._pool else []:
            job = worker.job
            if self.frozen is None and job is not None and worker.started:
                metrics = job.out_dir / "metrics.jsonl"
                if metrics.exists() and metrics.read_text().strip():
                    os.kill(worker.process.pid, signal.SIGSTOP)
                    self.frozen = worker.process.pid
                    self.on_freeze()
        if self.frozen is not None and len(self.seen) < 6 and time.time() > self.next_look:
            self.seen.append((_state_counts(self.spec), _text(trials_table(self.spec))))
            self.next_look = time.time() + 1.5  # few looks: each reads the store (slow, loaded)
        return events


def _attempts(spec) -> list[tuple[str, str | None]]:
    storage = optuna.storages.RDBStorage(spec.storage_url)
    (summary,) = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=summary.study_name, storage=storage).trials
    return [(t.user_attrs.get("status", "pending"), t.user_attrs.get("message")) for t in trials]


TIMEOUT_S = 15


@pytest.mark.slow
def test_a_frozen_worker_is_shown_stalled_then_ended_retried_and_finished(one_model, monkeypatch):
    # The definition's values (minutes) are tested above; here its mechanism on a real frozen
    # process, in seconds: shown stalled after a second or two, ended TIMEOUT_S after its last
    # metrics line. The driver's timeout is armed when the worker is frozen: on a loaded 2-core
    # machine the start-up and first epoch alone outlast any timeout short enough for a test.
    monkeypatch.setattr(progress_module, "STALL_FLOOR_S", 1.0)
    monkeypatch.setattr(progress_module, "STALL_EPOCHS", 0.05)
    one_model["epochs"] = 2
    one_model["executor"] = {"retries": 1, "stall_timeout_s": TIMEOUT_S}
    spec = parse_spec(one_model)
    made = []

    def unarmed(run, stall_timeout_s):
        made.append(Following(run, None))
        return made[-1]

    def arm():
        made[0].stall_timeout_s = spec.executor.stall_timeout_s

    monkeypatch.setattr(driver, "Following", unarmed)
    executor = FreezesItsWorker(spec, on_freeze=arm)
    live = io.StringIO()
    terminal = Console(file=live, force_terminal=True, width=200)
    try:
        progress = run_study(spec, executor, console=terminal)
    finally:
        executor.close(cancel=True)
    assert executor.frozen is not None and progress.ran == 1
    with pytest.raises(ProcessLookupError):  # the driver killed the frozen worker
        os.kill(executor.frozen, 0)
    # while frozen: running in `status`, stalled in `status --trials` and in the live view
    assert all(counts == {"running": 1, "pending": 0} for counts, _ in executor.seen)
    assert any(re.search(r"stalled \d+ s", trials) for _, trials in executor.seen)
    assert re.search(r"stalled \d+ s", live.getvalue())
    assert "time left unknown: 1 trial(s) stalled" in live.getvalue()
    ((status, message),) = _attempts(spec)
    assert status == "failed"
    assert re.fullmatch(
        rf"stalled: no progress for \d+ s \(executor.stall_timeout_s is {TIMEOUT_S}\)", message
    )
    (trial,) = plan(spec)
    assert (trial.out_dir / "error.log").read_text() == message + "\n"

    # the next run retries it (as any failed attempt): it resumes and finishes
    run_study(spec, LocalExecutor(1, spec.study_dir), console=Console(file=io.StringIO()))
    assert [s for s, _ in _attempts(spec)] == ["failed", "finished"]


@pytest.mark.slow
def test_status_shows_the_trial_a_running_driver_trains_as_running(cli, one_model, tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump(one_model))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    driver = subprocess.Popen(
        [sys.executable, "-m", "optbench", "run", str(study)],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    seen = []
    try:
        while driver.poll() is None and "1" not in seen:
            code, out, err = cli("status", str(study))
            assert code == 0, err
            (row,) = [r for r in out.splitlines() if "vit_p_w64_16px" in r]
            seen.append(_cells(row)[6])  # model, optimizer, epochs, finished, diverged, failed
            time.sleep(0.5)
    finally:
        assert driver.wait(300) == 0, driver.stderr.read()
    assert seen[-1] == "1" and set(seen) <= {"0", "1"}  # pending until its worker started it
    code, out, _ = cli("status", str(study))
    # the table's row (a finished cell also gets a "cost ..." line: where its seconds went)
    (row,) = [r for r in out.splitlines() if "vit_p_w64_16px" in r and "│" in r]
    assert _cells(row)[3] == "1" and _cells(row)[6] == "0"  # finished, and nothing runs


class RequeuesOnce:
    """An executor whose one job runs, goes back to the queue (a SLURM requeue), runs again and
    ends with a finished result; `optbench status` is asked after each step."""

    jobs_outlive_driver = False

    def __init__(self, spec):
        self.spec, self.steps, self.seen = spec, ["running", "queued", "running", "ended"], []

    def settle(self, jobs):
        return []

    def submit(self, jobs):
        (self.job,) = jobs
        return "test"

    def poll(self, timeout):
        if not self.steps:
            return []
        if len(self.steps) < 4:  # what the last event made of it
            self.seen.append(_state_counts(self.spec)["running"])
        kind = self.steps.pop(0)
        if kind == "ended":
            from optbench.trial.config import TrialResult
            from optbench.trial.results import write_result

            result = TrialResult(
                status="finished", final_error=7.0, best_error=6.0, epochs=1, config=self.job.config
            )
            write_result(self.job.out_dir, result)
        return [JobEvent(self.job.key, kind)]

    def close(self, cancel):
        pass


@pytest.mark.slow
def test_a_requeued_trial_counts_as_pending_until_it_runs_again(one_model):
    spec = parse_spec(one_model)
    executor = RequeuesOnce(spec)
    run_study(spec, executor, console=Console(file=io.StringIO()), live=False)
    assert executor.seen == [1, 0, 1]  # after running, queued, running again
    assert _attempts(spec) == [("finished", None)]

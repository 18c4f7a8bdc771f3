"""Every trial in MLflow and W&B (optbench/trackers/backends.py, trackers/trial_run.py), read back
from the trackers' own files: MLflow's file store through MlflowClient, W&B's offline run files
through their records (wandb_records.py). One run per trial, its params and tags, every
metrics.jsonl line as a step, no run or step twice after a resume or a rerun, and a failing tracker
costs no trial. Nothing leaves the machine and nothing is written outside the study folder (HOME and
TMPDIR are the test's own, and checked)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from cli_inprocess import ONE_MODEL_STUDY, run_cli, tiny_config
from driver_process import ctrl_c_after_first_end, run_again, stoppable_study
from services import needs_extra

from optbench.plan.trials import plan
from optbench.spec import tracking as tracking_settings
from optbench.spec.schema import parse_spec
from optbench.spec.tracking import Tracking
from optbench.trackers import backends as tracking_mod
from optbench.trackers import trial_run as train_tracking
from optbench.trackers.backends import RUN_FILE, open_run, read_run_file, tracker_env
from optbench.trackers.trial_run import RunWriter, TrialTracker
from optbench.trial.config import TrialResult
from optbench.trial.results import read_metrics, write_metrics


@pytest.fixture(autouse=True)
def _own_home(tmp_path, monkeypatch) -> None:
    needs_extra("mlflow", "mlflow", "mlflow")
    needs_extra("wandb", "wandb", "wandb")
    """A HOME and a TMPDIR of the test's own, to check that trackers write nothing there; W&B
    and MLflow told nothing (optbench sets what they read, tracking.tracker_env)."""
    for name in ("home", "tmp"):
        (tmp_path / name).mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    # what open_run sets in this process is undone after the test (setenv records it unset)
    offline = Tracking(kind="wandb").resolved(tmp_path)
    for name in [*tracker_env(offline, tmp_path), "MLFLOW_TRACKING_URI"]:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def _tracker_files(folder: Path) -> list[str]:
    """Files below `folder` that a tracker wrote (by their or their folder's name). Not empty
    folders: `import wandb` makes two (tmp*wandb-media, tmp*wandb-artifacts) in TMPDIR, removed
    at exit, and timm imports wandb wherever it is installed (timm/utils/summary.py), so a
    worker killed by its stop signal leaves them whatever optbench does."""
    names = ("mlflow", "wandb", "mlruns")
    return [
        str(p)
        for p in folder.rglob("*")
        if p.is_file()
        and any(t in part.lower() for part in p.relative_to(folder).parts for t in names)
    ]


def _client(study_dir: Path):
    from mlflow.tracking import MlflowClient

    # the reader's own settings (undone after the test, _own_home); a worker sets its own
    os.environ |= {"MLFLOW_ALLOW_FILE_STORE": "true", "MLFLOW_DISABLE_TELEMETRY": "true"}

    return MlflowClient(tracking_uri=(study_dir / "mlruns").resolve().as_uri())


def _mlflow_runs(study_dir: Path) -> dict[str, object]:
    """run name (the trial's key) -> its runs, of the experiment named after the study."""
    client = _client(study_dir)
    experiment = client.get_experiment_by_name(study_dir.name)
    runs: dict[str, list] = {}
    for run in client.search_runs([experiment.experiment_id]):
        runs.setdefault(run.info.run_name, []).append(run)
    return runs


def _mlflow_steps(study_dir: Path, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in _client(study_dir).get_metric_history(run_id, key))


def _expected_steps(lines: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """metrics.jsonl as steps: each numeric key -> [(epoch, value), ...]."""
    steps: dict[str, list] = {}
    for line in lines:
        for k, v in line.items():
            if k != "epoch" and type(v) in (int, float):
                steps.setdefault(k, []).append((line["epoch"], v))
    return steps


def _check_mlflow_study(spec) -> None:
    """One finished run per trial, with its params, tags and metrics.jsonl as its steps."""
    runs = _mlflow_runs(spec.study_dir)
    trials = plan(spec)
    assert sorted(runs) == sorted(t.key for t in trials)
    for trial in trials:
        [run] = runs[trial.key]  # one run, never two
        tags, params = run.data.tags, run.data.params
        assert (tags["cell"], tags["model"], tags["seed"]) == (trial.cell_id, trial.cell.model, "0")
        assert tags["sample"] == str(trial.sample) and tags["study"] == spec.name
        assert tags["optbench.status"] == "finished" and run.info.status == "FINISHED"
        assert float(params["lr"]) == trial.lr and float(params["wd"]) == trial.wd
        assert float(params["recipe.warmup_epochs"]) == 0 and params["model"] == trial.cell.model
        result = json.loads((trial.out_dir / "result.json").read_text())
        assert tags["code_fingerprint"] == result["provenance"]["code_fingerprint"]
        assert result["execution"]["tracking"]["kind"] == "mlflow"
        expected = _expected_steps(read_metrics(trial.out_dir))
        assert "ema_top1" in expected and "input_wait" in expected
        for key, steps in expected.items():
            assert _mlflow_steps(spec.study_dir, run.info.run_id, key) == steps, key
        assert read_run_file(trial.out_dir, spec.study_dir, trial.execution.tracking)[0] == (
            run.info.run_id
        )


# --- the settings -----------------------------------------------------------------------------


def test_tracking_is_an_execution_setting_never_part_of_a_cell_id(tiny_dict):
    plain = parse_spec(tiny_dict)
    tracked = parse_spec({**tiny_dict, "tracking": {"kind": "mlflow"}})
    assert [t.key for t in plan(plain)] == [t.key for t in plan(tracked)]
    assert plan(plain)[0].execution.tracking is None
    resolved = plan(tracked)[0].execution.tracking
    assert resolved.uri == (tracked.study_dir / "mlruns").resolve().as_uri()
    wandb_spec = parse_spec({**tiny_dict, "tracking": {"kind": "wandb"}})
    assert plan(wandb_spec)[0].execution.tracking.model_dump() == {
        "kind": "wandb", "uri": None, "project": "tiny", "mode": "offline"
    }  # fmt: skip


def test_a_tracker_that_is_not_installed_is_refused_with_its_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tracking_settings, "installed", lambda kind: False)
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({**ONE_MODEL_STUDY, "output": "results"}))
    code, _, err = run_cli(
        ["run", str(study), "--set", "tracking.kind=mlflow"], tmp_path, monkeypatch, capsys
    )
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "tracking" in err and "pip install 'optbench[mlflow]'" in err
    assert not (tmp_path / "results").exists()


def test_a_run_file_that_is_not_ours_is_no_run(tmp_path):
    target = Tracking(kind="mlflow").resolved(tmp_path)
    for text in (
        "not json",
        '{"x": 1}',
        json.dumps({f"mlflow:{target.uri}": {"run_id": "../x", "logged": 3}}),
        "[" * 60_000 + "]" * 5_000,  # deeper than Python's stack (issue 43: a RecursionError)
    ):
        (tmp_path / RUN_FILE).write_text(text)
        assert read_run_file(tmp_path, tmp_path, target) == (None, 0, None)
    # a count of epochs logged that no trial has (a trial has at most 10,000): none logged
    for logged in (10**30, -1, "3", True):
        entry = {f"mlflow:{target.uri}": {"run_id": "abc", "logged": logged}}
        (tmp_path / RUN_FILE).write_text(json.dumps(entry))
        assert read_run_file(tmp_path, tmp_path, target) == ("abc", 0, None)


# --- the tracker thread, on metrics.jsonl files (no training) -----------------------------------


def _trial_folder(study_dir: Path) -> Path:
    out = study_dir / "trials" / "cellid-1234" / "s003-seed0"
    out.mkdir(parents=True)
    return out


def _line(epoch: int) -> dict:
    return {
        "epoch": epoch,
        "lr": 0.1 / epoch,
        "train_loss": 2.0 - epoch / 10,
        "ema_top1": 90.0 - epoch,
        "input_wait": None,
    }


def _tracked(cfg, out: Path, study: Path, target, lines: list[dict], result) -> None:
    """A trial that writes `lines` to metrics.jsonl, telling its tracker at each, then ends."""
    tracker = TrialTracker(cfg, out, study, target)
    for n in range(1, len(lines) + 1):
        write_metrics(out, lines[:n], study)
        tracker.epoch_ended()
    tracker.end(result)


class _Stopped(Exception):
    """The trial's stop, come after its run opened and before tracker.json recorded it."""


@pytest.mark.parametrize("kind", ["mlflow", "wandb"])
@pytest.mark.slow
def test_a_trial_stopped_while_its_run_opens_continues_that_run(kind, tmp_path, monkeypatch):
    study = tmp_path / "study"
    out = _trial_folder(study)
    target = Tracking(kind=kind).resolved(study)
    cfg = tiny_config(epochs=2)
    opened = []

    def open_then_stop(*args):
        opened.append(run := open_run(*args))
        run.end(None, {"status": "stopped"})
        raise _Stopped

    monkeypatch.setattr(train_tracking, "open_run", open_then_stop)
    with pytest.raises(_Stopped):
        RunWriter(cfg, out, study, target).open()
    monkeypatch.undo()
    lines = [_line(1), _line(2)]
    write_metrics(out, lines, study)
    done = TrialResult(status="finished", final_error=88.0, epochs=2, config=cfg, epochs_run=2)
    resumed = RunWriter(cfg, out, study, target)
    resumed.open()
    resumed.sync()
    resumed.end(done)
    [first] = opened
    assert resumed.run.run_id == first.run_id
    assert read_run_file(out, study, target) == (first.run_id, 2, True)
    if kind == "mlflow":
        [[run]] = _mlflow_runs(study).values()  # one run of the trial, not two
        assert run.info.status == "FINISHED" and _mlflow_steps(study, run.info.run_id, "lr") == [
            (1, 0.1),
            (2, 0.05),
        ]
    else:
        import wandb
        from wandb_records import offline_runs, read_run

        wandb.teardown()
        runs = offline_runs(study)
        assert list(runs) == [first.run_id]  # one run of the trial, in two sessions
        got = read_run(runs[first.run_id])
        assert [step for step, _ in got["history"]] == [1, 2]
        assert got["summary"]["status"] == "finished"


@pytest.mark.parametrize("kind", ["mlflow", "wandb"])
@pytest.mark.slow
def test_a_resumed_trial_continues_its_run_and_logs_each_epoch_once(
    kind, tmp_path, capfd, monkeypatch
):
    # a stopped worker exits; this process goes on instead: let the first session end first
    monkeypatch.setattr(train_tracking, "END_WAIT_S", 600.0)
    study = tmp_path / "study"
    out = _trial_folder(study)
    target = Tracking(kind=kind).resolved(study)
    cfg = tiny_config(epochs=3)
    lines = [_line(e) for e in (1, 2, 3)]
    _tracked(cfg, out, study, target, lines[:2], None)  # stopped after 2 epochs
    first_id = read_run_file(out, study, target)[0]
    done = TrialResult(status="finished", final_error=87.0, epochs=3, config=cfg, epochs_run=3)
    _tracked(cfg, out, study, target, lines, done)  # resumed: the file holds 1..3 again
    assert read_run_file(out, study, target) == (first_id, 3, True)
    expected = _expected_steps(lines)
    assert "input_wait" not in expected  # None is no number: not logged
    if kind == "mlflow":
        [[run]] = _mlflow_runs(study).values()
        assert run.info.run_id == first_id and run.info.run_name == "cellid-1234/s003-seed0"
        assert run.data.tags["sample"] == "3" and run.data.tags["optbench.status"] == "finished"
        assert run.data.tags["optbench.final_error"] == "87.0" and run.info.status == "FINISHED"
        for key, steps in expected.items():
            assert _mlflow_steps(study, first_id, key) == steps
    else:
        import wandb
        from wandb_records import offline_runs, read_run

        wandb.teardown()  # finish() returns before W&B's service has written all; it ends now
        runs = offline_runs(study)
        assert list(runs) == [first_id] and len(runs[first_id]) == 2  # one run, two sessions
        got = read_run(runs[first_id])
        assert (got["project"], got["group"], got["job_type"]) == ("study", "cellid-1234", "trial")
        assert got["config"]["lr"] == cfg.lr and got["config"]["optbench"]["sample"] == "3"
        steps = [step for step, _ in got["history"]]
        assert steps == [1, 2, 3]  # each epoch once, across both sessions
        for key, want in expected.items():
            assert [(s, row[key]) for s, row in got["history"]] == want
        assert got["summary"]["status"] == "finished" and got["exits"] == [1, 0]
    assert capfd.readouterr().err == ""  # no warning
    assert not _tracker_files(tmp_path / "home") and not _tracker_files(tmp_path / "tmp")


def _broken_store(tmp_path: Path) -> tuple[Path, Path, Tracking]:
    """(study folder, trial folder, MLflow settings) of a store that cannot be made: its folder
    would be below a regular file."""
    study = tmp_path / "study"
    (tmp_path / "a-file").write_text("not a folder")
    target = Tracking(kind="mlflow", uri=str(tmp_path / "a-file" / "store")).resolved(study)
    return study, _trial_folder(study), target


@pytest.mark.slow
def test_a_failing_tracker_costs_one_warning_line_and_nothing_else(tmp_path, capfd):
    study, out, target = _broken_store(tmp_path)
    cfg = tiny_config(epochs=2)
    done = TrialResult(status="finished", final_error=87.0, epochs=2, config=cfg, epochs_run=2)
    _tracked(cfg, out, study, target, [_line(1), _line(2)], done)
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("optbench: the mlflow run of trial cellid-1234/s003-seed0 is ")
    assert "could not be written" in err[0] and "next `optbench run` completes it" in err[0]
    assert len(read_metrics(out)) == 2  # the trial's own files as they were


def test_a_hanging_tracker_holds_its_trial_end_for_end_wait_s_and_says_so_once(
    tmp_path, monkeypatch, capfd
):
    """A server that takes a write and never answers: the trial's end waits END_WAIT_S, says so
    in one line, and the thread left behind writes nothing more once the server answers."""
    answer, calls = threading.Event(), []

    class Hanging(tracking_mod.TrackerRun):
        run_id = "hanging"

        def log(self, lines) -> None:
            calls.append(("log", [line["epoch"] for line in lines]))
            answer.wait()

        def end(self, status, summary) -> None:
            calls.append(("end", status))

    monkeypatch.setattr(train_tracking, "open_run", lambda *args: Hanging())
    monkeypatch.setattr(train_tracking, "END_WAIT_S", 0.5)
    study = tmp_path / "study"
    out = _trial_folder(study)
    target = Tracking(kind="mlflow", uri="http://127.0.0.1:9").resolved(study)
    cfg = tiny_config(epochs=2)
    tracker = TrialTracker(cfg, out, study, target)
    write_metrics(out, [_line(1)], study)
    tracker.epoch_ended()
    while not calls:  # the thread is inside its first write now
        time.sleep(0.01)
    write_metrics(out, [_line(1), _line(2)], study)
    tracker.epoch_ended()
    tracker.end(TrialResult(status="finished", final_error=87.0, epochs=2, config=cfg))
    assert capfd.readouterr().err.splitlines() == [
        "optbench: the mlflow run of trial cellid-1234/s003-seed0 is incomplete: mlflow did not "
        "finish writing within 0.5 s of the trial's end; the next `optbench run` completes it "
        "from the trial's files"
    ]
    answer.set()
    tracker._thread.join(10)
    assert not tracker._thread.is_alive() and calls == [("log", [1])]  # no epoch 2, no end
    assert read_run_file(out, study, target) == ("hanging", 1, False)
    assert capfd.readouterr().err == ""  # one line per trial


def _chained(outer: Exception, inner: BaseException) -> Exception:
    try:
        try:
            raise inner
        except BaseException as err:
            raise outer from err
    except Exception as err:  # noqa: BLE001
        return err


class _Wrapped(Exception):
    """An HTTP library's error that keeps what it wraps as its `reason`, not chained."""

    def __init__(self, reason: BaseException):
        super().__init__("wrapped")
        self.reason = reason


@pytest.mark.parametrize(
    ("err", "says"),
    [
        (
            _chained(Exception("API request to http://127.0.0.1:9/api failed " + "x" * 400),
                     ConnectionRefusedError(111, "Connection refused")),
            "the MLflow server at http://127.0.0.1:9 is not answering",
        ),
        (
            _chained(Exception("Read timed out " + "y" * 400), TimeoutError("timed out")),
            "the MLflow server at http://127.0.0.1:9 did not answer in time",
        ),
        (
            # a server killed mid-request: requests' error holds urllib3's, whose reason holds
            # the reset, none of them chained
            Exception("API request failed", _Wrapped(_Wrapped(ConnectionResetError(104, "reset")))),
            "the MLflow server at http://127.0.0.1:9 is not answering",
        ),
        (ModuleNotFoundError("No module named 'mlflow'"),
         "mlflow is not installed here: pip install 'optbench[mlflow]'"),
        (PermissionError(13, "Permission denied", "/srv/mlruns/0"),
         "the MLflow server at http://127.0.0.1:9 could not be written (permission denied: "
         "/srv/mlruns/0)"),
        (ValueError("z" * 500), "the MLflow server at http://127.0.0.1:9 refused a write (ValueError)"),
    ],
)  # fmt: skip
def test_a_tracker_failure_is_told_in_optbenchs_words_never_the_librarys(err, says):
    target = Tracking(kind="mlflow", uri="http://127.0.0.1:9")
    assert tracking_mod.describe_failure(err, target) == says


# --- completing runs an outage left incomplete (trackers/repair.py), on a recording backend ---


class Recording(tracking_mod.TrackerRun):
    """A tracker run that records what it is told (per run id: a new one per trial)."""

    def __init__(self, runs: dict, run_id: str | None, meta: dict):
        self.run_id = run_id or meta["name"].replace("/", "_")
        self.calls = runs.setdefault(self.run_id, [])

    def log(self, lines) -> None:
        self.calls.append(("log", [line["epoch"] for line in lines]))

    def end(self, status, summary) -> None:
        self.calls.append(("end", status, summary["status"]))


def _ended_trials(tiny_dict, monkeypatch) -> tuple[list, dict]:
    """The tiny study with MLflow tracking, both trials finished after 3 epochs with no run
    written (the tracker was down throughout); the runs a Recording backend is given."""
    from optbench.trial.config import Execution
    from optbench.trial.results import write_result

    tiny_dict |= {"tracking": {"kind": "mlflow"}, "models": ["vit_p_w64_16px"], "epochs": 3}
    trials = plan(parse_spec(tiny_dict))
    for trial in trials:
        trial.out_dir.mkdir(parents=True)
        write_metrics(trial.out_dir, [_line(e) for e in (1, 2, 3)], trial.study_dir)
        done = TrialResult(
            status="finished", final_error=80.0, epochs=3, epochs_run=3, config=trial.config,
            execution=Execution(tracking=trial.execution.tracking),
        )  # fmt: skip
        write_result(trial.out_dir, done, trial.study_dir)
    runs: dict = {}
    monkeypatch.setattr(
        train_tracking,
        "open_run",
        lambda tracking, root, run_id, meta: Recording(runs, run_id, meta),
    )
    return trials, runs


def test_the_next_run_completes_each_incomplete_run_once(tiny_dict, monkeypatch):
    from optbench.trackers.repair import complete_runs, incomplete
    from optbench.trackers.trial_run import RunWriter

    trials, runs = _ended_trials(tiny_dict, monkeypatch)
    first, second = trials
    target = first.execution.tracking
    # the first trial's run holds epoch 1 and was never ended; the second has none
    from optbench.trackers.backends import write_run_file

    write_run_file(first.out_dir, first.study_dir, target, "first", 1, ended=False)
    assert all(incomplete(t) is not None for t in trials)
    said = []
    assert complete_runs(trials, said.append) == 2
    assert said == [
        "completed 2 mlflow run(s) that a tracker outage left incomplete, from their trials' "
        "metrics.jsonl and result.json"
    ]
    assert runs["first"] == [("log", [2, 3]), ("end", "finished", "finished")]
    [new_id] = set(runs) - {"first"}
    assert runs[new_id] == [("log", [1, 2, 3]), ("end", "finished", "finished")]
    assert read_run_file(second.out_dir, second.study_dir, target) == (new_id, 3, True)
    assert complete_runs(trials, said.append) == 0 and len(said) == 1  # nothing, silently
    assert [len(calls) for calls in runs.values()] == [2, 2]

    # a run whose worker still writes it (its lock is held) is left to that worker
    write_run_file(first.out_dir, first.study_dir, target, "first", 2, ended=False)
    writer = RunWriter(first.config, first.out_dir, first.study_dir, target)
    assert writer.lock(wait=False)
    try:
        assert complete_runs(trials, said.append) == 0
    finally:
        writer.close()
    assert complete_runs(trials, said.append) == 1 and runs["first"][-2:] == [
        ("log", [3]), ("end", "finished", "finished")
    ]  # fmt: skip


def test_only_runs_a_trial_was_tracked_into_and_left_open_are_incomplete(tiny_dict, monkeypatch):
    from optbench.trackers.backends import RUN_FILE, write_run_file
    from optbench.trackers.repair import incomplete
    from optbench.trial.results import RESULT_FILE, load_result, write_result

    trials, _ = _ended_trials(tiny_dict, monkeypatch)
    trial = trials[0]
    target, folder, root = trial.execution.tracking, trial.out_dir, trial.study_dir
    write_run_file(folder, root, target, "r", 3, ended=True)
    assert incomplete(trial) is None  # ended
    # written before `ended` was recorded: complete when it holds every epoch
    (folder / RUN_FILE).write_text(
        json.dumps({f"mlflow:{target.uri}": {"run_id": "r", "logged": 3}})
    )
    assert incomplete(trial) is None
    (folder / RUN_FILE).write_text(
        json.dumps({f"mlflow:{target.uri}": {"run_id": "r", "logged": 2}})
    )
    assert incomplete(trial) is not None
    # a trial that ran untracked (tracking turned on since) gets no run after the fact
    untracked = load_result(folder, root).model_copy(update={"execution": None})
    write_result(folder, untracked, root)
    assert incomplete(trial) is None
    (folder / RESULT_FILE).unlink()  # not ended (or a retry under way): its worker's run
    assert incomplete(trial) is None


# --- whole studies ------------------------------------------------------------------------------


@pytest.mark.slow
def test_mlflow_ctrl_c_resume_rerun_and_report_give_one_run_per_trial(tmp_path, one_model):
    one_model["tracking"] = {"kind": "mlflow"}
    one_model["output"] = str(tmp_path / "results")
    study, spec = stoppable_study(one_model, tmp_path)  # 2 trials of 2 epochs, one worker
    proc = ctrl_c_after_first_end(study, tmp_path)
    assert proc.returncode == 130, proc.stderr
    assert len(_mlflow_runs(spec.study_dir)) >= 1
    resumed = run_again(study, tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "tracking" not in resumed.stderr  # no warning
    _check_mlflow_study(spec)
    again = run_again(study, tmp_path)  # nothing to run: nothing logged
    assert again.returncode == 0 and "nothing to run" in again.stdout
    _check_mlflow_study(spec)
    report = subprocess.run(
        [sys.executable, "-m", "optbench", "report", str(study), "--peak"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert report.returncode == 0 and report.stderr == "", report.stderr
    [report_run] = _mlflow_runs(spec.study_dir)["report"]
    attached = {a.path for a in _client(spec.study_dir).list_artifacts(report_run.info.run_id)}
    assert {"index.html", "summary.json", "trials.csv"} <= attached
    assert not _tracker_files(tmp_path / "home") and not _tracker_files(tmp_path / "tmp")
    outside = {p.name for p in tmp_path.iterdir()} - {
        "results",
        "reports",
        "study.yaml",
        "home",
        "tmp",
    }
    assert not outside


@pytest.mark.slow
def test_wandb_offline_population_gives_one_run_per_member_and_a_rerun_none(
    tmp_path, one_model, monkeypatch, capsys
):
    one_model["tracking"] = {"kind": "wandb"}
    one_model["epochs"] = 2
    one_model["search"]["n_samples"] = 2
    one_model["executor"] = {"workers": 1, "population": 2}
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(one_model))
    spec = parse_spec(one_model)
    code, _, err = run_cli(["run", str(study)], tmp_path, monkeypatch, capsys)
    assert code == 0, err
    from wandb_records import offline_runs, read_run

    runs = offline_runs(spec.study_dir)
    trials = plan(spec)
    assert len(runs) == len(trials) == 2
    for trial in trials:
        run_id, logged, _ = read_run_file(trial.out_dir, spec.study_dir, trial.execution.tracking)
        got = read_run(runs[run_id])
        assert got["name"] == trial.key and got["group"] == trial.cell_id and logged == 2
        assert got["config"]["lr"] == trial.lr and got["summary"]["status"] == "finished"
        expected = _expected_steps(read_metrics(trial.out_dir))
        for key, want in expected.items():
            assert [(s, row[key]) for s, row in got["history"] if key in row] == want, key
    code, out, _ = run_cli(["run", str(study)], tmp_path, monkeypatch, capsys)
    assert code == 0 and "nothing to run" in out
    assert {k: len(v) for k, v in offline_runs(spec.study_dir).items()} == {k: 1 for k in runs}
    assert not _tracker_files(tmp_path / "home") and not _tracker_files(tmp_path / "tmp")


@pytest.mark.slow
def test_a_trial_whose_tracker_fails_finishes_with_one_warning_line(tmp_path, capfd):
    from optbench.train.run_trial import run_trial
    from optbench.trial.config import Execution

    study, out, broken = _broken_store(tmp_path)
    cfg = tiny_config(epochs=1)
    result = run_trial(cfg, out, execution=Execution(tracking=broken), root=study, workers=1)
    assert result.status == "finished" and (out / "result.json").exists()
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("optbench: the mlflow run of trial "), err


@pytest.mark.slow
def test_wandb_ctrl_c_and_resume_continue_each_trials_run(tmp_path, one_model):
    one_model["tracking"] = {"kind": "wandb"}
    one_model["output"] = str(tmp_path / "results")
    study, spec = stoppable_study(one_model, tmp_path)  # 2 trials of 2 epochs, one worker
    assert ctrl_c_after_first_end(study, tmp_path).returncode == 130
    resumed = run_again(study, tmp_path)
    assert resumed.returncode == 0 and "tracking" not in resumed.stderr, resumed.stderr
    from wandb_records import offline_runs, read_run

    runs = offline_runs(spec.study_dir)
    assert len(runs) == 2  # one run per trial, however many sessions it took
    for trial in plan(spec):
        run_id = read_run_file(trial.out_dir, spec.study_dir, trial.execution.tracking).run_id
        got = read_run(runs[run_id])
        assert [step for step, _ in got["history"]] == [1, 2]  # each epoch once
        want = _expected_steps(read_metrics(trial.out_dir))["ema_top1"]
        assert [(s, row["ema_top1"]) for s, row in got["history"]] == want
        assert got["summary"]["status"] == "finished" and got["exits"][-1] == 0


# --- a tracker outage -------------------------------------------------------------------------


@pytest.fixture
def server(tmp_path):
    from services import mlflow_server

    (tmp_path / "server").mkdir()
    yield from mlflow_server(tmp_path / "server")


def _server_runs(uri: str, study: str) -> dict[str, list]:
    """run name (the trial's key) -> its runs on the server, of the study's experiment."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(study)
    runs: dict[str, list] = {}
    for run in client.search_runs([experiment.experiment_id]):
        runs.setdefault(run.info.run_name, []).append(run)
    return runs


def _group(pgid: int) -> list[int]:
    """The processes of process group `pgid` (Linux's /proc)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # state, ppid, pgrp, ...
        except OSError:
            continue  # it exited meanwhile
        if int(fields[2]) == pgid:
            pids.append(int(stat.parent.name))
    return pids


def _stopped(pid: int) -> bool:
    """Whether every thread of `pid` is stopped (or gone)."""
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("t", "T", "Z", "X"):
            return False
    return True


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the driver and its workers are gone
        os.killpg(pgid, sig)


@contextlib.contextmanager
def _held_still(pgid: int):
    """Process group `pgid` (a driver and its workers) stopped, every thread of it (kill()
    only queues SIGSTOP, so wait until they are), and continued on exit."""
    _signal_group(pgid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 60
        while not all(_stopped(pid) for pid in _group(pgid)):
            assert time.monotonic() < deadline, "the driver's processes did not stop in 60 s"
            time.sleep(0.001)
        yield
    finally:
        _signal_group(pgid, signal.SIGCONT)


def _kill_while_run_open(study: Path, spec, server, cwd: Path, trial):
    """`optbench run STUDY`, the server killed while `trial`'s run is open on it and the trial
    has its last epoch still to train (once the run holds an epoch, if it does by then), then
    left down to the run's end; the run's completed process and what the trial's files said at
    the kill (tracker.json, and how many epochs metrics.jsonl held).

    The moment is read with the driver and its worker held still (SIGSTOP), so it still holds
    when the server dies: a trial tells its tracker to end only after metrics.jsonl has its
    last epoch, so a run that tracker.json records opened and not ended has its end, at least,
    still to write, and the trial trains on and ends while the server is down. Polling while
    it ran raced on a loaded machine: the trial could train its last epoch and its tracker end
    the run between the poll's look and the kill."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "optbench", "run", str(study)],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # its own process group: the driver and its workers
    )  # fmt: skip
    target, epochs = trial.execution.tracking, trial.config.epochs
    at_kill = missed = None
    while proc.poll() is None and at_kill is None and missed is None:
        # a cheap look first (nothing stopped), then the one that counts, held still
        if read_run_file(trial.out_dir, spec.study_dir, target).run_id is not None:
            with _held_still(proc.pid):
                held = read_run_file(trial.out_dir, spec.study_dir, target)
                trained = len(read_metrics(trial.out_dir, spec.study_dir, partial=True))
                # once it holds an epoch (what the next run must not log again), or on its
                # trial's last epoch at the latest
                last = trained == epochs - 1
                if held.ended is False and trained < epochs and (held.logged or last):
                    server.kill()
                    at_kill = (held, trained)
                elif held.ended or trained == epochs:
                    missed = (held, trained)  # the run opened after the trial's last epoch
        time.sleep(0.02)
    out, err = proc.communicate(timeout=900)
    assert at_kill is not None, f"no moment to kill the server at: {missed} (tracker.json, epochs)"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), at_kill


@pytest.mark.slow
def test_a_killed_mlflow_server_costs_one_line_per_trial_and_the_next_run_completes_the_runs(
    tmp_path, one_model, server
):
    # three trials of 2 epochs: as many epochs as the two trials of 3 this test trained before
    one_model |= {"epochs": 2, "executor": {"workers": 1}, "output": str(tmp_path / "results")}
    one_model["search"]["n_samples"] = 3
    one_model["tracking"] = {"kind": "mlflow", "uri": server.uri}
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(one_model))
    spec = parse_spec(one_model)
    trials = plan(spec)  # trained one after another (one worker), in this order
    target, epochs = trials[0].execution.tracking, trials[0].config.epochs

    # The server dies during the second trial: its worker imported mlflow for the first, so
    # its run opens in a few requests. The first trial's run opens only after that import (2 s
    # of CPU here), which can outlast its epochs and leave no moment to kill the server in.
    first, (at_kill, trained) = _kill_while_run_open(study, spec, server, tmp_path, trials[1])
    assert first.returncode == 0, first.stderr  # the trials finish: a tracker costs none
    warnings = first.stderr.strip().splitlines()
    assert len(warnings) == 2, first.stderr  # one line per trial the outage hit
    for trial, line in zip(trials[1:], warnings, strict=True):
        assert line.startswith(f"optbench: the mlflow run of trial {trial.key} is incomplete: ")
        assert line.endswith("the next `optbench run` completes it from the trial's files")
        assert f"the MLflow server at {server.uri} is not answering" in line, line
    held = [read_run_file(t.out_dir, spec.study_dir, target) for t in trials]
    assert held[0].logged == epochs and held[0].ended  # complete before the outage
    # the run killed mid-way keeps what it held: no epoch trained after the kill was logged
    assert held[1].run_id == at_kill.run_id and not held[1].ended
    assert at_kill.logged <= held[1].logged <= trained < epochs
    assert held[2].run_id is None  # the server was down when the third trial began

    server.start()
    second = run_again(study, tmp_path)
    assert second.returncode == 0 and second.stderr == "", second.stderr
    # the complete run is left alone: two runs completed, each once (below)
    assert "completed 2 mlflow run(s) that a tracker outage left incomplete" in second.stdout
    runs = _server_runs(server.uri, spec.name)
    assert sorted(runs) == sorted(t.key for t in trials)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=server.uri)
    for trial in trials:
        [run] = runs[trial.key]  # one run per trial, never two
        assert run.info.status == "FINISHED" and run.data.tags["optbench.status"] == "finished"
        result = json.loads((trial.out_dir / "result.json").read_text())
        assert float(run.data.tags["optbench.final_error"]) == result["final_error"]
        assert (
            run.data.tags["optbench.epochs_run"] == str(epochs)
            and run.data.tags["cell"] == trial.cell_id
        )
        for key, steps in _expected_steps(read_metrics(trial.out_dir)).items():
            got = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
            assert got == steps, key  # every epoch once
        held = read_run_file(trial.out_dir, spec.study_dir, target)
        assert held == (run.info.run_id, epochs, True)

    server.kill()  # a complete run is never written again: the server is not even asked
    third = run_again(study, tmp_path)
    assert third.returncode == 0 and third.stderr == "", third.stderr
    assert "nothing to run" in third.stdout and "completed" not in third.stdout


def test_a_report_run_whose_artifact_location_was_edited_to_lead_out_attaches_nothing(tmp_path):
    # MLflow copies a run's artifacts where its store's meta.yaml says; a received study folder
    # may say anywhere. The first report attaches in the study folder, the edited one nowhere.
    study_dir = tmp_path / "results" / "tiny"
    report_dir = tmp_path / "reports" / "tiny"
    report_dir.mkdir(parents=True)
    (report_dir / "index.html").write_text("<p>report</p>")
    tracking = Tracking(kind="mlflow").resolved(study_dir)
    assert tracking_mod.attach_report(tracking, study_dir, report_dir) is None
    [report_run] = _mlflow_runs(study_dir)["report"]
    run_id = report_run.info.run_id
    assert [a.path for a in _client(study_dir).list_artifacts(run_id)] == ["index.html"]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    [meta] = [p for p in (study_dir / "mlruns").rglob("meta.yaml") if p.parent.name == run_id]
    text = meta.read_text()
    before = report_run.info.artifact_uri
    assert before in text
    meta.write_text(text.replace(before, elsewhere.as_uri()))
    note = tracking_mod.attach_report(tracking, study_dir, report_dir)
    assert note is not None and note.startswith("optbench: mlflow: the report's files were not")
    assert elsewhere.as_uri() in note and "outside the study folder" in note
    assert not any(elsewhere.iterdir())

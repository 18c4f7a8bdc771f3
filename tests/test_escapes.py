"""Hostile but realistic input (issue 24): links planted in a study folder, crafted data and
result files, signals to the driver, endless numbers. Each time: nothing escapes the study
folder, nothing runs, and the user gets one true line."""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cli_inprocess import run_cli
from driver_process import driver_command, run_again, stoppable_study
from fifos import fifo_never_waited_on
from services import needs_extra
from test_faults import WritingExecutor, _finished_counts, _quiet, _valid_result_json

from optbench import safefs
from optbench.executors.protocol import JobEvent
from optbench.plan.trials import plan
from optbench.run.driver import run_study
from optbench.spec.schema import parse_spec
from optbench.trial.config import TrialResult
from optbench.trial.results import RESULT_FILE, write_result


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path below `root` with its bytes (None for folders), links not followed."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = p.read_bytes() if p.is_file() else None
    return out


def _finished(config) -> TrialResult:
    return TrialResult(status="finished", final_error=7.0, best_error=6.0, epochs=1, config=config)


# --- 1. links in the study folder -----------------------------------------------------------------


def test_safefs_refuses_a_link_in_any_folder_and_replaces_a_linked_file(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "a").mkdir(parents=True)
    outside.mkdir()
    (outside / "f").write_text("theirs")
    (root / "a" / "b").symlink_to(outside)
    target = root / "a" / "b" / "f"
    for act in (
        lambda: safefs.write_text(target, root, "ours"),
        lambda: safefs.read_bytes(target, root, 100),
        lambda: safefs.remove(target, root),
        lambda: safefs.make_dirs(root / "a" / "b" / "c", root),
        lambda: safefs.check(target, root),
    ):
        with pytest.raises(safefs.UnsafePath, match=r"a/b: a symbolic link"):
            act()
    assert _tree(outside) == {"f": b"theirs"}
    # a link as the last component: read refused, write replaces the link, remove removes it
    (root / "a" / "f").symlink_to(outside / "f")
    with pytest.raises(safefs.UnsafePath, match="symbolic link"):
        safefs.read_bytes(root / "a" / "f", root, 100)
    safefs.write_text(root / "a" / "f", root, "ours")
    assert not (root / "a" / "f").is_symlink() and (root / "a" / "f").read_text() == "ours"
    assert (outside / "f").read_text() == "theirs"


def test_safefs_reads_no_fifo_and_no_more_than_its_cap(tmp_path):
    os.mkfifo(tmp_path / "fifo")  # a plain open() for reading would wait for a writer forever
    with pytest.raises(safefs.UnsafePath, match="fifo: not a regular file"):
        safefs.read_bytes(tmp_path / "fifo", tmp_path, 100)
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(safefs.UnsafePath, match="larger than 100 bytes"):
        safefs.read_bytes(tmp_path / "big", tmp_path, 100)
    assert safefs.read_bytes(tmp_path / "missing", tmp_path, 100) is None
    assert safefs.read_bytes(tmp_path / "no" / "such", tmp_path, 100) is None


def _plant(spec, where: str, outside: Path) -> None:
    """Replace the study folder, its trials/ folder or the first trial's folder by a link to
    `outside`, which holds a result.json of that trial."""
    trial = plan(spec)[0]
    write_result(outside, _finished(trial.config))
    if where == "trial":
        link = trial.out_dir
    elif where == "trials":
        link = spec.study_dir / "trials"
        write_result(outside / trial.key, _finished(trial.config))
    else:
        link = spec.study_dir
        write_result(outside / "trials" / trial.key, _finished(trial.config))
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)


@pytest.mark.parametrize("where", ["trial", "trials", "study"])
def test_run_refuses_a_linked_folder_before_writing_anything(
    one_model, tmp_path, monkeypatch, capsys, where
):
    one_model["output"] = "results"
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(one_model))
    spec = parse_spec({**one_model, "output": str(tmp_path / "results")})
    outside = tmp_path / "outside"
    _plant(spec, where, outside)
    before_out, before_results = _tree(outside), _tree(tmp_path / "results")
    code, _, err = run_cli(["run", "study.yaml"], tmp_path, monkeypatch, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "a symbolic link" in err
    assert _tree(outside) == before_out and _tree(tmp_path / "results") == before_results
    code, _, err = run_cli(["status", "study.yaml", "--trials"], tmp_path, monkeypatch, capsys)
    assert code == 2 and "a symbolic link" in err and len(err.strip().splitlines()) == 1


class LinkingExecutor(WritingExecutor):
    """Its 'worker' replaces the trial's folder by a link to `outside` (which holds a valid
    result of that trial) while the trial runs."""

    def __init__(self, outside: Path):
        super().__init__()
        self.outside = outside

    def poll(self, timeout):
        if not self.queue:
            return []
        job = self.queue.pop(0)
        write_result(self.outside, _finished(job.config))
        if job.out_dir.exists():
            job.out_dir.rmdir()
        job.out_dir.parent.mkdir(parents=True, exist_ok=True)
        job.out_dir.symlink_to(self.outside, target_is_directory=True)
        return [JobEvent(job.key, "ended")]


@pytest.mark.slow
def test_a_trial_folder_linked_while_running_fails_that_trial_in_one_line(one_model, tmp_path):
    one_model["executor"] = {"retries": 0}
    spec = parse_spec(one_model)
    outside = tmp_path / "outside"
    progress = run_study(spec, LinkingExecutor(outside), console=_quiet(), live=False)
    (item,) = progress.trials
    assert item.status == "failed"
    message = item.record.user_attrs["message"]
    assert "a symbolic link" in message and str(item.trial.out_dir) in message
    assert "\n" not in message
    assert sorted(_tree(outside)) == [RESULT_FILE]  # nothing deleted or added there


def test_a_worker_writes_nothing_through_a_linked_folder(one_model, tmp_path):
    from optbench.train.run_trial import run_trial

    spec = parse_spec(one_model)
    trial = plan(spec)[0]
    outside = tmp_path / "outside"
    outside.mkdir()
    (spec.study_dir / "trials").mkdir(parents=True)
    (spec.study_dir / "trials" / trial.cell_id).symlink_to(outside, target_is_directory=True)
    with pytest.raises(safefs.UnsafePath, match=f"{trial.cell_id}: a symbolic link"):
        run_trial(trial.config, trial.out_dir, resume=True, root=trial.job.root)
    assert _tree(outside) == {}


def test_a_population_writes_nothing_through_a_linked_member_folder(one_model, tmp_path):
    from optbench.plan.trials import jobs
    from optbench.train.run_trial import run_job
    from optbench.trial.jobs import PopulationJob

    one_model["search"]["n_samples"] = 2
    one_model["executor"] = {"population": 2}
    spec = parse_spec(one_model)
    trials = plan(spec)
    (job,) = jobs(trials, {t.key: 1 for t in trials}, spec.executor.population)
    assert isinstance(job, PopulationJob)
    outside = tmp_path / "outside"
    outside.mkdir()
    linked = job.members[1].out_dir
    linked.parent.mkdir(parents=True)
    linked.symlink_to(outside, target_is_directory=True)
    with pytest.raises(safefs.UnsafePath) as refused:
        run_job(job, "cpu")
    assert str(linked) in str(refused.value) and "a symbolic link" in str(refused.value)
    assert "\n" not in str(refused.value)
    assert _tree(outside) == {}
    assert not (job.members[0].out_dir / RESULT_FILE).exists()  # refused before any write


def _plant_at(path: Path, kind: str, outside: Path) -> None:
    """A FIFO, a folder or a link to the regular file `outside` at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        outside.write_text("theirs")
        path.symlink_to(outside)


@pytest.mark.parametrize("kind", ["fifo", "folder", "link"])
@pytest.mark.parametrize("lock", [".lock", ".workers.lock"])
def test_a_lock_file_that_is_not_a_regular_file_is_refused_in_one_line(
    one_model, tmp_path, monkeypatch, capsys, lock, kind
):
    one_model["output"] = "results"
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(one_model))
    study_dir = tmp_path / "results" / one_model["name"]
    _plant_at(study_dir / lock, kind, tmp_path / "outside")
    code, _, err = run_cli(["run", "study.yaml"], tmp_path, monkeypatch, capsys)
    says = "a symbolic link" if kind == "link" else "not a regular file"
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{Path('results', one_model['name'], lock)}: {says}" in err
    assert not (study_dir / "spec.yaml").exists() and not (study_dir / "study.db").exists()
    assert kind != "link" or (tmp_path / "outside").read_text() == "theirs"


def test_status_never_waits_on_a_fifo_in_place_of_the_driver_lock(
    one_model, tmp_path, monkeypatch, capsys
):
    one_model["output"] = "results"
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(one_model))
    with fifo_never_waited_on(tmp_path / "results" / one_model["name"] / ".lock"):
        code, _, err = run_cli(["status", "study.yaml"], tmp_path, monkeypatch, capsys)
    assert code == 0, err


# --- 3. crafted result files ------------------------------------------------------------------------


FP = "0123456789abcdef"  # a code fingerprint of the right form
FP_KEY = {"code_fingerprint": FP}
CRAFTED_RESULTS = {
    "a formula as digest": {"digest": '=HYPERLINK("http://x","y")'},
    "a digest of the wrong length": {"digest": "ab" * 16},
    "a huge device string": {"device": "x" * 10_000},
    "a huge versions map": {"versions": {str(i): "1" for i in range(1000)}},
    "a negative wall time": {"wall_s": -1.0},
    "threads zero": {"threads": 0},
    "another schedule length": {"epochs": 7},
    "epochs_run beyond epochs": {"epochs_run": 9},
    "an unknown reported metric": {"reported": "=1+1"},
    # strictly typed and capped as docs/outputs.md says (issue 32)
    "a string for an error": {"final_error": "5.0"},
    "a switch for a count": {"epochs_run": True},
    "a float for a count": {"threads": 2.0},
    "a huge provenance version": {"provenance": {"version": "v" * 200_000, "code_fingerprint": FP}},
    "a provenance commit of markup": {"provenance": {"version": "1", "commit": "[/]", **FP_KEY}},
    "a provenance fingerprint of markup": {"provenance": {"version": "1", "code_fingerprint": "x"}},
}


@pytest.mark.slow
@pytest.mark.parametrize("name", CRAFTED_RESULTS)
def test_a_crafted_result_field_is_a_failed_attempt_naming_it(one_model, name):
    one_model["executor"] = {"retries": 0}
    spec = parse_spec(one_model)
    config = plan(spec)[0].config
    payload = _valid_result_json(config, **CRAFTED_RESULTS[name])
    (item,) = run_study(spec, WritingExecutor(payload), console=_quiet(), live=False).trials
    assert item.status == "failed"
    message = item.record.user_attrs["message"]
    assert "not a valid result" in message and next(iter(CRAFTED_RESULTS[name])) in message


@pytest.mark.slow
def test_a_crafted_timing_keeps_its_result_and_status_and_report_say_so(
    one_model, tmp_path, monkeypatch, capsys
):
    """A timing that is not one (issue 68), in result.json or edited into the database later:
    the result is recorded (its error counts), `status` and `report` end well and say so."""
    import sqlite3

    (tmp_path / "study.yaml").write_text(yaml.safe_dump(one_model))
    spec = parse_spec(one_model)
    payload = _valid_result_json(plan(spec)[0].config, timing="soon")
    (item,) = run_study(spec, WritingExecutor(payload), console=_quiet(), live=False).trials
    assert item.status == "finished" and item.record.value == 7.0
    note = item.record.user_attrs["timing_note"]
    assert note.endswith("result.json: timing: not an object of seconds per part, read as absent")
    label = "timing vit_p_w64_16px/adamw/e1: 1 result(s) hold a timing that is not one"
    code, out, err = run_cli(["status", "study.yaml"], tmp_path, monkeypatch, capsys)
    assert code == 0 and label in out, err
    code, out, err = run_cli(["report", "study.yaml"], tmp_path, monkeypatch, capsys)
    assert code == 0, err
    page = (tmp_path / "reports" / "tiny" / "index.html").read_text()
    assert "1 result(s) hold a timing that is not one" in page

    # a shared database whose copy of a timing was edited: text, nested junk, NaN, negative
    database = sqlite3.connect(spec.study_dir / "study.db")
    database.execute("DELETE FROM trial_user_attributes WHERE key = 'timing_note'")
    database.execute(
        "INSERT INTO trial_user_attributes (trial_id, key, value_json) SELECT trial_id, "
        "'timing', '{}' FROM trial_user_attributes WHERE key = 'final_error'"
    )
    for junk, why in [
        ('{"epochs": "soon"}', "timing.epochs: Input should be a valid number"),
        ('{"epochs": {"a": [1]}}', "timing.epochs: Input should be a valid number"),
        ('{"epochs": NaN}', "timing.epochs: Input should be a finite number"),
        ('{"epochs": -5.0}', "timing.epochs: Input should be greater than or equal to 0"),
    ]:
        database.execute(
            "UPDATE trial_user_attributes SET value_json = ? WHERE key = 'timing'", (junk,)
        )
        database.commit()
        code, out, err = run_cli(["status", "study.yaml"], tmp_path, monkeypatch, capsys)
        assert code == 0 and f"{label}, read as absent" in out and why in out, (junk, out, err)
        code, out, err = run_cli(["report", "study.yaml"], tmp_path, monkeypatch, capsys)
        assert code == 0 and "Traceback" not in err, (junk, err)
        rows = list(csv.DictReader((tmp_path / "reports" / "tiny" / "trials.csv").open()))
        assert rows[0]["outside_epochs_s"] == "" and why in rows[0]["timing_note"], junk
    database.close()


def test_a_failure_message_is_kept_to_its_cap(tiny_dict):
    from optbench.trial.config import MAX_MESSAGE

    config = plan(parse_spec(tiny_dict))[0].config
    result = TrialResult(status="failed", epochs=1, config=config, message="x" * 10**6)
    assert len(result.message) == MAX_MESSAGE


BAD_METRICS = {
    "NaN": '{"epoch": 1, "val_error": NaN}',
    "Infinity": '{"epoch": 1, "epoch_s": Infinity}',
    "not a percentage": '{"epoch": 1, "val_error": 250}',
    "a string for seconds": '{"epoch": 1, "epoch_s": "soon"}',
    "a negative lr": '{"epoch": 1, "lr": -1}',
    "a nested object": '{"epoch": 1, "x": {"a": 1}}',
    "epoch zero": '{"epoch": 0}',
    "a long key": '{"epoch": 1, "' + "k" * 100 + '": 1}',
    "nested past the parser": "[" * 200_000,
}


@pytest.mark.parametrize("name", BAD_METRICS)
def test_a_crafted_metrics_line_is_refused_by_both_readers(tmp_path, name):
    from optbench.run.progress import read_trial_epochs
    from optbench.trial.results import InvalidResultFile, read_metrics

    good = '{"epoch": 1, "val_error": 50.0, "epoch_s": 2.0, "note": "ok"}'
    (tmp_path / "metrics.jsonl").write_text(good + "\n" + BAD_METRICS[name] + "\n")
    with pytest.raises(InvalidResultFile, match="line 2"):
        read_metrics(tmp_path)
    assert read_trial_epochs(tmp_path).done == 1  # the view stops before the bad line


def test_no_csv_cell_starts_a_formula(tmp_path):
    import pandas as pd

    from optbench.report.trials_file import csv_cell, write_trials

    frame = pd.DataFrame(
        {
            "message": ["=HYPERLINK(1)", "+1+2", "-x", "@SUM(A1)", "\tx", "fine", "-1.5"],
            "final_error": [-1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
        }
    )
    write_trials(frame, tmp_path)
    with open(tmp_path / "trials.csv", newline="") as f:
        header, *rows = csv.reader(f)
    message, error = header.index("message"), header.index("final_error")
    assert [r[message] for r in rows] == [
        "'=HYPERLINK(1)",
        "'+1+2",
        "'-x",
        "'@SUM(A1)",
        "'\tx",
        "fine",
        "-1.5",
    ]
    assert rows[0][error] == "-1.5"  # numbers stay numbers
    assert csv_cell("\r=1") == "'\r=1" and csv_cell(-2.0) == -2.0


# --- data from files is shown as text, never as rich markup (issue 32) -------------------------------

MARKUP = "[/] [red]x[/red] :smile:"  # a MarkupError, a style and an emoji, were they markup


@pytest.mark.slow
def test_a_recorded_device_name_of_markup_is_shown_as_text(
    one_model, tmp_path, monkeypatch, capsys
):
    spec = parse_spec(one_model)
    config = plan(spec)[0].config
    speed = {"images_per_s": 100.0, "wall_s": 10.0, "epochs_run": 1}
    payload = _valid_result_json(config, device=f"cpu: {MARKUP}", **speed)
    run_study(spec, WritingExecutor(payload), console=_quiet(), live=False)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(one_model))
    for command in (["run", "study.yaml", "--dry-run"], ["status", "study.yaml", "--trials"]):
        code, out, err = run_cli(command, tmp_path, monkeypatch, capsys)
        assert code == 0 and "Traceback" not in err, err
    code, out, _ = run_cli(["run", "study.yaml", "--dry-run"], tmp_path, monkeypatch, capsys)
    assert MARKUP in " ".join(out.split())  # the plan's caption names the device as recorded


def test_a_path_of_markup_is_shown_as_text(one_model, tmp_path, monkeypatch, capsys):
    one_model["dataset"] = {"name": "cifar10", "root": str(tmp_path / MARKUP)}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(one_model))
    code, out, err = run_cli(["run", "study.yaml", "--dry-run"], tmp_path, monkeypatch, capsys)
    assert code == 0 and "Traceback" not in err, err
    assert f"dataset.root: {tmp_path / MARKUP}/cifar-10-batches-py is not a folder" in out


def test_a_text_table_is_text_in_any_console():
    import io

    from rich.console import Console

    from optbench.run.console import TextTable

    table = TextTable(title=MARKUP)
    table.add_column("a")
    table.add_row(MARKUP)
    table.caption = MARKUP
    table.add_caption(MARKUP)
    out = io.StringIO()
    Console(file=out, width=200).print(table)  # a caller's console, markup and emoji on
    assert out.getvalue().count(MARKUP) == 4, out.getvalue()


# --- 4. signals to the driver ---------------------------------------------------------------------

# The driver under test: `optbench run` whose executor starts every job and never ends one (so
# the signal always comes while trials run), and that says so in a file when it has started.
HANGING_DRIVER = """
import signal, sys
from pathlib import Path
import optbench.executors as executors
from optbench.executors.protocol import JobEvent
signal.signal(signal.SIGINT, signal.default_int_handler)  # a shell's background job ignores it

class Hanging:
    jobs_outlive_driver = False
    def __init__(self): self.started = []
    def settle(self, jobs): return []
    def submit(self, jobs):
        self.started = [JobEvent(j.key, "running") for j in jobs]
        return "hanging"
    def poll(self, timeout):
        events, self.started = self.started, []
        if events: Path("started").write_text("yes")
        return events
    def close(self, cancel): pass

executors.make_executor = lambda spec, **kw: Hanging()
from optbench.cli.app import main
main()
"""


def _stop_the_driver(tmp_path: Path, study: Path, signum: int):
    folder = tmp_path / signal.Signals(signum).name
    folder.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", HANGING_DRIVER, "run", str(study)],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (folder / "started").exists() and proc.poll() is None:
        assert time.monotonic() < deadline, "the driver never started its trials"
        time.sleep(0.2)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def _records(spec) -> list[tuple]:
    import optuna

    storage = optuna.storages.RDBStorage(spec.storage_url)
    rows = []
    for s in optuna.get_all_study_summaries(storage):
        for t in optuna.load_study(study_name=s.study_name, storage=storage).trials:
            rows.append((t.user_attrs["key"], t.state.name, t.user_attrs.get("status")))
    return sorted(rows)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_the_driver_as_ctrl_c_does(one_model, tmp_path, signum):
    one_model["search"]["n_samples"] = 2
    records, replies = {}, {}
    for sent in (signal.SIGINT, signum):
        data = {**one_model, "output": str(tmp_path / f"out-{sent}")}
        study = tmp_path / f"study-{sent}.yaml"
        study.write_text(yaml.safe_dump(data))
        code, out, err = _stop_the_driver(tmp_path, study, sent)
        assert code == 128 + sent, err
        assert "stopped: 0 trial(s) recorded, 2 left; run the same command to resume" in out
        assert "Traceback" not in err, err
        records[sent], replies[sent] = _records(parse_spec(data)), out
    assert records[signum] == records[signal.SIGINT]  # the same records as after Ctrl-C


def _first_trial_started(study_dir: Path) -> bool:
    """Whether a worker has begun a trial (it writes the trial's metrics file as it starts)."""
    return any((study_dir / "trials").rglob("metrics.jsonl"))


BURST = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


@pytest.mark.slow
def test_three_stop_signals_at_once_stop_the_driver_cleanly_and_it_resumes(one_model, tmp_path):
    """SIGTERM, SIGHUP and SIGINT within 0.3 s of each other to a real driver mid-trial: it
    stops as on the first (the workers checkpoint, the stop line, 128 + its number) without
    being killed by a later one, and the same command completes the study."""
    study, spec = stoppable_study(one_model, tmp_path)
    driver = subprocess.Popen(
        driver_command(study), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while not _first_trial_started(spec.study_dir):
        assert driver.poll() is None, driver.communicate()
        assert time.monotonic() < deadline, "no trial started"
        time.sleep(0.1)
    for signum in BURST:
        driver.send_signal(signum)
        time.sleep(0.1)
    out, err = driver.communicate(timeout=120)
    assert driver.returncode == 128 + BURST[0], (driver.returncode, out, err)
    assert re.search(r"stopped: \d trial\(s\) recorded, \d left; run the same command", out), out
    assert "Traceback" not in err, err
    resumed = run_again(study, tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    finished = _finished_counts(spec)
    assert len(finished) == 2 and set(finished.values()) == {1}


# --- 5. caps ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, says",
    [
        ("models: " + "[" * 5000 + "]" * 5000, "nested deeper than"),
        ("search: " + "{a: " * 5000 + "1" + "}" * 5000, "nested deeper than"),
        ("models:\n" + "".join("  " * i + "- \n" for i in range(300)), "nested deeper than"),
    ],
    ids=["flow lists", "flow maps", "block lists"],
)
def test_deeply_nested_yaml_is_one_line_exit_2(tmp_path, monkeypatch, capsys, text, says):
    (tmp_path / "study.yaml").write_text(text)
    code, _, err = run_cli(["run", "study.yaml", "--dry-run"], tmp_path, monkeypatch, capsys)
    assert code == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1, err
    assert says in err and sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml"]


@pytest.mark.parametrize("epochs", ["10001", "[50, 100000]"], ids=["10001", "list"])
def test_an_endless_schedule_is_refused(tiny_dict, tmp_path, monkeypatch, capsys, epochs):
    text = yaml.safe_dump({k: v for k, v in tiny_dict.items() if k != "epochs"})
    (tmp_path / "study.yaml").write_text(text + f"epochs: {epochs}\n")
    code, _, err = run_cli(["run", "study.yaml", "--dry-run"], tmp_path, monkeypatch, capsys)
    assert code == 2 and "epochs" in err and "above the cap of 10000" in err, err
    assert len(err.strip().splitlines()) == 1


def test_tensorboard_writer_refuses_a_linked_trial_folder(tmp_path):
    needs_extra("tensorboard", "tensorboard", "tensorboard")
    from optbench.trackers.tensorboard import EpochEvents

    outside = tmp_path / "outside"
    outside.mkdir()
    trial = tmp_path / "study" / "trials" / "t"
    trial.parent.mkdir(parents=True)
    trial.symlink_to(outside, target_is_directory=True)
    with pytest.raises(safefs.UnsafePath, match="symbolic link"):
        EpochEvents(trial, tmp_path / "study")
    assert list(outside.iterdir()) == []  # no event file written through the link
    real = tmp_path / "study" / "trials" / "u"
    events = EpochEvents(real, tmp_path / "study")  # a real folder is written as before
    events.write({"epoch": 1, "train_loss": 2.5})
    events.close()
    assert any(p.name.startswith("events.out.tfevents") for p in real.iterdir())

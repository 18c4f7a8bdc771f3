"""Reading never runs a study's code: `status`, `cancel`, `report` (of a study file or of
`--results`), `compare` and the Python API's readers read a study whose `imports:` names a
module on the path that writes a marker file when imported, and the standard library's `this`
(which prints when imported), without either running; only `run` imports them (issue 68).
The reading tests share one such study (its results recorded by a driver that trains nothing);
`run`'s has a module of its own (sys.modules and timm's registry live as long as the
process)."""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from pathlib import Path

import pandas as pd
import pytest
import yaml
from cli_inprocess import ONE_MODEL_STUDY
from rich.console import Console
from writing_driver import WritingExecutor

import optbench
from optbench.run.driver import run_study
from optbench.spec.schema import parse_spec

ZEN = "Beautiful is better than ugly"  # what importing `this` prints

MARKER_MODULE = '''
"""Writes its marker when imported, and registers a model (as a lab's module would)."""
from pathlib import Path

Path({marker!r}).write_text("imported")

from timm.models import register_model
from torch import nn


@register_model
def {model}(pretrained=False, num_classes=10, in_chans=3, **kwargs):
    return nn.Sequential(
        nn.Conv2d(in_chans, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, num_classes)
    )
'''


class Sent:
    """A study someone sent: its file, its results folder and the marker its module writes."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        tag = uuid.uuid4().hex[:10]
        self.module, self.model = f"sender_{tag}", f"sender_{tag}_net"
        code = tmp_path / "code"
        code.mkdir(parents=True)
        self.marker = tmp_path / "MARKER"
        (code / f"{self.module}.py").write_text(
            MARKER_MODULE.format(marker=str(self.marker), model=self.model)
        )
        # on the path, as a sender's module beside the folder is (docs/extending.md's export)
        monkeypatch.syspath_prepend(str(code))
        path = os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")])
        monkeypatch.setenv("PYTHONPATH", path)
        self.root = tmp_path / "work"
        data = {
            **ONE_MODEL_STUDY,
            "name": "sent",
            "imports": [self.module, "this"],
            "models": [self.model, *ONE_MODEL_STUDY["models"]],
            "output": str(self.root / "results"),
        }
        self.study = self.root / "study.yaml"
        self.root.mkdir()
        self.study.write_text(yaml.safe_dump(data))
        # recorded without importing anything: the driver's executor only writes result files
        quiet = Console(file=open(os.devnull, "w"))  # noqa: SIM115 - closed with the process
        run_study(parse_spec(data, self.study), WritingExecutor(), console=quiet, live=False)
        self.results = self.root / "results"
        assert (self.results / "sent" / "spec.yaml").is_file()
        assert not self.marker.exists() and self.module not in sys.modules

        self.this_imported = "this" in sys.modules  # by an earlier test's `run`

    def assert_not_run(self, *outputs: str) -> None:
        assert not self.marker.exists(), f"{self.module} was imported"
        assert self.module not in sys.modules
        assert all(ZEN not in text for text in outputs), "`this` was imported"
        assert ("this" in sys.modules) == self.this_imported, "`this` was imported"


@pytest.fixture(scope="module")
def sent(tmp_path_factory) -> Sent:
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield Sent(tmp_path_factory.mktemp("sent"), monkeypatch)


@pytest.mark.parametrize(
    "args",
    [
        ["status", "{study}"],
        ["status", "{results}/sent/spec.yaml", "--trials"],
        ["cancel", "{study}"],
    ],
    ids=["status", "status of results", "cancel"],
)
def test_status_and_cancel_never_import_the_studys_modules(sent, cli, args):
    args = [a.format(study=sent.study, results=sent.results) for a in args]
    code, out, err = cli(*args)
    assert code == 0, err
    sent.assert_not_run(out, err)
    if args[0] == "status":
        assert sent.model in out and "finished" in out


@pytest.mark.slow  # reads the study's trials twice (over half a second)
def test_the_apis_readers_never_import_the_studys_modules(sent, capsys):
    spec = optbench.load_study(sent.study)
    assert list(spec.imports) == [sent.module, "this"]
    trials = optbench.load_trials(sent.results / "sent" / "spec.yaml")
    assert set(trials["model"]) == {sent.model, *ONE_MODEL_STUDY["models"]}
    assert (trials["status"] == "finished").all()
    optbench.load_trials(sent.study, epochs=True)
    out = capsys.readouterr()
    sent.assert_not_run(out.out, out.err)


@pytest.mark.slow  # renders two reports
def test_report_and_compare_never_import_the_studys_modules(sent, cli):
    code, out, err = cli("report", "--results", str(sent.results), "--out", "received")
    assert code == 0, err
    code2, out2, err2 = cli("report", str(sent.study), "--out", "own", "--complexity")
    assert code2 == 0, err2
    code3, out3, err3 = cli("compare", "received/sent", "own/sent")
    assert code3 == 0, err3
    sent.assert_not_run(out, err, out2, err2, out3, err3)
    assert "only in the run 0, only in the reference 0" in out3  # every trial matched
    assert f"{sent.model}/adamw/1" in out3
    page = (Path("own") / "sent" / "index.html").read_text()
    # what the module would tell (its model's size) is shown as not counted, never run
    assert f"{sent.model}: complexity not counted: a model of the study" in page
    summary = optbench.load_summary(sent.study)
    assert {cell["model"] for cell in summary["cells"]} >= {sent.model}
    sent.assert_not_run()


@pytest.mark.slow  # renders a report
def test_a_sent_results_folder_is_read_where_it_lies_whatever_output_its_spec_names(
    sent, cli, tmp_path
):
    # the sender's spec.yaml names their own folder (or any other); the report reads the one
    # it was given, and writes nothing at the other
    inbox = tmp_path / "inbox"
    shutil.copytree(sent.results, inbox)
    saved = inbox / "sent" / "spec.yaml"
    data = yaml.safe_load(saved.read_text())
    elsewhere = tmp_path / "sender's results"
    data["output"] = str(elsewhere)
    saved.write_text(yaml.safe_dump(data))
    code, out, err = cli("report", "--results", str(inbox), "--out", "inbox_report")
    assert code == 0, err
    read = pd.read_csv(tmp_path / "inbox_report" / "sent" / "trials.csv")
    recorded = optbench.load_trials(sent.study)
    assert len(read) == len(recorded) > 0 and (read["status"] == "finished").all()
    assert not elsewhere.exists()
    sent.assert_not_run(out, err)


def test_a_study_without_imports_still_refuses_an_unknown_model(tmp_path, cli):
    data = {**ONE_MODEL_STUDY, "models": ["vit_p_w64_16pz"], "output": str(tmp_path / "r")}
    (tmp_path / "typo.yaml").write_text(yaml.safe_dump(data))
    code, out, err = cli("status", "typo.yaml")
    assert code == 2 and "unknown model 'vit_p_w64_16pz'" in err


@pytest.mark.slow  # counts its model's flops for the plan
def test_run_is_what_imports_them(tmp_path, monkeypatch, cli):
    """The marker works: the one command that trains the study's code runs it."""
    own = Sent(tmp_path / "own", monkeypatch)
    code, out, err = cli("run", str(own.study), "--dry-run")
    assert code == 0, err
    assert own.marker.exists() and own.module in sys.modules

"""Your question, end to end (issue 54's first acceptance): a model of your own, registered by a
module outside the repository (written here into a folder put on the path), trained with Lion and
with AdamW through the local executor; the declared comparison of the two is decided at its first
look, the study stops there and the report names it; the same model and optimizers train as a
population; a driver killed at that look resumes, by the same command, to the same decision; and
results of another version of the module are told apart by their provenance and by `optbench
compare`. The SLURM run of the same study is
tests/slurm/test_slurm_your_question.py (tests/your_question.py: the module and the study)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from driver_process import signal_at
from test_decide import COMPUTE, LOOK, _finished_attempts, _looks, _run, _start, _study_file
from your_question import (
    COMPARISON,
    MODEL,
    MODULE_NAME,
    SAID,
    module_digest,
    put_on_path,
    write_module,
    your_study,
)

from optbench.plan.trials import plan
from optbench.spec.schema import load_spec
from optbench.store.database import Store
from optbench.trial.results import read_result
from optbench.user_code import source_digest

pytestmark = pytest.mark.slow  # each test trains and runs drivers

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def user_code(tmp_path_factory):
    """The module, written once into a folder outside the repository, on the path."""
    folder = tmp_path_factory.mktemp("your-code")
    assert not folder.is_relative_to(REPO)
    write_module(folder)
    with pytest.MonkeyPatch.context() as monkeypatch:
        put_on_path(monkeypatch, folder)
        yield folder


def _results(study_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(study_dir.rglob("result.json"))]


def test_your_model_and_lion_decide_through_the_local_executor_and_stop(user_code, tmp_path, cli):
    data = your_study(tmp_path / "results", executor={"kind": "local", "workers": 2})
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(data))
    code, out, err = cli("run", "study.yaml")
    assert code == 0, err
    said = " ".join(out.split())
    assert f"look 1 (3 of at most 6 seeds): {SAID}" in said, said
    assert f"{SAID}: holds after 3 of at most 6 seeds" in said, said

    spec = load_spec(tmp_path / "study.yaml")
    (look,) = Store(spec, create=False).looks()  # decided at the first look: no second
    assert (look["claim"], look["kind"], look["k"], look["n"]) == (COMPARISON, "d", 0, 3)
    assert look["outcome"] == "holds"
    # trained: the first look's 3 seeds of both cells, in the pool's worker processes, which
    # imported the module themselves (its digest in each result's provenance)
    results = _results(tmp_path / "results" / "your_question")
    import your_question_models

    assert sorted((r["config"]["optimizer"], r["config"]["seed"]) for r in results) == [
        (optimizer, seed) for optimizer in ("adamw", "lion") for seed in (0, 1, 2)
    ]
    for result in results:
        assert result["status"] == "finished" and result["config"]["model"] == MODEL
        assert result["config"]["imports"] == [MODULE_NAME]
        assert result["provenance"]["user_code"] == {
            MODULE_NAME: {"version": "1.0", "digest": source_digest(your_question_models)}
        }
    stored = [s for s in Store(spec, create=False).read(plan(spec)) if s.status == "finished"]
    assert len(stored) == 6 and {s.attempts for s in stored} == {1}
    code, out, _ = cli("run", "study.yaml")
    assert code == 0 and "nothing to run" in out, out

    code, _, err = cli("report", "study.yaml", "--out", str(tmp_path / "reports"))
    assert code == 0, err
    report = tmp_path / "reports" / "your_question"
    summary = json.loads((report / "summary.json").read_text())
    (row,) = [r for r in summary["claims"] if r["claim"] == COMPARISON]
    assert (row["kind"], row["verdict"], row["looks"]) == ("d", "holds", 1)
    page = (report / "index.html").read_text()
    assert f"{COMPARISON}: {MODEL} lion 2ep vs {MODEL} adamw 2ep" in page


def test_your_model_and_lion_train_as_a_population(user_code, tmp_path, cli):
    # the members of a population are a cell's (lr, wd) samples at one seed: three of each
    # optimizer, batched into one program per cell in a pool worker that imports the module
    data = your_study(tmp_path / "results", seeds=[0])
    data["search"]["n_samples"] = 3
    data["executor"] = {"kind": "local", "workers": 1, "population": 3}
    del data["comparisons"], data["decide"]
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(data))
    code, _, err = cli("run", "study.yaml")
    assert code == 0, err
    results = _results(tmp_path / "results" / "your_question")
    import your_question_models

    assert Counter(r["config"]["optimizer"] for r in results) == {"lion": 3, "adamw": 3}
    for result in results:
        assert result["status"] == "finished" and result["config"]["model"] == MODEL
        assert result["execution"]["population"] == 3
        assert result["provenance"]["user_code"] == {
            MODULE_NAME: {"version": "1.0", "digest": source_digest(your_question_models)}
        }
    lion = sorted(r["final_error"] for r in results if r["config"]["optimizer"] == "lion")
    adamw = sorted(r["final_error"] for r in results if r["config"]["optimizer"] == "adamw")
    assert lion[-1] < 50 < adamw[0]  # Lion's members learned; AdamW's tiny steps did not


def _digests(study: Path) -> dict[str, str]:
    """The weight digest of each finished trial of the study at `study`, by the trial's key."""
    spec = load_spec(study)
    done = [s for s in Store(spec, create=False).read(plan(spec)) if s.status == "finished"]
    return {s.trial.key: read_result(s.trial.out_dir).digest for s in done}


# where the driver is killed: (the hook, the looks recorded when it stops)
KILLS = {
    "while the look is computed": (signal_at(COMPUTE, 1, signal.SIGKILL), 0),
    "before the look is recorded": (signal_at(LOOK, 1, signal.SIGKILL), 0),
    "after the look is recorded": (signal_at(LOOK, 1, signal.SIGKILL, after=True), 1),
}


def test_a_driver_killed_at_the_declared_comparisons_look_resumes_to_the_same_decision(
    user_code, tmp_path
):
    # One study killed at each moment in turn, each run from the state the last one left (the
    # trials trained and recorded, then the look recorded: the states a fresh study killed
    # there reaches), then resumed by the same command; the reference runs uninterrupted
    # meanwhile (every process on one thread: tests/conftest.py). Every look recorded, killed
    # or not, is the reference's.
    reference = _study_file(tmp_path / "reference", your_study(None))
    uninterrupted = _start(reference, reference.parent / "run.log")
    path = _study_file(tmp_path / "killed", your_study(None))
    states = []
    for where, (hook, recorded) in KILLS.items():
        killed = _run(path, hook=hook)
        assert killed.returncode == -signal.SIGKILL, (where, killed.stderr)
        assert Counter(_finished_attempts(path).values()) == Counter({1: 6}), where
        states.append((where, _looks(path)))
        assert len(states[-1][1]) == recorded, where
    again = _run(path)  # the same command
    assert again.returncode == 0, again.stderr
    assert f"{SAID}: holds after 3 of at most 6 seeds" in " ".join(again.stdout.split())

    assert uninterrupted.wait(timeout=900) == 0, (reference.parent / "run.log").read_text()
    expected, digests = _looks(reference), _digests(reference)
    assert [(look[1], look[2], look[-1]) for look in expected] == [(0, 3, "holds")]
    assert len(digests) == 6
    for where, looks in states:
        assert looks == expected[: len(looks)], where  # a killed run's look is the reference's
    assert _looks(path) == expected  # the same decision at the same look, once
    assert _digests(path) == digests  # the same 6 trials, no seed beyond the look
    assert Counter(_finished_attempts(path).values()) == Counter({1: 6})


def _optbench(env: dict, *args: str) -> subprocess.Popen:
    """`optbench ARGS` started in a process of its own, which imports the study's module afresh
    (this process may hold another version of it)."""
    command = [sys.executable, "-m", "optbench", *args]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def test_results_of_another_version_of_your_module_are_told_apart(tmp_path, monkeypatch, cli):
    # its own folder: this test edits the module, which the other tests have imported. Each
    # version's run imports it in a process of its own; a report never imports a study's code
    # (run/preflight.py), so it runs here, the first version's while the second's trains.
    folder = tmp_path / "code"
    module = write_module(folder, version="1.0", width=16)
    put_on_path(monkeypatch, folder)
    env = dict(os.environ)
    fingerprints, studies = {}, {}
    for version, width in (("1.0", 16), ("1.1", 12)):
        write_module(folder, version=version, width=width)
        data = your_study(tmp_path / version / "results", seeds=[0], optimizers=["lion"])
        del data["comparisons"], data["decide"]
        studies[version] = _study_file(tmp_path / version, data)
        run = _optbench(env, "run", str(studies[version]), "--executor", "debug")
        if version == "1.1":
            _report(cli, studies["1.0"], tmp_path / "1.0" / "reports")
        _, err = run.communicate(timeout=600)
        assert run.returncode == 0, err
        (result,) = _results(tmp_path / version / "results")
        recorded = result["provenance"]["user_code"][MODULE_NAME]
        assert recorded["version"] == version
        assert recorded["digest"] == module_digest(module)
        fingerprints[version] = result["provenance"]["code_fingerprint"]
    _report(cli, studies["1.1"], tmp_path / "1.1" / "reports")
    assert fingerprints["1.0"] != fingerprints["1.1"]
    run, reference = (tmp_path / v / "reports" / "your_question" for v in ("1.1", "1.0"))
    code, out, err = cli("compare", str(run), str(reference))
    assert code == 0, err
    assert (
        f"the training code ({fingerprints['1.1']} here; {fingerprints['1.0']} in the reference)"
        in out
    ), out
    assert f"user module {MODULE_NAME}: version 1.1 here; 1.0 in the reference" in out, out


def _report(cli, study: Path, out: Path) -> None:
    code, _, err = cli("report", str(study), "--out", str(out))
    assert code == 0, err

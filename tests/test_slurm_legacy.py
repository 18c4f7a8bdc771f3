"""A SLURM job queued before optbench's modules moved still runs after the move: its pickle names
the classes by their old modules (executors/slurm/legacy.py maps them). The pickles here are
written by the current code and then given the old names, as a job queued under the old layout
holds them; each is read in a fresh interpreter, as a job step reads its own."""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
import submitit
from cli_inprocess import tiny_config

from optbench.executors.slurm.job import JOB_STEP_CODE, TrialBatch
from optbench.executors.slurm.legacy import LEGACY_MODULES, MOVED_CLASSES
from optbench.spec.tracking import Tracking
from optbench.trial.config import Execution
from optbench.trial.jobs import PopulationJob, TrialJob
from optbench.trial.results import ResumeMismatch

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("optbench", "tests", "bench", "scripts")


def with_old_names(data: bytes) -> tuple[bytes, set[str]]:
    """A protocol-2 pickle with every class of a moved module named by its old module (each
    class is one GLOBAL opcode: b"c<module>\\n<name>\\n"); the old names it now holds."""
    used = set()
    for old, new in LEGACY_MODULES.items():
        current = b"c" + new.encode() + b"\n"
        if current in data:
            data = data.replace(current, b"c" + old.encode() + b"\n")
            used.add(old)
    return data, used


def _fresh_python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO, timeout=120
    )


READ_BACK = """
import json, pickle, sys
batch, outcome = pickle.load(open(sys.argv[1], "rb"))  # as submitit's pickle_load reads it
from optbench.spec.recipe import Recipe
from optbench.spec.tracking import Tracking
from optbench.trial.config import TrainConfig
from optbench.trial.jobs import PopulationJob, TrialJob
from optbench.trial.results import ResumeMismatch
solo, population = batch.jobs
# the current classes, each module under its own name
assert type(solo) is TrialJob and type(population) is PopulationJob
assert type(solo.config) is TrainConfig and type(solo.config.recipe) is Recipe
assert type(solo.execution.tracking) is Tracking and type(outcome) is ResumeMismatch
assert sys.modules["optbench.train.config"].__spec__.name == "optbench.trial.config"
print(json.dumps({
    "configs": [m.config.model_dump_json() for m in (solo, *population.members)],
    "execution": solo.execution.model_dump_json(),
    "outcome": [type(outcome).__module__, str(outcome)],
}))
"""


def test_a_job_pickled_under_the_old_module_paths_unpickles_as_the_current_classes(tmp_path):
    solo = TrialJob(
        "a",
        tiny_config(),
        tmp_path / "a",
        Execution(pipeline="pil", tracking=Tracking(kind="wandb")),
    )
    members = tuple(
        TrialJob(k, tiny_config(lr=lr), tmp_path / k) for k, lr in [("b", 1e-3), ("c", 2e-3)]
    )
    outcome = ResumeMismatch("another config's result")  # what a job may raise (ends.py reads it)
    data, used = with_old_names(
        pickle.dumps((TrialBatch([solo, PopulationJob(members)]), outcome), 2)
    )
    assert used == set(LEGACY_MODULES)  # every entry of the table is exercised
    (tmp_path / "job.pkl").write_bytes(data)
    run = _fresh_python(READ_BACK, str(tmp_path / "job.pkl"))
    assert run.returncode == 0, run.stderr
    read = json.loads(run.stdout)
    assert read["configs"] == [m.config.model_dump_json() for m in (solo, *members)]
    assert read["execution"] == solo.execution.model_dump_json()
    assert read["outcome"] == ["optbench.trial.results", str(outcome)]


MOVED_BACK = """
import pickle, sys
from optbench.spec.tracking import Tracking
batch = pickle.load(open(sys.argv[1], "rb"))
assert type(batch.jobs[0].execution.tracking) is Tracking
print(batch.jobs[0].execution.model_dump_json())
"""


def test_a_class_moved_out_of_a_module_that_remains_unpickles_from_its_old_name(tmp_path):
    # a job queued before issue 52 names its tracking settings trackers.backends.Tracking
    execution = Execution(pipeline="pil", tracking=Tracking(kind="mlflow", uri="http://h:5000"))
    data = pickle.dumps(TrialBatch([TrialJob("a", tiny_config(), tmp_path, execution)]), 2)
    for (old, name), new in MOVED_CLASSES.items():
        current = f"c{new}\n{name}\n".encode()
        assert current in data  # every entry of the table is exercised
        data = data.replace(current, f"c{old}\n{name}\n".encode())
    (tmp_path / "job.pkl").write_bytes(data)
    run = _fresh_python(MOVED_BACK, str(tmp_path / "job.pkl"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == execution.model_dump_json()


def test_without_the_table_the_old_pickle_does_not_load(tmp_path):
    # what the table guards against: the same bytes, read where no finder answers the old names
    data, _ = with_old_names(pickle.dumps(TrialBatch([TrialJob("a", tiny_config(), tmp_path)]), 2))
    (tmp_path / "job.pkl").write_bytes(data)
    code = (
        "import pickle, sys, optbench.executors.slurm.legacy as legacy\n"
        "sys.meta_path = [f for f in sys.meta_path if not isinstance(f, legacy._LegacyPaths)]\n"
        "pickle.load(open(sys.argv[1], 'rb'))"
    )
    run = _fresh_python(code, str(tmp_path / "job.pkl"))
    assert run.returncode != 0 and "No module named 'optbench." in run.stderr


def test_no_source_imports_an_old_module_path():
    # the table is for pickles of queued jobs only: code names the current modules
    old = "|".join(re.escape(m) for m in LEGACY_MODULES)
    pattern = re.compile(rf"^\s*(from|import) ({old})\b", re.M)
    found = [
        str(path.relative_to(REPO))
        for folder in SOURCES
        for path in (REPO / folder).rglob("*.py")
        if pattern.search(path.read_text())
    ]
    assert not found


@pytest.mark.slow
def test_a_job_queued_under_the_old_module_paths_trains_in_its_job_step(tmp_path):
    # the job step exactly as SLURM starts it (executor.py): JOB_STEP_CODE, then submitit's
    # process_job unpickles the job from its folder and runs it
    job = TrialJob("a", tiny_config(epochs=1), tmp_path / "trial")
    data, used = with_old_names(
        pickle.dumps(submitit.helpers.DelayedSubmission(TrialBatch([job])), 2)
    )
    assert {"optbench.executors.base", "optbench.train.config", "optbench.recipe"} <= used
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "1_submitted.pkl").write_bytes(data)
    env = {**os.environ, "SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "1", "SLURM_PROCID": "0"}
    step = [sys.executable, "-u", "-S", "-c", JOB_STEP_CODE, "-u", "-m", "submitit.core._submit"]
    run = subprocess.run([*step, str(tmp_path / "%j")], env=env, cwd=REPO, capture_output=True)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    outcome = submitit.core.utils.pickle_load(tmp_path / "1" / "1_0_result.pkl")
    assert outcome == ("success", ["finished"])
    assert (tmp_path / "trial" / "result.json").is_file()

"""Your question on a real SLURM cluster (issue 54's first acceptance; tests/your_question.py):
the model of your own, in a module outside the repository on PYTHONPATH, trained with Lion and
with AdamW as SLURM jobs whose workers import the module themselves, and the declared comparison
of the two decided at its first look, with no job submitted beyond it. The local executor and a
killed driver: tests/test_your_question.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import yaml
import your_question as yours

from optbench.executors.slurm.client import sacct_states
from optbench.executors.slurm.journal import read_records
from optbench.executors.slurm.study import job_folder
from optbench.plan.trials import plan
from optbench.spec.schema import load_spec
from optbench.store.database import Store
from optbench.trial.results import read_result

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def test_your_model_and_lion_train_as_slurm_jobs_and_the_declared_comparison_is_decided(
    tmp_path, monkeypatch
):
    code = tmp_path / "your-code"  # outside the repository and the study folder
    module = yours.write_module(code)
    yours.put_on_path(monkeypatch, code)  # the driver's environment: sbatch passes it to every job
    executor = {"kind": "slurm", "slurm": {"poll_s": 2, "time_min": 10}}
    data = yours.your_study(tmp_path / "work" / "results", executor=executor)
    study = tmp_path / "work" / "study.yaml"
    study.parent.mkdir()
    study.write_text(yaml.safe_dump(data))
    ran = subprocess.run(
        [sys.executable, "-m", "optbench", "run", str(study)],
        capture_output=True, text=True, timeout=900, cwd=study.parent, env=dict(os.environ),
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    said = " ".join(ran.stdout.split())
    assert f"{yours.SAID}: holds after 3 of at most 6 seeds" in said, said

    spec = load_spec(study)
    (look,) = Store(spec, create=False).looks()
    assert (look["claim"], look["k"], look["n"], look["outcome"]) == (
        yours.COMPARISON,
        0,
        3,
        "holds",
    )
    finished = [s for s in Store(spec, create=False).read(plan(spec)) if s.status == "finished"]
    assert sorted((s.trial.config.optimizer, s.trial.config.seed) for s in finished) == [
        (optimizer, seed) for optimizer in ("adamw", "lion") for seed in (0, 1, 2)
    ]
    # each trial a SLURM job of its own, none beyond the deciding look, each ended COMPLETED
    records = read_records(job_folder(spec))
    assert sorted(records) == sorted(s.trial.key for s in finished)
    job_ids = {r.job_id for r in records.values()}
    assert len(job_ids) == 6
    deadline = time.monotonic() + 180  # a trial is recorded as soon as its result is written
    while set(sacct_states(job_ids).values()) != {"COMPLETED"} and time.monotonic() < deadline:
        time.sleep(1)
    assert set(sacct_states(job_ids).values()) == {"COMPLETED"}, sacct_states(job_ids)
    # the jobs imported the module from the folder on PYTHONPATH: its version and digest are in
    # every result their workers wrote (a job that had not imported it knows no such model)
    digest = yours.module_digest(module)
    for item in finished:
        result = read_result(item.trial.out_dir)
        assert result.config.model == yours.MODEL and result.config.imports == (yours.MODULE_NAME,)
        user_code = result.provenance.user_code[yours.MODULE_NAME]
        assert (user_code.version, user_code.digest) == ("1.0", digest)

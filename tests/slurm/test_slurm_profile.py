"""A study without an executor block run on a real SLURM cluster by a cluster profile alone
(`optbench run STUDY --profile site.yaml`, issue 34 item 2): the profile's executor, setup lines
and storage are used, and result.json records the profile."""

from __future__ import annotations

import copy

import pytest
import yaml
from typer.testing import CliRunner

from optbench.cli.app import app
from optbench.executors.slurm.journal import read_records
from optbench.executors.slurm.study import job_folder
from optbench.plan.trials import plan
from optbench.spec.overrides import load_study
from optbench.spec.profiles import read_profile
from optbench.store.database import Store
from optbench.trial.results import read_result

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def test_a_profile_runs_a_study_on_slurm_without_editing_it(tiny_dict, tmp_path, slurm_cluster):
    data = copy.deepcopy(tiny_dict)
    data["models"] = data["models"][:2]
    data["search"]["n_samples"] = 1
    assert "executor" not in data and "storage" not in data  # a study as a laptop runs it
    study = tmp_path / "tiny.yaml"
    study.write_text(yaml.safe_dump(data))
    (tmp_path / "site").mkdir()
    journal = tmp_path / "site" / "journal.log"
    site = tmp_path / "site.yaml"
    site.write_text(
        yaml.safe_dump(
            {
                "executor": {
                    "kind": "slurm",
                    "slurm": {"poll_s": 2, "time_min": 10, "setup": ["echo site-setup-ran"]},
                },
                "storage": f"journal://{journal}",
            }
        )
    )

    cli = CliRunner()
    ran = cli.invoke(app, ["run", str(study), "--profile", str(site)])
    assert ran.exit_code == 0, ran.output
    assert "2 trial(s) submitted" in ran.output

    spec = load_study(study, profile=read_profile(site))
    assert spec.storage_url == f"journal://{journal}" and journal.is_file()
    frame = Store(spec, create=False).frame(plan(spec))
    assert len(frame) == 2 and (frame.status == "finished").all()
    records = read_records(job_folder(spec))
    assert len(records) == 2  # both trials were SLURM jobs
    logs = [p.read_text() for p in job_folder(spec).rglob("*_log.out")]
    assert logs and all("site-setup-ran" in log for log in logs)
    for trial in plan(spec):
        result = read_result(trial.out_dir)
        assert result.execution.profile == str(site.resolve())

    status = cli.invoke(app, ["status", str(study), "--profile", str(site)])
    assert status.exit_code == 0 and "2 of 2 trials done" in status.output, status.output

"""Cluster profiles (`--profile site.yaml`, OPTBENCH_PROFILE): a site's executor, storage and data
roots laid under a study, the study's own keys winning, validated as the study's keys, never
part of a cell id (issue 34 item 2)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from services import needs_extra

from optbench.errors import SpecError
from optbench.plan.trials import plan
from optbench.spec.overrides import load_study, parse_overrides
from optbench.spec.profiles import PROFILE_ENV, read_profile
from optbench.spec.tracking import Tracking

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "profiles" / "example-slurm.yaml"
PAPER = REPO / "studies" / "edf_adamw_4gf.yaml"


def _write(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def study(tiny_dict, tmp_path) -> Path:
    tiny_dict["output"] = "results"
    return _write(tmp_path / "tiny.yaml", tiny_dict)


def test_the_example_profile_runs_a_paper_study_unchanged_on_slurm():
    """The docs' profile: the paper's study gets its executor, storage and ImageNet root from
    it, and its cells keep their ids (the profile is an execution setting)."""
    site = read_profile(EXAMPLE)
    plain, on_site = load_study(PAPER), load_study(PAPER, profile=site)
    assert plain.executor.kind == "local" and plain.dataset.root is None
    assert on_site.executor.kind == "slurm" and on_site.executor.slurm.partition == "gpu"
    assert on_site.executor.slurm.setup == site.layer["executor"]["slurm"]["setup"]
    assert str(on_site.dataset.root) == site.data["imagenet"]
    assert on_site.storage == site.layer["storage"]
    assert [on_site.cell_id(c) for c in on_site.cells()] == [
        plain.cell_id(c) for c in plain.cells()
    ]
    trial = plan(on_site)[0]
    assert trial.execution.profile == str(EXAMPLE.resolve())
    assert plan(plain)[0].execution.profile is None


def test_the_studys_own_keys_win_and_overrides_win_over_both(study, tiny_dict, tmp_path):
    tiny_dict["output"] = "results"
    tiny_dict["executor"] = {"slurm": {"partition": "study-part"}}
    tiny_dict["dataset"] = {"name": "imagefolder", "root": "study-root", "img_size": 16}
    _write(study, tiny_dict)
    site = read_profile(
        _write(
            tmp_path / "site.yaml",
            {
                "executor": {"kind": "slurm", "slurm": {"partition": "site-part", "qos": "q"}},
                "data": {"imagefolder": "/site/images"},
            },
        )
    )
    spec = load_study(study, profile=site)
    assert spec.executor.kind == "slurm" and spec.executor.slurm.qos == "q"
    assert spec.executor.slurm.partition == "study-part"
    assert str(spec.dataset.root) == "study-root"
    sets = ["executor.slurm.qos=mine", "executor.kind=debug"]
    spec = load_study(study, parse_overrides(sets), profile=site)
    assert (spec.executor.kind, spec.executor.slurm.qos) == ("debug", "mine")


def test_a_data_root_fills_only_the_dataset_of_its_name(study, tiny_dict, tmp_path):
    site = read_profile(_write(tmp_path / "site.yaml", {"data": {"imagenet": "/site/imagenet"}}))
    assert load_study(study, profile=site).dataset.root is None  # digits: not this name
    tiny_dict["output"] = "results"
    tiny_dict["dataset"] = {"name": "imagenet"}
    _write(study, tiny_dict)
    assert str(load_study(study, profile=site).dataset.root) == "/site/imagenet"
    renamed = load_study(study, parse_overrides(["dataset.root=/mine"]), profile=site)
    assert str(renamed.dataset.root) == "/mine"


def test_a_profile_names_the_sites_tracker_and_a_studys_block_replaces_it_whole(
    study, tiny_dict, tmp_path
):
    needs_extra("mlflow", "mlflow", "mlflow")
    server = "http://mlflow.site:5000"
    site = read_profile(
        _write(tmp_path / "site.yaml", {"tracking": {"kind": "mlflow", "uri": server}})
    )
    plain, on_site = load_study(study), load_study(study, profile=site)
    assert (on_site.tracking.kind, on_site.tracking.uri) == ("mlflow", server)
    assert plan(on_site)[0].execution.tracking.uri == server  # what each worker logs to
    assert [on_site.cell_id(c) for c in on_site.cells()] == [
        plain.cell_id(c) for c in plain.cells()
    ]
    tiny_dict["output"] = "results"
    tiny_dict["tracking"] = {"kind": "none"}  # the site's uri is not merged into it
    _write(study, tiny_dict)
    assert load_study(study, profile=site).tracking == Tracking()


@pytest.mark.parametrize(
    ("profile", "line"),
    [
        ({"executor": {"slurm": {"partiton": "gpu"}}},
         "site.yaml: executor.slurm.partiton: unknown key; did you mean executor.slurm.partition?"),
        ({"executor": {"slurm": {"time_min": "60"}}},
         "site.yaml: executor.slurm.time_min: Input should be a valid integer (got '60')"),
        ({"models": ["vit_c_4gf"]},
         "site.yaml: models: a study key, not a site's (a profile holds executor, storage, "
         "tracking and data)"),
        ({"dat": {"imagenet": "/x"}}, "site.yaml: dat: unknown key; did you mean data?"),
        ({"data": {"imagenett": "/x"}},
         "site.yaml: data.imagenett: unknown dataset; did you mean data.imagenet?"),
        ({"storage": "sqlite://"}, "site.yaml: storage: "),
        ({"tracking": {"kind": "mlflow", "project": "p"}},
         "site.yaml: tracking: project and mode are W&B's (kind wandb), not mlflow's"),
        (["executor"], "site.yaml: a profile must be a YAML mapping, got list"),
    ],
    ids=["key", "type", "study-key", "top-key", "dataset", "storage", "tracking", "list"],
)  # fmt: skip
def test_a_bad_profile_is_one_line_naming_file_and_field_exit_2_nothing_written(
    cli, study, tmp_path, profile, line
):
    _write(tmp_path / "site.yaml", profile)
    for command in (
        ["run", "tiny.yaml"],
        ["run", "tiny.yaml", "--dry-run"],
        ["status", "tiny.yaml"],
    ):
        code, _, err = cli(*command, "--profile", "site.yaml")
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert err.startswith(f"error: {line}"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site.yaml", "tiny.yaml"]


def test_a_profile_is_read_as_strictly_as_a_study(cli, study, tmp_path):
    (tmp_path / "site.yaml").write_text("executor: {kind: slurm, kind: local}\n")
    code, _, err = cli("run", "tiny.yaml", "--dry-run", "--profile", "site.yaml")
    assert (code, err.strip()) == (
        2,
        "error: site.yaml: not valid YAML: duplicate key 'kind' (line 1, column 25)",
    )
    code, _, err = cli("run", "tiny.yaml", "--dry-run", "--profile", "nowhere.yaml")
    assert (code, err.strip()) == (2, "error: nowhere.yaml: no such profile file")


def test_the_environment_names_a_default_profile_and_the_flag_wins(
    cli, study, tmp_path, monkeypatch
):
    _write(tmp_path / "site.yaml", {"executor": {"workers": 0}})
    _write(tmp_path / "good.yaml", {"executor": {"workers": 1}})
    monkeypatch.setenv(PROFILE_ENV, "site.yaml")
    code, _, err = cli("run", "tiny.yaml", "--dry-run")
    assert code == 2 and err.startswith("error: site.yaml: executor.workers: workers must be")
    assert f"(the profile {PROFILE_ENV} names)" in err
    code, _, err = cli("run", "tiny.yaml", "--dry-run", "--profile", "good.yaml")
    assert code == 0, err
    monkeypatch.setenv(PROFILE_ENV, "")
    assert cli("run", "tiny.yaml", "--dry-run")[0] == 0


def test_a_ddp_population_made_by_a_profile_is_refused_with_the_same_line(cli, tiny_dict, tmp_path):
    """The fourth spelling of test_overrides' DDP + population study: the profile gives the
    SLURM executor with DDP, the study its population; one validation of the whole study."""
    from test_overrides import DDP_POPULATION

    data = copy.deepcopy(tiny_dict)
    data["output"] = "results"
    data["executor"] = {"population": 4}
    _write(tmp_path / "tiny.yaml", data)
    _write(tmp_path / "site.yaml", {"executor": {"kind": "slurm", "slurm": {"nodes": 2}}})
    for dry_run in (["--dry-run"], []):
        code, _, err = cli("run", "tiny.yaml", "--profile", "site.yaml", *dry_run)
        assert (code, err.strip()) == (2, DDP_POPULATION), err
    with pytest.raises(SpecError, match="population 4 trains in one process"):
        load_study(tmp_path / "tiny.yaml", profile=read_profile(tmp_path / "site.yaml"))


def test_the_slurm_walkthrough_names_the_example_profile_and_its_keys():
    """docs/slurm.md's walkthrough edits profiles/example-slurm.yaml: every key it tells a user
    to edit is in the example, and the example loads."""
    doc = (REPO / "docs" / "slurm.md").read_text()
    assert "profiles/example-slurm.yaml" in doc
    site = read_profile(EXAMPLE)
    slurm = site.layer["executor"]["slurm"]
    for key in ("partition", "account", "qos", "gpus_per_node", "cpus_per_task", "mem_gb"):
        assert f"`{key}`" in doc or key in doc.split("## Every SLURM setting")[0], key
        assert key in slurm, key
    assert "imagenet" in site.data and "time_min" in slurm and slurm["setup"]


def test_the_python_api_takes_a_profile_as_the_command_line_does():
    import optbench

    spec = optbench.load_study(PAPER, profile=EXAMPLE)
    assert spec == load_study(PAPER, profile=read_profile(EXAMPLE))
    assert spec.executor.kind == "slurm" and optbench.load_study(PAPER).executor.kind == "local"

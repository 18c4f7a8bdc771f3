"""`--set KEY=VALUE` on run, status, report and --dry-run, --version, shell completion, and the
messages of bad input: did-you-mean for keys, models and datasets, one line per union field."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from optbench.errors import SpecError
from optbench.spec.overrides import load_study, parse_overrides
from optbench.spec.schema import dump_spec, parse_spec

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def study(tiny_dict, tmp_path) -> Path:
    tiny_dict["output"] = "results"
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_dict))
    return path


def test_an_override_is_the_same_study_as_the_edited_yaml(study, tiny_dict):
    edited = copy.deepcopy(tiny_dict)
    edited["output"] = "results"
    edited["search"]["n_samples"] = 5
    edited["models"] = ["vit_c_w64_16px"]
    edited["recipe"]["label_smoothing"] = 0.2
    sets = ["search.n_samples=5", "models=[vit_c_w64_16px]", "recipe.label_smoothing=0.2"]
    overridden = load_study(study, parse_overrides(sets))
    expected = parse_spec(edited)
    assert overridden == expected
    assert [overridden.cell_id(c) for c in overridden.cells()] == [
        expected.cell_id(c) for c in expected.cells()
    ]
    plain = load_study(study)
    assert plain.cell_id(plain.cells()[1]) != overridden.cell_id(overridden.cells()[0])


@pytest.mark.slow
def test_run_saves_the_resolved_spec_with_its_overrides(cli, study, tiny_dict, tmp_path):
    sets = ["--set", "models=[vit_p_w64_16px]", "--set", "search.n_samples=1"]
    code, out, err = cli("run", "tiny.yaml", "--dry-run", *sets)
    assert code == 0, err
    assert "1 trials, 1 to run" in out.replace("\n", " ")
    code, _, err = cli("run", "tiny.yaml", "--executor", "debug", *sets)
    assert code == 0, err
    edited = copy.deepcopy(tiny_dict)
    edited.update(output="results", models=["vit_p_w64_16px"])
    edited["search"]["n_samples"] = 1
    edited["executor"] = {"kind": "debug"}
    saved = (tmp_path / "results" / "tiny" / "spec.yaml").read_text()
    assert saved == dump_spec(parse_spec(edited))
    code, out, err = cli("status", "tiny.yaml", *sets)
    assert code == 0 and "1 of 1 trials done" in out, err
    code, out, err = cli("report", "tiny.yaml", "--peak", *sets)
    assert code == 0, err
    assert "vit_c" not in (tmp_path / "reports" / "tiny" / "trials.csv").read_text()


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("search.n_sample=8", "--set search.n_sample=8: unknown key; did you mean search.n_samples?"),
        ('epochs="3"', "--set epochs='3': should be an int or a list of ints"),
        ("executor.workers=many", "--set executor.workers=many: should be a valid integer or 'auto' (got 'many')"),
        ("models=[vit_c_w64_16p]", "--set models=[vit_c_w64_16p]: models: unknown model 'vit_c_w64_16p'; did you mean vit_c_w64_16px?"),
        ("dataset.name=digit", "--set dataset.name=digit: dataset.name: unknown dataset 'digit'; did you mean digits?"),
        ("name.first=x", "--set name.first=x: name is not a mapping"),
        ("batch_size", "--set batch_size: expected KEY=VALUE"),
        ("search.n_samples=[1", "--set search.n_samples=[1: not valid YAML"),
        # read as strictly as a study file: a key given twice is refused, not "the last one wins"
        ("recipe={ema: true, ema: false}", "--set recipe={ema: true, ema: false}: not valid YAML: duplicate key 'ema' (line 1, column 13)"),
    ],
)  # fmt: skip
def test_a_bad_override_is_one_line_naming_it_exit_2_nothing_written(
    cli, study, tmp_path, override, needle
):
    for command in (
        ["run", "tiny.yaml"],
        ["run", "tiny.yaml", "--dry-run"],
        ["status", "tiny.yaml"],
    ):
        code, _, err = cli(*command, "--set", override)
        assert code == 2
        assert err.strip() == f"error: {needle}" or (
            err.startswith(f"error: {needle}") and len(err.strip().splitlines()) == 1
        ), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


DDP_POPULATION = (
    "error: tiny.yaml: executor: population 4 trains in one process: it cannot use DDP (slurm "
    "nodes x tasks_per_node is 2); set population 1 or one task"
)


@pytest.mark.parametrize(
    "spelling",
    [["--set", "executor.kind=slurm"], ["--executor", "slurm"], []],
    ids=["set", "flag", "yaml"],
)
def test_a_ddp_population_is_refused_with_one_line_however_slurm_is_spelled(
    cli, tiny_dict, tmp_path, spelling
):
    """`--executor` is a study key like any other: validated with the whole study, so the
    DDP + population study is refused the same way by flag, --set or in the file (issue 34)."""
    tiny_dict["output"] = "results"
    kind = "local" if spelling else "slurm"
    tiny_dict["executor"] = {"kind": kind, "population": 4, "slurm": {"nodes": 2}}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(tiny_dict))
    for dry_run in (["--dry-run"], []):
        code, _, err = cli("run", "tiny.yaml", *spelling, *dry_run)
        assert (code, err.strip()) == (2, DDP_POPULATION), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


@pytest.mark.parametrize(
    ("spelling", "named"),
    [(["--workers", "0"], "--workers 0"), (["--set", "executor.workers=0"], "--set executor.workers=0")],
    ids=["flag", "set"],
)  # fmt: skip
def test_workers_are_validated_with_the_study_whichever_way_they_are_given(
    cli, study, tmp_path, spelling, named
):
    for dry_run in (["--dry-run"], []):
        code, _, err = cli("run", "tiny.yaml", *spelling, *dry_run)
        assert (code, err.strip()) == (2, f"error: {named}: workers must be >= 1 or 'auto'"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


def test_an_executor_flag_wins_over_a_set_of_the_same_key(study):
    from optbench.cli.study_commands import read_study as _load

    flags = {"executor.kind": ("--executor", "debug"), "executor.workers": ("--workers", None)}
    spec = _load(study, data=False, overrides=["executor.kind=slurm"], flags=flags)
    assert spec.executor.kind == "debug" and spec.executor.workers == "auto"


def test_file_errors_suggest_keys_and_say_what_a_union_field_takes(tiny_dict):
    bad = copy.deepcopy(tiny_dict)
    bad["recipe"]["warmup_epoch"] = 1
    bad["executor"] = {"workers": "many"}
    bad["epochs"] = "3"
    with pytest.raises(SpecError) as err:
        parse_spec(bad, "study.yaml")
    lines = str(err.value).splitlines()
    assert sorted(lines) == sorted(
        [
            "study.yaml: epochs: should be an int or a list of ints, e.g. 50 or [50, 100] (got '3')",
            "study.yaml: recipe.warmup_epoch: unknown key; did you mean recipe.warmup_epochs?",
            "study.yaml: executor.workers: should be a valid integer or 'auto' (got 'many')",
        ]
    )
    assert "valid list" not in str(err.value)


def test_version_is_the_packages(cli):
    pyproject = (REPO / "pyproject.toml").read_text()
    version = re.search(r'^version = "(.+)"$', pyproject, re.MULTILINE).group(1)
    code, out, _ = cli("--version")
    assert code == 0 and out.strip() == f"optbench {version}"


def test_shell_completion_knows_commands_and_model_names(cli, monkeypatch):
    monkeypatch.setenv("_OPTBENCH_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", "optbench models vit_c_4")
    monkeypatch.setenv("COMP_CWORD", "2")
    code, out, _ = cli()
    assert code == 0 and out.split() == ["vit_c_4gf"]
    monkeypatch.setenv("COMP_WORDS", "optbench sta")
    monkeypatch.setenv("COMP_CWORD", "1")
    assert cli()[1].split() == ["status"]


def _readme_example_sets() -> list[str]:
    """The --set flags of the README's override example."""
    readme = (REPO / "README.md").read_text()
    [row] = [line for line in readme.splitlines() if "models='[vit_c_4gf]'" in line]
    return [s.strip("`").replace("'", "") for s in re.findall(r"--set (\S+)", row.split("|")[1])]


def test_the_readme_override_example_works_on_the_studies_it_fits():
    from optbench.run.preflight import check_spec

    sets = _readme_example_sets()
    assert "models=[vit_c_4gf]" in sets
    # the studies that sample (lr, wd) pairs (sampler good trains one) and name ViT_C-4GF
    fits = [
        p
        for p in sorted((REPO / "studies").glob("*.yaml"))
        if "vit_c_4gf" in p.read_text() and "sampler: good" not in p.read_text()
    ]
    assert REPO / "studies" / "edf_adamw_4gf.yaml" in fits
    for path in fits:
        spec = load_study(path, parse_overrides(sets))
        check_spec(spec, data=False, source=path)
        assert spec.models == ["vit_c_4gf"] and spec.search.n_samples == 8


def test_a_rule_broken_by_overrides_names_them(study):
    with pytest.raises(SpecError) as err:
        load_study(study, parse_overrides(["search.sampler=good"]))
    line = str(err.value)
    assert "\n" not in line and f"{study} with --set search.sampler=good:" in line


def test_good_values_of_a_model_that_does_not_exist_are_refused(tiny_dict):
    from optbench.run.preflight import check_spec

    tiny_dict["search"]["good_values"] = {"vit_c_w64_16pxx": {"adamw": {"lr": 1e-3, "wd": 0.1}}}
    with pytest.raises(SpecError, match=r"search.good_values: unknown model 'vit_c_w64_16pxx'"):
        check_spec(parse_spec(tiny_dict), data=False)

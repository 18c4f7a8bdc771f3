"""The study schema: every bad input names its field, exits 2 and writes nothing."""

from __future__ import annotations

import copy
import sys
import types
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from optbench.cli.app import main
from optbench.errors import SpecError
from optbench.run.preflight import check_spec
from optbench.spec.schema import StudySpec, load_spec, parse_spec


def _mutate(data: dict, path: str, value) -> dict:
    data = copy.deepcopy(data)
    *parents, last = path.split(".")
    node = data
    for p in parents:
        node = node[p]
    node[last] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        ("epochz", 3, "epochz: unknown key"),
        ("search.n_sample", 3, "search.n_sample: unknown key"),
        ("batch_size", "big", "batch_size"),
        ("search.ranges.adamw.lr", [1e-2, 1e-3], "search.ranges.adamw.lr"),
        ("search.ranges.adamw.wd", [0.0, 0.1], "must be > 0"),
        ("models", ["vit_p_w64_16px", "no_such_model"], "no_such_model"),
        ("dataset.name", "mnist_typo", "mnist_typo"),
        ("optimizers", ["adamw", "loin"], "optimizers.1"),
        ("search.sampler", "qmc", "power of 2"),
    ],
)
def test_bad_spec_names_the_field(tiny_dict, path, value, needle):
    bad = _mutate(tiny_dict, path, value)
    if path == "search.sampler":
        bad["search"]["n_samples"] = 3
    with pytest.raises(SpecError) as err:  # the schema, then what it names (models, dataset)
        check_spec(parse_spec(bad, "study.yaml"), data=False, source="study.yaml")
    assert needle in str(err.value)
    assert "study.yaml" in str(err.value)


def test_search_must_cover_every_model_and_optimizer(tiny_dict):
    bad = _mutate(tiny_dict, "optimizers", ["adamw", "sgd"])
    with pytest.raises(SpecError, match=r"no range for optimizer 'sgd'"):
        parse_spec(bad)


def test_good_values_give_the_paper_box(tiny_dict):
    data = _mutate(
        tiny_dict, "search.good_values", {"vit_c_w64_16px": {"adamw": {"lr": 1e-3, "wd": 0.24}}}
    )
    spec = parse_spec(data)
    box = spec.search.bounds("vit_c_w64_16px", "adamw")
    assert box.lr == pytest.approx((1e-3 / 8, 4e-3))
    assert box.wd == pytest.approx((0.03, 0.96))
    assert spec.search.bounds("vit_p_w64_16px", "adamw").lr == (1e-3, 1e-2)  # falls back to ranges


def test_epochs_scalar_or_grid(tiny_dict):
    assert parse_spec(tiny_dict).epochs == [1]
    assert parse_spec(_mutate(tiny_dict, "epochs", [1, 2])).cells()[1].epochs == 2


def test_cell_id_changes_with_meaning_not_with_bookkeeping(tiny_dict):
    spec = parse_spec(tiny_dict)
    cell = spec.cells()[0]
    same = parse_spec(_mutate(_mutate(tiny_dict, "output", "/elsewhere"), "search.n_samples", 9))
    other = parse_spec(_mutate(tiny_dict, "recipe.label_smoothing", 0.0))
    assert spec.cell_id(cell) == same.cell_id(cell)
    assert spec.cell_id(cell) != other.cell_id(cell)


@pytest.fixture
def run_cli(monkeypatch, capsys):
    """Run `optbench ARGS` in this process from folder `cwd`; returns (exit code, stderr)."""

    def run(args: list[str], cwd: Path) -> tuple[int, str]:
        monkeypatch.chdir(cwd)
        monkeypatch.setattr(sys, "argv", ["optbench", *args])
        with pytest.raises(SystemExit) as exit_:
            main()
        return exit_.value.code, capsys.readouterr().err

    return run


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        ("epochz", 3, "epochz: unknown key"),
        ("batch_size", "big", "batch_size"),
        ("search.ranges.adamw.lr", [1e-2, 1e-3], "low 0.01 must be < high 0.001"),
        ("models", ["no_such_model"], "no_such_model"),
        ("dataset.name", "nope", "unknown dataset 'nope'"),
    ],
)
def test_cli_rejects_bad_study_with_exit_2_and_writes_nothing(
    run_cli, tmp_path, tiny_dict, path, value, needle
):
    data = _mutate(tiny_dict, path, value)
    data["output"] = "results"
    study = tmp_path / "bad.yaml"
    study.write_text(yaml.safe_dump(data))
    for command in (["run", "bad.yaml"], ["run", "bad.yaml", "--dry-run"], ["status", "bad.yaml"]):
        code, err = run_cli(command, tmp_path)
        assert code == 2, err
        assert needle in err and "bad.yaml" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_cli_missing_study_file(run_cli, tmp_path):
    code, err = run_cli(["run", "nowhere.yaml"], tmp_path)
    assert code == 2
    assert "nowhere.yaml: no such study file" in err


def test_quickstart_study_validates():
    spec = load_spec(Path(__file__).parent.parent / "studies" / "quickstart.yaml")
    check_spec(spec, data=True)  # its models exist and its data (bundled digits) is here
    assert {"vit_p_w64_16px", "vit_c_w64_16px"} <= set(spec.models)


def test_good_sampler_needs_good_values_and_one_sample(tiny_dict):
    data = _mutate(tiny_dict, "search.sampler", "good")
    with pytest.raises(SpecError, match="sampler 'good'"):
        parse_spec(data)
    data["search"]["n_samples"] = 1
    data["search"]["good_values"] = {
        m: {"adamw": {"lr": 1e-3, "wd": 0.05}} for m in ("vit_p_w64_16px", "vit_c_w64_16px")
    }
    assert parse_spec(data).search.sampler == "good"


# The studies optbench ships, by name: a user's own study saved in studies/ is not a test case.
BUNDLED_STUDIES = [
    "dhvt_deit_cifar100", "edf_adamw_18gf", "edf_adamw_1gf", "edf_adamw_4gf",
    "edf_adamw_cifar100", "edf_adamw_deit_cifar100", "edf_sgd_18gf", "edf_sgd_1gf",
    "edf_sgd_4gf", "edf_sgd_cifar100", "length_stability", "length_stability_cifar100",
    "lion_claim_a", "lion_vs_adamw", "optimizer_stability", "quickstart", "rank_optimizers",
    "stem_ablation",
]  # fmt: skip


@pytest.mark.parametrize(
    "path",
    [Path(__file__).parent.parent / "studies" / f"{name}.yaml" for name in BUNDLED_STUDIES],
    ids=lambda p: p.name,
)
@pytest.mark.slow
def test_every_bundled_study_validates_and_plans(path, cli, tmp_path):
    spec = load_spec(path)
    assert spec.name == path.stem
    code, out, err = cli("run", str(path), "--dry-run")
    assert code in (0, None), err
    if spec.decide is not None:  # its sequential design and its cost against the fixed design's
        flat = " ".join(out.split())  # the table's caption wraps
        assert "looked at after" in flat and "expected if each effect is one" in flat, flat
        assert "for the fixed design, the same study without decide:" in flat, flat
    assert list(tmp_path.iterdir()) == []  # a plan writes nothing


def test_paper_edf_study_is_faithful_to_table_4():
    spec = load_spec(Path(__file__).parent.parent / "studies" / "edf_adamw_4gf.yaml")
    assert spec.models == ["vit_p_4gf", "vit_c_4gf", "regnety_4gf"]
    assert (spec.search.n_samples, spec.epochs, spec.batch_size, spec.ref_batch) == (
        64,
        [50],
        2048,
        2048,
    )
    box = spec.search.bounds("vit_c_4gf", "adamw")
    assert box.lr == pytest.approx((1e-3 / 8, 4e-3)) and box.wd == pytest.approx((0.03, 0.96))
    assert spec.recipe.preset == "paper" and spec.recipe.mixup_alpha == 0.8


def test_only_a_real_run_needs_the_data_folder(run_cli, tmp_path, tiny_dict):
    data = _mutate(tiny_dict, "dataset", {"name": "cifar10", "root": str(tmp_path / "nowhere")})
    data["output"] = "results"
    (tmp_path / "away.yaml").write_text(yaml.safe_dump(data))
    for command in (["status", "away.yaml"], ["run", "away.yaml", "--dry-run"]):
        code, err = run_cli(command, tmp_path)
        assert code in (0, None), err
    code, err = run_cli(["report", "away.yaml", "--out", "reports"], tmp_path)
    assert code in (0, None), err
    assert (tmp_path / "reports" / "tiny" / "summary.json").is_file()
    code, err = run_cli(["run", "away.yaml"], tmp_path)
    assert code == 2 and "nowhere" in err
    assert not (tmp_path / "results").exists()


# --- a number is a number, a switch a switch (issue 32) --------------------------------------------


def _base_type(annotation):
    """int, float, bool or a model class behind Optional, Annotated (StrictInt) and unions with a
    Literal ("auto"); None for anything else (str, Path, Literal, dict of scalars)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _base_type(args[0])
    if origin in (typing.Union, types.UnionType):
        found = {_base_type(a) for a in args} - {None}
        return found.pop() if len(found) == 1 else None
    if annotation in (int, float, bool):
        return annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _scalar_fields(annotation, data, key: str = ""):
    """(dotted key, kind, whether in a list) of every int, float and bool field of the schema
    `annotation` and of the models below it, as far as `data` (a valid study's mapping) holds
    them: models in a dict are walked at the keys `data` gives them (search.ranges.adamw)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (list, tuple):
        if (kind := _base_type(args[0])) in (int, float, bool):
            yield key, kind, True
    elif origin is dict:  # slurm.sbatch, a dict of strings, numbers and switches, is empty here
        for name, value in (data or {}).items():
            yield from _scalar_fields(args[1], value, f"{key}.{name}")
    elif (kind := _base_type(annotation)) in (int, float, bool):
        yield key, kind, False
    elif kind is not None:
        for name, field in kind.model_fields.items():
            below = f"{key}.{name}" if key else name
            yield from _scalar_fields(field.annotation, (data or {}).get(name), below)


def _every_section(data: dict) -> dict:
    """The tiny study with each nested model spelled out, so the walk reaches them all."""
    data = copy.deepcopy(data)
    data["search"]["good_values"] = {"vit_p_w64_16px": {"adamw": {"lr": 1e-3, "wd": 0.05}}}
    data["executor"] = {"slurm": {}}
    data["search"]["n_samples"] = 8
    data["decide"] = {"claims": ["a"], "looks": [4, 8], "margin": 0.1}
    return data


def test_every_number_and_switch_of_a_study_refuses_the_other_kind(tiny_dict):
    # pydantic's lax types read true (YAML's yes, on) as 1 and 1 as true: stall_timeout_s: yes
    # was a one-second timeout that killed healthy trials as stalled.
    data = _every_section(tiny_dict)
    parse_spec(data)  # the base is valid
    fields = list(_scalar_fields(StudySpec, data))
    assert len(fields) > 55 and ("executor.stall_timeout_s", float, False) in fields
    assert ("search.good_values.vit_p_w64_16px.adamw.lr", float, False) in fields
    for key, kind, in_list in fields:
        wrong = 1 if kind is bool else True
        value = [wrong, 2] if in_list else wrong
        with pytest.raises(SpecError) as err:
            parse_spec(_mutate(data, key, value), "study.yaml")
        line = str(err.value)
        assert line.startswith(f"study.yaml: {key}") and f"(got {wrong!r})" in line, (key, line)
        assert "\n" not in line, line


# How researchers write numbers (issue 68): YAML 1.1 (PyYAML's rule) read 1e-5 as text, so
# `lr: [1e-5, 1e-3]` was refused as "Input should be a valid number (got '1e-5', '1e-3')".
SPELLED_NUMBERS = {
    "1e-5": 1e-5,
    "1E-5": 1e-5,
    "3e+2": 300.0,
    "3e2": 300.0,
    "2.5e-4": 2.5e-4,
    "-1.5e-3": -1.5e-3,
    ".5": 0.5,
    "-.5": -0.5,
    "+.5": 0.5,
    "5.": 5.0,
    "1.e-3": 1e-3,
    "1_000": 1000,
    "1_000.5": 1000.5,
    "1_000e-3": 1.0,
    "8": 8,
}
NOT_NUMBERS = ("1e5x", "1.2.3", "e5", "1e", ".e5", "inf", "nan", "_1e5", "1e5_")


def test_numbers_read_as_researchers_write_them_and_the_rest_stays_text(tiny_dict, tmp_path):
    from optbench.spec.overrides import load_study, parse_overrides
    from optbench.spec.profiles import read_profile
    from optbench.spec.yamlio import read_yaml

    for text, value in SPELLED_NUMBERS.items():
        read = read_yaml(f"x: {text}", "t")["x"]
        assert read == value and type(read) is type(value), (text, read)
    for text in NOT_NUMBERS:
        assert read_yaml(f"x: {text}", "t") == {"x": text}
    # in a study file, a --set value and a profile alike
    tiny_dict["search"]["ranges"]["adamw"]["lr"] = "LR"
    text = yaml.safe_dump(tiny_dict).replace("LR", "[1e-5, 1E-3]")
    (tmp_path / "study.yaml").write_text(text)
    assert load_study(tmp_path / "study.yaml").search.ranges["adamw"].lr == (1e-5, 1e-3)
    over = parse_overrides(["search.ranges.adamw.wd=[3e-3, .5]", "search.good_range=[.125, 4.]"])
    spec = load_study(tmp_path / "study.yaml", over)
    assert spec.search.ranges["adamw"].wd == (3e-3, 0.5) and spec.search.good_range == (0.125, 4)
    (tmp_path / "site.yaml").write_text("executor:\n  stall_timeout_s: 6e2\n")
    profile = read_profile(tmp_path / "site.yaml")
    assert load_study(tmp_path / "study.yaml", profile=profile).executor.stall_timeout_s == 600.0
    # an infinite bound reads as one, and the schema refuses it naming the field
    (tmp_path / "study.yaml").write_text(text.replace("[1e-5, 1E-3]", "[1e-5, .inf]"))
    with pytest.raises(SpecError, match=r"study.yaml: search.ranges.adamw.lr"):
        load_study(tmp_path / "study.yaml")


def test_a_text_that_reads_as_a_number_is_written_back_quoted(tiny_dict):
    from optbench.spec.schema import dump_spec
    from optbench.spec.yamlio import read_yaml

    spec = parse_spec({**tiny_dict, "name": "1e5"})  # quoted in its file: a name, not a number
    assert parse_spec(read_yaml(dump_spec(spec), "spec.yaml")).name == "1e5"

"""Every optimizer of timm's registry by name (spec/optimizers.py): the torch-free table equals
the installed timm's registry and a wheel ships it, a study's optimizer arguments are checked against it, an
optimizer and its arguments name its cells while the paper's AdamW and SGD cells keep their ids,
a hybrid optimizer's fallback is recorded, and a Lion and a Muon study train."""

from __future__ import annotations

import copy
import inspect
import json
import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import yaml
from cli_inprocess import TINY, run_cli, tiny_config

from optbench.errors import SpecError
from optbench.spec.optimizers import OPTIMIZER_NAMES, check_optimizer_args
from optbench.spec.schema import parse_spec
from optbench.spec.timm_optimizers import TABLE_FILE, TIMM_OPTIMIZERS, TIMM_VERSION

REPO = Path(__file__).resolve().parents[1]

SGD_BOX = {"lr": [0.1, 1.0], "wd": [1e-5, 1e-4]}
LION_BOX = {"lr": [1e-4, 1e-3], "wd": [0.1, 1.0]}


def _study(**changes) -> dict:
    data = copy.deepcopy(TINY)
    data["search"]["ranges"].update(sgd=SGD_BOX, lion=LION_BOX, muon=LION_BOX)
    return {**data, **changes}


def test_the_table_is_the_installed_timms_registry():
    import timm
    from timm.optim import list_optimizers
    from timm.optim._optim_factory import default_registry

    if timm.__version__ != TIMM_VERSION:
        pytest.skip(f"the table is timm {TIMM_VERSION}'s, this is {timm.__version__}")
    assert sorted(TIMM_OPTIMIZERS) == list_optimizers()
    for name, entry in TIMM_OPTIMIZERS.items():
        cls = default_registry.get_optimizer_info(name).opt_class
        if isinstance(cls, str):
            assert entry["class"] == cls and "unsupported" in entry
            continue
        assert entry["class"] == f"{cls.__module__}.{cls.__qualname__}"
        if "args" in entry:  # each argument a study may set is one the class takes
            assert set(entry["args"]) <= set(inspect.signature(cls.__init__).parameters), name
    assert {"lion", "adopt", "muon", "kron", "mars", "lamb", "lars"} <= set(OPTIMIZER_NAMES)
    # the shipped file is what `python -m optbench.train.optim` writes from this timm
    from optbench.train.optim import optimizer_table_text

    shipped = resources.files("optbench.spec").joinpath(TABLE_FILE).read_text(encoding="utf-8")
    assert shipped == optimizer_table_text()


@pytest.mark.slow  # builds a wheel and starts a Python
def test_a_wheel_ships_the_table_and_reads_it_from_there(tmp_path):
    source = tmp_path / "source"  # a copy: a build writes build/ and egg-info beside its source
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "optbench", source / "optbench", ignore=shutil.ignore_patterns("*.pyc"))
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    build += ["--no-index", "-q", "-w", str(tmp_path / "dist"), str(source)]
    subprocess.run(build, check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("optbench-*.whl")
    # the wheel first on the path: its optbench, not the checkout's (no PYTHONPATH either)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from optbench.spec import timm_optimizers as t; "
        "print(t.__file__); print(repr(t.TIMM_OPTIMIZERS))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ran = subprocess.run(
        [sys.executable, "-c", code, str(wheel)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    where, table = ran.stdout.splitlines()
    assert where.startswith(str(wheel)) and table == repr(TIMM_OPTIMIZERS)


def test_figures_and_sentences_write_an_optimizer_by_its_class_name():
    from optbench.spec.optimizers import display_name

    assert [display_name(n) for n in ("adamw", "sgd", "lion", "muon", "nadamw")] == [
        "AdamW",
        "SGD",
        "Lion",
        "Muon",
        "NAdamW",
    ]
    # a registry name that is not its class's (Lion with caution, SGD with momentum) stays
    assert (display_name("lionc"), display_name("momentum")) == ("lionc", "momentum")


def test_the_paper_cells_keep_their_ids():
    """The ids the code gave these cells before any optimizer but AdamW and SGD existed."""
    data = _study(optimizers=["adamw", "sgd"], epochs=[1, 2])
    before = [
        "vit_p_w64_16px-adamw-e1-cdf9e1e8",
        "vit_p_w64_16px-adamw-e2-5a12e49e",
        "vit_p_w64_16px-sgd-e1-c48ddf73",
        "vit_p_w64_16px-sgd-e2-6766c548",
        "vit_c_w64_16px-adamw-e1-5e9b0a47",
        "vit_c_w64_16px-adamw-e2-e86e6c25",
        "vit_c_w64_16px-sgd-e1-8c2dbc84",
        "vit_c_w64_16px-sgd-e2-dd1e3904",
    ]
    spec = parse_spec(data)
    assert [spec.cell_id(c) for c in spec.cells()] == before
    paper = parse_spec({**data, "recipe": {"preset": "paper"}})
    assert paper.cell_id(paper.cells()[0]) == "vit_p_w64_16px-adamw-e1-1f06ff58"
    # another optimizer's arguments leave them as they are
    with_lion = parse_spec(
        {**data, "recipe": {**data["recipe"], "optimizer_args": {"lion": {"caution": True}}}}
    )
    assert [with_lion.cell_id(c) for c in with_lion.cells()] == before


def test_an_optimizer_and_its_arguments_name_its_cells():
    def lion_id(args: dict | None) -> str:
        recipe = {**TINY["recipe"], **({"optimizer_args": {"lion": args}} if args else {})}
        spec = parse_spec(_study(optimizers=["adamw", "lion"], recipe=recipe))
        ids = {c.optimizer: spec.cell_id(c) for c in spec.cells() if c.model.startswith("vit_p")}
        assert ids["adamw"].split("-")[-1] != ids["lion"].split("-")[-1]  # not adamw's hash
        return ids["lion"]

    plain, betas = lion_id(None), lion_id({"betas": [0.95, 0.98]})
    assert len({plain, betas, lion_id({"betas": [0.9, 0.98]})}) == 3
    assert lion_id({"betas": [0.95, 0.98]}) == betas


def test_a_trial_trains_with_its_own_optimizers_arguments_only():
    recipe = {**TINY["recipe"], "optimizer_args": {"lion": {"caution": True}, "muon": {}}}
    spec = parse_spec(_study(optimizers=["adamw", "lion"], recipe=recipe))
    from optbench.plan.trials import plan

    configs = {t.config.optimizer: t.config for t in plan(spec)}
    assert configs["lion"].recipe.optimizer_args == {"lion": {"caution": True}}
    assert configs["adamw"].recipe.optimizer_args == {}
    assert "optimizer_args" not in configs["adamw"].model_dump(mode="json")["recipe"]


@pytest.mark.parametrize(
    ("optimizer", "args", "fallback"),
    [("muon", {}, "adamw"), ("nmuon", {}, "nadamw"), ("muon", {"nesterov": True}, "nadamw")]
    + [("adamuon", {}, "adamw"), ("kron", {}, "diagonal"), ("lion", {}, None)]
    + [("adamw", {}, None)],
)
def test_a_hybrid_optimizers_fallback_is_in_its_config(optimizer, args, fallback):
    from optbench.spec.recipe import Recipe

    recipe = Recipe(warmup_epochs=0, optimizer_args={optimizer: args} if args else {})
    cfg = tiny_config(optimizer=optimizer, recipe=recipe)
    assert cfg.fallback == fallback
    dumped = cfg.model_dump(mode="json")
    assert dumped.get("fallback") == fallback and (fallback is not None) == ("fallback" in dumped)


@pytest.mark.parametrize(
    ("name", "args", "needle"),
    [
        ("lion", {"beta": [0.9, 0.99]}, "did you mean betas"),
        ("lion", {"betas": 0.9}, "a list of 2 numbers"),
        ("lion", {"caution": 1}, "true or false"),
        ("muon", {"ns_steps": 5.5}, "an integer"),
        ("lion", {"lr": 0.1}, "set by optbench"),
        ("adamw", {"amsgrad": True}, "recipe.betas"),
        ("bnbadam", {}, "not supported"),
        ("adahessian", {}, "second order"),
    ],
)
def test_a_bad_optimizer_argument_is_one_line(name, args, needle):
    with pytest.raises(ValueError, match=needle) as err:
        check_optimizer_args(name, args)
    assert "\n" not in str(err.value)


def test_a_population_trains_lion_with_its_arguments_but_caution():
    data = _study(optimizers=["adamw", "lion"], executor={"population": 2})
    data["recipe"] = {**data["recipe"], "optimizer_args": {"lion": {"betas": [0.95, 0.98]}}}
    assert parse_spec(data).executor.population == 2
    data["recipe"]["optimizer_args"]["lion"]["caution"] = True
    with pytest.raises(SpecError, match="lion.caution True: a population implements") as err:
        parse_spec(data)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("optimizer", ["muon", "lionc"])
def test_a_population_refuses_every_other_optimizer_in_one_line(optimizer):
    data = _study(optimizers=[optimizer], executor={"population": 2})
    data["search"]["ranges"][optimizer] = LION_BOX
    with pytest.raises(SpecError, match="population trains adamw, sgd and lion only") as err:
        parse_spec(data)
    assert f"not {optimizer!r}" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["lion", "muon"])
def test_a_timm_optimizer_trains_through_the_local_executor(
    optimizer, tmp_path, monkeypatch, capsys
):
    data = _study(optimizers=[optimizer], models=TINY["models"][:1], output=str(tmp_path / "out"))
    data["recipe"] = {**data["recipe"], "optimizer_args": {"lion": {"betas": [0.95, 0.98]}}}
    data["executor"] = {"kind": "local", "workers": 1}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(data))
    code, _, err = run_cli(["run", "study.yaml"], tmp_path, monkeypatch, capsys)
    assert code == 0, err
    results = sorted((tmp_path / "out" / "tiny").rglob("result.json"))
    assert len(results) == 2
    for path in results:
        result = json.loads(path.read_text())
        assert result["status"] == "finished" and result["digest"]
        assert result["config"]["optimizer"] == optimizer
        assert result["config"].get("fallback") == ("adamw" if optimizer == "muon" else None)
        own = {"lion": {"betas": [0.95, 0.98]}} if optimizer == "lion" else None
        assert result["config"]["recipe"].get("optimizer_args") == own

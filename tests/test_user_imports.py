"""A model of one's own, outside the repository, named by a study's `imports:` (optbench/
user_code.py): checked as a module name, imported by the driver, `--dry-run`, `optbench models`,
every worker (the local pool, a SLURM job, a population) and `optbench train`, recorded
in provenance (its version and source digest) and in the cell id. Each test writes its module into
its own folder outside the repository, under a name of its own (timm's registry lives as long as
the process)."""

from __future__ import annotations

import copy
import json
import os
import pickle
import sys
import types
import uuid
from pathlib import Path

import pytest
import yaml
from cli_inprocess import ONE_MODEL_STUDY, tiny_config

from optbench import user_code
from optbench.errors import SpecError, UsageError
from optbench.provenance import code_fingerprint, mixed_code_warning, provenance
from optbench.spec.schema import parse_spec
from optbench.trial.config import Provenance, TrainConfig, TrialResult
from optbench.user_code import check_module_name, source_digest

# the optimizers its modules register leave timm's registry with it
pytestmark = pytest.mark.usefixtures("timm_optimizers_kept")

MODULE = '''
"""A model of one's own: registered with timm when imported."""
from timm.models import register_model
from torch import nn

__version__ = "0.3"


class TinyConvNet(nn.Module):
    def __init__(self, num_classes=1000, in_chans=3, drop_path_rate=0.0, **kwargs):
        super().__init__()
        self.stem = nn.Conv2d(in_chans, 8, 3, padding=1)
        self.head = nn.Linear(8, num_classes)

    def forward(self, x):
        return self.head(self.stem(x).relu().mean((2, 3)))


@register_model
def {model}(pretrained=False, **kwargs):
    return TinyConvNet(**kwargs)
'''


def write_module(folder: Path, name: str, model: str) -> Path:
    """`name`.py in `folder` (put on sys.path, and PYTHONPATH for processes it starts),
    registering `model`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(MODULE.replace("{model}", model))
    return path


@pytest.fixture
def code_dir(tmp_path, monkeypatch) -> Path:
    """A folder outside the repository and outside the study's, on the path."""
    folder = tmp_path / "code"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])
    )
    return folder


def lab_study(tmp_path: Path, module: str, model: str, **changes) -> Path:
    data = copy.deepcopy(ONE_MODEL_STUDY)
    output = str(tmp_path / "work" / "results")
    data |= {"name": "lab", "imports": [module], "models": [model], "output": output}
    data["search"] |= {"n_samples": 1}
    data["executor"] = {"workers": 1, "retries": 0}
    data |= changes
    path = tmp_path / "work" / "study.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


# --- module names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["lab_models", "lab.models.stems", "_private", "M2"])
def test_a_dotted_module_name_is_taken(name):
    assert check_module_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["lab/models.py", "lab_models.py ", "https://x.org/m.py", ".models", "lab..models", "2lab",
     "import", "lab.class", "os; rm", "", "a" * 201, "lab-models", "~/lab"],
)  # fmt: skip
def test_anything_but_a_module_name_is_refused_before_import(name):
    with pytest.raises(ValueError, match="module name"):
        check_module_name(name)


# --- failing imports: one line, exit 2, nothing written ------------------------------------------


@pytest.mark.parametrize(
    "body, needle",
    [
        ("raise RuntimeError('no GPU driver here')", "RuntimeError: no GPU driver here"),
        ("import no_such_dependency_of_lab", "ModuleNotFoundError"),
        ("def broken(:\n", "SyntaxError"),
        ("import sys\nsys.exit(3)", "SystemExit"),
    ],
    ids=["raises", "missing dependency", "syntax error", "exits"],
)
def test_a_module_that_fails_to_import_is_one_line_naming_it(body, needle, code_dir, tmp_path, cli):
    module = f"lab_fails_{abs(hash(body)) % 10**8}"
    (code_dir / f"{module}.py").write_text(body + "\n")
    study = lab_study(tmp_path, module, "vit_p_w64_16px")
    work = sorted(p for p in study.parent.rglob("*"))
    for args in (["run", str(study), "--dry-run"], ["run", str(study)]):
        code, out, err = cli(*args)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, err
        assert f"imports: cannot import module '{module}'" in lines[0] and needle in lines[0]
    assert sorted(p for p in study.parent.rglob("*")) == work  # nothing written
    code, out, err = cli("status", str(study))  # reading imports nothing (test_reading_...)
    assert code == 0 and module not in sys.modules, err
    code, out, err = cli("models", "--import", module)
    assert code == 2 and f"--import: cannot import module '{module}'" in err.strip()


# --- a file name: refused before anything is imported ---------------------------------------------


def test_a_file_name_under_imports_is_refused_before_any_import(code_dir, tmp_path, cli):
    """`imports: ['labm.py']` reads as module `py` of package `labm`: importing that would run
    labm's code before failing. It is refused first, with the module it means."""
    module = f"labm_{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "MARKER"
    (code_dir / f"{module}.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
    )
    study = lab_study(tmp_path, f"{module}.py", "vit_p_w64_16px")
    work = sorted(study.parent.rglob("*"))
    for args, where in (
        (["run", str(study), "--dry-run"], "study.yaml: imports: "),
        (["run", str(study)], "study.yaml: imports: "),
        (["models", "--import", f"{module}.py"], "--import: "),
    ):
        code, out, err = cli(*args)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, err
        assert where in lines[0] and lines[0].endswith(f"did you mean {module}?"), lines[0]
    assert not marker.exists() and module not in sys.modules  # none of its code ran
    assert sorted(study.parent.rglob("*")) == work  # nothing written


# --- a name means one thing: no module of one's own replaces a registered one -----------------------

REGISTERS = """
from timm.models import register_model
from torch import nn


@register_model
def {name}(pretrained=False, **kwargs):
    return nn.Linear(1, 1)
"""


@pytest.mark.parametrize(
    "name, owner", [("vit_c_w64_16px", "optbench"), ("resnet18", "timm")], ids=["zoo", "timm"]
)
def test_a_module_registering_a_models_name_again_is_refused_naming_both(
    name, owner, code_dir, tmp_path, cli
):
    import timm

    module = f"lab_shadow_{uuid.uuid4().hex[:8]}"
    (code_dir / f"{module}.py").write_text(REGISTERS.format(name=name))
    builtin = timm.models.model_entrypoint(name)
    study = lab_study(tmp_path, module, "vit_p_w64_16px")
    work = sorted(study.parent.rglob("*"))
    for args, where in (
        (["run", str(study), "--dry-run"], "imports"),
        (["models", "--import", module], "--import"),
    ):
        code, out, err = cli(*args)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, err
        said = f"{where}: module '{module}' registers model '{name}', which {owner} already has"
        assert said in lines[0], lines[0]
    assert sorted(study.parent.rglob("*")) == work  # nothing written
    assert timm.models.model_entrypoint(name) is builtin  # never replaced, in this process either


def test_a_second_module_registering_the_firsts_model_is_refused(code_dir):
    tag = uuid.uuid4().hex[:8]
    first, second, name = f"lab_first_{tag}", f"lab_second_{tag}", f"lab_twice_{tag}"
    for module in (first, second):
        (code_dir / f"{module}.py").write_text(REGISTERS.format(name=name))
    said = f"imports: module '{second}' registers model '{name}', which module '{first}' already"
    with pytest.raises(UsageError, match=said):
        user_code.import_modules([first, second])


def test_a_module_replacing_a_timm_optimizer_is_refused_and_undone(code_dir, cli):
    from timm.optim import get_optimizer_info

    lion = get_optimizer_info("lion")
    module = f"lab_lion_{uuid.uuid4().hex[:8]}"
    (code_dir / f"{module}.py").write_text(
        "import torch\n"
        "from timm.optim._optim_factory import OptimInfo, default_registry\n"
        "default_registry.register(OptimInfo(name='lion', opt_class=torch.optim.SGD))\n"
    )
    code, out, err = cli("models", "--import", module)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    said = f"--import: module '{module}' registers optimizer 'lion', which timm already has"
    assert said in lines[0], lines[0]
    assert get_optimizer_info("lion") is lion  # what `lion` trains is timm's Lion again


SHADOW_SOURCE = """
from torch import nn


def vit_c_w64_16px(pretrained=False, num_classes=10, in_chans=3, **kwargs):
    return nn.Sequential(
        nn.Conv2d(in_chans, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, num_classes)
    )
"""


def test_counts_made_under_a_shadowing_model_are_never_read_for_the_builtin(
    code_dir, tmp_path, monkeypatch
):
    """A module imported around optbench's check (a script's own `import`) puts its model under
    optbench's name: the model-count cache keeps those counts under its source digest, so the
    built-in is counted as itself afterwards, and an edit of the module counts it afresh."""
    import importlib

    import timm

    from optbench.models import cache, complexity

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "CACHE", cache._Cache())  # this test's own, read afresh
    module = f"lab_cache_{uuid.uuid4().hex[:8]}"
    path = code_dir / f"{module}.py"
    path.write_text(SHADOW_SOURCE)
    shadow = importlib.import_module(module).vit_c_w64_16px
    entrypoints = timm.models._registry._model_entrypoints
    shape = dict(num_classes=10, in_chans=1, img_size=16)
    with monkeypatch.context() as shadowed:
        shadowed.setitem(entrypoints, "vit_c_w64_16px", shadow)
        counted_shadow = cache.cached_counts("vit_c_w64_16px", **shape)
    cache.CACHE.clear()  # a later process, reading the file
    builtin = cache.cached_counts("vit_c_w64_16px", **shape)
    assert builtin == complexity.model_complexity("vit_c_w64_16px", **shape) != counted_shadow
    with monkeypatch.context() as shadowed:  # the module's counts are cached under its digest
        shadowed.setitem(entrypoints, "vit_c_w64_16px", shadow)
        cache.CACHE.clear()
        shadowed.setattr(complexity, "model_complexity", _never_counted)
        assert cache.cached_counts("vit_c_w64_16px", **shape) == counted_shadow
        path.write_text(SHADOW_SOURCE + "# an edit\n")
        with pytest.raises(AssertionError, match="counted again"):
            cache.cached_counts("vit_c_w64_16px", **shape)


def _never_counted(*args, **kwargs):
    raise AssertionError("counted again")


# --- identity and provenance ----------------------------------------------------------------------


def _ids(tiny_dict, **changes) -> list[str]:
    spec = parse_spec({**tiny_dict, **changes})
    return [spec.cell_id(c) for c in spec.cells()]


def test_the_imports_are_part_of_a_cell_id_and_a_study_without_them_keeps_its_ids(tiny_dict):
    plain = _ids(tiny_dict)
    assert _ids(tiny_dict, imports=[]) == plain
    assert "imports" not in parse_spec(tiny_dict).cell_config(parse_spec(tiny_dict).cells()[0])
    with_lab = _ids(tiny_dict, imports=["lab_models"])
    assert all(a != b for a, b in zip(with_lab, plain, strict=True))
    assert _ids(tiny_dict, imports=["other_lab"]) != with_lab  # other code, other cells


def test_a_config_without_imports_dumps_as_before_and_one_with_them_round_trips():
    plain = tiny_config()
    assert "imports" not in plain.model_dump(mode="json")  # result.json, checkpoints, journal
    cfg = tiny_config(imports=("lab_models",))
    assert TrainConfig.model_validate_json(cfg.model_dump_json()) == cfg
    assert cfg.population_key() != plain.population_key()
    with pytest.raises(ValueError, match="not a module name"):
        tiny_config(imports=("lab/models.py",))


def test_a_config_pickled_before_imports_existed_unpickles_without_them():
    """A SLURM job queued before the upgrade holds a TrainConfig pickled without the field."""
    old = tiny_config()
    del old.__dict__["imports"]  # as the pickle of the earlier class holds it
    queued = pickle.loads(pickle.dumps(old))
    assert queued.imports == () and queued == tiny_config()
    assert queued.model_dump_json() == tiny_config().model_dump_json()


def test_provenance_records_each_modules_version_and_digest_and_tells_edits_apart(code_dir):
    path = write_module(code_dir, "lab_provenance", "lab_provenance_net")
    first = provenance(("lab_provenance",))
    recorded = first["user_code"]["lab_provenance"]
    assert recorded["version"] == "0.3"
    assert first["code_fingerprint"] != code_fingerprint()  # the user's code is covered
    assert "user_code" not in provenance()
    path.write_text(path.read_text() + "\n# an edit\n")
    second = provenance(("lab_provenance",))
    assert second["user_code"]["lab_provenance"]["digest"] != recorded["digest"]
    assert second["code_fingerprint"] != first["code_fingerprint"]
    # one cell trained by both versions is flagged as mixed code, as optbench's own edits are
    warning = mixed_code_warning(
        [("cell", first["code_fingerprint"]), ("cell", second["code_fingerprint"])]
    )
    assert warning and "cell" in warning


def test_a_module_version_with_a_terminal_escape_is_never_recorded(monkeypatch):
    # `optbench compare` prints a recorded version: one that would retitle the terminal is
    # refused in a result file, and provenance records no version rather than that one
    escape = "1.0\x1b]0;owned\x07"
    recorded = {"version": "1", "code_fingerprint": "0" * 16}
    with pytest.raises(ValueError, match="not printable text"):
        Provenance(**recorded, user_code={"m": {"version": escape, "digest": "0" * 16}})
    module = types.ModuleType("lab_escape")
    module.__version__ = escape
    monkeypatch.setattr(user_code.metadata, "version", lambda name: escape)  # its distribution's
    assert user_code.module_version(module) is None


def test_a_package_digest_covers_every_source_file(code_dir):
    package = code_dir / "lab_package"
    (package / "stems").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "stems" / "__init__.py").write_text("")
    (package / "stems" / "conv.py").write_text("WIDTH = 8\n")
    import lab_package

    before = source_digest(lab_package)
    (package / "stems" / "conv.py").write_text("WIDTH = 16\n")
    assert source_digest(lab_package) != before


# --- an optimizer of one's own ---------------------------------------------------------------------

OPTIMIZER_MODULE = """
\"\"\"An optimizer of one's own: registered with timm's optimizer registry when imported.\"\"\"
import torch
from timm.optim import OptimInfo
from timm.optim._optim_factory import default_registry


class LabMomentum(torch.optim.SGD):
    def __init__(self, params, lr=0.1, momentum=0.9, weight_decay=0.0, dampening=0.0):
        super().__init__(params, lr=lr, momentum=momentum, weight_decay=weight_decay,
                         dampening=dampening)


default_registry.register(
    OptimInfo(name={name!r}, opt_class=LabMomentum, has_eps=False, has_momentum=True)
)
"""
OWN_BOX = {"lr": [0.01, 0.1], "wd": [1e-5, 1e-4]}


def own_optimizer(code_dir: Path) -> tuple[str, str]:
    """(module, optimizer): a module in `code_dir`, not imported yet, registering an optimizer
    under a name of its own (timm's registry lives as long as the process)."""
    tag = uuid.uuid4().hex[:8]
    module, name = f"lab_optim_{tag}", f"labmomentum{tag}"
    (code_dir / f"{module}.py").write_text(OPTIMIZER_MODULE.format(name=name))
    return module, name


def own_optimizer_study(module: str, name: str, **changes) -> dict:
    data = copy.deepcopy(ONE_MODEL_STUDY)
    data |= {"imports": [module], "optimizers": [name]}
    data["search"]["ranges"] = {name: OWN_BOX}
    return data | changes


def test_an_optimizer_of_ones_own_is_checked_by_runs_check_and_unknown_without_imports(
    code_dir, tmp_path
):
    """The schema takes a name timm's table lacks where the study has `imports:`; `run`'s
    check imports the module, finds the name registered, checks its arguments against its
    class and builds it; the trainer builds the module's class. Without `imports:` the name is
    unknown (one line, the closest of timm's names)."""
    from torch import nn

    from optbench.run.preflight import check_optimizer_runs, check_spec
    from optbench.train.optim import build_optimizer

    module, name = own_optimizer(code_dir)
    data = own_optimizer_study(module, name, recipe={"optimizer_args": {name: {"momentum": 0.8}}})
    spec = parse_spec(data, "study.yaml")
    assert [cell.optimizer for cell in spec.cells()] == [name] and module not in sys.modules
    check_spec(spec, data=False, import_code=True, source="study.yaml")
    assert module in sys.modules
    check_optimizer_runs(name, spec.recipe, "study.yaml")
    cfg = tiny_config(optimizer=name, imports=(module,), recipe=data["recipe"])
    built = build_optimizer(nn.Linear(4, 2), cfg)
    assert type(built).__name__ == "LabMomentum" and built.defaults["momentum"] == 0.8

    boxless = copy.deepcopy(data)
    boxless["search"]["ranges"] = {}  # its own (lr, wd) box, as every optimizer's
    with pytest.raises(SpecError, match=f"search: no range for optimizer '{name}'"):
        parse_spec(boxless, "study.yaml")
    with pytest.raises(SpecError) as refused:
        parse_spec({**data, "imports": []}, "study.yaml")
    said = str(refused.value)
    assert f"study.yaml: optimizers.0: unknown optimizer '{name}'" in said, said
    assert "once the module that registers it is imported: a study's `imports`" in said


def test_an_optimizer_its_imports_do_not_register_is_refused_by_runs_check(code_dir):
    from optbench.run.preflight import check_spec

    module, name = own_optimizer(code_dir)
    spec = parse_spec(own_optimizer_study(module, f"{name}x"), "study.yaml")
    check_spec(spec, data=False, source="study.yaml")  # reading: taken as the module's
    with pytest.raises(SpecError) as refused:
        check_spec(spec, data=False, import_code=True, source="study.yaml")
    said = str(refused.value)
    assert len(said.splitlines()) == 1, said
    assert said.startswith(f"study.yaml: optimizers: unknown optimizer '{name}x': neither") and (
        f"imports {module}; did you mean {name}?" in said
    ), said


@pytest.mark.parametrize(
    "args, said",
    [
        ({"momentun": 0.8}, "momentun: not an argument of {name}; did you mean momentum?"),
        ({"momentum": "high"}, "momentum: should be a number (its default: 0.9)"),
        ({"momentum": -1.0}, "momentum: {name} refuses -1.0: Invalid momentum value"),
    ],
    ids=["name", "type", "value"],
)
def test_an_own_optimizers_arguments_are_checked_against_its_class(args, said, code_dir):
    from optbench.run.preflight import check_optimizer_runs, check_spec

    module, name = own_optimizer(code_dir)
    data = own_optimizer_study(module, name, recipe={"optimizer_args": {name: args}})
    spec = parse_spec(data, "study.yaml")  # not imported: what it takes is not known yet
    check_spec(spec, data=False, import_code=True, source="study.yaml")
    with pytest.raises(UsageError) as refused:
        check_optimizer_runs(name, spec.recipe, "study.yaml")
    line = str(refused.value)
    assert line.startswith(f"study.yaml: recipe.optimizer_args.{name}.{said.format(name=name)}")


def test_optbench_train_takes_an_optimizer_its_import_registers(code_dir, tmp_path, cli):
    """`optbench train --import M --optimizer NAME` takes M's optimizer and its optimizer_args,
    and checks them against its class before anything is written."""
    module, name = own_optimizer(code_dir)
    out = tmp_path / "one"
    code, _, err = cli(
        "train", "vit_p_w64_16px", "--import", module, "--optimizer", name, "--dataset",
        "digits", "--img-size", "16", "--lr", "0.01", "--wd", "1e-4", "--epochs", "1",
        "--out", str(out), "--set", f"optimizer_args={{{name}: {{momentun: 0.5}}}}",
    )  # fmt: skip
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    said = f"recipe.optimizer_args.{name}.momentun: not an argument of {name}; did you mean"
    assert said in lines[0], lines[0]
    assert not out.exists()


@pytest.mark.parametrize("name", ["lab_sgd", "LabSGD", "lab-sgd"])
def test_an_own_optimizer_name_timm_would_not_build_as_written_is_refused(name):
    """timm's registry lower-cases names, and create_optimizer_v2 reads 'lab_sgd' as timm's
    'sgd' wrapped by 'lab': such a name would train another optimizer."""
    with pytest.raises(SpecError, match="optimizers.0: optimizer .* lower-case letters and digits"):
        parse_spec(own_optimizer_study("lab.optim", name), "study.yaml")


def test_status_takes_an_optimizer_of_the_imports_without_importing_them(tmp_path, cli):
    """A study sent without its module: `status` reads it and says whose the optimizer is."""
    module = f"lab_absent_{uuid.uuid4().hex[:8]}"
    data = own_optimizer_study(module, "labsent", output=str(tmp_path / "results"))
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(data))
    code, out, err = cli("status", str(study))
    assert code == 0, err
    said = " ".join(out.split())
    assert (
        f"note: optimizer labsent: not timm's, taken as registered by the study's imports "
        f"({module}), which this command does not import" in said
    ), said
    code, out, err = cli("run", str(study), "--dry-run")  # run imports it: not there
    assert code == 2 and f"imports: cannot import module '{module}'" in err


# --- training with the model of one's own ---------------------------------------------------------


def _trained(study_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(study_dir.rglob("result.json"))]


@pytest.mark.slow
def test_a_model_of_ones_own_is_seen_by_dry_run_models_and_status(code_dir, tmp_path, cli):
    write_module(code_dir, "lab_seen", "lab_seen_net")
    study = lab_study(tmp_path, "lab_seen", "lab_seen_net")
    assert "lab_seen" not in sys.modules
    code, out, err = cli("models", "lab_seen_net", "--import", "lab_seen", "--json")
    assert code == 0 and [row["name"] for row in json.loads(out)] == ["lab_seen_net"], err
    code, out, err = cli("run", str(study), "--dry-run")
    assert code == 0 and "lab_seen_net" in out, err
    code, out, err = cli("models", "--import", "lab_seen", "--json")
    assert code == 0, err
    rows = {row["name"]: row for row in json.loads(out)}
    assert "vit_p_w64_16px" in rows and rows["lab_seen_net"]["params"] > 0
    code, out, err = cli("status", str(study))
    assert code == 0 and "lab_seen_net" in out, err
    # its counts are the user's code's: cached under its source digest, never under the bare
    # name that other code may take
    import lab_seen

    cache = Path(os.environ["XDG_CACHE_HOME"]) / "optbench" / "models.json"
    keys = json.loads(cache.read_text())["entries"]
    assert f"counts/lab_seen_net@lab_seen:{source_digest(lab_seen)}/10/1/16" in keys
    assert not any(key.startswith("counts/lab_seen_net/") for key in keys)
    # without the import, the name is unknown: the study's imports are what registered it
    study_without = lab_study(tmp_path, "lab_seen", "lab_seen_net_not_registered")
    code, out, err = cli("run", str(study_without), "--dry-run")
    assert code == 2 and "unknown model 'lab_seen_net_not_registered'" in err


@pytest.mark.slow
def test_a_model_of_ones_own_trains_through_the_local_pool(code_dir, tmp_path, cli):
    path = write_module(code_dir, "lab_pool", "lab_pool_net")
    study = lab_study(tmp_path, "lab_pool", "lab_pool_net")
    code, out, err = cli("run", str(study))
    assert code == 0, err
    [result] = _trained(study.parent / "results" / "lab")
    assert result["status"] == "finished", result.get("message")
    assert result["config"]["imports"] == ["lab_pool"]
    import lab_pool

    assert result["provenance"]["user_code"] == {
        "lab_pool": {"version": "0.3", "digest": source_digest(lab_pool)}
    }
    assert path.is_file()


@pytest.mark.slow
def test_a_slurm_job_and_a_population_import_the_module_themselves(code_dir, tmp_path):
    """The job function of a SLURM job (TrialBatch, called in this process as its job step
    would) and a population import what the config names: no module is imported here before
    they run. The job trains the model with an optimizer of one's own too, which its config
    takes as its imports' and its process builds once it has imported them."""
    from optbench.executors.slurm.job import TrialBatch
    from optbench.train.population import run_population
    from optbench.trial.jobs import TrialJob

    write_module(code_dir, "lab_slurm", "lab_slurm_net")
    write_module(code_dir, "lab_population", "lab_population_net")
    optim_module, optimizer = own_optimizer(code_dir)
    assert not {"lab_slurm", "lab_population", optim_module} & set(sys.modules)
    cfg = tiny_config(
        model="lab_slurm_net", imports=("lab_slurm", optim_module), optimizer=optimizer, epochs=1
    )
    assert TrialBatch([TrialJob("k", cfg, tmp_path / "slurm")])() == ["finished"]
    assert {"lab_slurm", optim_module} <= set(sys.modules)
    trained = TrialResult.model_validate_json((tmp_path / "slurm" / "result.json").read_text())
    assert trained.config.optimizer == optimizer and set(trained.provenance.user_code) == {
        "lab_slurm",
        optim_module,
    }
    members = [
        tiny_config(model="lab_population_net", imports=("lab_population",), epochs=1, lr=lr)
        for lr in (1e-3, 1e-2)
    ]
    results = run_population(members, [tmp_path / "p0", tmp_path / "p1"], handle_signals=False)
    assert [r.status for r in results] == ["finished", "finished"]
    assert all(r.provenance.user_code["lab_population"].version == "0.3" for r in results)
    assert TrialResult.model_validate_json((tmp_path / "p0" / "result.json").read_text())

"""Code of one's own on every executor (issue 69): a package outside the repository, installed
as pip installs one (a wheel into a folder of its own, its distribution named otherwise than the
module, as `pip install lab-tools` may install `lab`), registers a model and an optimizer with
timm; a study names both modules in `imports:` and trains the model with the package's optimizer
through the local pool (a spawned worker process) and a SLURM job (tests marked `slurm` skip,
saying why, without a cluster), and with Lion through a population (`executor.population`),
which refuses the package's optimizer in one line before anything is written (a population has
no batched version of it). Each result records each module's version (its distribution's) and
source digest. A worker that cannot import the module fails its trials with one line naming it in each
trial's error.log (executors/protocol.py: import_study_code; docs/extending.md says what a
cluster's workers need)."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import pytest
import yaml
from cli_inprocess import ONE_MODEL_STUDY, tiny_config

from optbench.errors import UsageError
from optbench.trial.jobs import PopulationJob, TrialJob
from optbench.trial.results import ERROR_LOG
from optbench.user_code import module_version, source_digest

# the optimizers its modules register leave timm's registry with it
pytestmark = pytest.mark.usefixtures("timm_optimizers_kept")

# one name per process (timm's registry and sys.modules outlive a test)
PACKAGE = "lab_executors"
MODULE = f"{PACKAGE}.models"
MODEL = "lab_executors_net"
OPTIM_MODULE = f"{PACKAGE}.optim"
OPTIMIZER = "labexecutorssgd"  # timm's registry: lower-case letters and digits
DISTRIBUTION, VERSION = "optbench-lab-tools", "2.1.0"  # no __version__: the wheel's says it

MODELS_SOURCE = f'''"""A model of one's own, registered with timm when imported."""
import multiprocessing
import os

from timm.models import register_model
from torch import nn

if os.environ.get("LAB_ONLY_IN_DRIVER") and multiprocessing.parent_process() is not None:
    raise ImportError("lab kernels are built for the login node only")


@register_model
def {MODEL}(pretrained=False, num_classes=10, in_chans=3, drop_path_rate=0.0, **kwargs):
    # a linear classifier of 4x4-pooled pixels: the least that trains
    return nn.Sequential(nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(in_chans * 16, num_classes))
'''


OPTIM_SOURCE = f'''"""An optimizer of one's own, registered with timm when imported: heavy-ball SGD whose
momentum buffer averages the gradients (dampening = momentum) and whose weight decay is
decoupled (scaled by the lr)."""
import torch
from timm.optim import OptimInfo
from timm.optim._optim_factory import default_registry


class LabSGD(torch.optim.Optimizer):
    def __init__(self, params, lr=0.1, momentum=0.9, weight_decay=0.0, average=True):
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, average=average)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, momentum = group["lr"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.mul_(1 - lr * group["weight_decay"])
                buffer = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buffer.mul_(momentum).add_(p.grad, alpha=1 - momentum if group["average"] else 1)
                p.add_(buffer, alpha=-lr)


default_registry.register(
    OptimInfo(name="{OPTIMIZER}", opt_class=LabSGD, has_eps=False, has_momentum=True)
)
'''


def _wheel(folder: Path) -> Path:
    """A wheel of DISTRIBUTION holding PACKAGE (its __init__, models and optim), as a build tool
    writes one: the files, then the dist-info's METADATA, WHEEL, top_level.txt and RECORD."""
    files = {
        f"{PACKAGE}/__init__.py": '"""A lab\'s tools."""\n',
        f"{PACKAGE}/models.py": MODELS_SOURCE,
        f"{PACKAGE}/optim.py": OPTIM_SOURCE,
    }
    info = f"{DISTRIBUTION.replace('-', '_')}-{VERSION}.dist-info"
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {VERSION}\n"
    files[f"{info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    files[f"{info}/top_level.txt"] = f"{PACKAGE}\n"
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    path = folder / f"{DISTRIBUTION.replace('-', '_')}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
    return path


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The folder pip installed the lab's wheel into (`pip install --target`), outside the
    repository; its module is not imported here yet."""
    root = tmp_path_factory.mktemp("lab")
    target = root / "site"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target"]
    ran = subprocess.run(
        [*pip, str(target), str(_wheel(root))], capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert (target / PACKAGE / "models.py").is_file()
    return target


def on_path(monkeypatch, folder: Path) -> dict:
    """`folder` on this process's sys.path and on PYTHONPATH, as `export PYTHONPATH` puts it
    (every process a run starts inherits it); returns that environment."""
    monkeypatch.syspath_prepend(str(folder))
    earlier = os.environ.get("PYTHONPATH")  # unset where optbench is installed (CI)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(folder), earlier])))
    return dict(os.environ)


def installed_digest(site: Path, module_name: str = MODULE) -> str:
    """The digest provenance records for an installed module, without importing it."""
    module = types.ModuleType(module_name)
    module.__file__ = str(site / PACKAGE / f"{module_name.rpartition('.')[2]}.py")
    return source_digest(module)


BOXES = {
    "lion": {"lr": [1e-4, 1e-3], "wd": [0.1, 1.0]},
    OPTIMIZER: {"lr": [0.1, 1.0], "wd": [1e-5, 1e-4]},
}


def lab_study(tmp_path: Path, optimizer: str = OPTIMIZER, **executor) -> Path:
    """MODEL trained with `optimizer` (the package's, else timm's) on digits, one epoch, two
    (lr, wd) samples, by `executor`; the study imports both of the package's modules."""
    data = copy.deepcopy(ONE_MODEL_STUDY)
    data |= {"name": "lab", "imports": [MODULE, OPTIM_MODULE], "models": [MODEL]}
    data |= {"optimizers": [optimizer]}
    data["search"] |= {"ranges": {optimizer: BOXES[optimizer]}}
    data["output"] = str(tmp_path / "work" / "results")
    data["executor"] = {"retries": 0, **executor}
    path = tmp_path / "work" / "study.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def results(study: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(study.parent.rglob("result.json"))]


def error_logs(study: Path) -> list[str]:
    return [p.read_text() for p in sorted(study.parent.rglob(ERROR_LOG))]


def assert_recorded(found: list[dict], site: Path, population: int, optimizer: str) -> None:
    """Every trial finished, trained by `population` together with `optimizer`, and recorded
    each installed module's distribution version and source digest."""
    assert [r["status"] for r in found] == ["finished"] * 2, [r.get("message") for r in found]
    for result in found:
        assert result["config"]["imports"] == [MODULE, OPTIM_MODULE]
        assert result["config"]["model"] == MODEL and result["config"]["optimizer"] == optimizer
        assert result["execution"]["population"] == population
        assert result["provenance"]["user_code"] == {
            name: {"version": VERSION, "digest": installed_digest(site, name)}
            for name in (MODULE, OPTIM_MODULE)
        }


def test_a_module_of_a_package_records_the_packages_version(tmp_path, monkeypatch):
    """`imports: [lab.layers]`: the version is the package's `__version__` (the module has none
    of its own, and no distribution is named `lab_versioned`)."""
    package = tmp_path / "lab_versioned"
    package.mkdir()
    (package / "__init__.py").write_text('__version__ = "4.2"\n')
    (package / "layers.py").write_text("WIDTH = 8\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import lab_versioned.layers

    assert module_version(lab_versioned.layers) == "4.2"


# --- training through each executor ---------------------------------------------------------------


@pytest.mark.slow
def test_the_local_pool_trains_the_installed_model_and_records_its_version(
    site, tmp_path, monkeypatch, cli
):
    on_path(monkeypatch, site)
    study = lab_study(tmp_path, kind="local", workers=1)
    code, out, err = cli("run", str(study))
    assert code == 0, out[-2000:] + err
    assert_recorded(results(study), site, population=1, optimizer=OPTIMIZER)


@pytest.mark.slow
def test_a_population_trains_the_installed_model_and_records_its_version(
    site, tmp_path, monkeypatch, cli
):
    on_path(monkeypatch, site)
    study = lab_study(tmp_path, "lion", kind="local", workers=1, population=2)
    code, out, err = cli("run", str(study))
    assert code == 0, out[-2000:] + err
    assert_recorded(results(study), site, population=2, optimizer="lion")


def test_a_population_refuses_the_packages_optimizer_before_anything_is_written(tmp_path, cli):
    """A population trains its members' steps batched (train/population_optim.py), which the
    package's optimizer has no version of: the study is refused as it is read, before its
    modules are imported (none is installed here), in one line naming the optimizer, exit 2,
    no study folder."""
    study = lab_study(tmp_path, kind="local", workers=1, population=2)
    code, out, err = cli("run", str(study))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, out[-2000:] + err
    assert "executor.population 2: a population trains adamw, sgd and lion only" in lines[0]
    assert f"not '{OPTIMIZER}' (an optimizer of the study's imports" in lines[0], lines[0]
    assert not (study.parent / "results").exists()


def _run_driver(
    study: Path, env: dict, sys_path: Path | None = None
) -> subprocess.CompletedProcess:
    """`optbench run STUDY` in a process of its own; `sys_path`: a folder the driver alone
    imports from (put on its sys.path, not on PYTHONPATH)."""
    code = "import sys; from optbench.cli.app import main; sys.argv[0] = 'optbench'; main()"
    if sys_path is not None:
        code = f"import sys; sys.path.insert(0, {str(sys_path)!r}); {code}"
    return subprocess.run(
        [sys.executable, "-c", code, "run", str(study)],
        capture_output=True, text=True, timeout=600, cwd=study.parent, env=env,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.xdist_group("slurm")
def test_a_slurm_job_trains_the_installed_model_and_records_its_version(
    site, tmp_path, monkeypatch
):
    env = on_path(monkeypatch, site)  # sbatch passes the submitting environment to the job
    study = lab_study(tmp_path, kind="slurm", slurm={"poll_s": 2, "time_min": 10})
    ran = _run_driver(study, env)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert_recorded(results(study), site, population=1, optimizer=OPTIMIZER)


# --- a worker that cannot import it ---------------------------------------------------------------


def _one_line_naming_the_module(log: str, cause: str) -> None:
    lines = log.strip().splitlines()
    assert len(lines) == 1, log
    assert f"imports: cannot import module '{MODULE}'" in lines[0] and cause in lines[0], log
    assert lines[0].startswith("a worker on "), log  # where it could not


def test_a_worker_without_the_module_writes_one_line_in_each_members_error_log(tmp_path):
    """What every executor's worker runs first (the local pool's, a SLURM job's), here on a
    population whose module this process cannot import: each member's error.log names it, no
    result is written, and the UsageError goes on to the executor."""
    from optbench.executors.protocol import import_study_code

    missing = "lab_executors_absent.models"
    members = tuple(
        TrialJob(f"k{i}", tiny_config(model=MODEL, imports=(missing,), lr=lr),
                 tmp_path / "trials" / f"t{i}", study_dir=tmp_path)
        for i, lr in enumerate((1e-3, 1e-2))
    )  # fmt: skip
    with pytest.raises(UsageError, match=missing):
        import_study_code([PopulationJob(members)])
    for member in members:
        log = (member.out_dir / ERROR_LOG).read_text()
        assert len(log.strip().splitlines()) == 1, log
        assert f"imports: cannot import module '{missing}': ModuleNotFoundError" in log, log
        assert not (member.out_dir / "result.json").exists()


@pytest.mark.slow
def test_a_population_worker_that_cannot_import_it_says_so_in_each_error_log(
    site, tmp_path, monkeypatch, cli
):
    """The module imports in the driver but raises in a spawned worker (LAB_ONLY_IN_DRIVER:
    code built for the login node only): both members fail, each error.log one line."""
    on_path(monkeypatch, site)
    monkeypatch.setenv("LAB_ONLY_IN_DRIVER", "1")
    study = lab_study(tmp_path, "lion", kind="local", workers=1, population=2)
    code, out, err = cli("run", str(study))
    found = results(study)
    assert [r["status"] for r in found] == [], found  # no result file: the driver records them
    logs = error_logs(study)
    assert len(logs) == 2, out[-2000:] + err
    for log in logs:
        _one_line_naming_the_module(log, "ImportError: lab kernels are built for the login node")
    assert "2 trial(s) failed; tracebacks in" in " ".join(out.split()), out[-2000:]


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.xdist_group("slurm")
def test_a_slurm_job_whose_environment_lacks_the_module_says_so_in_error_log(
    site, tmp_path, monkeypatch
):
    """The driver imports the module from a folder on its own sys.path only; the job's
    environment (PYTHONPATH without that folder) cannot: its trial's error.log names it."""
    study = lab_study(tmp_path, kind="slurm", slurm={"poll_s": 2, "time_min": 10})
    data = yaml.safe_load(study.read_text())
    data["search"]["n_samples"] = 1
    study.write_text(yaml.safe_dump(data))
    ran = _run_driver(study, dict(os.environ), sys_path=site)
    said = " ".join(ran.stdout.split())
    assert ran.returncode != 0 and "1 trial(s) failed; tracebacks in" in said, said[-3000:]
    [log] = error_logs(study)
    _one_line_naming_the_module(log, f"ModuleNotFoundError: No module named '{PACKAGE}'")

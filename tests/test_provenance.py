"""Which code made a result: version, commit and training-code fingerprint in result.json and
trials.csv, and the warning of `status` and `report` when one cell mixes training code."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import optbench
from optbench.provenance import code_fingerprint, git_commit, mixed_code_warning
from optbench.trial.config import TrialResult
from optbench.trial.results import load_result

REPO = Path(__file__).resolve().parents[1]
SHA_A, SHA_B = "a" * 40, "b" * 40


def _package(root: Path) -> Path:
    """A copy of the optbench package under root/optbench (its source only)."""
    shutil.copytree(
        Path(optbench.__file__).parent,
        root / "optbench",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return root / "optbench"


def test_the_fingerprint_follows_the_training_code_only(tmp_path):
    package = _package(tmp_path)
    before = code_fingerprint(package)
    (package / "cli/app.py").write_text((package / "cli/app.py").read_text() + "\n# a comment\n")
    assert code_fingerprint.__wrapped__(package) == before  # not training code
    edited = {before}
    # each is training code (the catalogue: the sizes the input pipeline loads images at)
    for source in ("train/loop.py", "data/batches.py", "trial/config.py", "spec/catalogue.py"):
        (package / source).write_text((package / source).read_text() + "\n# a comment\n")
        edited.add(code_fingerprint.__wrapped__(package))
    assert len(edited) == 5
    (package / "models" / "extra.py").write_text("X = 1\n")  # a new file counts too
    assert code_fingerprint.__wrapped__(package) not in edited


def test_the_commit_is_read_from_the_git_folder(tmp_path):
    package = tmp_path / "checkout" / "optbench"
    package.mkdir(parents=True)
    assert git_commit.__wrapped__(package) is None  # not a checkout
    git = tmp_path / "checkout" / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "packed-refs").write_text(f"# pack-refs\n{SHA_B} refs/heads/main\n")
    assert git_commit.__wrapped__(package) == SHA_B  # a packed ref
    (git / "refs" / "heads" / "main").write_text(SHA_A + "\n")
    assert git_commit.__wrapped__(package) == SHA_A  # a loose ref wins
    (git / "HEAD").write_text(SHA_B + "\n")
    assert git_commit.__wrapped__(package) == SHA_B  # a detached HEAD
    (git / "HEAD").write_text("ref: refs/heads/gone\n")
    assert git_commit.__wrapped__(package) is None


def test_a_worktree_commit_is_read_through_its_git_file(tmp_path):
    common = tmp_path / "main" / ".git"
    wt_dir = common / "worktrees" / "wt"
    wt_dir.mkdir(parents=True)
    (common / "refs" / "heads").mkdir(parents=True)
    (common / "refs" / "heads" / "topic").write_text(SHA_A + "\n")
    (wt_dir / "HEAD").write_text("ref: refs/heads/topic\n")
    (wt_dir / "commondir").write_text("../..\n")
    package = tmp_path / "wt" / "optbench"
    package.mkdir(parents=True)
    (tmp_path / "wt" / ".git").write_text(f"gitdir: {wt_dir}\n")
    assert git_commit.__wrapped__(package) == SHA_A


def test_this_checkout_names_its_commit():
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
    )
    if head.returncode != 0:
        pytest.skip("not a git checkout (or no git here)")
    assert git_commit() == head.stdout.strip()


def test_old_result_files_without_provenance_still_load(tmp_path, tiny_dict):
    from optbench.plan.trials import plan
    from optbench.spec.schema import parse_spec

    cfg = plan(parse_spec(tiny_dict))[0].job.config
    old = TrialResult(status="finished", final_error=50.0, epochs=1, config=cfg)
    data = json.loads(old.model_dump_json())
    del data["provenance"]
    (tmp_path / "result.json").write_text(json.dumps(data))
    assert load_result(tmp_path).provenance is None


CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse2 avx fma avx2 bmi2

processor\t: 1
vendor_id\t: GenuineIntel
"""


def test_a_result_records_the_machine_its_arithmetic_ran_on(tmp_path, tiny_dict):
    import torch

    from optbench.host import cpu_identity, nvidia_driver
    from optbench.plan.trials import plan
    from optbench.provenance import provenance
    from optbench.spec.schema import parse_spec
    from optbench.trial.config import Provenance
    from optbench.trial.results import write_result

    (tmp_path / "cpuinfo").write_text(CPUINFO)
    assert cpu_identity(tmp_path / "cpuinfo") == {
        "cpu": "AuthenticAMD family 25 model 1 stepping 1",
        "cpu_flags": "avx avx2 fma",  # the vector flags only, in MATH_FLAGS' order
    }
    assert cpu_identity(tmp_path / "none") == {"cpu": None, "cpu_flags": None}
    (tmp_path / "nvidia").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    assert nvidia_driver(tmp_path / "nvidia") == "550.54.15"
    assert nvidia_driver(tmp_path / "none") is None

    recorded = provenance(device=torch.device("cpu"))
    machine = recorded["machine"]
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert "gpu" not in machine and "machine" not in provenance()  # the driver's: no device
    cfg = plan(parse_spec(tiny_dict))[0].job.config
    result = TrialResult(status="failed", epochs=1, config=cfg, provenance=Provenance(**recorded))
    write_result(tmp_path, result)
    assert load_result(tmp_path).provenance.machine.cpu_capability == machine["cpu_capability"]
    # a result written before the machine was recorded still reads
    data = json.loads((tmp_path / "result.json").read_text())
    del data["provenance"]["machine"]
    (tmp_path / "result.json").write_text(json.dumps(data))
    assert load_result(tmp_path).provenance.machine is None


def test_a_cuda_result_records_its_gpu_capability_and_driver(monkeypatch):
    # CUDA's calls faked: this checks what is recorded, a lent GPU checks the calls
    import torch

    import optbench.host as host
    from optbench.provenance import machine

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (9, 0))
    monkeypatch.setattr(host, "nvidia_driver", lambda: "550.54.15")
    recorded = machine(torch.device("cuda", 0))
    assert recorded["gpu"] == "NVIDIA H100 80GB HBM3, capability 9.0"
    assert recorded["gpu_driver"] == "550.54.15"
    assert recorded["cpu_capability"] == torch.backends.cpu.get_cpu_capability()


def test_the_warning_names_each_mixed_cell_once():
    assert mixed_code_warning([("c1", "aaaa"), ("c1", "aaaa"), ("c2", None)]) is None
    line = mixed_code_warning([("c1", "aaaa"), ("c1", "bbbb"), ("c1", None), ("c2", "aaaa")])
    assert "\n" not in line and "1 cell mix" in line
    assert "c1 (aaaa, bbbb)" in line and "c2" not in line


@pytest.mark.slow
def test_a_cell_trained_by_edited_code_is_flagged_by_status_and_report(tmp_path, cli, tiny_dict):
    """A trial trained by an edited copy of the package and one by this one, in one cell."""
    copy_root = tmp_path / "edited"
    package = _package(copy_root)
    epoch = package / "train" / "epoch.py"
    epoch.write_text(epoch.read_text() + "\n# an edit that changes nothing computed\n")
    tiny_dict["models"] = ["vit_p_w64_16px"]
    tiny_dict["search"]["n_samples"] = 1
    tiny_dict["executor"] = {"kind": "debug"}
    study = tmp_path / "tiny.yaml"
    study.write_text(yaml.safe_dump(tiny_dict))

    env = {**os.environ, "PYTHONPATH": str(copy_root), "OMP_NUM_THREADS": "1"}
    first = subprocess.run(
        [sys.executable, "-m", "optbench", "run", str(study)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert first.returncode == 0, first.stderr
    code, out, err = cli("status", str(study))
    assert code == 0 and "mix results" not in out + err  # one code so far

    code, _, err = cli("run", str(study), "--set", "seeds=[0,1]")  # seed 1: this package
    assert code == 0, err
    trials = sorted((tmp_path / "results" / "tiny" / "trials").glob("*/*"))
    prints = {load_result(t).provenance.code_fingerprint for t in trials}
    assert len(trials) == 2 and code_fingerprint() in prints and len(prints) == 2
    assert all(load_result(t).provenance.version == optbench.__version__ for t in trials)

    code, out, err = cli("status", str(study), "--set", "seeds=[0,1]")
    warned = [line for line in out.splitlines() if "mix results of different training" in line]
    assert code == 0 and len(warned) == 1 and "vit_p_w64_16px-adamw-e1" in warned[0]

    code, out, _ = cli("report", str(study), "--edf", "--set", "seeds=[0,1]")
    assert code == 0 and sum("mix results of different training" in x for x in out.splitlines())
    report = tmp_path / "reports" / "tiny"
    rows = list(csv.DictReader((report / "trials.csv").open()))
    assert {r["code_fingerprint"] for r in rows} == prints
    assert {r["version"] for r in rows} == {optbench.__version__}
    import torch

    assert {r["cpu_capability"] for r in rows} == {torch.backends.cpu.get_cpu_capability()}
    summary = json.loads((report / "summary.json").read_text())
    assert summary["code"]["code_fingerprints"] == sorted(prints) and summary["code"]["warning"]
    assert "mix results of different training code" in (report / "index.html").read_text()


def test_the_version_is_the_one_pyproject_declares():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert optbench.__version__ == declared

"""The tests on a fresh machine: without SLURM's commands, a PostgreSQL server or optbench's
optional extras, every test that needs one skips saying why (or fails where OPTBENCH_TEST_REQUIRE
names its service), and scripts/test-fresh-machine.sh runs the tests so even where they are
installed (.ci/run, on every submission)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from services import needs_slurm

REPO = Path(__file__).parents[1]
SCRIPT = REPO / "scripts" / "test-fresh-machine.sh"
USR2_TEST = "tests/test_slurm_launch.py::test_jobs_start_in_an_entry_that_holds_usr2_back_until_submitit_handles_it"


class _Test:
    """A test item with these markers, as needs_slurm reads one."""

    def __init__(self, *markers: str):
        self.markers = markers

    def get_closest_marker(self, name: str) -> str | None:
        return name if name in self.markers else None


def _fake_slurm_commands(folder: Path) -> None:
    folder.mkdir(exist_ok=True)
    for name in ("srun", "sbatch"):
        (folder / name).write_text("#!/bin/sh\nexit 0\n")
        (folder / name).chmod(0o755)


def test_a_test_that_needs_slurms_commands_skips_without_them_unless_ci_requires_slurm(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("OPTBENCH_TEST_REQUIRE", raising=False)
    needs_slurm(_Test())  # a test that needs nothing runs
    with pytest.raises(pytest.skip.Exception, match="needs SLURM's srun and sbatch on PATH"):
        needs_slurm(_Test("slurm_commands"))
    monkeypatch.setenv("OPTBENCH_TEST_REQUIRE", "slurm,postgres")
    with pytest.raises(pytest.fail.Exception, match="OPTBENCH_TEST_REQUIRE"):
        needs_slurm(_Test("slurm_commands"))
    _fake_slurm_commands(tmp_path / "bin")
    needs_slurm(_Test("slurm_commands"))  # the commands suffice, no cluster needed


def _hidden_modules() -> set[str]:
    [line] = [
        line for line in SCRIPT.read_text().splitlines() if line.startswith("HIDDEN_MODULES=")
    ]
    return set(line.split("(", 1)[1].rstrip(")").split())


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()


def test_every_optional_extra_is_hidden_on_the_fresh_machine_and_asked_for_by_needs_extra():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = {_name(r) for r in project["dependencies"]}
    optional = {
        _name(r)
        for extra, requirements in project["optional-dependencies"].items()
        if extra != "test"
        for r in requirements
    }
    assert optional - core <= _hidden_modules()
    # pytest.importorskip would skip even where CI requires the extra (services.needs_extra)
    asked_wrongly = [
        f"{path.name}:{number}"
        for path in (REPO / "tests").rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "importorskip(" in line and any(f'"{m}"' in line for m in optional - core)
    ]
    assert not asked_wrongly


@pytest.mark.slow  # a pytest run of its own
def test_the_fresh_machine_hides_installed_slurm_commands_and_ci_s_requirements(tmp_path):
    _fake_slurm_commands(tmp_path / "bin")
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "OPTBENCH_TEST_REQUIRE": "slurm",  # CI's, which would fail the skip
    }
    proc = subprocess.run(
        ["bash", str(SCRIPT), "-q", "-n", "0", USR2_TEST],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 skipped" in proc.stdout
    assert "needs SLURM's srun and sbatch on PATH" in proc.stdout  # the reason, shown by -rs

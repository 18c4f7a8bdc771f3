"""Services that some tests need (a SLURM cluster, a PostgreSQL server) and what a test does
when one is missing: skip, or fail where OPTBENCH_TEST_REQUIRE names it (CI starts them all,
so a skip there would hide a broken setup)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parents[1] / "scripts"


def skip_or_fail(service: str, why: str) -> None:
    """Skip the test, or fail it where OPTBENCH_TEST_REQUIRE (comma-separated) names `service`."""
    if service in os.environ.get("OPTBENCH_TEST_REQUIRE", "").split(","):
        pytest.fail(f"{why} (OPTBENCH_TEST_REQUIRE={os.environ['OPTBENCH_TEST_REQUIRE']})")
    pytest.skip(why)


def needs_extra(module: str, extra: str, service: str) -> None:
    """Skip (or fail, as skip_or_fail) a test whose Python package comes with an optional extra
    of optbench that this environment lacks, saying how to install it."""
    if importlib.util.find_spec(module) is None:
        skip_or_fail(service, f"needs {module}: pip install -e '.[{extra}]'")


def script(name: str, *args: str, env: dict | None = None) -> str:
    """Run scripts/<name> (as root); its output."""
    proc = subprocess.run(
        ["bash", str(SCRIPTS / name), *args], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise AssertionError(f"{name} {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout.strip()


class PrivatePostgres:
    """A PostgreSQL server of one test's own (scripts/postgres-local.sh with its own folder and
    port), which the test may stop and start."""

    def __init__(self, state: Path, port: int):
        self.env = {**os.environ, "PG_LOCAL_STATE": str(state), "PG_LOCAL_PORT": str(port)}

    def start(self) -> None:
        script("postgres-local.sh", "start", env=self.env)

    def stop(self) -> None:
        script("postgres-local.sh", "stop", env=self.env)

    @property
    def url(self) -> str:
        return script("postgres-local.sh", "url", env=self.env)

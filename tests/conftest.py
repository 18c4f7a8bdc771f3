"""Shared fixtures: the tiny digits study (cli_inprocess.TINY) that trains in seconds on one CPU
core, with its own output folder per test. The tests' TrainConfig comes from one factory,
cli_inprocess.tiny_config (a function, not a fixture: module helpers build configs too, and
`from conftest import` is ambiguous beside tests/slurm/conftest.py)."""

from __future__ import annotations

import copy
import glob
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from cli_inprocess import TINY
from services import PrivatePostgres, needs_extra, needs_slurm, skip_or_fail

# The processes the tests start (drivers, `optbench train`) on one thread unless they set their
# own, as this process's tests run (_one_thread): two test workers' two-thread trainings on a
# 2-core machine spin (a kill-and-resume test took twice the CPU), and the two sides of a
# digest comparison need the same thread count.
os.environ["OMP_NUM_THREADS"] = "1"

# A fast test that takes this long hangs or belongs in the slow lane; the slow lane's limit is
# pyproject.toml's `timeout`. Generous: a loaded 2-core machine runs tests several times slower.
FAST_TEST_TIMEOUT_S = 120


def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("slow") is None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(FAST_TEST_TIMEOUT_S))


@pytest.fixture(autouse=True, scope="session")
def _own_model_cache(tmp_path_factory):
    """The model-count cache (optbench/models/cache.py) starts empty and stays out of ~/.cache."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)  # deterministic and polite to the other core


@pytest.fixture(scope="module")
def timm_optimizers_kept() -> Iterator[None]:
    """timm's optimizer registry as a test module found it, once the module is done: the
    optimizers its modules of one's own registered leave with it (timm has no way to unregister
    one; test_optimizers.py compares the registry with optbench's table)."""
    from timm.optim._optim_factory import default_registry

    before = dict(default_registry._optimizers)
    yield
    default_registry._optimizers.clear()
    default_registry._optimizers.update(before)


@pytest.fixture
def tiny_dict(tmp_path: Path) -> dict:
    data = copy.deepcopy(TINY)
    data["output"] = str(tmp_path / "results")
    return data


@pytest.fixture
def one_model(tiny_dict) -> dict:
    """The tiny digits study with one model: n_samples trials of 1 epoch."""
    data = copy.deepcopy(tiny_dict)
    data["models"] = ["vit_p_w64_16px"]
    data["search"]["n_samples"] = 1
    data["executor"] = {"retries": 1}
    return data


@pytest.fixture
def cli(monkeypatch, capsys, tmp_path):
    """Run `optbench ARGS` in this process from tmp_path; returns (exit code, stdout, stderr)."""
    from optbench.cli.app import main

    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["optbench", *args])
        try:
            main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code or 0
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


# --- services (SLURM, PostgreSQL) ------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _needs_services(request: pytest.FixtureRequest) -> None:
    """A test marked `slurm` (a running cluster) or `slurm_commands` (only srun and sbatch on
    PATH) skips without them, saying why, wherever it lies (services.needs_slurm)."""
    needs_slurm(request.node)


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The URL of a running PostgreSQL server for storage tests (`.ci/run` starts one)."""
    needs_extra("psycopg", "postgres", "postgres")
    url = os.environ.get("OPTBENCH_TEST_POSTGRES_URL")
    if not url:
        skip_or_fail(
            "postgres",
            "no PostgreSQL server: bash scripts/postgres-local.sh start, then "
            "export OPTBENCH_TEST_POSTGRES_URL=$(bash scripts/postgres-local.sh url)",
        )
    return url


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """A PostgreSQL server of this test's own, which it may stop and start."""
    needs_extra("psycopg", "postgres", "postgres")
    if os.geteuid() != 0 or not glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"):
        skip_or_fail("postgres", "a private PostgreSQL server needs root and Debian's postgresql")
    state = Path(tempfile.mkdtemp(prefix="optbench-pg-"))  # the postgres user must reach it
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = PrivatePostgres(state, port)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(state, ignore_errors=True)

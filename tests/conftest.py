"""Shared fixtures: a tiny digits study that trains in seconds on one CPU core."""

from __future__ import annotations

import copy
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

TINY = {
    "name": "tiny",
    "dataset": {"name": "digits", "img_size": 16},
    "models": ["vit_p_w64_16px", "vit_c_w64_16px"],
    "optimizers": ["adamw"],
    "epochs": 1,
    "batch_size": 128,
    "ref_batch": 128,
    "search": {"n_samples": 2, "ranges": {"adamw": {"lr": [1e-3, 1e-2], "wd": [0.01, 0.1]}}},
    "recipe": {"warmup_epochs": 0, "hflip": False, "translate": 2},
}


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)  # deterministic and polite to the other core


@pytest.fixture
def tiny_dict(tmp_path: Path) -> dict:
    data = copy.deepcopy(TINY)
    data["output"] = str(tmp_path / "results")
    return data


# --- services (PostgreSQL) ------------------------------------------------------------------------

SCRIPTS = Path(__file__).parents[1] / "scripts"


def skip_or_fail(service: str, why: str) -> None:
    """Skip a test whose service is missing, or fail it where OPTBENCH_TEST_REQUIRE names the
    service (CI starts them all: a skip there would hide a broken setup)."""
    if service in os.environ.get("OPTBENCH_TEST_REQUIRE", "").split(","):
        pytest.fail(f"{why} (OPTBENCH_TEST_REQUIRE={os.environ['OPTBENCH_TEST_REQUIRE']})")
    pytest.skip(why)


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The URL of a running PostgreSQL server for storage tests (`.ci/run` starts one)."""
    url = os.environ.get("OPTBENCH_TEST_POSTGRES_URL")
    if not url:
        skip_or_fail(
            "postgres",
            "no PostgreSQL server: bash scripts/postgres-local.sh start, then "
            "export OPTBENCH_TEST_POSTGRES_URL=$(bash scripts/postgres-local.sh url)",
        )
    return url


class PrivatePostgres:
    """A PostgreSQL server of one test's own (scripts/postgres-local.sh with its own folder and
    port), which the test may stop and start."""

    def __init__(self, state: Path, port: int):
        self.env = {**os.environ, "PG_LOCAL_STATE": str(state), "PG_LOCAL_PORT": str(port)}

    def _script(self, command: str) -> str:
        proc = subprocess.run(
            ["bash", str(SCRIPTS / "postgres-local.sh"), command],
            env=self.env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        return proc.stdout.strip()

    def start(self) -> None:
        self._script("start")

    def stop(self) -> None:
        self._script("stop")

    @property
    def url(self) -> str:
        return self._script("url")


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
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

"""Services that some tests need (a SLURM cluster or only SLURM's commands, a PostgreSQL server,
an MLflow server, the optional extras) and what a test does when one is missing: skip saying why,
or fail where OPTBENCH_TEST_REQUIRE names it (CI starts them all, so a skip there would hide a
broken setup). scripts/test-fresh-machine.sh runs the fast lane with all of them hidden."""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from optbench.executors.slurm.client import max_array_size

SCRIPTS = Path(__file__).parents[1] / "scripts"
# What submitit needs on PATH to build a job's command (it checks for srun) and to submit it.
SLURM_COMMANDS = ("srun", "sbatch")


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


def needs_slurm(node: pytest.Item) -> None:
    """Skip (or fail, as skip_or_fail) a test marked `slurm` where no cluster answers, and one
    marked `slurm_commands` where SLURM's commands are not on PATH, saying which."""
    if node.get_closest_marker("slurm") and reachable_cluster() is None:
        skip_or_fail(
            "slurm",
            "no SLURM cluster reachable (sinfo); `bash scripts/slurm-local.sh start` makes one",
        )
    if node.get_closest_marker("slurm_commands") is None:
        return
    missing = [name for name in SLURM_COMMANDS if shutil.which(name) is None]
    if missing:
        skip_or_fail(
            "slurm",
            f"needs SLURM's {' and '.join(missing)} on PATH (submitit builds its jobs' commands "
            "only there); `bash scripts/slurm-local.sh start` installs them",
        )


@dataclass(frozen=True)
class Cluster:
    max_array_size: int
    gpus: int  # GPUs (gres gpu) on the first node


def query(*args: str) -> str | None:
    """A SLURM command's output, or None where it cannot run or fails."""
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


@functools.cache  # asked once per process, and only by a test that needs the cluster
def reachable_cluster() -> Cluster | None:
    """The SLURM cluster that sinfo reaches, if its first node can run jobs."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return None
    nodes = query("sinfo", "-h", "-o", "%t|%G")
    if not nodes:
        return None
    state, gres = nodes.splitlines()[0].split("|")
    if state.rstrip("*~#") not in ("idle", "mix", "alloc", "comp"):
        return None  # down or drained: jobs would never start
    gpus = sum(
        int(g.rsplit(":", 1)[-1].split("(")[0]) for g in gres.split(",") if g.startswith("gpu")
    )
    return Cluster(max_array_size=max_array_size(), gpus=gpus)


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


class MlflowServer:
    """An MLflow tracking server of one test's own on 127.0.0.1 (a SQLite store and artifacts
    in `folder`), which the test may kill (SIGKILL to its process group: the server and its
    workers, as a crash or an OOM kill) and start again on the same port and store."""

    def __init__(self, folder: Path):
        self.folder = folder
        with socket.socket() as s:  # a free port, kept across restarts
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, wait_s: float = 300) -> None:
        """Start the server and wait until it answers (minutes on a loaded machine)."""
        log = open(self.folder / "mlflow-server.log", "a")  # noqa: SIM115 - the server's
        self.proc = subprocess.Popen(
            ["mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers",
             "1", "--backend-store-uri", f"sqlite:///{self.folder / 'mlflow.db'}",
             "--artifacts-destination", str(self.folder / "artifacts")],
            stdout=log, stderr=log, start_new_session=True,
            env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"},
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"mlflow server exited: {self.folder / 'mlflow-server.log'}")
            try:
                urllib.request.urlopen(f"{self.uri}/health", timeout=2).close()
                return
            except OSError:
                time.sleep(0.5)
        self.kill()
        raise AssertionError(f"mlflow server did not answer within {wait_s:g} s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None


def mlflow_server(folder: Path) -> Iterator[MlflowServer]:
    """A started MlflowServer (skip, or fail, without the mlflow extra), killed afterwards."""
    needs_extra("mlflow", "mlflow", "mlflow")
    server = MlflowServer(folder)
    server.start()
    try:
        yield server
    finally:
        server.kill()

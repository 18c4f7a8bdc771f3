"""Fixtures for tests against a real SLURM cluster, e.g. the one `scripts/slurm-local.sh start`
brings up. Tests marked `slurm` skip cleanly when `sinfo` cannot reach a controller."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

import pytest

from optbench.launch.slurm import max_array_size


@dataclass(frozen=True)
class Cluster:
    max_array_size: int
    gpus: int  # GPUs (gres gpu) on the first node


def _query(*args: str) -> str | None:
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _find_cluster() -> Cluster | None:
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return None
    nodes = _query("sinfo", "-h", "-o", "%t|%G")
    if not nodes:
        return None
    state, gres = nodes.splitlines()[0].split("|")
    if state.rstrip("*~#") not in ("idle", "mix", "alloc", "comp"):
        return None  # down or drained: jobs would never start
    gpus = sum(
        int(g.rsplit(":", 1)[-1].split("(")[0]) for g in gres.split(",") if g.startswith("gpu")
    )
    return Cluster(max_array_size=max_array_size(), gpus=gpus)


_CLUSTER = _find_cluster()


@pytest.fixture(autouse=True)
def _needs_slurm(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("slurm") and _CLUSTER is None:
        pytest.skip(
            "no SLURM cluster reachable (sinfo); `bash scripts/slurm-local.sh start` makes one"
        )


@pytest.fixture
def slurm_cluster() -> Cluster:
    if _CLUSTER is None:
        pytest.skip("no SLURM cluster reachable (sinfo)")
    return _CLUSTER

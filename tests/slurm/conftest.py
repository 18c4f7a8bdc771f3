"""Fixtures for tests against a real SLURM cluster, e.g. the one `scripts/slurm-local.sh start`
brings up. Tests marked `slurm` skip cleanly when `sinfo` cannot reach a controller (and fail
where OPTBENCH_TEST_REQUIRE names slurm, as in CI): tests/conftest.py's `_needs_services`, for
every test wherever it lies."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
from services import SCRIPTS, Cluster, query, reachable_cluster, script, skip_or_fail


@pytest.fixture
def slurm_cluster() -> Cluster:
    cluster = reachable_cluster()
    if cluster is None:
        skip_or_fail("slurm", "no SLURM cluster reachable (sinfo)")
    return cluster


class Daemons:
    """The daemons of the cluster that scripts/slurm-local.sh started: stop and start one."""

    def stop(self, name: str) -> None:
        script("slurm-local.sh", "stop", name)

    def start(self, name: str | None = None) -> str:
        return script("slurm-local.sh", "start", *([name] if name else []))


@pytest.fixture
def slurm_daemons() -> Iterator[Daemons]:
    """For tests that stop a daemon (an accounting or controller outage): needs the cluster of
    scripts/slurm-local.sh, as root; every daemon runs again after the test."""
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["bash", str(SCRIPTS / "slurm-local.sh"), "status"], capture_output=True
        ).returncode
    ):
        skip_or_fail("slurm", "needs the cluster of scripts/slurm-local.sh, as root")
    daemons = Daemons()
    try:
        yield daemons
    finally:
        for name in ("slurmdbd", "slurmctld"):
            daemons.start(name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed SLURM test says what the cluster was doing when it failed (a job that never
    started or never ended is otherwise a bare timeout): the queue with each job's reason, the
    node's state, and the last lines of the test's job logs."""
    report = yield
    if report.when == "call" and report.failed and item.get_closest_marker("slurm"):
        report.sections.append(("cluster at the failure", _cluster_state(item)))
    return report


def _cluster_state(item: pytest.Item) -> str:
    lines = []
    for args in (
        ["squeue", "-o", "%i %j %T %r %M"],
        ["sinfo", "-N", "-o", "%N %T %E %C %G"],
        ["sacct", "-X", "--starttime", "now-20minutes", "-o", "JobID,JobName%24,State,Elapsed"],
    ):
        lines += [f"$ {' '.join(args)}", query(*args) or "(no answer)"]
    tmp = getattr(item, "funcargs", {}).get("tmp_path")
    for log in sorted(tmp.rglob("*_log.err"))[-4:] if tmp else []:
        lines += [f"--- {log}", *log.read_text(errors="replace").splitlines()[-15:]]
    return "\n".join(lines)

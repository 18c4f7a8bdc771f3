"""The README's test command (`-n 2 --dist loadgroup`) runs an `xdist_group` on one worker: the
SLURM tests stop and restart the one shared cluster, so two of them side by side fail each other.
pytest 9.2 made Item.nodeid ignore the `@group` suffix that pytest-xdist 3.8 writes, and
loadgroup silently spread the group over both workers (pyproject.toml bounds pytest)."""

from __future__ import annotations

import subprocess
import sys


def test_loadgroup_runs_a_group_on_one_worker(tmp_path):
    workers = tmp_path / "workers.txt"
    (tmp_path / "test_grouped.py").write_text(
        "import os, pytest\n"
        "@pytest.mark.xdist_group('one')\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_grouped(i):\n"
        f"    with open({str(workers)!r}, 'a') as f:\n"
        "        f.write(os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n"
    )
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup"]
        + ["-p", "no:cacheprovider", "--rootdir", str(tmp_path), "test_grouped.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    ran_on = workers.read_text().split()
    assert len(ran_on) == 6 and len(set(ran_on)) == 1, ran_on

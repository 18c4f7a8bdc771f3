"""Benchmark: wall time of the read-only commands a user types most, each in a fresh interpreter,
as a user would run them: `optbench status studies/quickstart.yaml` (target < 2 s) and
`optbench models` (target < 5 s) with its count cache warm, plus the cold first `models` (it
counts the zoo: imports torch and timm, about 25 s), and `optbench run studies/quickstart.yaml
--dry-run` (its checks and plan; the first, cold, counts its models). Prints one JSON line; not a test.

    PYTHONPATH=. python bench/cli_latency.py [--repeats 5]

The machine's 1-minute load average is printed before and after: read the numbers only where
both are below 1 (the team records timings from a quiet machine only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed(args: list[str], env: dict[str, str]) -> float:
    """Seconds from start to exit of `python -m optbench ARGS` (it must succeed)."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "optbench", *args],
        cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": cache}
        status = [timed(["status", "studies/quickstart.yaml"], env) for _ in range(args.repeats)]
        dry = ["run", "studies/quickstart.yaml", "--dry-run"]
        dry_cold = timed(dry, env)  # counts its 3 models and their patch sizes into the cache
        cold = timed(["models"], env)  # fills the cache with the rest of the zoo
        warm = [timed(["models"], env) for _ in range(args.repeats)]
        dry_warm = [timed(dry, env) for _ in range(args.repeats)]
    study_db = REPO / "results" / "quickstart" / "study.db"
    print(
        json.dumps(
            {
                "bench": "cli_latency",
                "repeats": args.repeats,
                "quickstart_has_results": study_db.exists(),
                "status_s": {"median": round(statistics.median(status), 2), "max": round(max(status), 2)},
                "models_warm_s": {"median": round(statistics.median(warm), 2), "max": round(max(warm), 2)},
                "models_cold_s": round(cold, 2),
                "dry_run_warm_s": {"median": round(statistics.median(dry_warm), 2), "max": round(max(dry_warm), 2)},
                "dry_run_cold_s": round(dry_cold, 2),
                "load_1min": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
            }
        )
    )  # fmt: skip


if __name__ == "__main__":
    main()

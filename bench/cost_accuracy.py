"""The cost plan against a real SLURM cluster (issue 43 item 9): the quickstart at a few epochs,
measured (`optbench run --dry-run --measure`), run as SLURM jobs at the default packing
(`trials_per_job: auto`, which may pack trials of several cells into one job), then
`optbench status`'s comparison of each cell's estimate with its trials' median wall time, its
jobs' median sacct elapsed time (jobs of that cell alone) and, summed, the jobs of several
cells. Prints one JSON line: per cell, estimate / measured for trials and jobs, the jobs of
several cells, and whether each is within +-25%.

    bash scripts/slurm-local.sh start        # a one-node cluster on this machine (as root)
    python bench/cost_accuracy.py [--epochs 4] [--samples 2] [--cpus 2]

`--cpus` is each job's cpus_per_task: at the node's cores, one job runs at a time, as the
estimate assumes (a trial alone on its cores). The study lives in a temporary folder, removed
afterwards unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from optbench.host import cpu_name

ROOT = Path(__file__).resolve().parents[1]
# status's compared cells: "vit_p_w64_16px/adamw/e4 9.8 s vs 11.2 s (-12%, 2 trial(s))"
COMPARED = re.compile(r"(\S+/\S+/e\d+) (\S+ \w+) vs (\S+ \w+) \(([+-]\d+)%, (\d+) (trial|job)")
# status's jobs of several cells: "... summed over them): 1.2 min vs 1.4 min (-14%, 3 job(s))"
MIXED = re.compile(r"several cells.*?: (\S+ \w+) vs (\S+ \w+) \(([+-]\d+)%, (\d+) job")


def _optbench(*args: str, cwd: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "optbench", *args], cwd=cwd, capture_output=True, text=True
    )
    if proc.returncode != 0:
        sys.exit(f"optbench {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


def _mixed(status: str) -> dict | None:
    """{estimate, measured, estimate_over_measured, n} of status's line on the jobs of several
    cells, None without one."""
    found = MIXED.search(" ".join(status.split()))
    if found is None:
        return None
    estimate, measured, percent, n = found.groups()
    ratio = round(1 + int(percent) / 100, 2)
    return {
        "estimate": estimate,
        "measured": measured,
        "estimate_over_measured": ratio,
        "n": int(n),
    }


def _compared(status: str) -> tuple[dict, dict]:
    """Per cell {estimate, measured, estimate_over_measured, n} of status's trial line and of
    its SLURM job line (jobs of that cell alone)."""
    flat = " ".join(status.split()).partition("SLURM jobs of several cells")[0]
    trial_part, _, job_part = flat.partition("SLURM job time, estimated vs measured")
    trial_part = trial_part.partition("trial time, estimated on")[2]

    def cells(text: str) -> dict:
        return {
            cell: {
                "estimate": estimate,
                "measured": measured,
                "estimate_over_measured": round(1 + int(percent) / 100, 2),
                "n": int(n),
            }
            for cell, estimate, measured, percent, n, _ in COMPARED.findall(text)
        }

    return cells(trial_part), cells(job_part)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=os.cpu_count())
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    if shutil.which("sinfo") is None or subprocess.run(["sinfo"], capture_output=True).returncode:
        sys.exit(
            "no SLURM cluster reachable (sinfo): `bash scripts/slurm-local.sh start` makes one"
        )
    study = yaml.safe_load((ROOT / "studies" / "quickstart.yaml").read_text())
    study.pop("decide", None)  # a fixed size: the cost plan is what is measured here
    study["name"] = "cost_accuracy"
    study["epochs"] = args.epochs
    study["search"]["n_samples"] = args.samples
    study["executor"] = {
        "kind": "slurm",
        "slurm": {"cpus_per_task": args.cpus, "time_min": 30, "poll_s": 2},
    }
    work = Path(tempfile.mkdtemp(prefix="optbench-cost-accuracy-"))
    (work / "study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    load_before = os.getloadavg()
    clock = {}
    for step, command in [
        ("measure", ["run", "study.yaml", "--dry-run", "--measure"]),
        ("run", ["run", "study.yaml"]),
    ]:
        start = time.time()
        _optbench(*command, cwd=work)
        clock[f"{step}_wall_s"] = round(time.time() - start, 1)
    status = _optbench("status", "study.yaml", cwd=work)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    trials, jobs = _compared(status)
    mixed = _mixed(status)
    compared = [*trials.values(), *jobs.values(), *([mixed] if mixed else [])]
    ratios = [c["estimate_over_measured"] for c in compared]
    print(json.dumps({
        "bench": "cost_accuracy", "study": f"quickstart, {args.epochs} epochs, "
        f"{args.samples} samples per model, trials_per_job auto, cpus_per_task {args.cpus}",
        "cpu": cpu_name(), "cores": os.cpu_count(),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        **clock, "driver_user_s": round(children.ru_utime, 1),
        "driver_sys_s": round(children.ru_stime, 1),
        "trials": trials, "jobs": jobs, "jobs_of_several_cells": mixed,
        "within_25pct": bool(ratios) and all(0.75 <= r <= 1.25 for r in ratios),
    }))  # fmt: skip
    if args.keep:
        print(f"kept: {work}", file=sys.stderr)
    else:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()

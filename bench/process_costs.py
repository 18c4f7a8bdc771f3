"""Benchmark: what a process pays that is not its work (host.py), each in fresh interpreters.

- `exit`: a pool worker's imports (`optbench.train.run_trial`, torch and timm with it), then
  the process's end: the seconds from its last statement to its exit, and its CPU time (user +
  sys), with and without `host.freeze_at_exit` (alternating; medians of `--repeats`).
- `run`: `optbench run` of a one-trial local study (the smallest ViT, digits at 16 px, 3
  epochs, one worker): wall and CPU seconds of the driver and its worker, whole; what the tests'
  many short runs and a user's each pay beside the trial. Run the bench on another checkout
  (PYTHONPATH) to compare code; `exit` needs a checkout with `freeze_at_exit`.

Prints one JSON line; not a test. The machine's 1-minute load average is printed before and
after: read the numbers only where both are low.

    PYTHONPATH=. python bench/process_costs.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from optbench.host import cpu_name

WORKER = "import optbench.train.run_trial\n"
FREEZE = "from optbench.host import freeze_at_exit\nfreeze_at_exit()\n"
LAST = "import time\nprint(time.time(), flush=True)\n"
STUDY = {
    "name": "one",
    "dataset": {"name": "digits", "img_size": 16},
    "models": ["vit_p_w64_16px"],
    "optimizers": ["adamw"],
    "epochs": 3,
    "batch_size": 128,
    "ref_batch": 128,
    "search": {"n_samples": 1, "ranges": {"adamw": {"lr": [1e-3, 1e-2], "wd": [0.01, 0.1]}}},
    "recipe": {"warmup_epochs": 1, "hflip": False, "translate": 2},
    "executor": {"kind": "local", "workers": 1},
}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def exit_seconds(code: str) -> tuple[float, float]:
    """(seconds from the last statement to the exit, the process's CPU seconds) of `code`."""
    cpu = children_cpu()
    done = subprocess.run(
        [sys.executable, "-c", code + LAST], capture_output=True, text=True, check=True
    )
    ended = time.time()
    return ended - float(done.stdout.split()[-1]), children_cpu() - cpu


def run_seconds(folder: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of `optbench run` on a fresh one-trial study in `folder`."""
    study = folder / "one.yaml"
    study.write_text(yaml.safe_dump({**STUDY, "output": str(folder / "results")}))
    cpu, start = children_cpu(), time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "optbench", "run", str(study)],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder,
    )  # fmt: skip
    return time.perf_counter() - start, children_cpu() - cpu


def medians(pairs: list[tuple[float, float]], names: tuple[str, str]) -> dict[str, float]:
    """The median of each column of `pairs`, by name."""
    columns = zip(*pairs, strict=True)
    return {name: round(statistics.median(x), 2) for name, x in zip(names, columns, strict=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--parts", default="exit,run", help="exit, run or both")
    args = parser.parse_args()
    parts = args.parts.split(",")
    load_before = os.getloadavg()[0]
    line = {"bench": "process_costs", "cpu": cpu_name(), "cores": os.cpu_count()}
    line["repeats"] = args.repeats
    if "exit" in parts:
        plain, frozen = [], []
        for _ in range(args.repeats):  # alternating: a drift in the machine hits both
            plain.append(exit_seconds(WORKER))
            frozen.append(exit_seconds(WORKER + FREEZE))
        names = ("exit_s", "process_cpu_s")
        line["worker_exit"] = {
            "plain": medians(plain, names),
            "freeze_at_exit": medians(frozen, names),
        }
    if "run" in parts:
        runs = []
        with tempfile.TemporaryDirectory() as scratch:
            for k in range(args.repeats):
                folder = Path(scratch) / str(k)
                folder.mkdir()
                runs.append(run_seconds(folder))
        line["one_trial_run"] = medians(runs, ("wall_s", "cpu_s"))
    line["load_1min"] = {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)}
    print(json.dumps(line))


if __name__ == "__main__":
    main()

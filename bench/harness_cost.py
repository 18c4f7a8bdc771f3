"""What the harness costs around a study's trainings (issue 55): the quickstart run locally, and
where its seconds went, read from its own records. Prints one JSON line.

    PYTHONPATH=. python bench/harness_cost.py                      # runs the quickstart in a
                                                                   # fresh temporary folder
    PYTHONPATH=. python bench/harness_cost.py --ran-in DIR --workers 2   # a finished run's

- `wall_over_epochs`: the trials' wall_s added up over their epochs' time (metrics.jsonl's
  epoch_s, training steps only), the issue's 1.21 before it;
- `worker_s_over_epochs`: the study's worker-seconds (workers x the run's wall time, from the
  first trial's start to the last one's completion, the store's times) over the same epochs'
  time, the issue's 1.32;
- `parts_s`: result.json's `timing` (trial/timing.py) added over the trials, each part in
  seconds, and `process_s`, the worker processes' starts and imports they recorded; absent for
  results written before it.
With the run it made itself: the device its workers trained on (one worker per GPU where
there is one, as `optbench run` starts them), its wall time and the user + sys CPU seconds of it and its workers.
The machine (CPU model, load average before and after) is in the line: on a shared machine read
the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STUDY = "studies/quickstart.yaml"


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def measured(ran_in: Path, workers: int) -> dict:
    """The JSON's figures from the finished study run in `ran_in` (its output folder there)."""
    cwd = os.getcwd()
    os.chdir(ran_in)  # the study's output folder is relative to where it ran
    try:
        from optbench.api import load_study
        from optbench.run.rounds import asked_trials
        from optbench.store.database import Store
        from optbench.trial.results import load_result, read_metrics
        from optbench.trial.timing import PARTS

        spec = load_study(STUDY)
        store = Store(spec, create=False)
        items = [i for i in store.read(asked_trials(spec, store)) if i.is_result]
        wall = epochs = 0.0
        parts = dict.fromkeys(PARTS, 0.0)
        process_s, timed = 0.0, 0
        starts, ends = [], []
        for item in items:
            out = item.trial.out_dir
            result = load_result(out, spec.study_dir)
            wall += result.wall_s
            epochs += sum(m.get("epoch_s") or 0.0 for m in read_metrics(out, spec.study_dir))
            starts.append(item.record.datetime_start.timestamp())
            ends.append(item.record.datetime_complete.timestamp())
            if result.timing is not None:
                timed += 1
                for part in PARTS:
                    parts[part] += getattr(result.timing, part)
                process_s += (result.timing.process_start_s or 0) + (result.timing.imports_s or 0)
        run_wall = max(ends) - min(starts)
    finally:
        os.chdir(cwd)
    line = {
        "trials": len(items),
        "wall_s": round(wall, 1),
        "epochs_s": round(epochs, 1),
        "wall_over_epochs": round(wall / epochs, 3),
        "workers": workers,
        "run_wall_s": round(run_wall, 1),
        "worker_s_over_epochs": round(workers * run_wall / epochs, 3),
    }
    if timed:
        line["timed_trials"] = timed
        line["parts_s"] = {part: round(s, 1) for part, s in parts.items()}
        line["process_s"] = round(process_s, 1)
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ran-in", type=Path, help="a folder the quickstart ran in, finished")
    parser.add_argument("--workers", type=int, default=2, help="its workers (with --ran-in)")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    line = {"bench": "harness_cost", "cpu": cpu_model(), "cores": os.cpu_count()}
    if args.ran_in:
        line.update(measured(args.ran_in.resolve(), args.workers))
    else:
        with tempfile.TemporaryDirectory() as scratch:
            (Path(scratch) / "studies").mkdir()
            (Path(scratch) / STUDY).write_bytes((REPO / STUDY).read_bytes())
            paths = [str(REPO), os.environ.get("PYTHONPATH", "")]  # and where wheels went
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "optbench", "run", STUDY],
                cwd=scratch, env=env, check=True, stdout=subprocess.DEVNULL,
            )  # fmt: skip
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            line["run_s"] = round(time.perf_counter() - t0, 1)
            line["user_sys_s"] = round(usage.ru_utime + usage.ru_stime, 1)
            import torch

            from optbench.executors.local import split_cores
            from optbench.host import usable_cores

            gpus = torch.cuda.device_count()  # one worker per GPU where there are GPUs
            workers, _ = split_cores(26, "auto", usable_cores(), gpus)
            line["device"] = torch.cuda.get_device_name() if gpus else "cpu"
            line.update(measured(Path(scratch), workers))
    line["load_before"], line["load_after"] = round(load_before, 2), round(os.getloadavg()[0], 2)
    print(json.dumps(line))


if __name__ == "__main__":
    main()

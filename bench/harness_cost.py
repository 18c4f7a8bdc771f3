"""What the harness costs around a study's trainings (issue 55): the quickstart run locally, and
where its seconds went, read from its own records. Prints one JSON line.

    PYTHONPATH=. python bench/harness_cost.py                      # runs the quickstart in a
                                                                   # fresh temporary folder
    PYTHONPATH=. python bench/harness_cost.py --ran-in DIR --workers 2   # a finished run's
    PYTHONPATH=. python bench/harness_cost.py --slurm              # as SLURM jobs (below)

- `wall_over_epochs`: the trials' wall_s added up over their epochs' time (metrics.jsonl's
  epoch_s, training steps only), the issue's 1.21 before it;
- `worker_s_over_epochs`: the study's worker-seconds (workers x the run's wall time, from the
  first trial's start to the last one's completion, the store's times) over the same epochs'
  time, the issue's 1.32;
- `parts_s`: result.json's `timing` (trial/timing.py) added over the trials, each part in
  seconds, and `process_s`, the worker processes' starts and imports they recorded; absent for
  results written before it.
With `--slurm` the study gains `executor: {kind: slurm}` and nothing else (default settings:
`trials_per_job: auto`, docs/slurm.md) and runs on the cluster `sinfo` reaches
(scripts/slurm-local.sh); the line adds its completed jobs as `optbench status` reads them
from sacct (executors/slurm/study.py completed_job_times): `job_elapsed_over_epochs`, the jobs' Elapsed added up over
their trials' epochs' time (the issue's 1.25 at most); `queue_wait_s`, Submit to Start, summed and
per job; and per job (`per_job`) its trials, its elapsed, its trials' epochs and wall, its first
trial's process start and imports (`start_s`, result.json's timing: the job step's Python from
its birth to the trainer) and `outside_s`, what the elapsed holds beyond its trials and that
start (SLURM's launch of the step, the batch script, the process's exit). A fresh copy has no
measured costs, so `auto` runs one trial per job; `--measure` first runs `optbench run --dry-run
--measure` (in `run_s`), whose figures `auto` packs by. `workers` is then the cores: jobs of the
default cpus_per_task 1 that run at once on a one-node cluster of this machine.
With the run it made itself: the device its workers trained on (one worker per GPU where
there is one, as `optbench run` starts them), its wall time and the user + sys CPU seconds of
it and its workers.
The machine (CPU model, load average before and after) is in the line: on a shared machine read
the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from optbench.host import cpu_name

REPO = Path(__file__).resolve().parents[1]
STUDY = "studies/quickstart.yaml"


def trial_seconds(out_dir: Path, study_dir: Path):
    """(result, its epochs' seconds (metrics.jsonl's epoch_s), its process's start + imports
    (recorded with a worker's first trial; 0 for the others and for results without timing))."""
    from optbench.trial.results import load_result, read_metrics

    result = load_result(out_dir, study_dir)
    epochs = sum(m.get("epoch_s") or 0.0 for m in read_metrics(out_dir, study_dir))
    timing = result.timing
    process = 0.0 if timing is None else (timing.process_start_s or 0) + (timing.imports_s or 0)
    return result, epochs, process


def measured(ran_in: Path, workers: int) -> dict:
    """The JSON's figures from the finished study run in `ran_in` (its output folder there)."""
    cwd = os.getcwd()
    os.chdir(ran_in)  # the study's output folder is relative to where it ran
    try:
        from optbench.api import load_study
        from optbench.run.rounds import asked_trials
        from optbench.store.database import Store
        from optbench.trial.timing import PARTS

        spec = load_study(STUDY)
        store = Store(spec, create=False)
        items = [i for i in store.read(asked_trials(spec, store)) if i.is_result]
        wall = epochs = 0.0
        parts = dict.fromkeys(PARTS, 0.0)
        process_s, timed = 0.0, 0
        starts, ends = [], []
        for item in items:
            result, trial_epochs, process = trial_seconds(item.trial.out_dir, spec.study_dir)
            wall += result.wall_s
            epochs += trial_epochs
            process_s += process
            starts.append(item.record.datetime_start.timestamp())
            ends.append(item.record.datetime_complete.timestamp())
            if result.timing is not None:
                timed += 1
                for part in PARTS:
                    parts[part] += getattr(result.timing, part)
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


def slurm_jobs(ran_in: Path) -> dict:
    """The JSON's SLURM figures (module docstring) of the study run in `ran_in` on SLURM: each
    completed job by sacct (`optbench status`'s own reading, completed_job_times) beside its
    trials' result files."""
    cwd = os.getcwd()
    os.chdir(ran_in)
    try:
        from optbench.api import load_study
        from optbench.executors.slurm.study import completed_job_times, job_folder
        from optbench.run.rounds import asked_trials
        from optbench.store.database import Store

        spec = load_study(STUDY)
        store = Store(spec, create=False)
        done = {i.trial.key: i.trial for i in store.read(asked_trials(spec, store)) if i.is_result}
        per_job: list[dict] = []
        for job_time in completed_job_times(job_folder(spec)):
            job = {"trials": 0, "epochs_s": 0.0, "wall_s": 0.0, "start_s": 0.0}
            for key in job_time.keys:
                if key in done:
                    result, epochs, process = trial_seconds(done[key].out_dir, spec.study_dir)
                    job["trials"] += 1
                    job["epochs_s"] += epochs
                    job["wall_s"] += result.wall_s
                    job["start_s"] += process  # the job's first trial paid its process's start
            job["elapsed_s"], job["queue_wait_s"] = job_time.elapsed_s, job_time.queue_s
            job["outside_s"] = job["elapsed_s"] - job["wall_s"] - job["start_s"]
            per_job.append(job)
    finally:
        os.chdir(cwd)
    total = {
        k: sum(j[k] for j in per_job)
        for k in ("elapsed_s", "epochs_s", "queue_wait_s", "start_s", "outside_s")
    }
    return {
        "jobs": len(per_job),
        "trials_per_job": sorted({j["trials"] for j in per_job}),
        "job_elapsed_s": round(total["elapsed_s"], 1),
        "job_epochs_s": round(total["epochs_s"], 1),
        "job_elapsed_over_epochs": round(total["elapsed_s"] / total["epochs_s"], 3),
        "queue_wait_s": round(total["queue_wait_s"], 1),
        "job_start_s": round(total["start_s"], 1),
        "job_outside_s": round(total["outside_s"], 1),
        "per_job": [{k: round(v, 1) for k, v in job.items()} for job in per_job],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ran-in", type=Path, help="a folder the quickstart ran in, finished")
    parser.add_argument("--workers", type=int, default=2, help="its workers (with --ran-in)")
    parser.add_argument("--slurm", action="store_true", help="as SLURM jobs (sinfo's cluster)")
    parser.add_argument(
        "--measure",
        action="store_true",
        help="first `optbench run --dry-run --measure`: the cost plan `auto` packs by",
    )
    parser.add_argument("--keep", action="store_true", help="keep the folder it ran in")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    line = {"bench": "harness_cost", "cpu": cpu_name(), "cores": os.cpu_count()}
    if args.ran_in:
        line.update(measured(args.ran_in.resolve(), args.workers))
        if args.slurm:  # it ran on SLURM: its jobs, from sacct
            line.update(slurm_jobs(args.ran_in.resolve()))
    else:
        scratch = tempfile.mkdtemp(prefix="optbench-harness-cost-")
        try:
            (Path(scratch) / "studies").mkdir()
            study = (REPO / STUDY).read_text()
            if args.slurm:  # nothing else changed: SLURM's default settings
                study += "executor: {kind: slurm}\n"
            (Path(scratch) / STUDY).write_text(study)
            paths = [str(REPO), os.environ.get("PYTHONPATH", "")]  # and where wheels went
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
            runs = [["run", STUDY, "--dry-run", "--measure"]] if args.measure else []
            t0 = time.perf_counter()
            for command in [*runs, ["run", STUDY]]:
                subprocess.run(
                    [sys.executable, "-m", "optbench", *command],
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
            if args.slurm:  # the jobs that ran at once: SLURM's, not the local pool's
                workers = len(os.sched_getaffinity(0))
            line.update(measured(Path(scratch), workers))
            if args.slurm:
                line["measured_first"] = args.measure
                line.update(slurm_jobs(Path(scratch)))
        finally:
            if not args.keep:
                shutil.rmtree(scratch)
    line["load_before"], line["load_after"] = round(load_before, 2), round(os.getloadavg()[0], 2)
    print(json.dumps(line))
    if args.keep and not args.ran_in:
        print(f"kept: {scratch}", file=sys.stderr)


if __name__ == "__main__":
    main()

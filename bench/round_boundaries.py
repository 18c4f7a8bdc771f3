"""What a sequential study's round boundaries cost (issue 45, item 5), read from a finished run's
own records: each trial's asking time (the driver asks a round's trials at once), start,
completion and wall_s. Prints one JSON line.

    python bench/round_boundaries.py STUDY.yaml --workers W     # from the folder it ran in
    python bench/round_boundaries.py STUDY.yaml --workers W --slurm

On the local pool a trial starts when asked and its times are the store's. With --slurm they are
each job's Submit, Start and End as sacct has them (the jobs of the study's journal), W the jobs
that ran at once, so a boundary also counts the driver's poll, the submission of the next array
and the scheduler's start of it.

Rounds are read off the records: a trial asked after every earlier trial completed begins a
round. At each boundary between rounds:
- tail_worker_s: worker-seconds idle while the round's last trial runs. With no trial left to
  hand out, each of the round's last W completions is a different worker's last trial, so the
  W - 1 earlier of them leave their worker idle until the last one: the sum of those gaps.
- look_s: from the round's last completion to the next round's first start, every worker idle:
  the driver records the result, makes the look (recomputes the claims) and asks the next round.
- idle_worker_s = tail_worker_s + W * look_s.
Beside them the run's wall time (first creation to last completion), its worker-seconds
(W * wall) and the share of those idle at boundaries. The tail is bounded by about one trial's
length, so it is compared with the median trial's wall_s.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from datetime import datetime

import submitit

from optbench.api import load_study
from optbench.executors.slurm.client import base_state, slurm_command
from optbench.executors.slurm.journal import read_records
from optbench.executors.slurm.study import job_folder
from optbench.run.rounds import asked_trials
from optbench.store.database import Store

Record = tuple[float, float, float, float]  # asked, started, completed, wall_s
TIMES = ("Submit", "Start", "End")  # sacct's fields for asked, started, completed


def _rounds(records: list[Record]) -> list[list[Record]]:
    """Records grouped into rounds, in order."""
    rounds: list[list[Record]] = []
    last_completed = float("-inf")
    for record in sorted(records):
        if not rounds or record[0] > last_completed:
            rounds.append([])
        rounds[-1].append(record)
        last_completed = max(last_completed, record[2])
    return rounds


def boundaries(records: list[Record], workers: int) -> dict:
    """The JSON of the module docstring, from each finished trial's (asked, started, completed,
    wall_s) in seconds."""
    rounds = _rounds(records)
    rows = []
    for this, after in itertools.pairwise(rounds):
        completions = sorted(r[2] for r in this)
        end = completions[-1]
        tail = sum(end - c for c in completions[-workers:-1])
        look = min(r[1] for r in after) - end
        rows.append(
            {
                "trials": len(this),
                "tail_worker_s": round(tail, 2),
                "look_s": round(look, 2),
                "idle_worker_s": round(tail + workers * look, 2),
            }
        )
    wall = max(r[2] for r in records) - min(r[0] for r in records)
    idle = sum(row["idle_worker_s"] for row in rows)
    return {
        "bench": "round-boundaries",
        "workers": workers,
        "rounds": [len(r) for r in rounds],
        "boundaries": rows,
        "wall_s": round(wall, 1),
        "worker_s": round(workers * wall, 1),
        "idle_share": round(idle / (workers * wall), 4),
        "median_trial_wall_s": round(statistics.median(r[3] for r in records), 1),
    }


def sacct_records(out: str) -> list[Record]:
    """Records of the finished jobs in `sacct -X -P -o JobID,State,Submit,Start,End` output
    (parsed as the SLURM executor parses sacct: submitit's reader, client.base_state)."""
    records = []
    for job in submitit.slurm.slurm.SlurmInfoWatcher().read_info(out).values():
        if base_state(job["State"]) != "COMPLETED":
            continue
        submit, start, end = (datetime.fromisoformat(job[k]).timestamp() for k in TIMES)
        records.append((submit, start, end, end - start))
    return records


def _local_records(spec) -> list[Record]:
    store = Store(spec, create=False)
    records = []
    for item in store.read(asked_trials(spec, store)):
        if item.is_result and item.record.datetime_complete is not None:
            asked = item.record.datetime_start.timestamp()
            wall = float(item.record.user_attrs["wall_s"])
            records.append((asked, asked, item.record.datetime_complete.timestamp(), wall))
    return records


def _slurm_records(spec) -> list[Record]:
    arrays = sorted({r.job_id.split("_")[0] for r in read_records(job_folder(spec)).values()})
    fields = ",".join(("JobID", "State", *TIMES))
    return sacct_records(slurm_command("sacct", "-X", "-P", "-o", fields, "-j", ",".join(arrays)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", help="the study YAML, from the folder the study ran in")
    parser.add_argument("--workers", type=int, required=True, help="trials that ran at once")
    parser.add_argument(
        "--slurm", action="store_true", help="the study ran on SLURM: sacct's times"
    )
    args = parser.parse_args()
    spec = load_study(args.study)
    records = _slurm_records(spec) if args.slurm else _local_records(spec)
    print(json.dumps({"study": spec.name, **boundaries(records, args.workers)}))


if __name__ == "__main__":
    main()

"""What a sequential study's round boundaries cost (issue 45, item 5), read from a finished run's
own records: each trial's creation time (the driver asks a round's trials at once), its
completion time and its wall_s. Prints one JSON line.

    python bench/round_boundaries.py STUDY.yaml --workers W     # from the folder it ran in

Rounds are read off the records: a trial created after every earlier trial completed begins a
round. At each boundary between rounds:
- tail_worker_s: worker-seconds idle while the round's last trial runs. With no trial left to
  hand out, each of the round's last W completions is a different worker's last trial, so the
  W - 1 earlier of them leave their worker idle until the last one: the sum of those gaps.
- look_s: from the round's last completion to the next round's first trial, every worker idle:
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

from optbench.api import load_study
from optbench.run.rounds import asked_trials
from optbench.store.database import Store


def _rounds(records: list[tuple[float, float, float]]) -> list[list[tuple[float, float, float]]]:
    """(created, completed, wall_s) triples grouped into rounds, in order."""
    rounds: list[list[tuple[float, float, float]]] = []
    last_completed = float("-inf")
    for record in sorted(records):
        if not rounds or record[0] > last_completed:
            rounds.append([])
        rounds[-1].append(record)
        last_completed = max(last_completed, record[1])
    return rounds


def boundaries(records: list[tuple[float, float, float]], workers: int) -> dict:
    """The JSON of the module docstring, from each finished trial's (created, completed, wall_s)
    in seconds."""
    rounds = _rounds(records)
    rows = []
    for this, after in itertools.pairwise(rounds):
        completions = sorted(r[1] for r in this)
        end = completions[-1]
        tail = sum(end - c for c in completions[-workers:-1])
        look = min(r[0] for r in after) - end
        rows.append(
            {
                "trials": len(this),
                "tail_worker_s": round(tail, 2),
                "look_s": round(look, 2),
                "idle_worker_s": round(tail + workers * look, 2),
            }
        )
    wall = max(r[1] for r in records) - min(r[0] for r in records)
    idle = sum(row["idle_worker_s"] for row in rows)
    return {
        "bench": "round-boundaries",
        "workers": workers,
        "rounds": [len(r) for r in rounds],
        "boundaries": rows,
        "wall_s": round(wall, 1),
        "worker_s": round(workers * wall, 1),
        "idle_share": round(idle / (workers * wall), 4),
        "median_trial_wall_s": round(statistics.median(r[2] for r in records), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", help="the study YAML, from the folder the study ran in")
    parser.add_argument("--workers", type=int, required=True, help="the local pool's workers")
    args = parser.parse_args()
    spec = load_study(args.study)
    store = Store(spec, create=False)
    records = [
        (
            item.record.datetime_start.timestamp(),
            item.record.datetime_complete.timestamp(),
            float(item.record.user_attrs["wall_s"]),
        )
        for item in store.read(asked_trials(spec, store))
        if item.is_result and item.record.datetime_complete is not None
    ]
    print(json.dumps({"study": spec.name, **boundaries(records, args.workers)}))


if __name__ == "__main__":
    main()

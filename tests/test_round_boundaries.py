"""bench/round_boundaries.py: what a sequential study's round boundaries cost, read off its
trials' creation and completion times."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
from round_boundaries import boundaries, sacct_records  # noqa: E402


def test_a_boundary_costs_the_tail_of_its_round_and_the_look_on_every_worker():
    # two workers; round 1 asks 4 trials at t=0, the last two end at 20 and 23: the worker done
    # at 20 waits 3 s; the driver asks round 2 at 23.5, so both wait 0.5 s more
    first = [(0.0, 0.0, 10.0, 10.0), (0.0, 0.0, 12.0, 12.0), (0.0, 0.0, 20.0, 10.0)]
    first.append((0.0, 0.0, 23.0, 11.0))
    second = [(23.5, 23.5, 30.0, 6.5), (23.5, 23.5, 31.0, 7.5)]
    out = boundaries(first + second, workers=2)
    assert out["rounds"] == [4, 2]
    assert out["boundaries"] == [
        {"trials": 4, "tail_worker_s": 3.0, "look_s": 0.5, "idle_worker_s": 4.0}
    ]
    assert out["wall_s"] == 31.0 and out["worker_s"] == 62.0
    assert out["idle_share"] == round(4.0 / 62.0, 4)


def test_a_trial_asked_while_another_runs_is_in_that_round():
    # a retry asked at 5 while the round still runs (created before its last completion) is not
    # a round of its own
    records = [(0.0, 0.0, 10.0, 10.0), (0.0, 0.0, 9.0, 9.0), (5.0, 5.0, 12.0, 7.0)]
    out = boundaries(records, workers=2)
    assert out["rounds"] == [3] and out["boundaries"] == []
    assert out["idle_share"] == 0.0


def test_on_slurm_a_boundary_lasts_until_the_next_array_starts():
    # sacct's Submit, Start and End: round 2 submitted 3 s after round 1 ended (the driver's
    # poll and look) and started 5 s after that (the scheduler): 8 s on both workers; a failed
    # job is no result
    out = """JobID|State|Submit|Start|End
7_0|COMPLETED|2026-12-03T10:00:00|2026-12-03T10:00:01|2026-12-03T10:00:20
7_1|COMPLETED|2026-12-03T10:00:00|2026-12-03T10:00:01|2026-12-03T10:00:22
7_2|FAILED|2026-12-03T10:00:00|2026-12-03T10:00:01|2026-12-03T10:00:02
8_0|COMPLETED|2026-12-03T10:00:25|2026-12-03T10:00:30|2026-12-03T10:00:40
"""
    records = sacct_records(out)
    assert len(records) == 3 and records[0][3] == 19.0
    row = boundaries(records, workers=2)["boundaries"][0]
    assert row == {"trials": 2, "tail_worker_s": 2.0, "look_s": 8.0, "idle_worker_s": 18.0}

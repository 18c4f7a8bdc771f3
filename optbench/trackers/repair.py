"""The driver completes the tracker runs that an outage left incomplete (`complete_runs`), from
the trials' own files, each time `optbench run` starts on its trials.

A trial's run is incomplete when the trial ended with this tracker (its result.json's
`execution.tracking` is the study's) and its tracker.json does not say the run ended: the
tracker failed while the trial trained (a server that stopped answering, a store that could
not be written), its worker gave up waiting for it, or the run never opened. Completing it does
what the worker would have done (trial_run.RunWriter): open the run (or make it), log the lines
of metrics.jsonl after the last epoch it holds, end it with result.json's status and numbers.
A complete run is never written again, so a second `optbench run` logs nothing; a run whose
worker still writes it (its lock is held) is left to that worker.

The first failure ends the pass (the tracker still does not answer, most likely): one line
says how many runs stay incomplete and why, and the next run tries again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from optbench.trackers.backends import describe_failure, read_run_file
from optbench.trackers.trial_run import RunWriter
from optbench.trial.config import TrialResult
from optbench.trial.results import InvalidResultFile, load_result, read_metrics

if TYPE_CHECKING:
    from optbench.plan.trials import Trial


def incomplete(trial: Trial) -> TrialResult | None:
    """The trial's result if its tracker run is incomplete (module docstring), else None."""
    tracking, root = trial.execution.tracking, trial.study_dir
    if tracking is None:
        return None
    held = read_run_file(trial.out_dir, root, tracking)
    if held.ended:
        return None
    try:
        result = load_result(trial.out_dir, root)
    except InvalidResultFile:
        return None  # a failed attempt: its retry continues the run
    if (
        result is None
        or result.config != trial.config
        or result.execution is None
        or result.execution.tracking != tracking
    ):
        return None
    if held.ended is None and held.run_id is not None:  # a file from before `ended`: the
        lines = read_metrics(trial.out_dir, root, partial=True)  # epochs tell what is missing
        if not lines or lines[-1]["epoch"] <= held.logged:
            return None
    return result


def complete_runs(trials: list[Trial], say: Callable[[str], None]) -> int:
    """Complete the incomplete tracker runs of `trials`; how many it completed. Each outcome
    is one line to `say`; nothing where every run is complete."""
    todo = [(trial, result) for trial in trials if (result := incomplete(trial)) is not None]
    if not todo:
        return 0
    tracking = todo[0][0].execution.tracking  # one study's: the same for every trial
    done = 0
    for trial, result in todo:
        writer = RunWriter(trial.config, trial.out_dir, trial.study_dir, tracking)
        try:
            if not writer.lock(wait=False):
                continue  # its worker is writing it
            writer.open()
            writer.sync()
            writer.end(result)
        except Exception as err:  # noqa: BLE001 - a tracker's failure stops no study
            say(
                f"{len(todo) - done} {tracking.kind} run(s) of finished trials stay incomplete: "
                f"{describe_failure(err, tracking)}; the next `optbench run` completes them"
            )
            return done
        finally:
            writer.close()
        done += 1
    if done:
        say(
            f"completed {done} {tracking.kind} run(s) that a tracker outage left incomplete, "
            "from their trials' metrics.jsonl and result.json"
        )
    return done

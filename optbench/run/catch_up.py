"""The driver's first phase: record the attempts that ended while no driver followed them
(`catch_up`), before the store is prepared, so that a failure among them is retried in this run.
"""

from __future__ import annotations

from optuna.trial import TrialState
from rich.console import Console

from optbench.executors.protocol import Executor
from optbench.plan.trials import Trial
from optbench.run.attempts import record_end, record_from_disk
from optbench.store.database import Store


def catch_up(store: Store, trials: list[Trial], executor: Executor, console: Console) -> None:
    """Record the attempts that ended while no driver followed them: those whose job the
    executor says ended (`settle`), then result files already on disk (a driver killed before
    it recorded them). Attempts not yet asked for (WAITING) never ran: prepare asks for them."""
    running = {
        s.trial.key: s
        for s in store.read(trials)
        if s.status == "pending" and s.record is not None and s.record.state == TrialState.RUNNING
    }
    ended = executor.settle([s.trial.job for s in running.values()])
    for event in ended:
        record_end(store, running[event.key], event.message)
    if ended:
        console.print(f"recorded {len(ended)} trial(s) whose job ended while no run followed")
    recovered = [
        s for s in running.values() if s.status == "pending" and record_from_disk(store, s)
    ]
    if recovered:
        console.print(f"recorded {len(recovered)} result(s) found on disk")
        for s in recovered:
            if s.status == "failed":  # an invalid result file: a failed attempt, retried now
                console.print(f"failed: {s.record.user_attrs['message']}", markup=False)

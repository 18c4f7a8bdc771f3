"""What the driver tells the user beside the progress table (progress.py): the line for a run
that leaves failed trials (`failed_trials`), what keeps a sequential study's next look waiting
(`waiting_for`), and the model's multiply-adds the table shows (`flops_counter`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from optbench import safefs
from optbench.run.attempts import repeats_itself
from optbench.run.progress import StudyProgress
from optbench.spec.schema import StudySpec
from optbench.store.database import StoredTrial
from optbench.trial.results import ERROR_LOG


def failed_trials(progress: StudyProgress, study_dir: Path) -> str | None:
    """One line for a run that leaves failed trials: how many, and their error.log files (or
    the trials folder, where none wrote one: a worker that died). None if none failed."""
    failed = [s for s in progress.trials if s.status == "failed"]
    if not failed:
        return None
    logs = [s.trial.out_dir / ERROR_LOG for s in failed if _error_log(s)]
    if logs:
        more = f" and {len(logs) - 3} more" if len(logs) > 3 else ""
        where = f"tracebacks in {', '.join(map(str, logs[:3]))}{more}"
    else:
        where = f"their folders are in {study_dir / 'trials'}"
    return f"{len(failed)} trial(s) failed; {where}"


def _error_log(item: StoredTrial) -> bool:
    """Whether the trial's folder holds an error.log (a link there is not one)."""
    try:
        return safefs.stat(item.trial.out_dir / ERROR_LOG, item.trial.job.root) is not None
    except safefs.UnsafePath:
        return False


def waiting_for(progress: StudyProgress, retries: int) -> str:
    """What keeps a sequential study's next look from being taken after a run: its round's
    failed trials, which no later run retries (each had its executor.retries, or failed twice
    the same way), and what to do."""
    failed = [s for s in progress.trials if s.status == "failed"]
    repeating = [s for s in failed if repeats_itself(s)]
    if not failed:
        return "trials without a result"
    parts = []
    if len(failed) > len(repeating):
        parts.append(
            f"{len(failed) - len(repeating)} failed trial(s) that no run retries with "
            f"executor.retries: {retries}; raise it (e.g. --set executor.retries={retries + 1}) "
            "and run again to retry them"
        )
    if repeating:
        parts.append(
            f"{len(repeating)} failed trial(s) that failed twice the same way and are not "
            "retried (`not retried` above): remove the cause"
        )
    return "; ".join(parts)


def flops_counter(spec: StudySpec) -> Callable[[str], float]:
    """Forward multiply-adds per image of a model on the study's input (each model counted once,
    when first asked: it needs torch and timm)."""

    @functools.cache
    def flops_of(model: str) -> float:
        from optbench.data.datasets import dataset_info
        from optbench.models.cache import cached_counts

        info = dataset_info(spec.dataset, model)
        shape = dict(num_classes=info.num_classes, in_chans=info.in_chans, img_size=info.img_size)
        return cached_counts(model, **shape)["flops"]

    return flops_of

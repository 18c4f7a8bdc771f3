"""A trial's attempts as the driver sees them: which result file in a trial's folder is its
latest attempt's (`whose`, the one rule), recording an attempt's end (`record_end`) or a result
file found on disk (`record_from_disk`), and which failed attempts are tried again (`prepare`,
`repeats_itself`).

An attempt is one optuna trial of a planned trial (store/database.py counts them); a worker
writes the result file of the attempt its job names (TrialResult.attempt). The file in a trial's
folder may be another attempt's or another configuration's (a folder is untrusted ground), so
every reader of it asks `read_attempt`, which says whose the file is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from optuna.trial import TrialState
from rich.console import Console

from optbench import safefs
from optbench.plan.trials import Trial
from optbench.store.database import Store, StoredTrial
from optbench.trial.config import TrialResult
from optbench.trial.results import (
    RESULT_FILE,
    InvalidResultFile,
    config_difference,
    load_result,
    read_metrics,
)

Whose = Literal["this", "earlier", "other"]


def whose(result: TrialResult, item: StoredTrial) -> Whose:
    """Whose result `result` (read from the trial's folder) is: the latest attempt's ("this"),
    an earlier attempt's ("earlier"), or another configuration's ("other"). A result names its
    attempt; one written before results did (attempt None) is the latest attempt's unless it
    failed: a failed attempt's file was left in its folder then, so a failed one is an earlier
    attempt's crash."""
    if result.attempt is not None and result.attempt != item.attempts:
        return "earlier"
    if result.config != item.trial.config:
        return "other"
    if result.attempt is None and result.status == "failed":
        return "earlier"
    return "this"


@dataclass(frozen=True)
class FolderResult:
    """What a trial's folder holds for its latest attempt (`read_attempt`): `kind` is "none" (no
    result file), "invalid" (`why` says what is wrong with it), or `whose` the file is;
    `metrics` are the latest attempt's (empty for another's); `timing_note`: why its timing
    was read as absent (trial/results.py: load_result), else None."""

    kind: Literal["none", "invalid"] | Whose
    result: TrialResult | None = None
    metrics: list[dict] = field(default_factory=list)
    why: str | None = None
    timing_note: str | None = None


def read_attempt(item: StoredTrial) -> FolderResult:
    """The trial's result file as its worker left it, and whose it is. An unusable file is
    "invalid", never a traceback: the folder is cleared before each attempt (`clear_folder`),
    so a file too broken to say whose it is counts as the latest attempt's failure."""
    out_dir, root = item.trial.out_dir, item.trial.job.root
    notes: list[str] = []
    try:
        result = load_result(out_dir, root, notes)
        if result is None:
            return FolderResult("none")
        metrics = read_metrics(out_dir, root)  # unusable metrics make the result invalid too
    except InvalidResultFile as err:
        return FolderResult("invalid", why=str(err))
    kind = whose(result, item)
    note = notes[0] if notes else None
    return FolderResult(kind, result, metrics if kind == "this" else [], timing_note=note)


def failed(item: StoredTrial, why: str) -> TrialResult:
    """The failed result the driver records for an attempt that left no result of its own."""
    config = item.trial.config
    return TrialResult(
        status="failed",
        epochs=config.epochs,
        config=config,
        message=why,
        origin="driver",
        attempt=item.attempts,
    )


def clear_folder(item: StoredTrial) -> None:
    """Remove the trial's result file before its next attempt exists (store.prepare's
    `before_attempt`): a file found while that attempt runs is then its own, even one too
    broken to say so (an invalid result file)."""
    safefs.remove(item.trial.out_dir / RESULT_FILE, item.trial.job.root)


def record_from_disk(store: Store, item: StoredTrial) -> bool:
    """Record the result file a worker wrote for the trial's latest attempt, if there is one
    (whether it recorded one). An invalid one is recorded as a failed attempt with its reason
    (and retried as one); another attempt's or configuration's is left alone."""
    found = read_attempt(item)
    if found.kind == "invalid":
        return store.record(item, failed(item, found.why), [])
    if found.kind != "this":
        return False
    return store.record(item, found.result, found.metrics, timing_note=found.timing_note)


def record_end(store: Store, item: StoredTrial, lost_message: str | None) -> None:
    """Record the end of the trial's latest attempt (its job ended; `lost_message`: how, where
    the executor knows it lost the job): its result file, or a failure where the folder holds
    none of its own (none, an earlier attempt's, another configuration's, an invalid one)."""
    found = read_attempt(item)
    if found.kind == "this":
        store.record(item, found.result, found.metrics, timing_note=found.timing_note)
        return
    out_dir = item.trial.out_dir
    if found.kind == "invalid":
        why = found.why
    elif found.kind == "other":
        difference = config_difference(item.trial.config, found.result.config)
        why = lost_message or (
            f"{out_dir / RESULT_FILE} is the result of another configuration ({difference})"
        )
    else:  # none, or an earlier attempt's: this one wrote none
        why = lost_message or f"no {RESULT_FILE} written in {out_dir}"
    store.record(item, failed(item, why), [])


def holds_its_result(item: StoredTrial) -> bool:
    """Whether the trial's folder holds a valid result of its latest attempt: one written after
    catching up read the folder, by a job that outlived its driver (SLURM), which the executor
    follows again; its end records it."""
    return read_attempt(item).kind == "this"


def repeats_itself(item: StoredTrial) -> bool:
    """Whether the trial's latest attempt failed with the same one-line reason (exception type
    and message, TrialResult.message) as the attempt before it, both reported by the worker
    itself: another would fail the same way (a corrupt image, an input the model cannot take),
    so it is not retried. A job that ended without its result (killed, stalled, preempted,
    out of time: the driver's message, origin "driver"; or recorded before origins were) is
    retried as before: its cause may not be the trial's."""
    if item.status != "failed" or item.earlier is None or item.earlier.state != TrialState.FAIL:
        return False
    latest, earlier = item.record.user_attrs, item.earlier.user_attrs
    if latest.get("origin") != "worker" or earlier.get("origin") != "worker":
        return False
    return latest.get("message") is not None and latest.get("message") == earlier.get("message")


def prepare(store: Store, trials: list[Trial], retries: int, console: Console) -> list[StoredTrial]:
    """store.prepare, retrying failed trials within `retries` unless they repeat themselves
    (each such trial is named, with its reason); each new attempt's folder cleared first."""
    held: list[StoredTrial] = []

    def retry(item: StoredTrial) -> bool:
        if repeats_itself(item):
            held.append(item)
            return False
        return True

    stored = store.prepare(trials, retries=retries, retry=retry, before_attempt=clear_folder)
    for item in held:
        console.print(
            f"not retried: {item.trial.key} failed twice the same way: "
            f"{item.record.user_attrs['message']}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    return stored

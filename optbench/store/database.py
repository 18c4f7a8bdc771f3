"""The study database: an optuna storage (SQLite in the study folder by default).

Layout: one optuna study per cell, named "<study name>/<cell id>", whose user attr "config"
holds everything that gives the cell's results meaning (its hash is in the cell id). One optuna
trial per attempt at a (sample, seed), with params lr and wd and user attrs key, model,
optimizer, epochs, sample, seed, attempt; once recorded also status, the errors, wall_s,
images_per_s, input_wait, device, pipeline and population (the resolved execution settings),
digest, provenance (which code made it) and the per-epoch metrics (also as intermediate values).
While an attempt runs, user attr "running" says which driver's worker runs it and since when
(`mark_running`, `running_marks`): what `optbench status` counts as running.

States: COMPLETE = finished (value = final top-1 error); FAIL with status "diverged" = diverged
(a result); FAIL otherwise = failed (a crash, retried by the next run); RUNNING = pending.
Only the single driver process writes here; workers write result files. The trials themselves
come from the plan (plan/trials.py); the store only attaches their state (`StoredTrial`).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import optuna
from optuna.trial import FrozenTrial, TrialState

from optbench import safefs
from optbench.errors import UsageError
from optbench.plan.sampling import distributions
from optbench.plan.trials import Trial
from optbench.spec.schema import StudySpec
from optbench.store.storage_url import make_storage, masked, storage_errors
from optbench.trial.config import Machine, TrialResult
from optbench.trial.results import TIMING_NOTE, stored_timing

if TYPE_CHECKING:
    import pandas as pd

optuna.logging.set_verbosity(optuna.logging.WARNING)

RESULT_ATTRS = (
    "status",
    "final_error",
    "best_error",
    "epochs_run",
    "diverged_epoch",
    "wall_s",
    "images_per_s",
    "input_wait",
    "device",
    "threads",
    "versions",
    "digest",
    "message",
    "origin",
)

RUNNING_ATTR = "running"  # {"run": driver token, "since": time.time()} while a worker runs it

# A sequential study's looks (optbench/run/rounds.py): one more optuna study, "<study name>/looks",
# without trials; each look is one user attr "look/<panel>/<k>" holding its record.
LOOKS_STUDY = "looks"


class DamagedLooks(UsageError):
    """A sequential study's looks record that is not what a driver wrote (not JSON, not a
    look's fields, not one of the design's looks): one line naming the study, exit 2, and the
    record is left as it is."""


# which code made a result (TrialResult.provenance): columns of the trials frame and trials.csv
PROVENANCE_COLUMNS = ("version", "commit", "code_fingerprint")
# the machine it ran on (provenance.machine): cpu, cpu_flags, cpu_capability, gpu, gpu_driver
MACHINE_COLUMNS = tuple(Machine.model_fields)


def user_code_cell(user_code: dict | None) -> str | None:
    """A result's provenance.user_code (the study's own modules, user_code.py) as one cell of
    text, JSON with sorted keys ({module: {"version", "digest"}}); None without one."""
    return json.dumps(user_code, sort_keys=True, separators=(",", ":")) if user_code else None


@dataclass
class StoredTrial:
    """A planned trial and where it stands in the database."""

    trial: Trial
    status: str = "pending"  # finished | diverged | failed | pending
    attempts: int = 0
    record: FrozenTrial | None = None  # the latest attempt
    earlier: FrozenTrial | None = None  # the attempt before it

    @property
    def is_result(self) -> bool:
        return self.status in ("finished", "diverged")


def _status(trial: FrozenTrial) -> str:
    if trial.state == TrialState.COMPLETE:
        return "finished"
    if trial.state == TrialState.FAIL:
        return "diverged" if trial.user_attrs.get("status") == "diverged" else "failed"
    return "pending"


def _storage_errors(method):
    @functools.wraps(method)
    def wrapped(self, *args, **kwargs):
        with storage_errors(self.spec.storage_url):
            return method(self, *args, **kwargs)

    return wrapped


def refuse_links(spec: StudySpec, trials: list[Trial]) -> None:
    """UnsafePath (exit 2) if the study folder, its `trials/` folder, a cell's or a trial's
    folder, or the study's own database file is a symbolic link: optbench would write and
    delete through it, outside the study folder. Reads only."""
    safefs.check(spec.study_dir / "trials", spec.output)
    if spec.storage is None:
        safefs.check(spec.study_dir / "study.db", spec.output)
    for trial in trials:
        safefs.check(trial.out_dir, spec.output)


class Store:
    """Read and write one study's trials. `Store(spec, create=True)` is the driver's, under the
    study's lock (run/driver.py: run_study): it recovers a killed driver's unfinished write and
    makes the database. `Store(spec, create=False)` never writes anything: it opens the storage
    read-only (storage_url.make_storage), and a storage without anything recorded yet (no file)
    just means "nothing has run"."""

    def __init__(self, spec: StudySpec, *, create: bool):
        self.spec = spec
        if spec.storage is None:  # the default file in the study folder: SQLite follows links
            safefs.check(spec.study_dir / "study.db", spec.output)
        if create:
            safefs.make_dirs(spec.study_dir, spec.output)
        with storage_errors(spec.storage_url):
            self.storage = make_storage(spec.storage_url, writer=create)

    # --- reading ------------------------------------------------------------------------------

    def _study(self, cell_id: str, create: bool) -> optuna.Study | None:
        name = f"{self.spec.name}/{cell_id}"
        if self.storage is None:
            return None
        if create:
            return optuna.create_study(
                study_name=name, storage=self.storage, direction="minimize", load_if_exists=True
            )
        try:
            return optuna.load_study(study_name=name, storage=self.storage)
        except KeyError:
            return None

    def _attach(self, trials: list[Trial], study: optuna.Study | None) -> list[StoredTrial]:
        """One cell's planned trials with the state of each one's latest attempt. UsageError if
        an attempt's record is not JSON or not of the types `record` writes (damaged_attempt)."""
        stored = {(t.sample, t.seed): StoredTrial(t) for t in trials}
        try:
            records = study.get_trials(deepcopy=False) if study is not None else []
        except ValueError as err:  # optuna's json.loads of a value edited into not JSON
            where = f"cell {trials[0].cell_id}"
            raise UsageError(self._damaged(where, f"not JSON: {err}")) from None
        for record in sorted(records, key=lambda r: r.number):
            item = stored.get((record.user_attrs.get("sample"), record.user_attrs.get("seed")))
            if item is None:
                continue  # a sample or seed the spec no longer asks for: kept, not used
            why = damaged_attempt(record.user_attrs)
            if why is not None:
                where = f"trial {item.trial.key}, attempt {record.number}"
                raise UsageError(self._damaged(where, why))
            item.attempts += 1
            item.earlier, item.record, item.status = item.record, record, _status(record)
        return list(stored.values())

    def _damaged(self, where: str, why: str) -> str:
        """The line for a damaged record of a cell's attempts: the study, where, why, and what
        to do."""
        return (
            f"{self.spec.name}: the record of {where} in the study database is damaged ({why}); "
            "it is left as it is: restore the database from a copy"
        )

    @_storage_errors
    def read(self, trials: list[Trial]) -> list[StoredTrial]:
        """The planned trials (plan.plan(spec)) with their state. Reads only."""
        return [
            item
            for cell_id, cell_trials in _by_cell(trials).items()
            for item in self._attach(cell_trials, self._study(cell_id, False))
        ]

    @_storage_errors
    def earlier_cells(self, trials: list[Trial]) -> tuple[int, int]:
        """(trials, cells) of this study's earlier cells: cells in the storage under this
        study's name that the plan `trials` no longer has (a setting changed, so its config
        hash did; or a model, optimizer or length no longer listed). Kept, never mixed in."""
        if self.storage is None:
            return 0, 0
        prefix = f"{self.spec.name}/"
        current = {f"{prefix}{cell_id}" for cell_id in _by_cell(trials)}
        counts = [
            summary.n_trials
            for summary in optuna.get_all_study_summaries(self.storage, include_best_trial=False)
            if summary.study_name.startswith(prefix) and summary.study_name not in current
        ]
        return sum(counts), sum(n > 0 for n in counts)

    def earlier_note(self, trials: list[Trial]) -> str | None:
        """The line `run`, `status` and `report` print when the storage holds earlier cells
        (earlier_cells); None when it holds none."""
        n_trials, n_cells = self.earlier_cells(trials)
        if not n_trials:
            return None
        return (
            f"note: {n_trials} trial(s) of {n_cells} earlier cell(s) of {self.spec.name!r} "
            "(configurations this study no longer plans) are in the study database, not shown "
            "and never mixed in"
        )

    @_storage_errors
    def look_records(self) -> list[tuple[str, object]]:
        """The looks recorded so far (record_look) as (key, record), in panel and look order,
        unchecked: run/rounds.py's `Rounds.of` is their reader. DamagedLooks if they are not
        JSON. Reads only."""
        study = self._study(LOOKS_STUDY, False)
        try:
            attrs = study.user_attrs if study is not None else {}
        except ValueError as err:  # optuna's json.loads of a value edited into not JSON
            raise DamagedLooks(self.damaged_looks(f"not JSON: {err}")) from None
        return [(key, attrs[key]) for key in sorted(attrs) if key.startswith("look/")]

    def looks(self) -> list[dict]:
        """The records of look_records (the report's copy of them, read after Rounds.of)."""
        return [record for _, record in self.look_records()]

    def damaged_looks(self, why: str) -> str:
        """The line for a damaged looks record: the study, why, and what to do."""
        name = f"{self.spec.name}/{LOOKS_STUDY}"
        return (
            f"{self.spec.name}: its looks record in the study database is damaged ({why}); "
            f"it is left as it is: restore the database from a copy, or delete the study "
            f"{name!r} from it (`optuna delete-study --study-name {name} --storage "
            f"{masked(self.spec.storage_url)}`) so "
            "that the next run takes its looks again, from the same trials"
        )

    # --- writing (driver only) ----------------------------------------------------------------

    @_storage_errors
    def record_look(self, record: dict) -> bool:
        """Record one panel's look (one transaction). A look is recorded once: False, changing
        nothing, if this panel's look k is there already."""
        study = self._study(LOOKS_STUDY, True)
        key = f"look/{record['panel']}/{record['k']:03d}"
        if key in study.user_attrs:
            return False
        study.set_user_attr(key, record)
        return True

    @_storage_errors
    def prepare(
        self,
        trials: list[Trial],
        retries: int,
        retry: Callable[[StoredTrial], bool] = lambda item: True,
        before_attempt: Callable[[StoredTrial], None] = lambda item: None,
    ) -> list[StoredTrial]:
        """Create the optuna trials for planned trials that have none yet, and a new attempt for
        failed ones with attempts left that `retry` (the driver's decision) tries again;
        `before_attempt(item)` is called before each new attempt is created (the driver clears
        the trial's folder). Returns every planned trial with its state."""
        self.spec.study_dir.mkdir(parents=True, exist_ok=True)
        prepared = []
        for cell_id, cell_trials in _by_cell(trials).items():
            cell = cell_trials[0].cell
            study = self._study(cell_id, True)
            if "config" not in study.user_attrs:
                study.set_user_attr("config", self.spec.cell_config(cell))
            dists = distributions(self.spec.search.bounds(cell.model, cell.optimizer))
            # A driver killed between enqueue and ask leaves WAITING trials: take them now.
            for _ in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
                study.ask(dists)
            items = self._attach(cell_trials, study)
            for item in items:
                again = item.status == "failed" and item.attempts <= retries and retry(item)
                if item.attempts == 0 or again:
                    before_attempt(item)
                    t = item.trial
                    attrs = {
                        "key": t.key,
                        "model": cell.model,
                        "optimizer": cell.optimizer,
                        "epochs": cell.epochs,
                        "sample": t.sample,
                        "seed": t.seed,
                        "attempt": item.attempts + 1,
                    }
                    study.enqueue_trial({"lr": t.lr, "wd": t.wd}, user_attrs=attrs)
                    record = study.ask(dists)
                    item.attempts += 1
                    item.status, item.record = "pending", study.trials[record.number]
            prepared += items
        return prepared

    @_storage_errors
    def record(
        self,
        item: StoredTrial,
        result: TrialResult,
        metrics: list[dict],
        timing_note: str | None = None,
    ) -> bool:
        """Record a worker's result on the item's latest attempt (`timing_note`: why its file's
        timing was read as absent, trial/results.py). Returns False (and changes nothing) if
        that attempt is already finished: a result is never counted twice."""
        study = self._study(item.trial.cell_id, False)
        current = study.trials[item.record.number]
        if current.state.is_finished():
            return False
        # optuna's public ask/tell surface has no "open trial by number"; Trial(study, id) is it.
        attempt = optuna.trial.Trial(study, current._trial_id)
        for name in RESULT_ATTRS:
            attempt.set_user_attr(name, getattr(result, name))
        # the resolved execution settings (trial/config.py's Execution): how it ran, not what
        execution = result.execution
        attempt.set_user_attr("pipeline", execution.pipeline if execution else None)
        attempt.set_user_attr("population", execution.population if execution else None)
        attempt.set_user_attr("metrics", metrics)
        if result.timing is not None:  # where its seconds went (trial/timing.py)
            attempt.set_user_attr("timing", result.timing.model_dump())
        if timing_note is not None:
            attempt.set_user_attr(TIMING_NOTE, timing_note)
        if result.provenance is not None:  # which code made it (optbench.provenance)
            attempt.set_user_attr("provenance", result.provenance.model_dump())
        if result.status != "failed":
            for m in metrics:
                if m.get("val_error") is not None:
                    attempt.report(m["val_error"], m["epoch"])
        if result.status == "finished":
            frozen = study.tell(attempt, result.final_error)
        else:
            frozen = study.tell(attempt, state=TrialState.FAIL)
        item.record, item.status = frozen, result.status
        return True

    @_storage_errors
    def mark_running(self, item: StoredTrial, run: str | None, since: float | None = None) -> None:
        """Note on the item's latest attempt that a worker of the driver run `run`
        (locks.driver_lock's token) runs it since `since` (time.time); None: it went back to
        the queue (SLURM requeue). Changes nothing on an attempt already finished."""
        study = self._study(item.trial.cell_id, False)
        current = study.trials[item.record.number]
        if current.state.is_finished():
            return
        mark = None if run is None else {"run": run, "since": since}
        optuna.trial.Trial(study, current._trial_id).set_user_attr(RUNNING_ATTR, mark)

    # --- for the report -----------------------------------------------------------------------

    def frame(self, trials: list[Trial]) -> pd.DataFrame:
        """One row per planned trial (pending ones included)."""
        import pandas as pd

        rows = []
        for item in self.read(trials):
            t = item.trial
            attrs = item.record.user_attrs if item.record and item.is_result else {}
            code = attrs.get("provenance") or {}
            machine = code.get("machine") or {}  # none in results from before it was recorded
            rows.append(
                {
                    "study": self.spec.name,
                    "cell_id": t.cell_id,
                    "model": t.cell.model,
                    "optimizer": t.cell.optimizer,
                    "epochs": t.cell.epochs,
                    "sample": t.sample,
                    "seed": t.seed,
                    "lr": t.lr,
                    "wd": t.wd,
                    "status": item.status,
                    "final_error": _num(attrs.get("final_error")),
                    "best_error": _num(attrs.get("best_error")),
                    "wall_s": _num(attrs.get("wall_s")),
                    "outside_epochs_s": _outside_epochs(attrs),
                    "timing_note": stored_timing(attrs)[1],
                    "images_per_s": _num(attrs.get("images_per_s")),
                    "input_wait": _num(attrs.get("input_wait")),
                    "pipeline": attrs.get("pipeline"),
                    "population": _num(attrs.get("population")),
                    "device": attrs.get("device"),
                    "threads": attrs.get("threads"),
                    "torch": (attrs.get("versions") or {}).get("torch"),
                    "diverged_epoch": _num(attrs.get("diverged_epoch")),
                    "digest": attrs.get("digest"),
                    **{key: code.get(key) for key in PROVENANCE_COLUMNS},
                    **{key: machine.get(key) for key in MACHINE_COLUMNS},
                    "user_code": user_code_cell(code.get("user_code")),
                    "metrics": attrs.get("metrics", []),
                }
            )
        frame = pd.DataFrame(rows)
        if "threads" in frame:  # a count: 1 in trials.csv, not 1.0 (empty while pending)
            frame["threads"] = frame["threads"].astype("Int64")
        return frame


def _outside_epochs(attrs: dict) -> float:
    """A result's wall_s outside its training epochs (its `timing`, trial/timing.py); NaN for
    a result without one, or whose timing is not one (an edited database: stored_timing)."""
    timing, _ = stored_timing(attrs)
    if timing is None:
        return math.nan
    return max(0.0, _num(attrs.get("wall_s")) - timing.epochs)


def running_since(item: StoredTrial, run: str | None) -> float | None:
    """When a worker of the driver run `run` (the one holding the study's lock now; None: no
    driver runs) started the item's pending attempt, or None if none runs it. A mark of an
    earlier run (its driver died) is not running: its workers died with it."""
    if run is None or item.status != "pending" or item.record is None:
        return None
    mark = item.record.user_attrs.get(RUNNING_ATTR)
    if not isinstance(mark, dict) or mark.get("run") != run:
        return None
    since = mark.get("since")
    return float(since) if isinstance(since, int | float) and math.isfinite(since) else None


# The types `Store.record` writes each attribute of a result in (TrialResult's fields): a value
# of another type was not written by optbench, and the readers (report, status) would trip on it
# far from here. "timing" and "running" have readers that take any value (stored_timing,
# running_since).
_NUMBER_ATTRS = (
    "final_error", "best_error", "epochs_run", "diverged_epoch", "wall_s", "images_per_s",
    "input_wait", "population",
)  # fmt: skip
_COUNT_ATTRS = ("threads",)
_TEXT_ATTRS = ("status", "device", "pipeline", "digest", "message", "origin")
_MAPPING_ATTRS = ("versions", "provenance")


def damaged_attempt(attrs: dict) -> str | None:
    """What is wrong with an attempt's recorded attributes (None: nothing): a value of another
    type than optbench writes it in (null is always allowed: an attempt not yet recorded)."""
    kinds = [
        (_NUMBER_ATTRS, (int, float), "a number"),
        (_COUNT_ATTRS, (int,), "a count"),
        (_TEXT_ATTRS, (str,), "a string"),
        (_MAPPING_ATTRS, (dict,), "a mapping"),
    ]
    for names, types, what in kinds:
        for name in names:
            value = attrs.get(name)
            if value is not None and type(value) not in types:
                return f"{name} {_short(value)} is not {what}"
    metrics = attrs.get("metrics", [])
    if not isinstance(metrics, list) or not all(isinstance(m, dict) for m in metrics):
        return f"metrics {_short(metrics)} is not a list of epochs' metrics"
    return None


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _by_cell(trials: list[Trial]) -> dict[str, list[Trial]]:
    cells: dict[str, list[Trial]] = {}
    for t in trials:
        cells.setdefault(t.cell_id, []).append(t)
    return cells


def _num(value) -> float:
    return math.nan if value is None else float(value)

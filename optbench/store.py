"""The study database: an optuna storage (SQLite in the study folder by default).

Layout: one optuna study per cell, named "<study name>/<cell id>", whose user attr "config"
holds everything that gives the cell's results meaning (its hash is in the cell id). One optuna
trial per attempt at a (sample, seed), with params lr and wd and user attrs key, model,
optimizer, epochs, sample, seed, attempt; once recorded also status, the errors, wall_s,
images_per_s, digest and the per-epoch metrics (also as intermediate values).

States: COMPLETE = finished (value = final top-1 error); FAIL with status "diverged" = diverged
(a result); FAIL otherwise = failed (a crash, retried by the next run); RUNNING = pending.
Only the single driver process writes here; workers write result files.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import optuna
import pandas as pd
import sqlalchemy
from optuna.trial import FrozenTrial, TrialState

from optbench.sampling import distributions, study_pairs
from optbench.spec import Cell, StudySpec, UsageError
from optbench.train.config import TrialResult

optuna.logging.set_verbosity(optuna.logging.WARNING)

RESULT_ATTRS = (
    "status",
    "final_error",
    "best_error",
    "epochs_run",
    "diverged_epoch",
    "wall_s",
    "images_per_s",
    "digest",
    "message",
)


@dataclass
class PlannedTrial:
    """One trial the current spec asks for, and where it stands in the database."""

    cell: Cell
    cell_id: str
    sample: int
    seed: int
    lr: float
    wd: float
    status: str = "pending"  # finished | diverged | failed | pending
    attempts: int = 0
    record: FrozenTrial | None = None  # the latest attempt

    @property
    def key(self) -> str:
        return f"{self.cell_id}/s{self.sample:03d}-seed{self.seed}"

    @property
    def is_result(self) -> bool:
        return self.status in ("finished", "diverged")


def _status(trial: FrozenTrial) -> str:
    if trial.state == TrialState.COMPLETE:
        return "finished"
    if trial.state == TrialState.FAIL:
        return "diverged" if trial.user_attrs.get("status") == "diverged" else "failed"
    return "pending"


# --- storages -------------------------------------------------------------------------------------


class StorageUnavailable(Exception):
    """The study's storage does not answer (a database server down, a file system gone): one
    line naming it, password masked. Nothing is lost: results stay in their trial folders and
    the next run records them."""


def masked(url: str) -> str:
    """The storage URL as it may be printed: its password replaced by ***."""
    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:  # journal:///path and other non-SQLAlchemy URLs
        return url


_CONNECTION_ERRORS = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)


@contextmanager
def storage_errors(url: str) -> Iterator[None]:
    """Turn a storage that does not answer into StorageUnavailable (one line, not a traceback)."""
    try:
        yield
    except (*_CONNECTION_ERRORS, optuna.exceptions.StorageInternalError, OSError) as err:
        # optuna wraps a failed commit's error in StorageInternalError; OSError is only the
        # journal file's (sqlite's arrive as OperationalError).
        journal = url.startswith("journal://")
        internal = isinstance(err, optuna.exceptions.StorageInternalError)
        cause = err.__cause__ if internal else err
        if (isinstance(err, OSError) and not journal) or not isinstance(
            cause, (*_CONNECTION_ERRORS, OSError)
        ):
            raise
        why = str(getattr(cause, "orig", None) or cause).strip().splitlines()[0]
        password = None if journal else sqlalchemy.engine.make_url(url).password
        if password:
            why = why.replace(str(password), "***")
        raise StorageUnavailable(f"storage {masked(url)} is not answering: {why}") from None


def _storage_errors(method):
    @functools.wraps(method)
    def wrapped(self, *args, **kwargs):
        with storage_errors(self.spec.storage_url):
            return method(self, *args, **kwargs)

    return wrapped


def make_storage(url: str) -> optuna.storages.BaseStorage:
    """An optuna storage from a URL: any SQLAlchemy URL (sqlite:///..., postgresql://...), or
    journal:///path/to/file for optuna's journal file storage (for shared file systems).
    postgresql:// means psycopg 3 (`pip install 'optbench[postgres]'`), on any SQLAlchemy 2."""
    if url.startswith("journal://"):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        path = url.removeprefix("journal://")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(path))
    if not url.startswith("sqlite"):
        return _server_storage(url)
    # optuna sets up a new database's schema in several statements: a second process opening the
    # SQLite file meanwhile (`optbench status` just after `optbench run` started) can trip over
    # the first's half-made tables, or find it locked. That is transient: wait, open it again.
    for wait_s in (0.1, 0.3, 1.0, 3.0):
        try:
            return optuna.storages.RDBStorage(url)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError):
            time.sleep(wait_s)
    return optuna.storages.RDBStorage(url)


def _server_storage(url: str) -> optuna.storages.RDBStorage:
    """RDBStorage on a database server, with a bounded connect time (a clear error, no hang)."""
    try:
        parsed = sqlalchemy.engine.make_url(url)
    except sqlalchemy.exc.ArgumentError as err:
        raise UsageError(f"storage: not a database URL: {masked(url)} ({err})") from None
    engine_kwargs = {}
    if parsed.get_backend_name() == "postgresql":
        if parsed.drivername == "postgresql":  # SQLAlchemy 2.0 would pick psycopg2
            parsed = parsed.set(drivername="postgresql+psycopg")
        engine_kwargs["connect_args"] = {"connect_timeout": 10}
    try:
        parsed.get_dialect().import_dbapi()
    except ImportError as err:
        raise UsageError(
            f"storage {masked(url)}: its database driver is not installed ({err}); for "
            "PostgreSQL: pip install 'optbench[postgres]'"
        ) from None
    return optuna.storages.RDBStorage(
        parsed.render_as_string(hide_password=False), engine_kwargs=engine_kwargs
    )


class Store:
    """Read and write one study's trials. `Store(spec, create=False)` never writes anything
    (a default SQLite file that does not exist yet just means "nothing has run")."""

    def __init__(self, spec: StudySpec, *, create: bool):
        self.spec = spec
        self.storage: optuna.storages.BaseStorage | None = None
        default_sqlite = spec.storage is None
        if create:
            spec.study_dir.mkdir(parents=True, exist_ok=True)
        if create or not default_sqlite or (spec.study_dir / "study.db").exists():
            with storage_errors(spec.storage_url):
                self.storage = make_storage(spec.storage_url)

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

    def _cell_plan(self, cell: Cell, study: optuna.Study | None) -> list[PlannedTrial]:
        spec = self.spec
        cell_id = spec.cell_id(cell)
        pairs = study_pairs(spec.search, cell.model, cell.optimizer)
        plan = {
            (i, seed): PlannedTrial(cell, cell_id, i, seed, lr, wd)
            for i, (lr, wd) in enumerate(pairs)
            for seed in spec.seeds
        }
        trials = study.get_trials(deepcopy=False) if study is not None else []
        for t in sorted(trials, key=lambda t: t.number):
            item = plan.get((t.user_attrs.get("sample"), t.user_attrs.get("seed")))
            if item is None:
                continue  # a sample or seed the spec no longer asks for: kept, not used
            item.attempts += 1
            item.record, item.status = t, _status(t)
        return list(plan.values())

    @_storage_errors
    def plan(self) -> list[PlannedTrial]:
        """Every trial of the current spec with its state. Reads only."""
        cells = self.spec.cells()
        return [
            t for c in cells for t in self._cell_plan(c, self._study(self.spec.cell_id(c), False))
        ]

    @_storage_errors
    def unused_trials(self) -> int:
        """Trials of this study's earlier configurations: kept in the storage, never mixed in."""
        if self.storage is None:
            return 0
        prefix = f"{self.spec.name}/"
        current = {f"{prefix}{self.spec.cell_id(c)}" for c in self.spec.cells()}
        total = 0
        for summary in optuna.get_all_study_summaries(self.storage, include_best_trial=False):
            if summary.study_name.startswith(prefix) and summary.study_name not in current:
                total += summary.n_trials
        return total

    # --- writing (driver only) ----------------------------------------------------------------

    @_storage_errors
    def prepare(self, retries: int) -> list[PlannedTrial]:
        """Create the optuna trials the spec asks for that do not exist yet, and a new attempt
        for failed ones with attempts left. Returns the plan."""
        self.spec.study_dir.mkdir(parents=True, exist_ok=True)
        plan = []
        for cell in self.spec.cells():
            study = self._study(self.spec.cell_id(cell), True)
            if "config" not in study.user_attrs:
                study.set_user_attr("config", self.spec.cell_config(cell))
            dists = distributions(self.spec.search.bounds(cell.model, cell.optimizer))
            # A driver killed between enqueue and ask leaves WAITING trials: take them now.
            for _ in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
                study.ask(dists)
            items = self._cell_plan(cell, study)
            for item in items:
                if item.attempts == 0 or (item.status == "failed" and item.attempts <= retries):
                    attrs = {
                        "key": item.key,
                        "model": cell.model,
                        "optimizer": cell.optimizer,
                        "epochs": cell.epochs,
                        "sample": item.sample,
                        "seed": item.seed,
                        "attempt": item.attempts + 1,
                    }
                    study.enqueue_trial({"lr": item.lr, "wd": item.wd}, user_attrs=attrs)
                    trial = study.ask(dists)
                    item.attempts += 1
                    item.status, item.record = "pending", study.trials[trial.number]
            plan += items
        return plan

    @_storage_errors
    def record(self, item: PlannedTrial, result: TrialResult, metrics: list[dict]) -> bool:
        """Record a worker's result on the item's latest attempt. Returns False (and changes
        nothing) if that attempt is already finished: a result is never counted twice."""
        study = self._study(item.cell_id, False)
        current = study.trials[item.record.number]
        if current.state.is_finished():
            return False
        # optuna's public ask/tell surface has no "open trial by number"; Trial(study, id) is it.
        trial = optuna.trial.Trial(study, current._trial_id)
        for name in RESULT_ATTRS:
            trial.set_user_attr(name, getattr(result, name))
        trial.set_user_attr("metrics", metrics)
        if result.status != "failed":
            for m in metrics:
                if m.get("val_error") is not None:
                    trial.report(m["val_error"], m["epoch"])
        if result.status == "finished":
            frozen = study.tell(trial, result.final_error)
        else:
            frozen = study.tell(trial, state=TrialState.FAIL)
        item.record, item.status = frozen, result.status
        return True

    # --- for the report -----------------------------------------------------------------------

    def frame(self) -> pd.DataFrame:
        """One row per trial of the current spec (pending ones included)."""
        rows = []
        for item in self.plan():
            attrs = item.record.user_attrs if item.record and item.is_result else {}
            rows.append(
                {
                    "study": self.spec.name,
                    "cell_id": item.cell_id,
                    "model": item.cell.model,
                    "optimizer": item.cell.optimizer,
                    "epochs": item.cell.epochs,
                    "sample": item.sample,
                    "seed": item.seed,
                    "lr": item.lr,
                    "wd": item.wd,
                    "status": item.status,
                    "final_error": _num(attrs.get("final_error")),
                    "best_error": _num(attrs.get("best_error")),
                    "wall_s": _num(attrs.get("wall_s")),
                    "images_per_s": _num(attrs.get("images_per_s")),
                    "diverged_epoch": _num(attrs.get("diverged_epoch")),
                    "digest": attrs.get("digest"),
                    "metrics": attrs.get("metrics", []),
                }
            )
        return pd.DataFrame(rows)


def _num(value) -> float:
    return math.nan if value is None else float(value)

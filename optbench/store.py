"""The study database: an optuna storage (SQLite in the study folder by default).

Layout: one optuna study per cell, named "<study name>/<cell id>", whose user attr "config"
holds everything that gives the cell's results meaning (its hash is in the cell id). One optuna
trial per attempt at a (sample, seed), with params lr and wd and user attrs key, model,
optimizer, epochs, sample, seed, attempt; once recorded also status, the errors, wall_s,
images_per_s, digest and the per-epoch metrics (also as intermediate values).

States: COMPLETE = finished (value = final top-1 error); FAIL with status "diverged" = diverged
(a result); FAIL otherwise = failed (a crash, retried by the next run); RUNNING = pending.
Only the single driver process writes here; workers write result files. The trials themselves
come from the plan (plan.py); the store only attaches their state (`StoredTrial`).
"""

from __future__ import annotations

import functools
import json
import math
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
import sqlalchemy
from optuna.trial import FrozenTrial, TrialState

from optbench.errors import StorageUnavailable, UsageError
from optbench.plan import Trial
from optbench.sampling import distributions
from optbench.spec import StudySpec
from optbench.train.config import TrialResult

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
    "digest",
    "message",
)


@dataclass
class StoredTrial:
    """A planned trial and where it stands in the database."""

    trial: Trial
    status: str = "pending"  # finished | diverged | failed | pending
    attempts: int = 0
    record: FrozenTrial | None = None  # the latest attempt

    @property
    def is_result(self) -> bool:
        return self.status in ("finished", "diverged")


def _status(trial: FrozenTrial) -> str:
    if trial.state == TrialState.COMPLETE:
        return "finished"
    if trial.state == TrialState.FAIL:
        return "diverged" if trial.user_attrs.get("status") == "diverged" else "failed"
    return "pending"


SQLITE_HEADER = b"SQLite format 3\x00"


def storage_file(url: str) -> Path | None:
    """The file a SQLite or journal storage URL names; None for a database server."""
    if url.startswith("journal://"):
        return Path(url.removeprefix("journal://"))
    if url.startswith("sqlite"):
        database = sqlalchemy.engine.make_url(url).database
        return Path(database) if database else None
    return None


def check_storage_file(url: str) -> None:
    """Raise UsageError naming the file if `url` names a file that exists but is not an optuna
    storage (garbage, a damaged or foreign SQLite database). Reads only: optuna would otherwise
    write its tables into it or stop with a traceback."""
    path = storage_file(url)
    if path is None or not (path.exists() or path.is_symlink()):
        return
    left = "it is left as it is: move it away, or set `storage:` to another file"
    if not path.is_file():
        raise UsageError(f"{path}: not a file, so not a study database; {left}")
    if url.startswith("journal://"):
        with open(path, "rb") as f:
            first = f.readline(1 << 20).strip()
        try:
            entry = json.loads(first) if first else {}
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            raise UsageError(f"{path}: not an optuna journal, so not a study database; {left}")
        return
    with open(path, "rb") as f:
        head = f.read(len(SQLITE_HEADER))
    if not head:
        return  # an empty file is an empty SQLite database
    if head != SQLITE_HEADER:
        raise UsageError(f"{path}: not an SQLite database, so not a study database; {left}")
    con = None
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as err:
        raise UsageError(f"{path}: a damaged SQLite database ({err}); {left}") from None
    finally:
        if con is not None:
            con.close()
    if tables and "studies" not in tables:
        raise UsageError(f"{path}: an SQLite database without optuna's tables; {left}")


# --- storages -------------------------------------------------------------------------------------


def masked(url: str) -> str:
    """The storage URL as it may be printed: its password replaced by ***."""
    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:  # journal:///path and other non-SQLAlchemy URLs
        return url


def _first_line(err: BaseException, url: str) -> str:
    """The first line of a storage error (of the driver's own, where SQLAlchemy wraps one), with
    the URL's password replaced by ***: it is printed."""
    why = (str(getattr(err, "orig", None) or err).strip().splitlines() or [""])[0]
    try:
        password = sqlalchemy.engine.make_url(url).password
    except sqlalchemy.exc.ArgumentError:  # journal:///path: no password
        password = None
    return why.replace(str(password), "***") if password else why


_CONNECTION_ERRORS = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)


@contextmanager
def storage_errors(url: str) -> Iterator[None]:
    """Turn a storage that does not answer, or a database file that cannot be written (disk
    full, I/O error), into StorageUnavailable: one line naming it, not a traceback."""
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
        why = _first_line(cause, url)
        file = storage_file(url)
        if file is not None:  # a file: full disk, I/O error, read-only, damaged meanwhile
            raise StorageUnavailable(
                f"{file}: cannot read or write the study database: {why}"
            ) from None
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
    postgresql:// means psycopg 3 (`pip install 'optbench[postgres]'`), on any SQLAlchemy 2. A
    file that is not a study database is refused with one line naming it (UsageError), untouched."""
    check_storage_file(url)
    try:
        return _open_storage(url)
    except (sqlalchemy.exc.DatabaseError, ValueError, RuntimeError) as err:
        if isinstance(err, sqlalchemy.exc.OperationalError) and not url.startswith("sqlite"):
            raise  # a database server that does not answer: not bad input
        where = storage_file(url) or masked(url)
        raise UsageError(
            f"{where}: not a usable study database ({_first_line(err, url)})"
        ) from None


def _open_storage(url: str) -> optuna.storages.BaseStorage:
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


def server_url(url: str) -> sqlalchemy.engine.URL:
    """The SQLAlchemy URL of a database server, with the driver optbench uses (postgresql://
    means psycopg 3); UsageError if that driver is not installed. Connects to nothing."""
    try:
        parsed = sqlalchemy.engine.make_url(url)
    except sqlalchemy.exc.ArgumentError as err:
        raise UsageError(f"storage: not a database URL: {masked(url)} ({err})") from None
    if parsed.drivername == "postgresql":  # SQLAlchemy 2.0 would pick psycopg2
        parsed = parsed.set(drivername="postgresql+psycopg")
    try:
        parsed.get_dialect().import_dbapi()
    except ImportError as err:
        raise UsageError(
            f"storage {masked(url)}: its database driver is not installed ({err}); for "
            "PostgreSQL: pip install 'optbench[postgres]'"
        ) from None
    return parsed


def _server_storage(url: str) -> optuna.storages.RDBStorage:
    """RDBStorage on a database server, with a bounded connect time (a clear error, no hang)."""
    parsed = server_url(url)
    engine_kwargs = {}
    if parsed.get_backend_name() == "postgresql":
        engine_kwargs["connect_args"] = {"connect_timeout": 10}
    return optuna.storages.RDBStorage(
        parsed.render_as_string(hide_password=False), engine_kwargs=engine_kwargs
    )


class Store:
    """Read and write one study's trials. `Store(spec, create=False)` never writes anything
    (a default SQLite file that does not exist yet just means "nothing has run")."""

    def __init__(self, spec: StudySpec, *, create: bool):
        self.spec = spec
        self.storage: optuna.storages.BaseStorage | None = None
        if create:
            spec.study_dir.mkdir(parents=True, exist_ok=True)
        file = storage_file(spec.storage_url)
        if create or file is None or file.exists():  # reading creates no file
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

    def _attach(self, trials: list[Trial], study: optuna.Study | None) -> list[StoredTrial]:
        """One cell's planned trials with the state of each one's latest attempt."""
        stored = {(t.sample, t.seed): StoredTrial(t) for t in trials}
        records = study.get_trials(deepcopy=False) if study is not None else []
        for record in sorted(records, key=lambda r: r.number):
            item = stored.get((record.user_attrs.get("sample"), record.user_attrs.get("seed")))
            if item is None:
                continue  # a sample or seed the spec no longer asks for: kept, not used
            item.attempts += 1
            item.record, item.status = record, _status(record)
        return list(stored.values())

    @_storage_errors
    def read(self, trials: list[Trial]) -> list[StoredTrial]:
        """The planned trials (plan.plan(spec)) with their state. Reads only."""
        return [
            item
            for cell_id, cell_trials in _by_cell(trials).items()
            for item in self._attach(cell_trials, self._study(cell_id, False))
        ]

    @_storage_errors
    def unused_trials(self, trials: list[Trial]) -> int:
        """Trials of this study's earlier configurations: kept in the storage, never mixed in."""
        if self.storage is None:
            return 0
        prefix = f"{self.spec.name}/"
        current = {f"{prefix}{cell_id}" for cell_id in _by_cell(trials)}
        total = 0
        for summary in optuna.get_all_study_summaries(self.storage, include_best_trial=False):
            if summary.study_name.startswith(prefix) and summary.study_name not in current:
                total += summary.n_trials
        return total

    # --- writing (driver only) ----------------------------------------------------------------

    @_storage_errors
    def prepare(self, trials: list[Trial], retries: int) -> list[StoredTrial]:
        """Create the optuna trials for planned trials that have none yet, and a new attempt for
        failed ones with attempts left. Returns every planned trial with its state."""
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
                if item.attempts == 0 or (item.status == "failed" and item.attempts <= retries):
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
    def record(self, item: StoredTrial, result: TrialResult, metrics: list[dict]) -> bool:
        """Record a worker's result on the item's latest attempt. Returns False (and changes
        nothing) if that attempt is already finished: a result is never counted twice."""
        study = self._study(item.trial.cell_id, False)
        current = study.trials[item.record.number]
        if current.state.is_finished():
            return False
        # optuna's public ask/tell surface has no "open trial by number"; Trial(study, id) is it.
        attempt = optuna.trial.Trial(study, current._trial_id)
        for name in RESULT_ATTRS:
            attempt.set_user_attr(name, getattr(result, name))
        attempt.set_user_attr("metrics", metrics)
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

    # --- for the report -----------------------------------------------------------------------

    def frame(self, trials: list[Trial]) -> pd.DataFrame:
        """One row per planned trial (pending ones included)."""
        import pandas as pd

        rows = []
        for item in self.read(trials):
            t = item.trial
            attrs = item.record.user_attrs if item.record and item.is_result else {}
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
                    "images_per_s": _num(attrs.get("images_per_s")),
                    "diverged_epoch": _num(attrs.get("diverged_epoch")),
                    "digest": attrs.get("digest"),
                    "metrics": attrs.get("metrics", []),
                }
            )
        return pd.DataFrame(rows)


def _by_cell(trials: list[Trial]) -> dict[str, list[Trial]]:
    cells: dict[str, list[Trial]] = {}
    for t in trials:
        cells.setdefault(t.cell_id, []).append(t)
    return cells


def _num(value) -> float:
    return math.nan if value is None else float(value)

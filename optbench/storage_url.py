"""Storage URLs: which study databases optbench opens, and how. One home for parsing a URL
(`storage_file`, `server_url`), checking it (its form, for the schema: `check_storage_url`; an
existing file: `check_storage_file`; a server's driver: `server_url`), printing it with its
password masked (`masked`), opening it (`make_storage`) and turning a storage that stops
answering into one line (`storage_errors`). Whether this machine can write where it points is
checks.check_storage's (folders are checks.py's).

A URL is journal:///path (optuna's journal file, for shared file systems) or an SQLAlchemy URL
of a known database kind: sqlite:///path (the default, in the study folder) or a server such as
postgresql://user@host/db (psycopg 3). docs/study.md lists them; docs/faults.md what is refused.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import optuna
import sqlalchemy

from optbench.errors import StorageUnavailable, UsageError


def check_storage_url(url: str) -> str:
    """A storage URL that optuna can open, checked for its form only (no file is touched):
    journal:///path, or an SQLAlchemy URL of a known database kind (not SQLite in memory)."""
    example = "e.g. sqlite:///path/study.db, postgresql://user@host/db or journal:///path/file.log"
    if "\0" in url:
        raise ValueError("a storage URL cannot contain a NUL character")
    if url.startswith("journal://"):
        path = url.removeprefix("journal://")
        if not path or path.endswith("/"):
            raise ValueError(f"journal:// needs a file path ({example})")
        return url
    try:
        parsed = sqlalchemy.engine.make_url(url)
        parsed.get_dialect()  # the kind of database is one SQLAlchemy knows (loads no driver)
    except sqlalchemy.exc.NoSuchModuleError:
        raise ValueError(f"unknown kind of database {url.split(':')[0]!r} ({example})") from None
    except (sqlalchemy.exc.ArgumentError, ValueError):
        raise ValueError(f"not a storage URL ({example})") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise ValueError(f"an in-memory SQLite database keeps nothing; name a file ({example})")
    return url


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
    file = storage_file(url)
    if file is not None:  # checks.check_storage let only a folder in the study folder be missing
        file.parent.mkdir(parents=True, exist_ok=True)
    if url.startswith("journal://"):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        return JournalStorage(JournalFileBackend(str(file)))
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

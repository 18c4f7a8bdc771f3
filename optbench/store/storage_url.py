"""Storage URLs: which study databases optbench opens, and how. One home for parsing a URL
(`storage_file`, `server_url`), checking it (its form, for the schema: spec/storage_form.py; an
existing file: `check_storage_file`; a server's driver: `server_url`), printing it with its
password masked (`masked`), opening it (`make_storage`: for the study's one driver, after
recovering what a killed driver left unfinished; for every other command, read-only) and turning
a storage that stops answering into one line (`storage_errors`). Whether this machine can write
where it points is run/preflight.py's (check_storage; folders too).

A URL is journal:///path (optuna's journal file, for shared file systems) or an SQLAlchemy URL
of a known database kind: sqlite:///path (the default, in the study folder) or a server such as
postgresql://user@host/db (psycopg 3). docs/study.md lists them; docs/faults.md what is refused
and what each promises after a crash.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import BinaryIO

import optuna
import sqlalchemy

from optbench.errors import StorageUnavailable, UnfinishedWrite, UsageError

SQLITE_HEADER = b"SQLite format 3\x00"
# The tables of an optuna study database: optuna's RDBStorage schema and alembic's version stamp
# (tests/test_faults.py checks the list against a database the installed optuna made).
OPTUNA_TABLES = frozenset(
    {
        "alembic_version",
        "studies",
        "study_directions",
        "study_system_attributes",
        "study_user_attributes",
        "trial_heartbeats",
        "trial_intermediate_values",
        "trial_params",
        "trial_system_attributes",
        "trial_user_attributes",
        "trial_values",
        "trials",
        "version_info",
    }
)
LEFT = "it is left as it is: move it away, or set `storage:` to another file"


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
    storage (garbage, a damaged or foreign SQLite database, a journal optuna cannot replay), or
    UnfinishedWrite if it holds a killed writer's unfinished write (SQLite's hot journal:
    recoverable, by `make_storage(writer=True)`). Reads only, and SQLite read-only, which
    recovers nothing: optuna would otherwise write its tables into it or stop with a traceback."""
    _check_file(url)


def _check_file(url: str) -> bool:
    """check_storage_file's checks; True when the file holds something (a study, an operation),
    False when there is nothing yet (no file, an empty one, a schema without a study)."""
    path = storage_file(url)
    if path is None:
        return True
    if not (path.exists() or path.is_symlink()):
        return False
    if not path.is_file():
        raise UsageError(f"{path}: not a file, so not a study database; {LEFT}")
    if url.startswith("journal://"):
        return _check_journal(path)
    return _check_sqlite(path)


# How optuna starts every line of a journal (compact JSON, the operation's code first).
JOURNAL_LINE_START = b'{"op_code":'


def _check_journal(path: Path) -> bool:
    """An optuna journal's first line is a JSON object, and optuna can replay every line. An
    unterminated last line is a killed writer's unfinished append, which optuna skips: as the
    only line, the start of one of optuna's lines means nothing is recorded yet."""
    with open(path, "rb") as f:
        first = f.readline(1 << 20)
    start = first[: len(JOURNAL_LINE_START)]
    if not first.endswith(b"\n") and JOURNAL_LINE_START.startswith(start):
        return False  # empty, or only an unfinished first append
    if not _is_json_object(first):
        raise UsageError(f"{path}: not an optuna journal, so not a study database; {LEFT}")
    _replay(path)
    return True


def _replay(path: Path) -> None:
    """Replay the journal as optuna does when it opens one (reading only): a line that is JSON but
    not one of its operations stops optuna with a KeyError, a TypeError or, for an unknown
    operation, its own AssertionError."""
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    try:
        JournalStorage(JournalFileBackend(str(path)))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, AssertionError) as err:
        raise UsageError(
            f"{path}: not an optuna journal, so not a study database (optuna cannot replay it: "
            f"{type(err).__name__}: {err}); {LEFT}"
        ) from None


def _is_json_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line) if line.strip() else {}, dict)
    except ValueError:
        return False


def _check_sqlite(path: Path) -> bool:
    """An SQLite file is empty (a new database) or has optuna's tables, all of them once it
    holds a study: a first run stopped while it made them left some and no study (the next run
    completes them), while a study without them is damage (a table dropped)."""
    with open(path, "rb") as f:
        head = f.read(len(SQLITE_HEADER))
    if not head:
        return False  # an empty file is an empty SQLite database
    if head != SQLITE_HEADER:
        raise UsageError(f"{path}: not an SQLite database, so not a study database; {LEFT}")
    tables, studies, twice = _sqlite_contents(path)
    if tables and "studies" not in tables:
        raise UsageError(f"{path}: an SQLite database without optuna's tables; {LEFT}")
    missing = sorted(OPTUNA_TABLES - tables)
    if studies and missing:
        raise UsageError(
            f"{path}: a damaged study database (without optuna's table(s) {', '.join(missing)}); "
            f"{LEFT}"
        )
    if twice is not None:  # made without optuna's unique index of study names
        raise UsageError(f"{path}: a damaged study database (two studies named {twice!r}); {LEFT}")
    return studies > 0


def _beside(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _is_wal(path: Path) -> bool:
    """Whether the database is in WAL mode (its header's read and write versions are 2)."""
    with open(path, "rb") as f:
        f.seek(18)
        return f.read(2) == b"\x02\x02"


def _read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection. SQLite's mode=ro writes neither the database nor its journal, so
    it rolls no hot journal back (and refuses to read past one). A WAL database is read through
    its -wal and its index, -shm, which SQLite's readers write (read marks, the index rebuilt
    after a crash); one without a -wal is whole in its file and open nowhere: read as immutable,
    since mode=ro would make the -wal and -shm files beside it (a driver that starts meanwhile
    writes into a new -wal, not into the file, until its first checkpoint)."""
    immutable = _is_wal(path) and not _beside(path, "-wal").exists()
    flags = "mode=ro&immutable=1" if immutable else "mode=ro"
    return sqlite3.connect(f"{path.absolute().as_uri()}?{flags}", uri=True)


def _sqlite_contents(path: Path) -> tuple[set[str], int, str | None]:
    """The database's table names, how many studies it holds and the name of one that two of
    them have (None: none), read read-only."""
    con = None
    try:
        con = _read_only(path)
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        studies, twice = 0, None
        if "studies" in tables:
            studies = con.execute("SELECT count(*) FROM studies").fetchone()[0]
            names = "SELECT study_name FROM studies GROUP BY study_name HAVING count(*) > 1"
            twice = next((row[0] for row in con.execute(names)), None)
    except sqlite3.DatabaseError as err:
        raise _sqlite_refusal(path, err) from None
    finally:
        if con is not None:
            con.close()
    return tables, studies, twice


# SQLite's answers to a read-only read that would have to write first to recover: a hot rollback
# journal, or a WAL index that only a writer may rebuild.
_RECOVERY_NEEDED = ("SQLITE_READONLY_ROLLBACK", "SQLITE_READONLY_RECOVERY")


def _sqlite_refusal(path: Path, err: sqlite3.DatabaseError) -> Exception:
    """What a read-only read's error means: a killed writer's unfinished write (recoverable), a
    database locked for longer than SQLite waits (busy, not damaged), or damage. Python 3.10
    has no error names: a connection that only reads is refused as read-only only to recover."""
    name = getattr(err, "sqlite_errorname", None)
    unfinished = name in _RECOVERY_NEEDED if name else "readonly database" in str(err)
    busy = name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) if name else "locked" in str(err)
    if unfinished:
        return UnfinishedWrite(
            f"{path}: holds the unfinished write of a driver that was killed (SQLite's journal "
            "beside it); run `optbench run` to recover it"
        )
    if busy:
        return StorageUnavailable(f"{path}: cannot read or write the study database: {err}")
    return UsageError(f"{path}: a damaged SQLite database ({err}); {LEFT}")


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
# SQLite's words for SQLITE_FULL: no space left (or a database at its page limit)
SQLITE_FULL = "database or disk is full"


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
            why = f"disk full ({why})" if why == SQLITE_FULL else why
            raise StorageUnavailable(
                f"{file}: cannot read or write the study database: {why}"
            ) from None
        raise StorageUnavailable(f"storage {masked(url)} is not answering: {why}") from None


def make_storage(url: str, *, writer: bool) -> optuna.storages.BaseStorage | None:
    """An optuna storage from a URL: any SQLAlchemy URL (sqlite:///..., postgresql://...), or
    journal:///path/to/file for optuna's journal file storage (for shared file systems).
    postgresql:// means psycopg 3 (`pip install 'optbench[postgres]'`), on any SQLAlchemy 2.

    `writer` is the study's one driver (run/driver.py: run_study, holding locks.driver_lock): it
    first recovers what a killed writer left unfinished and may create the schema. Every other
    opener (status, report, a dry run, the Python API) is a reader: it opens the storage read-only,
    recovers and creates nothing, and gets None where nothing is recorded yet (no file, an empty
    one, no study in it). A file that is not a study database is refused with one line naming
    it (UsageError), untouched; to a reader, one that needs recovering too (UnfinishedWrite)."""
    if not _checked(url, writer) and not writer:
        return None
    try:
        storage = _open_storage(url, writer)
        if writer and isinstance(storage, optuna.storages.RDBStorage):
            _complete_schema(storage, url)
        return storage
    except (sqlalchemy.exc.DatabaseError, ValueError, RuntimeError) as err:
        if isinstance(err, sqlalchemy.exc.OperationalError):
            raise  # a full disk, an I/O error, a server that does not answer: not bad input
        where = storage_file(url) or masked(url)
        raise UsageError(
            f"{where}: not a usable study database ({_first_line(err, url)})"
        ) from None


def _complete_schema(storage: optuna.storages.RDBStorage, url: str) -> None:
    """Make the indexes of optuna's schema that the database lacks, before anything is written to
    it. optuna makes its schema table by table, each table's indexes after it, and skips a table
    it finds, indexes and all: a first opening stopped in between (a full disk, a kill) leaves a
    table without its index, which optuna's next opening never makes. Without the unique index
    of study names, every run would add a second study of each name. A database that already
    holds two studies of one name is damage (UsageError); a full disk is the caller's fault to
    report (storage_errors)."""
    from optuna.storages._rdb import models  # the installed optuna's schema, as it makes it

    try:
        with storage.engine.begin() as connection:
            for table in models.BaseModel.metadata.sorted_tables:
                for index in table.indexes:
                    index.create(connection, checkfirst=True)
    except sqlalchemy.exc.IntegrityError as err:  # the unique index on what is not unique
        where = storage_file(url) or masked(url)
        raise UsageError(
            f"{where}: a damaged study database (its index of study names is missing and "
            f"{_first_line(err, url)}); {LEFT}"
        ) from None


def _checked(url: str, writer: bool) -> bool:
    """_check_file's answer; for the writer, after rolling a killed writer's write back."""
    try:
        return _check_file(url)
    except UnfinishedWrite:
        if not writer:
            raise
    _roll_back(storage_file(url))
    return _check_file(url)


def _roll_back(path: Path) -> None:
    """Roll a killed writer's hot journal back, as SQLite does on a read-write connection's
    first read (a WAL is merged into the database when that connection closes). The driver
    does it under the study's lock; SQLite's own locks keep it off a live writer's journal."""
    con = None
    try:
        con = sqlite3.connect(path)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as err:  # a read-only file system, a full disk
        raise StorageUnavailable(
            f"{path}: cannot read or write the study database: {err}"
        ) from None
    finally:
        if con is not None:
            con.close()


def _open_storage(url: str, writer: bool) -> optuna.storages.BaseStorage | None:
    file = storage_file(url)
    if file is not None and writer:  # checks.check_storage: only a folder in the study folder
        file.parent.mkdir(parents=True, exist_ok=True)  # may be missing
    if url.startswith("journal://"):
        return _journal_storage(file, writer)
    if file is None:
        return _server_storage(url, writer)
    opener = partial(optuna.storages.RDBStorage, url) if writer else partial(_sqlite_reader, file)
    # optuna sets up a new database's schema in several statements, and a reader may find the
    # file locked by a writer for longer than SQLite waits (two writers sharing a file may both
    # stamp its version). That is transient: wait, open again. A full disk or an I/O error is
    # not: it is reported at once, and the next opening completes the schema (_complete_schema).
    for wait_s in (0.1, 0.3, 1.0, 3.0):
        try:
            return opener()
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError) as err:
            if not _transient(err):
                raise
            time.sleep(wait_s)
    return opener()


def _transient(err: sqlalchemy.exc.DBAPIError) -> bool:
    """Whether an error opening a SQLite storage is another connection's lock (busy, locked) or
    two writers making the same row of optuna's schema at once: wait and open again."""
    if isinstance(err, sqlalchemy.exc.IntegrityError):
        return True
    name = getattr(err.orig, "sqlite_errorname", None)
    if name:
        return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))
    return "locked" in str(err.orig)  # Python 3.10 has no error names


def _sqlite_reader(path: Path) -> optuna.storages.RDBStorage:
    """optuna's RDBStorage on read-only connections: its reads and none of its writes (it would
    make missing tables and stamp its version into whatever file it opens)."""
    return optuna.storages.RDBStorage(
        "sqlite://", engine_kwargs={"creator": partial(_read_only, path)}, skip_table_creation=True
    )


def _journal_storage(path: Path, writer: bool) -> optuna.storages.BaseStorage:
    """optuna's journal storage on the file (which _check_journal replayed); the writer first cuts
    a killed writer's unfinished append."""
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    if writer:
        _cut_unfinished_append(path)
    return JournalStorage(JournalFileBackend(str(path)))


def _cut_unfinished_append(path: Path) -> None:
    """Cut a journal's unterminated last line, a killed writer's unfinished append. optuna skips
    it when it reads, but appends after it: its next operation would be glued to it, and lost.
    Under optuna's own lock on the file (the one its appends take)."""
    if not path.exists() or _ends_a_line(path):
        return
    from optuna.storages.journal import JournalFileSymlinkLock

    lock = JournalFileSymlinkLock(str(path))  # a killed writer's is taken over after 30 s
    lock.acquire()
    try:
        with open(path, "r+b") as f:
            f.truncate(_end_of_last_line(f))
    finally:
        lock.release()


def _ends_a_line(path: Path) -> bool:
    with open(path, "rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return True
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def _end_of_last_line(f: BinaryIO, chunk: int = 1 << 16) -> int:
    """The offset just past the file's last newline (0 if it has none), read from its end."""
    end = f.seek(0, os.SEEK_END)
    while end > 0:
        start = max(0, end - chunk)
        f.seek(start)
        at = f.read(end - start).rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0


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


def _server_storage(url: str, writer: bool) -> optuna.storages.RDBStorage | None:
    """RDBStorage on a database server, with a bounded connect time (a clear error, no hang).
    A reader's sessions are read-only where the server can make them so (PostgreSQL's
    default_transaction_read_only), it makes no tables, and None where no study is recorded."""
    parsed = server_url(url)
    engine_kwargs = {}
    if parsed.get_backend_name() == "postgresql":
        connect_args = {"connect_timeout": 10}
        if not writer:
            connect_args["options"] = "-c default_transaction_read_only=on"
        engine_kwargs["connect_args"] = connect_args
    rendered = parsed.render_as_string(hide_password=False)
    if not writer and not _server_holds_a_study(rendered, engine_kwargs):
        return None
    return optuna.storages.RDBStorage(
        rendered, engine_kwargs=engine_kwargs, skip_table_creation=not writer
    )


def _server_holds_a_study(url: str, engine_kwargs: dict) -> bool:
    """Whether the database has optuna's studies table with a study in it (optuna's first
    opening makes its tables in several statements: none, or some and no study, is a database
    where nothing has run)."""
    engine = sqlalchemy.create_engine(url, **engine_kwargs)
    try:
        with engine.connect() as connection:
            if not sqlalchemy.inspect(connection).has_table("studies"):
                return False
            count = connection.execute(sqlalchemy.text("SELECT count(*) FROM studies"))
            return count.scalar() > 0
    finally:
        engine.dispose()

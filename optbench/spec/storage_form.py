"""The form of a storage URL, checked for the schema without touching a file or loading a
database driver (`check_storage_url`): journal:///path, or an SQLAlchemy URL of a known database
kind, a SQLite one naming a file. Opening what it names is store/storage_url.py's.
"""

from __future__ import annotations

import sqlalchemy


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
    if parsed.get_backend_name() == "sqlite":
        _check_sqlite_url(parsed, example)
    return url


def _check_sqlite_url(parsed: sqlalchemy.engine.URL, example: str) -> None:
    """A SQLite URL names a file by its path. Refused: a database that keeps nothing (no path,
    `:memory:`, and SQLite's URI filenames that stay in memory: `mode=memory`, the `memdb` VFS;
    results would live in the driver's memory only), and any URI filename (`uri=true`: SQLite
    reads its `file:` name and options, not the path optbench checks and reads)."""
    query = {key.lower(): str(value).lower() for key, value in parsed.query.items()}
    database = parsed.database or ""
    in_memory = (
        database in ("", ":memory:")
        or ":memory:" in database
        or query.get("mode") == "memory"
        or "memdb" in query.get("vfs", "")
    )
    if in_memory:
        raise ValueError(f"an in-memory SQLite database keeps nothing; name a file ({example})")
    if "uri" in query:
        raise ValueError(
            "SQLite URI filenames (uri=true) are not read: name the file as sqlite:///path "
            f"({example})"
        )

"""The errors a user can cause, and how a validation error becomes one line per field.

`UsageError` is bad input (a study file, a flag, a dataset path): `optbench` prints it as one
message and exits with code 2, before anything is written. `WriteError` is the machine's fault
(disk full, I/O error): one message, exit code 1. `StorageUnavailable` is a study database that
does not answer: one line, exit code 1. Every module raises these; this one
imports nothing from optbench.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError


class UsageError(Exception):
    """Bad input from the user (spec, flags, dataset paths): reported as one line, exit code 2."""


class SpecError(UsageError):
    """A study YAML that does not validate."""


class WriteError(Exception):
    """A file or database that could not be written (disk full, I/O error, read-only file
    system): one line naming the path and the cause, exit code 1. Nothing recorded is lost, and
    the same command carries on once the cause is gone."""

    @classmethod
    def from_os(cls, err: OSError) -> WriteError:
        where = f"{err.filename}: " if err.filename else ""
        return cls(f"{where}cannot write: {err.strerror or err}")


class StorageUnavailable(Exception):
    """The study's storage does not answer (a database server down, a file system gone): one
    line naming it, password masked, exit code 1 (not bad input). Nothing is lost: results stay
    in their trial folders and the next run records them."""


def format_errors(source: Path | str, err: ValidationError) -> str:
    """One line per error, "<source>: <field.path>: <message>"."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            lines.append(f"{source}: {loc}: unknown key")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            lines.append(f"{source}: {loc}: {msg}")
    return "\n".join(lines)

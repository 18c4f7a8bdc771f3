"""Pool workers whose writes to their driver fail (an injected I/O error), for tests/test_faults.py:
spawned workers import this module by name, as the driver's `_worker_main` is replaced by one of
these."""

from __future__ import annotations

import errno
import os

from optbench.executors import local


def _failing_sends(conn, failures: int) -> None:
    """Make the first `failures` sends of `conn` fail as a write on a failing disk does."""
    send, calls = conn.send, []

    def failing(obj) -> None:
        calls.append(obj)
        if len(calls) <= failures:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        send(obj)

    conn.send = failing


def first_write_fails(conn, *args) -> None:
    """A worker whose first write, "ready" to its driver, fails; the next ones do not."""
    _failing_sends(conn, 1)
    local._worker_main(conn, *args)


def every_write_fails(conn, *args) -> None:
    """A worker none of whose writes to its driver goes through."""
    _failing_sends(conn, 10**6)
    local._worker_main(conn, *args)

"""A guard for the tests that plant a FIFO where optbench reads or writes a file: an open of a
FIFO waits for its other end forever (a reader for a writer, a writer for a reader), so the
guard opens both ends after a while. The test then fails (the code under test waited) instead
of hanging the whole run."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _release(fifo: Path, held: list[int]) -> None:
    """Let whoever waits in an open of `fifo` go on: a writer (a read end is now open; it stays
    open, so the writer's data has somewhere to go) or a reader (it reads end of file)."""
    held.append(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


@contextmanager
def fifo_never_waited_on(fifo: Path, after_s: float = 10.0) -> Iterator[None]:
    """Make `fifo` a FIFO; fail if the code inside the block still ran after `after_s` (then
    its ends are opened, so that the block ends)."""
    fifo.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(fifo)
    held: list[int] = []
    rescue = threading.Timer(after_s, _release, [fifo, held])
    rescue.start()
    try:
        yield
    finally:
        rescue.cancel()
        rescue.join()
        for fd in held:
            os.close(fd)
    assert not held, f"{fifo}: waited on a FIFO for {after_s:g} s"

"""A guard for the tests that plant a FIFO where optbench reads a file: an open of a FIFO for
reading waits for a writer forever, so the guard plays the writer after a while. The test then
fails (the code under test waited) instead of hanging the whole run."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _unblock_a_reader(fifo: Path, rescued: list) -> None:
    """Open the FIFO's other end, which succeeds only while a reader waits on it."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        rescued.append(fifo)
    except OSError:  # ENXIO: nobody waits to read it
        pass


@contextmanager
def fifo_never_waited_on(fifo: Path, after_s: float = 10.0) -> Iterator[None]:
    """Make `fifo` a FIFO; fail if the code inside the block was still waiting on it after
    `after_s` (then it is released, so the block ends)."""
    fifo.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(fifo)
    rescued: list = []
    rescue = threading.Timer(after_s, _unblock_a_reader, [fifo, rescued])
    rescue.start()
    try:
        yield
    finally:
        rescue.cancel()
    assert not rescued, f"{fifo}: waited on a FIFO"

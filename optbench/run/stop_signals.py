"""How the driver stops: SIGINT, SIGTERM and SIGHUP stop `optbench run` as Ctrl-C does
(`stop_signals_as_ctrl_c`, raising `StopSignal`); the CLI exits with 128 + the signal's number.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


class StopSignal(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP to the driver: the run stops as on Ctrl-C (the workers are
    stopped, what ended is recorded, the same command resumes); exit code 128 + `signum`."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


# Ctrl-C, `kill`, a closed terminal or ssh session: each one stops the run the same way.
DRIVER_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stop_signals_as_ctrl_c() -> Iterator[None]:
    """While inside, the first of SIGINT, SIGTERM and SIGHUP raises StopSignal in the main
    thread, and every later one is ignored until the process exits: a stop takes seconds (the
    workers checkpoint), and signals come in bursts (a closing terminal sends SIGHUP, a
    supervisor SIGTERM, an impatient user Ctrl-C), so a second one must neither interrupt the
    stop nor, once handlers were restored, kill the process by its default action before it
    says how it stopped. Without a stop the previous handlers are restored on the way out.
    A SIGINT that this process inherited ignored (a shell's background job) stays ignored."""
    stopping: list[int] = []

    def stop(signum: int, frame) -> None:
        if stopping:
            return  # the stop that the first signal began is under way
        stopping.append(signum)
        # Ignored by the OS from now on, not by this handler: Python restores the default
        # action of every signal it handles as the interpreter finalizes, and a late SIGINT
        # in that window would kill the process with -2 instead of the stop's exit code.
        for s in taken:
            signal.signal(s, signal.SIG_IGN)
        raise StopSignal(signum)

    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    taken = [s for s in DRIVER_STOP_SIGNALS if not (s == signal.SIGINT and ignored)]
    before = {s: signal.signal(s, stop) for s in taken}
    try:
        yield
    finally:
        if not stopping:  # after a stop `stop` stays: the process exits with the stop's code
            for s, handler in before.items():
                signal.signal(s, handler)

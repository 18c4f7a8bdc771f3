"""Stop signals: how a running trial is asked to stop, and what it does then.

SIGTERM or SIGUSR2 delivered to the trial's process (`kill -USR2 <pid>`; SLURM's
`--signal=USR2@120` reaches processes started by srun, and SLURM sends SIGTERM at the time limit
or on preemption) asks the trial to stop: it finishes the running optimizer step (under DDP, the
steps up to the ranks' next agreement, below), writes OUT/checkpoint.pt at that position,
restores the previous handlers and delivers the signal again to what was there before. By
default that ends the process (exit status 128 + the signal number: 143 for SIGTERM, 140 for
SIGUSR2), as the signal would have without optbench, only after the checkpoint; a caller's own
handler runs instead if it installed one (submitit's requeue on SIGUSR2, say; `optbench train`
installs one that exits with that same status). If that handler returns, `run_trial` raises
`TrialInterrupted` (a BaseException, so it is not recorded as a failure). Either way no
result.json is written. The handlers are installed only when `run_trial` runs in the main
thread and `handle_signals` is true.

When: a trial alone checks for a stop after every optimizer step (reading a flag costs
nothing). Under DDP every rank must stop at the same step, so the ranks agree: an all-reduce of
the highest signal any rank received, whose answer the host must wait for. They ask each other
every STOP_CHECK_EVERY steps (counted over the whole run) and at each epoch's end, so a signal
that reaches any rank is acted on by every rank within STOP_CHECK_EVERY steps, and a rank that
received none passes on the same signal. A signal that arrives during evaluation waits for the
next check.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from optbench.train.distributed import DistContext

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR2)

# Under DDP, how many optimizer steps pass between two agreements on stopping. Reading the
# agreement on the host waits for every step queued on the GPU, so asking after each step would
# stall the queue once a step; every 16 steps the stall is amortized, and a stop still comes
# within seconds of the signal (16 steps), far inside SLURM's warning (USR2@120).
STOP_CHECK_EVERY = 16


class TrialInterrupted(BaseException):
    """A stop signal arrived; the checkpoint is written and the trial can be resumed."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by signal {signal.Signals(signum).name}; checkpoint saved")
        self.signum = signum


@dataclass
class StopRequest:
    """Set by a signal handler; read after optimizer steps through a `StopAgreement`."""

    signum: int = 0

    def __call__(self, signum: int, frame) -> None:
        self.signum = signum


class StopAgreement:
    """The ranks' common answer to "stop after this step?" (see the module docstring)."""

    def __init__(self, stop: StopRequest, dist: DistContext, device: torch.device):
        self.stop, self.dist = stop, dist
        self.flag = torch.zeros(1, dtype=torch.int64, device=device)

    def after_step(self, step: int, epoch_end: bool) -> int:
        """The signal every rank stops for after optimizer step `step` (0: go on)."""
        if not self.dist.enabled:
            return self.stop.signum
        if not epoch_end and (step + 1) % STOP_CHECK_EVERY:
            return 0
        self.flag.fill_(self.stop.signum)
        return int(self.dist.max_(self.flag).item())


@contextlib.contextmanager
def stop_signals_caught(stop: StopRequest, enabled: bool) -> Iterator[dict]:
    """Route SIGTERM / SIGUSR2 to `stop` while the trial runs (main thread only). Yields the
    handlers it replaced (empty when it replaced none); they are restored on exit."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield {}
        return
    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        yield previous
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def pass_on(signum: int, previous: dict) -> None:
    """Deliver `signum` again, now to the handler the trial had replaced: the default action
    ends the process (as the signal would have without optbench, only after the checkpoint), a
    caller's handler (e.g. submitit's requeue on SIGUSR2, or the CLI's exit) runs. Returns only
    if that handler returns, or if the trial had not taken the signal over."""
    if signum in previous and previous[signum] is not signal.SIG_IGN:
        signal.raise_signal(signum)

"""`optbench run` as a terminal's foreground command, for the tests that press Ctrl-C on it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# A shell starts background jobs with SIGINT ignored (nohup ... &), and Python then keeps
# ignoring it, so under such a CI launcher Ctrl-C would not reach the driver at all: give it
# Python's own handler.
FOREGROUND = "import os, signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
# A Ctrl-C from a hook, not a race with the driver's poll: once the driver has recorded its
# first trial and said so, it sends itself SIGINT (as a terminal sends the foreground job).
CTRL_C_AFTER_FIRST_END = (
    "from optbench.progress import EventLog\n"
    "said = EventLog.ended\n"
    "def ended_then_ctrl_c(self, item):\n"
    "    said(self, item)\n"
    "    os.kill(os.getpid(), signal.SIGINT)\n"
    "EventLog.ended = ended_then_ctrl_c\n"
)
MAIN = "from optbench.cli import main; main()"


def driver_command(study: Path, *, ctrl_c_after_first_end: bool = False) -> list[str]:
    """The command line of `optbench run STUDY` that a SIGINT reaches as Ctrl-C; with
    `ctrl_c_after_first_end`, the driver presses it itself once it has recorded a trial."""
    code = FOREGROUND + (CTRL_C_AFTER_FIRST_END if ctrl_c_after_first_end else "") + MAIN
    return [sys.executable, "-c", code, "run", str(study)]


def start_driver(study: Path, cwd: Path) -> subprocess.Popen:
    """`optbench run STUDY` in a child process that a SIGINT sent to it reaches as Ctrl-C."""
    return subprocess.Popen(
        driver_command(study),
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

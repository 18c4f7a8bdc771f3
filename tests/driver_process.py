"""`optbench run` as a terminal's foreground command, for the tests that press Ctrl-C on it, and
the code that makes a driver signal itself at a chosen call (signal_at), for those that kill it."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import yaml

from optbench.spec.schema import StudySpec, parse_spec

# A shell starts background jobs with SIGINT ignored (nohup ... &), and Python then keeps
# ignoring it, so under such a CI launcher Ctrl-C would not reach the driver at all: give it
# Python's own handler.
FOREGROUND = "import os, signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
# A Ctrl-C from a hook, not a race with the driver's poll: once the driver has recorded its
# first trial and said so, it sends itself SIGINT (as a terminal sends the foreground job).
CTRL_C_AFTER_FIRST_END = (
    "from optbench.run.progress import EventLog\n"
    "said = EventLog.ended\n"
    "def ended_then_ctrl_c(self, item):\n"
    "    said(self, item)\n"
    "    os.kill(os.getpid(), signal.SIGINT)\n"
    "EventLog.ended = ended_then_ctrl_c\n"
)
MAIN = "from optbench.cli.app import main; main()"


def driver_command(study: Path, *, ctrl_c_after_first_end: bool = False) -> list[str]:
    """The command line of `optbench run STUDY` that a SIGINT reaches as Ctrl-C; with
    `ctrl_c_after_first_end`, the driver presses it itself once it has recorded a trial."""
    code = FOREGROUND + (CTRL_C_AFTER_FIRST_END if ctrl_c_after_first_end else "") + MAIN
    return [sys.executable, "-c", code, "run", str(study)]


def ctrl_c_after_first_end(study: Path, cwd: Path) -> subprocess.CompletedProcess:
    """`optbench run STUDY` that presses Ctrl-C itself once it has recorded a trial, to its end."""
    return subprocess.run(
        driver_command(study, ctrl_c_after_first_end=True),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )


def start_driver(study: Path, cwd: Path) -> subprocess.Popen:
    """`optbench run STUDY` in a child process that a SIGINT sent to it reaches as Ctrl-C."""
    return subprocess.Popen(
        driver_command(study),
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_again(study: Path, cwd: Path) -> subprocess.CompletedProcess:
    """`optbench run STUDY` once more, to its end: what resumes a stopped study."""
    return subprocess.run(
        [sys.executable, "-m", "optbench", "run", str(study)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,  # a loaded 2-core machine trains a trial in minutes
    )


def stoppable_study(data: dict, folder: Path) -> tuple[Path, StudySpec]:
    """`data` made a study of 2-epoch trials, two samples per cell, on one worker (a stop comes
    while a trial trains, and its resume has an epoch left), written to folder/study.yaml."""
    data = copy.deepcopy(data)
    data["epochs"] = 2
    data["search"]["n_samples"] = 2
    data["executor"] = {"workers": 1}
    study = folder / "study.yaml"
    study.write_text(yaml.safe_dump(data))
    return study, parse_spec(data)


def signal_at(where: str, call: int, signum: int, after: bool = False) -> str:
    """Code that makes the driver send itself `signum` at the `call`-th call of `where`
    ("module:Class.method" or "module:function"), before it runs (after it, with `after`)."""
    return f"""
import importlib, os
module, _, attr = {where!r}.partition(":")
owner_name, _, name = attr.rpartition(".")
owner = importlib.import_module(module)
owner = getattr(owner, owner_name) if owner_name else owner
original, calls = getattr(owner, name), []
def hooked(*args, **kwargs):
    calls.append(1)
    if len(calls) == {call} and not {after}:
        os.kill(os.getpid(), {int(signum)})
    out = original(*args, **kwargs)
    if len(calls) == {call} and {after}:
        os.kill(os.getpid(), {int(signum)})
    return out
setattr(owner, name, hooked)
"""

"""Run `optbench ARGS` inside the test process (fast: no interpreter or torch start-up), and
the command line of a small `optbench train` run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from optbench.cli import main


def run_cli(args: list[str], cwd: Path, monkeypatch, capsys) -> tuple[int, str, str]:
    """Exit code (0 for a normal return), stdout and stderr of `optbench ARGS` run in `cwd`."""
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["optbench", *args])
    capsys.readouterr()
    code = 0
    with pytest.raises(SystemExit) as exit_:
        main()
        raise SystemExit(0)
    code = exit_.value.code or 0
    out, err = capsys.readouterr()
    return code, out, err


# A two-epoch digits trial of the smallest ViT, one thread: `optbench train` + these.
TRAIN = (
    "train",
    "vit_p_w64_16px",
    "--dataset",
    "digits",
    "--img-size",
    "16",
    "--optimizer",
    "adamw",
    "--lr",
    "3e-3",
    "--wd",
    "0.05",
    "--epochs",
    "2",
    "--warmup-epochs",
    "0",
    "--out",
    "TMP/out",
)


def train_args(*extra: str, **replace: str) -> tuple[str, ...]:
    """TRAIN with some flags' values replaced (lr="inf" for --lr inf) and `extra` appended."""
    args = list(TRAIN)
    for flag, value in replace.items():
        args[args.index("--" + flag.replace("_", "-")) + 1] = value
    return (*args, *extra)

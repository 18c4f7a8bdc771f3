"""Run `optbench ARGS` inside the test process (fast: no interpreter or torch start-up), the
command line of a small `optbench train` run and its TrainConfig (`tiny_config`), and a small
study. (Test modules import these from here: `from conftest import ...` is ambiguous beside
tests/slurm/conftest.py.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from optbench.cli.app import main
from optbench.spec.recipe import Dataset, Recipe
from optbench.trial.config import TrainConfig


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


# The tests' TrainConfig, built in one place: by default the trial `optbench train` builds from
# TRAIN (ref_batch: the basic preset's). A test passes every value it depends on by name; a
# `recipe` given replaces the default one whole.
TINY_TRIAL = {
    "model": "vit_p_w64_16px",
    "dataset": Dataset(name="digits", img_size=16),
    "optimizer": "adamw",
    "lr": 3e-3,
    "wd": 0.05,
    "epochs": 2,
    "batch_size": 128,
    "recipe": Recipe(warmup_epochs=0),
}


def tiny_config(**changes) -> TrainConfig:
    """TINY_TRIAL with `changes` (TrainConfig's fields, by name): tiny_config(lr=0.5, epochs=1)."""
    return TrainConfig(**{**TINY_TRIAL, **changes})


# The tests' tiny study, defined once: digits at 16 px, the two smallest ViTs (P and C), one
# epoch, two (lr, wd) samples; it trains in seconds on one CPU core. conftest.py's `tiny_dict`
# is a copy of it with its own output folder.
TINY = {
    "name": "tiny",
    "dataset": {"name": "digits", "img_size": 16},
    "models": ["vit_p_w64_16px", "vit_c_w64_16px"],
    "optimizers": ["adamw"],
    "epochs": 1,
    "batch_size": 128,
    "ref_batch": 128,
    "search": {"n_samples": 2, "ranges": {"adamw": {"lr": [1e-3, 1e-2], "wd": [0.01, 0.1]}}},
    "recipe": {"warmup_epochs": 0, "hflip": False, "translate": 2},
}
# The same study of the smallest ViT only: two 1-epoch trials, one per (lr, wd) sample.
ONE_MODEL_STUDY = {**TINY, "models": TINY["models"][:1]}

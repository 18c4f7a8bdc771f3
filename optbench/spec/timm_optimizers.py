"""timm's optimizer registry as data: `TIMM_OPTIMIZERS` (each optimizer's class and the arguments
a study may give it, recipe.optimizer_args, with their defaults) and `TIMM_VERSION`, read once
from timm_optimizers.json beside this module (package data, in a wheel too). The file is
written by `python -m optbench.train.optim` from the installed timm (train/optim.py:
registry_table); spec/optimizers.py reads the table, so a study's optimizers are checked
without importing torch or timm.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

TABLE_FILE = "timm_optimizers.json"
TABLE_PATH = Path(__file__).with_name(TABLE_FILE)  # where the generator writes it


def _with_tuples(entry: dict) -> dict:
    """The entry with JSON's lists as the tuples they were (betas): spec/optimizers.py checks a
    study's value against its default's type."""
    if "args" not in entry:
        return entry
    args = {k: tuple(v) if isinstance(v, list) else v for k, v in entry["args"].items()}
    return {**entry, "args": args}


def _load() -> tuple[str, dict[str, dict]]:
    """(timm's version, the table) from the package's file, wherever the package is installed."""
    text = resources.files(__package__).joinpath(TABLE_FILE).read_text(encoding="utf-8")
    data = json.loads(text)
    return data["timm_version"], {n: _with_tuples(e) for n, e in data["optimizers"].items()}


TIMM_VERSION, TIMM_OPTIMIZERS = _load()

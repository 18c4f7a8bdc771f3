"""The report's trial tables: trials.csv (that no spreadsheet cell of it can run a formula) and
trials.parquet where pyarrow is installed, written through safefs.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd

from optbench import safefs
from optbench.decision import frames

CSV_FIRST_COLUMNS = [
    "model",
    "optimizer",
    "epochs",
    "lr",
    "wd",
    "seed",
    "status",
    "final_error",
    "best_error",
    frames.PYCLS_BEST,
]

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what makes a spreadsheet cell a formula


def csv_cell(value):
    """A cell a spreadsheet shows as text: a string that would start a formula gets a leading
    ' (OWASP's advice against CSV injection); numbers, and strings that are numbers, stay."""
    if not isinstance(value, str) or not value.startswith(FORMULA_STARTS):
        return value
    try:
        float(value)
        return value  # "-1.5" is a number, not a formula
    except ValueError:
        return "'" + value


def write_trials(trials: pd.DataFrame, out_dir: Path, root: Path | None = None) -> list[str]:
    """trials.csv (no per-epoch metrics, but pycls_best computed from them; no cell can start a
    formula), and trials.parquet when pyarrow is installed; through safefs below `root`
    (default: `out_dir` itself)."""
    root = out_dir if root is None else root
    trials = frames.with_pycls_best(trials)
    first = [c for c in CSV_FIRST_COLUMNS if c in trials.columns]
    rest = [c for c in trials.columns if c not in first and c != "metrics"]
    table = trials[first + rest].map(csv_cell)
    with safefs.atomic_open(out_dir / "trials.csv", root, "wb") as f:
        table.to_csv(f, index=False, encoding="utf-8")  # as pandas writes a path
    written = ["trials.csv"]
    if importlib.util.find_spec("pyarrow") is not None:
        with safefs.atomic_open(out_dir / "trials.parquet", root, "wb") as f:
            trials.to_parquet(f, index=False)
        written.append("trials.parquet")
    return written

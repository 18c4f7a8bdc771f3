"""Two reports of one study compared trial by trial (`optbench compare RUN REFERENCE`): a run of
yours against the committed reference (docs/reference/quickstart/), say.

Trials are matched by (model, optimizer, epochs, sample, seed) from each folder's trials.csv.
For each matched trial: whether the weights digests are equal, and the difference in error
(run - reference). Digests repeat only for the same config on the same machine (CPU or GPU
model), library versions and thread count (docs/faults.md); on another machine expect unequal
digests and errors that differ within seed noise. Reads only; writes nothing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from optbench.errors import UsageError

TRIAL_KEY: list[str] = ["model", "optimizer", "epochs", "sample", "seed"]
NEEDED = [*TRIAL_KEY, "status", "final_error", "digest"]
# what a digest depends on besides the config, as trials.csv records it (older files lack some)
MAKERS = {
    "device": "the device",
    "code_fingerprint": "the training code",
    "torch": "torch",
    "threads": "the thread count",
}


def read_trials(folder: Path) -> pd.DataFrame:
    """A report folder's trials.csv, with the columns a comparison needs (UsageError if not)."""
    path = Path(folder) / "trials.csv"
    if not path.is_file():
        raise UsageError(f"{path}: no trials.csv (a folder `optbench report` wrote?)")
    try:
        # a digest is text even where its hex digits are all decimal ones
        trials = pd.read_csv(path, dtype={"digest": str})
    except (ValueError, OSError) as err:
        raise UsageError(f"{path}: not a readable trials.csv ({err})") from None
    missing = [c for c in NEEDED if c not in trials.columns]
    if missing:
        raise UsageError(f"{path}: lacks the columns {missing}")
    return trials[NEEDED + [c for c in MAKERS if c in trials.columns]]


def _values(trials: pd.DataFrame, column: str) -> list[str]:
    if column not in trials:
        return []
    values = trials[column].dropna()
    return sorted({f"{v:g}" if isinstance(v, int | float) else str(v) for v in values})


def why_digests_differ(run: pd.DataFrame, reference: pd.DataFrame) -> str:
    """One line saying what differs between the machines and code that made the two sides
    (device, training-code fingerprint, torch version, as recorded), for when no digest
    matches; or that none of those differs, or which were not recorded."""
    differ, unknown = [], []
    for column, name in MAKERS.items():
        mine, theirs = _values(run, column), _values(reference, column)
        if not mine or not theirs:
            unknown.append(name)
        elif mine != theirs:
            differ.append(f"{name} ({', '.join(mine)} here; {', '.join(theirs)} in the reference)")
    if differ:
        return "no digest matches: " + "; ".join(differ) + " differ(s) (docs/faults.md)"
    if unknown:
        return f"no digest matches; not recorded on both sides: {', '.join(unknown)}"
    return (
        "no digest matches although device, training code, torch and thread count are the "
        "same: another library (docs/faults.md)"
    )


def compare_trials(run: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """One row per trial of either side: its key, status and final_error of each (suffixes
    _run and _ref; NaN where a side lacks the trial), error_diff (run - reference) and
    same_digest (None where a side has no digest)."""
    both = run.merge(reference, on=TRIAL_KEY, how="outer", suffixes=("_run", "_ref"))
    both["error_diff"] = both["final_error_run"] - both["final_error_ref"]
    has_both = both["digest_run"].notna() & both["digest_ref"].notna()
    both["same_digest"] = np.where(has_both, both["digest_run"] == both["digest_ref"], None)
    return both.sort_values(TRIAL_KEY, kind="stable").reset_index(drop=True)


def _per_model(table: pd.DataFrame) -> pd.DataFrame:
    """Per (model, optimizer, epochs): best and median error of each side and their digests."""
    rows = []
    for key, group in table.groupby(["model", "optimizer", "epochs"], sort=False):
        rows.append(
            {
                "cell": "/".join(str(k) for k in key),
                "trials": len(group),
                "digests equal": int((group["same_digest"] == True).sum()),  # noqa: E712
                "best run": group["final_error_run"].min(),
                "best ref": group["final_error_ref"].min(),
                "median run": group["final_error_run"].median(),
                "median ref": group["final_error_ref"].median(),
                "max |diff|": group["error_diff"].abs().max(),
            }
        )
    return pd.DataFrame(rows)


def format_comparison(
    table: pd.DataFrame,
    run: Path,
    reference: Path,
    run_trials: pd.DataFrame | None = None,
    reference_trials: pd.DataFrame | None = None,
) -> str:
    """The terminal text: counts (and, when no digest matches, why, from `run_trials` and
    `reference_trials`, the two read_trials), then per cell the errors of both sides (%), then
    each trial whose digest differs or that one side lacks."""
    matched = table["same_digest"].notna()
    equal = int((table["same_digest"] == True).sum())  # noqa: E712
    only_run = int(table["status_ref"].isna().sum())
    only_ref = int(table["status_run"].isna().sum())
    lines = [
        f"{run} against {reference}: {int(matched.sum())} trials in both, digests equal "
        f"{equal}, unequal {int(matched.sum()) - equal}; only in the run {only_run}, only in "
        f"the reference {only_ref}",
        "errors are top-1 final_error in percent; diff = run - reference",
        _per_model(table).to_string(index=False, float_format=lambda v: f"{v:.2f}"),
    ]
    unequal = table[table["same_digest"] == False]  # noqa: E712
    if matched.any() and equal == 0 and run_trials is not None and reference_trials is not None:
        lines.insert(1, why_digests_differ(run_trials, reference_trials))
    if len(unequal):
        cols = [*TRIAL_KEY, "final_error_run", "final_error_ref", "error_diff"]
        text = unequal[cols].to_string(index=False, float_format=lambda v: f"{v:.2f}")
        lines += ["trials whose digests differ:", text]
    return "\n".join(lines)

"""Two reports of one study compared trial by trial (`optbench compare RUN REFERENCE`): a run of
yours against the committed reference (docs/reference/quickstart/), say.

Trials are matched by (model, optimizer, epochs, sample, seed) from each folder's trials.csv.
For each matched trial: whether the weights digests are equal, and the difference in error
(run - reference). Digests repeat only for the same config on the same machine (CPU or GPU
model), library versions and thread count (docs/faults.md); on another machine expect unequal
digests and errors that differ within seed noise. When no digest matches, it names what differs
of the recorded makers (MAKERS: device, CPU family and model, torch's CPU capability, GPU and
driver, training code, torch, threads), or those one side did not record. Where trials.csv records the study's own
modules (its `user_code` column), each module whose version or source digest differs between
the two sides, or that one side lacks, is named on a line of its own. Reads only; writes
nothing. A trials.csv is untrusted input: each cell read is parsed strictly (a text error,
epochs of 20.0, a name with a terminal escape sequence are one line naming row and column; a
`user_code` cell as a result file's, trial/config.py's UserCode) and a trial listed twice is
refused, never counted twice.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import TypeAdapter, ValidationError

from optbench.errors import UsageError
from optbench.spec.caps import SEED_BOUND
from optbench.trial.config import UserCode, UserModule
from optbench.user_code import MAX_MODULES

TRIAL_KEY: list[str] = ["model", "optimizer", "epochs", "sample", "seed"]
NEEDED = [*TRIAL_KEY, "status", "final_error", "digest"]
# what a digest depends on besides the config, as trials.csv records it (older files lack some)
MAKERS = {
    "device": "the device",
    "code_fingerprint": "the training code",
    "torch": "torch",
    "threads": "the thread count",
    # the machine (provenance.machine): CPUs of one model name differ in these
    "cpu_capability": "torch's CPU capability",
    "cpu": "the CPU (vendor, family, model, stepping)",
    "cpu_flags": "the CPU's vector flags",
    "gpu": "the GPU",
    "gpu_driver": "the GPU driver",
}
# recorded on CUDA only: where neither side has them, both ran on a CPU (or before them)
GPU_ONLY = ("gpu", "gpu_driver")


MAX_TRIALS_BYTES = 64 * 2**20  # a report's trials.csv: 10,000 trials are about 5 MB
STATUSES = ("finished", "diverged", "failed", "pending")
_COUNT = re.compile(r"[0-9]{1,18}")
_SEED = re.compile(r"[0-9]{1,19}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_USER_CODE = TypeAdapter(UserCode)


def _text(value: str) -> str:
    """A name shown on the terminal: printable characters only (no escape sequence that would
    move the cursor, recolour or retitle it), at most 200."""
    if not value or not value.isprintable() or len(value) > 200:
        raise ValueError("not a name (printable text of 1 to 200 characters)")
    return value


def _count(value: str) -> int:
    if not _COUNT.fullmatch(value):
        raise ValueError("not a count (digits only)")
    return int(value)


def _seed(value: str) -> int:
    """A training seed: 0 .. 2**63 - 1, as a study may list (search.seed_per_sample draws them
    from the whole range)."""
    if not _SEED.fullmatch(value) or int(value) >= SEED_BOUND:
        raise ValueError("not a training seed (digits only, below 2**63)")
    return int(value)


def _error(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = None
    if number is None or not 0 <= number <= 100:  # NaN too
        raise ValueError("not an error in percent (a number from 0 to 100)")
    return number


def _digest(value: str) -> str:
    if not _DIGEST.fullmatch(value):
        raise ValueError("not a weights digest (64 hex digits)")
    return value


def _user_code(value: str) -> tuple[tuple[str, str | None, str], ...]:
    """The study's own modules a result was trained with (trials.csv's `user_code`, JSON of
    provenance.user_code, checked as a result file's): ((module, version or None, source
    digest), ...), sorted by module."""
    try:
        modules = _USER_CODE.validate_json(value, strict=True)
    except ValidationError as err:
        raise ValueError(_user_code_problem(err)) from None
    return tuple((name, module.version, module.digest) for name, module in sorted(modules.items()))


def _user_code_problem(err: ValidationError) -> str:
    """What is wrong with a user_code cell, in words that repeat no unchecked text of it (a key
    that is no module name, or not version or digest, may hold a terminal escape sequence)."""
    errors = err.errors()
    if any(not e["loc"] for e in errors):
        return f"not a JSON object of 1 to {MAX_MODULES} modules"
    if any("[key]" in e["loc"] for e in errors):
        return "a module name that is none"
    name, *field = errors[0]["loc"]
    if len(field) != 1 or field[0] not in UserModule.model_fields:
        return f"{name}: not a {{version, digest}} object"
    return f"{name}: {field[0]}: {errors[0]['msg'].removeprefix('Value error, ')}"


def _status(value: str) -> str:
    if value not in STATUSES:
        raise ValueError(f"not a trial status ({', '.join(STATUSES)})")
    return value


# How each column read is parsed: a cell that does not parse is one line naming row and column.
# Empty cells are missing values (a pending trial's error, an older file's device), except in
# the trial's key and its status.
PARSERS = {
    "model": _text,
    "optimizer": _text,
    "epochs": _count,
    "sample": _count,
    "seed": _seed,
    "status": _status,
    "final_error": _error,
    "digest": _digest,
    "device": _text,
    "code_fingerprint": _text,
    "torch": _text,
    "threads": _count,
    "user_code": _user_code,
    **dict.fromkeys(("cpu_capability", "cpu", "cpu_flags", "gpu", "gpu_driver"), _text),
}
REQUIRED = (*TRIAL_KEY, "status")
NUMBERS = ("final_error", "threads")


def read_trials(folder: Path) -> pd.DataFrame:
    """A report folder's trials.csv, with the columns a comparison needs, each cell parsed
    strictly (PARSERS) and each trial once: UsageError naming the file, the row and the column
    otherwise (a row is counted from 1 below the header)."""
    path = Path(folder) / "trials.csv"
    if not path.is_file():
        raise UsageError(f"{path}: no trials.csv (a folder `optbench report` wrote?)")
    if path.stat().st_size > MAX_TRIALS_BYTES:
        raise UsageError(f"{path}: larger than {MAX_TRIALS_BYTES // 2**20} MiB: not a report's")
    try:  # every cell as text, parsed below: pandas would guess a column's type from its cells
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (ValueError, OSError) as err:
        raise UsageError(f"{path}: not a readable trials.csv ({err})") from None
    missing = [c for c in NEEDED if c not in raw.columns]
    if missing:
        raise UsageError(f"{path}: lacks the columns {missing}")
    columns = NEEDED + [c for c in [*MAKERS, "user_code"] if c in raw.columns]
    parsed = {column: [] for column in columns}
    seen: dict[tuple, int] = {}
    for row, cells in enumerate(raw[columns].itertuples(index=False, name=None), 1):
        for column, cell in zip(columns, cells, strict=True):
            parsed[column].append(_parse(path, row, column, cell))
        key = tuple(parsed[c][-1] for c in TRIAL_KEY)
        if key in seen:  # which of the two counts? neither is a report's
            model, optimizer, epochs, sample, seed = key
            raise UsageError(
                f"{path}: rows {seen[key]} and {row} are one trial ({model} {optimizer} "
                f"{epochs} sample {sample} seed {seed}); a report lists each trial once"
            )
        seen[key] = row
    return pd.DataFrame(parsed, columns=columns)


def _parse(path: Path, row: int, column: str, cell: str):
    """One cell parsed by its column's parser; for an empty optional cell NaN in a column of
    numbers (a column of pending trials' errors stays one of numbers), else None."""
    if cell == "" and column not in REQUIRED:
        return np.nan if column in NUMBERS else None
    try:
        return PARSERS[column](cell)
    except ValueError as err:
        raise UsageError(f"{path}: row {row}: {column}: {err} ({cell!r:.60})") from None


def _values(trials: pd.DataFrame, column: str) -> list[str]:
    if column not in trials:
        return []
    values = trials[column].dropna()
    return sorted({f"{v:g}" if isinstance(v, int | float) else str(v) for v in values})


def why_digests_differ(run: pd.DataFrame, reference: pd.DataFrame) -> str:
    """One line saying what differs between the machines and code that made the two sides
    (device, training-code fingerprint, torch version, thread count, torch's CPU capability,
    the CPU's family and model, its vector flags, the GPU and its driver, as recorded), for when
    no digest matches; or that none of those differs, or which were not recorded on both sides
    (results from before they were), so that it cannot tell."""
    differ, unknown = [], []
    for column, name in MAKERS.items():
        mine, theirs = _values(run, column), _values(reference, column)
        if column in GPU_ONLY and not mine and not theirs:
            continue
        if not mine or not theirs:
            unknown.append(name)
        elif mine != theirs:
            differ.append(f"{name} ({', '.join(mine)} here; {', '.join(theirs)} in the reference)")
    if differ:
        also = f"; not recorded on both sides: {', '.join(unknown)}" if unknown else ""
        return "no digest matches: " + "; ".join(differ) + f" differ(s){also} (docs/faults.md)"
    if unknown:
        return (
            f"no digest matches; not recorded on both sides: {', '.join(unknown)}, so it cannot "
            "tell whether they differ (docs/faults.md)"
        )
    return (
        "no digest matches although every recorded maker is the same (device, CPU and its "
        "capability, training code, torch, thread count): another library (docs/faults.md)"
    )


def _user_modules(trials: pd.DataFrame) -> dict[str, set[tuple[str | None, str]]] | None:
    """{module: {(version, digest), ...}} over a side's results (several pairs where its results
    come from several versions); None where its trials.csv has no user_code column (written
    before it was recorded)."""
    if "user_code" not in trials:
        return None
    modules: dict[str, set[tuple[str | None, str]]] = {}
    for cell in trials["user_code"].dropna():
        for name, version, digest in cell:
            modules.setdefault(name, set()).add((version, digest))
    return modules


def _described(pairs: set[tuple[str | None, str]]) -> str:
    return ", ".join(f"version {v or '(none)'} digest {d}" for v, d in sorted(pairs, key=str))


def user_code_differences(run: pd.DataFrame, reference: pd.DataFrame) -> list[str]:
    """One line per module of the study's own code (`imports:`, user_code.py) that differs
    between the two sides: its versions, else its source digests, on each side, or that one
    side lacks it. None where either side did not record its modules."""
    mine, theirs = _user_modules(run), _user_modules(reference)
    if mine is None or theirs is None:
        return []
    lines = []
    for name in sorted(set(mine) | set(theirs)):
        here, there = mine.get(name), theirs.get(name)
        if here == there:
            continue
        if there is None or here is None:
            side, pairs = ("here", here) if there is None else ("in the reference", there)
            lines.append(f"user module {name}: only {side} ({_described(pairs)})")
            continue
        versions_here, versions_there = ({v or "(none)" for v, _ in p} for p in (here, there))
        if versions_here != versions_there:
            what, a, b = "version", versions_here, versions_there
        else:  # the same version number over edited source
            what, a, b = "source digest", {d for _, d in here}, {d for _, d in there}
            what = f"version {', '.join(sorted(versions_here))} on both sides, {what}"
        lines.append(
            f"user module {name}: {what} {', '.join(sorted(a))} here; "
            f"{', '.join(sorted(b))} in the reference"
        )
    return lines


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
    if run_trials is not None and reference_trials is not None:
        lines[1:1] = user_code_differences(run_trials, reference_trials)
        if matched.any() and equal == 0:
            lines.insert(1, why_digests_differ(run_trials, reference_trials))
    if len(unequal):
        cols = [*TRIAL_KEY, "final_error_run", "final_error_ref", "error_diff"]
        text = unequal[cols].to_string(index=False, float_format=lambda v: f"{v:.2f}")
        lines += ["trials whose digests differ:", text]
    return "\n".join(lines)

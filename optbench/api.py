"""The Python API (docs/api.md): a study's trials as a pandas DataFrame, its summary, and any
report figure drawn from a DataFrame. `import optbench` exposes these names without loading
them (or torch) until first used. Nothing here writes: a study that has not run yet has its
planned trials, all pending. Nothing here runs the study's own code: its `imports:` modules are
never imported (a study or results folder someone sends you reads as data).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from optbench.decision.stats import N_BOOT
from optbench.decision.summary import Options
from optbench.report.figures import (
    NothingToDraw,
    curves_figure,
    edf_figure,
    length_figure,
    looks_figure,
    optimizer_figure,
    per_epoch,
    scatter_figure,
    stem_figure,
    tunability_figure,
)
from optbench.report.writer import study_summary
from optbench.run.preflight import check_spec
from optbench.run.rounds import asked_trials
from optbench.spec.overrides import load_study as _load_study
from optbench.spec.overrides import override_sources, parse_overrides
from optbench.spec.profiles import read_profile
from optbench.spec.schema import StudySpec
from optbench.store.database import Store
from optbench.store.migrations import keep_recorded_cells

__all__ = [
    "NothingToDraw",
    "curves_figure",
    "edf_figure",
    "length_figure",
    "load_study",
    "load_summary",
    "load_trials",
    "optimizer_figure",
    "scatter_figure",
    "stem_figure",
    "looks_figure",
    "tunability_figure",
    "tunability_table",
]

Study = str | Path | StudySpec


def load_study(
    study: Study, overrides: Sequence[str] = (), profile: str | Path | None = None
) -> StudySpec:
    """A study YAML (path) over its cluster `profile` (as `--profile`; spec/profiles.py) validated,
    with `overrides` ("key=value", as `--set`) applied and its models and dataset checked (a
    model unknown here taken as one its `imports:` register: those are never imported); a
    StudySpec is returned as it is."""
    if isinstance(study, StudySpec):
        return study
    parsed = parse_overrides(list(overrides))
    spec = _load_study(study, parsed, profile=read_profile(profile) if profile else None)
    spec, kept = keep_recorded_cells(spec)  # an earlier default's recorded cells
    if kept:
        warnings.warn(kept, stacklevel=2)
    check_spec(spec, data=False, source=study, sources=override_sources(parsed))
    return spec


def load_trials(
    study: Study,
    *,
    epochs: bool = False,
    overrides: Sequence[str] = (),
    profile: str | Path | None = None,
) -> pd.DataFrame:
    """The study's trials, one row per trial (pending ones included), with the columns of the
    report's trials.csv (docs/api.md lists them). With `epochs`, one row per trial and recorded
    epoch instead, each with its trial's columns and the epoch's metrics (epoch, lr, train_loss,
    val_error, raw_top1, ema_top1, epoch_s, ...)."""
    from optbench.decision.frames import with_pycls_best

    spec = load_study(study, overrides, profile)
    store = Store(spec, create=False)
    trials = store.frame(asked_trials(spec, store))
    if epochs:
        return per_epoch(trials)
    # pycls_best is computed from the per-epoch lines, which the frame then leaves out
    return with_pycls_best(trials).drop(columns="metrics")


def load_summary(
    study: Study,
    *,
    metric: str = "final_error",
    n_boot: int = N_BOOT,
    seed: int = 0,
    overrides: Sequence[str] = (),
    profile: str | Path | None = None,
) -> dict[str, Any]:
    """What `optbench report` writes to summary.json (docs/reports.md): per cell n, best and
    median error, the fraction of trials within 1, 2, 4, 8 points of the best, the EDF area
    and near_chance; KS tests and bootstrap CIs between the models of each (optimizer,
    epochs); the claims; which code made the results."""
    spec = load_study(study, overrides)
    store = Store(spec, create=False)
    trials = store.frame(asked_trials(spec, store))
    options = Options(metric=metric, n_boot=n_boot, seed=seed)
    return study_summary(spec, trials, options, looks=store.looks())


def tunability_table(
    trials: pd.DataFrame, *, metric: str = "final_error", n_boot: int = N_BOOT, seed: int = 0
) -> pd.DataFrame:
    """Per cell of a trials frame with two or more (lr, wd) samples and a finished trial: n,
    its best error, the expected best error after k samples with its band up to k = n / 2
    (columns e<k>, e<k>_low, e<k>_high) and the samples needed to land within 1 point of the
    best with probability 0.9 (decision/tunability.py; docs/reports.md)."""
    from optbench.decision import frames, tunability

    return tunability.tunability_table(frames.with_errors(trials, metric), n_boot, seed)

"""Every figure of the report, drawn from a trials DataFrame: one function per figure, each
returning a matplotlib Figure. sections.py calls them for the page; a notebook calls them on
`optbench.load_trials(...)` (or any frame with its columns).

A trials frame has one row per trial: model, optimizer, epochs, sample, seed, lr, wd, status
and the errors (final_error, best_error; pycls_best from a `metrics` column). The curves figure takes the per-epoch frame,
`optbench.load_trials(..., epochs=True)`: one row per trial and epoch (`per_epoch`).
A figure without the data it needs raises `NothingToDraw` saying what is missing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from optbench.decision import frames, tunability
from optbench.decision.edf import AUC_MAX_POINTS, dtop1, edf, edf_auc
from optbench.decision.looks import panel_words
from optbench.decision.stats import N_BOOT, edf_band, good_range
from optbench.decision.summary import Options, chance_error, near_chance
from optbench.report import drawing, drawing_cells, drawing_curves, drawing_samples
from optbench.spec.claim_kinds import KINDS, comparison_key, declared_panel
from optbench.spec.roles import families

# The dtop-1 axis ends at the largest finite dtop-1 (rounded up to 5 points), at least at
# EDF_X_MIN and at most at EDF_X_MAX; trials past it are counted in the panel's title.
EDF_X_MIN, EDF_X_MAX = 20.0, 50.0
EDF_STEPS_PER_POINT = 20  # the EDF is evaluated every 0.05 points (raw: 400 steps per panel)
TRIAL_COLUMNS = ["cell_id", "sample", "seed"]  # what names a trial in a trials frame


class NothingToDraw(ValueError):
    """The trials have not what a figure needs (e.g. two schedule lengths for `length`)."""


def _options(metric: str, n_boot: int, seed: int) -> Options:
    return Options(metric=metric, n_boot=n_boot, seed=seed)


def _colors(trials: pd.DataFrame, colors: dict[str, str] | None) -> dict[str, str]:
    return colors or drawing.model_colors(list(dict.fromkeys(trials["model"])))


def _results(trials: pd.DataFrame, metric: str) -> pd.DataFrame:
    results = frames.with_errors(trials, metric)
    if results.empty:
        raise NothingToDraw("no finished or diverged trial")
    return results


def edf_figure(
    trials: pd.DataFrame,
    *,
    raw: bool = False,
    metric: str = "final_error",
    n_boot: int = N_BOOT,
    seed: int = 0,
    colors: dict[str, str] | None = None,
    num_classes: int | None = None,
    band: str = "simultaneous",
) -> Figure:
    """Figs 4-5: per (optimizer, epochs) panel, each model's EDF of dtop-1 (error minus the
    cell's best; `raw`: of the error itself) with one kind of 95% bootstrap band (`band`):
    "simultaneous" (bootstrap of the largest deviation: it holds for the whole curve, the one
    to compare curves by), "pointwise" (each x on its own) or "none". With `num_classes`, a
    cell whose best error is near chance level is drawn dotted. A dtop-1 figure marks the area
    claim (a) compares (to AUC_MAX_POINTS) and gives each model's in the legend."""
    if band not in drawing_samples.EDF_BANDS:
        raise ValueError(f"band: {band!r} is not one of {list(drawing_samples.EDF_BANDS)}")
    options = _options(metric, n_boot, seed)
    results = _results(trials, metric)
    x_max = None if raw else dtop1_axis_end(results)
    panels = []
    for (optimizer, epochs), panel in frames.panels(results):
        finite = panel["error"][np.isfinite(panel["error"])]
        if raw:
            if not len(finite):
                continue
            xs = np.linspace(finite.min(), finite.max(), 400 + 1)
        else:
            xs = np.linspace(0.0, x_max, round(x_max * EDF_STEPS_PER_POINT) + 1)
        curves = []
        for model, cell in panel.groupby("model", sort=False):
            errors = cell["error"].to_numpy()
            values = errors if raw else dtop1(errors)
            # each kind's resamples seeded as before: a report draws the bands it always drew
            simultaneous = band == "simultaneous"
            key = (model, optimizer, epochs)
            key = ("simultaneous", *key) if simultaneous else key
            shaded = None
            if band != "none":
                shaded = edf_band(
                    errors,
                    xs,
                    relative=not raw,
                    n_boot=options.n_boot,
                    seed=options.rng_seed(*key),
                    simultaneous=simultaneous,
                )
            best = errors[np.isfinite(errors)].min() if np.isfinite(errors).any() else None
            counts = {
                "n": len(errors),
                "n_diverged": int((cell["status"] == "diverged").sum()),
                "beyond": int((np.isfinite(values) & (values > xs[-1])).sum()),
                "near_chance": bool(near_chance(best, num_classes)),
                "best": None if best is None else float(best),
                "area": None if raw else edf_auc(values),
            }
            curves.append(
                drawing_samples.EdfCurve(model, xs, edf(values, xs), band=shaded, **counts)
            )
        panels.append(drawing_samples.EdfPanel(optimizer, epochs, curves))
    if not panels:
        raise NothingToDraw("no finished trial: no error to draw")
    return drawing_samples.plot_edf(
        panels,
        _colors(trials, colors),
        xlabel="error (%)" if raw else "dtop-1 = error - the model's best (points)",
        n_boot=options.n_boot,
        x_max=x_max,
        chance_error=chance_error(num_classes) if num_classes else None,
        band=band,
        area_to=None if raw else AUC_MAX_POINTS,
    )


def dtop1_axis_end(results: pd.DataFrame) -> float:
    """Where the dtop-1 axis ends: the largest finite dtop-1 of any cell, rounded up to 5
    points, within [EDF_X_MIN, EDF_X_MAX]."""
    largest = 0.0
    for _, cell in results.groupby(frames.CELL_KEYS, sort=False):
        dtop = dtop1(cell["error"].to_numpy())
        if np.isfinite(dtop).any():
            largest = max(largest, float(dtop[np.isfinite(dtop)].max()))
    return float(np.clip(5.0 * np.ceil(largest / 5.0), EDF_X_MIN, EDF_X_MAX))


def scatter_figure(
    trials: pd.DataFrame,
    *,
    metric: str = "final_error",
    n_boot: int = N_BOOT,
    seed: int = 0,
    colors: dict[str, str] | None = None,
) -> Figure:
    """Error against lr, wd and lr*wd of each finished trial, per cell, with each model's best
    value and its bootstrap good range."""
    options = _options(metric, n_boot, seed)
    panels = []
    for (optimizer, epochs), panel in frames.panels(_results(trials, metric)):
        if not np.isfinite(panel["error"]).any():
            continue
        series = [
            _scatter_series(model, cell, options, options.rng_seed(model, optimizer, epochs))
            for model, cell in panel.groupby("model", sort=False)
        ]
        panels.append(drawing_samples.ScatterPanel(optimizer, epochs, series))
    if not panels:
        raise NothingToDraw("no finished trial: no error to draw")
    return drawing_samples.plot_scatter(panels, _colors(trials, colors))


def _scatter_series(
    model: str, cell: pd.DataFrame, options: Options, seed: list[int]
) -> drawing_samples.ScatterSeries:
    errors = cell["error"].to_numpy()
    values = {
        "lr": cell["lr"].to_numpy(float),
        "wd": cell["wd"].to_numpy(float),
        "lr*wd": (cell["lr"] * cell["wd"]).to_numpy(float),
    }
    best = {
        name: good_range(errors, v, n_boot=options.n_boot, seed=seed) for name, v in values.items()
    }
    finished = np.isfinite(errors)
    return drawing_samples.ScatterSeries(
        model, {k: v[finished] for k, v in values.items()}, errors[finished], best
    )


def length_figure(
    trials: pd.DataFrame, *, metric: str = "final_error", colors: dict[str, str] | None = None
) -> Figure:
    """Fig 2: dtop-1 of each schedule length against the longest with a finished result."""
    length = frames.length_stability(frames.best_by_cell(_results(trials, metric)))
    if length.empty:
        raise NothingToDraw(
            "needs at least two schedule lengths with finished trials for some model"
        )
    return drawing_cells.plot_length(length, _colors(trials, colors))


def optimizer_figure(trials: pd.DataFrame, *, metric: str = "final_error") -> Figure:
    """Fig 3: per model, best error against schedule length with AdamW and with SGD."""
    best = frames.best_by_cell(_results(trials, metric))
    if not {"adamw", "sgd"} <= set(best["optimizer"]):
        raise NothingToDraw("needs both AdamW and SGD trials")
    stability = frames.optimizer_stability(best)
    if stability.empty:
        raise NothingToDraw("no finished trials")
    return drawing_cells.plot_optimizer(stability, frames.optimizer_gaps(stability))


def stem_figure(trials: pd.DataFrame, *, metric: str = "final_error") -> Figure:
    """Table 3 as a figure: each cell's error along the stem order of every model family with
    a stem ablation (ViT_C, S1, S2, ..., ViT_P; roles.families names them)."""
    models = list(dict.fromkeys(trials["model"]))
    order = [
        model
        for family in families(models)
        if family.stems and family.p
        for model in ((family.c,) if family.c else ()) + family.stem_order
    ]
    if not order:
        raise NothingToDraw("needs ViT_P and a stem ablation of the same family (vit_s<k>_...)")
    best = frames.best_by_cell(_results(trials, metric))
    best = best[best["model"].isin(order)].dropna(subset=["best_error"])
    if best.empty:
        raise NothingToDraw("no finished trials of the stem ablation")
    return drawing_cells.plot_stem(best, order)


def tunability_figure(
    trials: pd.DataFrame,
    *,
    metric: str = "final_error",
    n_boot: int = N_BOOT,
    seed: int = 0,
    colors: dict[str, str] | None = None,
) -> Figure:
    """Per model, the expected best error after k random (lr, wd) samples against k, with its
    bootstrap band (decision/tunability.py), a panel per optimizer and schedule length."""
    results = _results(trials, metric)
    curves = tunability.tunability_curves(results, n_boot, seed)
    if curves.empty and not np.isfinite(results["error"]).any():
        raise NothingToDraw("no trial finished: every one diverged, so no cell has a best")
    if curves.empty:
        raise NothingToDraw(
            f"no cell has {tunability.MIN_SAMPLES} or more (lr, wd) samples and a finished trial"
        )
    return drawing_curves.plot_tunability(curves, _colors(trials, colors))


def per_epoch(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per trial and recorded epoch: the trial's columns and its metrics line (epoch,
    lr, train_loss, val_error, ...), from a frame whose `metrics` column holds the lines."""
    rows = [
        {**{k: v for k, v in trial.items() if k != "metrics"}, **line}
        for trial in trials.to_dict("records")
        for line in (trial.get("metrics") or [])
    ]
    columns = [c for c in trials.columns if c != "metrics"] + ["epoch", "val_error"]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=columns)


def curves_figure(
    epochs: pd.DataFrame, *, metric: str = "final_error", colors: dict[str, str] | None = None
) -> Figure:
    """Validation error against epoch of the best, median and worst finished trial of each cell,
    from a per-epoch frame (`per_epoch`, or `optbench.load_trials(..., epochs=True)`)."""
    # a trial that diverged in its first epoch records lines without a val_error
    curves = epochs.dropna(subset=["val_error"]) if "val_error" in epochs else epochs.iloc[0:0]
    if curves.empty:
        raise NothingToDraw("no finished trial recorded per-epoch metrics")
    by_trial = curves.drop_duplicates(TRIAL_COLUMNS)
    if metric == frames.PYCLS_BEST:  # a trial's lines are rows here: gather them back
        lines = {key: rows.to_dict("records") for key, rows in curves.groupby(TRIAL_COLUMNS)}
        keys = by_trial[TRIAL_COLUMNS].itertuples(index=False, name=None)
        by_trial = by_trial.assign(**{metric: [frames.pycls_best(lines[k]) for k in keys]})
    picks = frames.curve_picks(frames.with_errors(by_trial, metric))
    if picks.empty:
        raise NothingToDraw("no finished trial recorded per-epoch metrics")
    panels = []
    for (optimizer, n_epochs), panel in frames.panels(picks):
        lines = []
        for _, pick in panel.iterrows():
            mine = np.logical_and.reduce([curves[c] == pick[c] for c in TRIAL_COLUMNS])
            rows = curves[mine].sort_values("epoch")
            lines.append(
                (
                    pick["model"],
                    pick["rank"],
                    rows["epoch"].to_numpy(),
                    rows["val_error"].to_numpy(),
                )
            )
        panels.append(drawing_curves.CurvePanel(optimizer, n_epochs, lines))
    return drawing_curves.plot_curves(panels, _colors(epochs, colors))


def _look_statistic(look: dict) -> str:
    """What a look's estimate computes: its kind's statistic, or a declared comparison's on its
    own two cells (the look's record names its claim, kind and cells)."""
    kind = look.get("kind") or look["claim"]
    if kind == look["claim"]:
        return KINDS[kind].statistic
    return declared_panel(look["claim"], kind, look["cells"], look.get("best_of")).statistic


def looks_figure(looks: list[dict]) -> Figure:
    """A sequential study's looks (the store's records, run/rounds.py): per claim panel, the
    estimate and repeated 95% interval at each look against its size (drawing_curves.plot_looks)."""
    by_panel: dict[str, list[dict]] = {}  # by the comparison, whatever key kept the record
    for look in sorted(looks, key=lambda x: x["k"]):
        by_panel.setdefault(comparison_key(look["claim"], look["cells"]), []).append(look)
    if not by_panel:
        raise NothingToDraw("no look taken yet")
    panels = []
    for path in sorted(by_panel.values(), key=lambda p: _look_title(p[-1])):
        last = path[-1]
        panels.append(
            drawing_curves.LookPanel(
                title=_look_title(last),
                statistic=_look_statistic(last),
                unit=last["unit"],
                n=[look["n"] for look in path],
                estimate=[look["estimate"] for look in path],
                low=[look["low"] for look in path],
                high=[look["high"] for look in path],
                boundary=[look["boundary"] for look in path],
                outcome=last["outcome"],
                n_max=last["n_max"],
                margin=last.get("margin"),
            )
        )
    return drawing_curves.plot_looks(panels)


def _look_title(look: dict) -> str:
    """A look's panel in words, e.g. "(a) adamw 20ep vit_c_x vs vit_p_x"."""
    return f"({look['claim']}) {panel_words(look['claim'], look['cells'], look.get('kind'))}"

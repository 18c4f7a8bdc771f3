"""The report of one study, assembled and written into a folder: summary.json, trials.csv, the
figures (PNG + SVG) and index.html. `write_report` is the entry point. This module picks the
sections, builds each one's figures and tables from the trials (tables.py, plots.py, stats.py)
and writes the files; the numbers of summary.json come from summary.py, the page from page.py.

Input is the store's trials table (one row per trial of the study as currently specified).
Only "finished" and "diverged" rows are results; "failed" and "pending" rows make the report
"partial: n of N". summary.json keeps the keys of issue 2 unchanged and adds new ones beside them.
"""

from __future__ import annotations

import base64
import importlib.util
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from optbench.analysis import claims, plots, tables
from optbench.analysis.edf import dtop1, edf
from optbench.analysis.page import Section, render_html
from optbench.analysis.stats import N_BOOT, edf_band, good_range
from optbench.analysis.summary import Options, summarize
from optbench.errors import UsageError
from optbench.spec import StudySpec

FIGURES: tuple[str, ...] = ("edf", "length", "optimizer", "peak", "complexity", "curves")
METRICS: tuple[str, ...] = ("final_error", "best_error")
EDF_X_MAX = 20.0  # dtop-1 axis of the EDF figure, in points
EDF_GRID = 401
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
]


# --- ordering ------------------------------------------------------------------------------


def _ordered(trials: pd.DataFrame, spec: StudySpec) -> pd.DataFrame:
    """Rows in the spec's order of models and optimizers, then by epochs, sample and seed."""

    def rank(order: list[str]) -> Callable[[pd.Series], pd.Series]:
        position = {name: i for i, name in enumerate(order)}
        return lambda col: col.map(lambda v: position.get(v, len(position)))

    keys = {"model": rank(list(spec.models)), "optimizer": rank(list(spec.optimizers))}
    by = [c for c in ["model", "optimizer", "epochs", "sample", "seed"] if c in trials.columns]
    return trials.sort_values(
        by, key=lambda col: keys.get(col.name, lambda c: c)(col), kind="stable"
    )


# --- sections: each returns figures, tables and notes for the page -------------------------


def _edf_section(results: pd.DataFrame, colors: dict[str, str], options: Options) -> Section:
    section = Section(
        "edf",
        "lr/wd stability: error distribution functions (Figs 4-5)",
        "F(x) = fraction of a cell's trials with dtop-1 = error - best error <= x; diverged "
        "trials count in n and are never within any x. Shaded: pointwise 95% bootstrap bands "
        f"({options.n_boot} resamples, best recomputed in each). Scatter: vertical lines at "
        "each model's best value, shaded its bootstrap good range (2.5-97.5 percentiles of "
        "the best run's value over resamples).",
    )
    xs = np.linspace(0.0, EDF_X_MAX, EDF_GRID)
    dtop_panels, raw_panels, scatter_panels = [], [], []
    for (optimizer, epochs), panel in tables.panels(results):
        dtop_curves, raw_curves, series = [], [], []
        finite_all = panel["error"][np.isfinite(panel["error"])]
        raw_xs = (
            np.linspace(finite_all.min(), finite_all.max(), EDF_GRID) if len(finite_all) else None
        )
        for model, cell in panel.groupby("model", sort=False):
            errors = cell["error"].to_numpy()
            seed = options.rng_seed(model, optimizer, epochs)
            counts = {"n": len(errors), "n_diverged": int((cell["status"] == "diverged").sum())}
            band = edf_band(errors, xs, n_boot=options.n_boot, seed=seed)
            dtop_curves.append(
                plots.EdfCurve(model, xs, edf(dtop1(errors), xs), band=band, **counts)
            )
            if raw_xs is not None:
                band = edf_band(errors, raw_xs, relative=False, n_boot=options.n_boot, seed=seed)
                raw_curves.append(
                    plots.EdfCurve(model, raw_xs, edf(errors, raw_xs), band=band, **counts)
                )
            series.append(_scatter_series(model, cell, options, seed))
        dtop_panels.append(plots.EdfPanel(optimizer, epochs, dtop_curves))
        if raw_curves:
            raw_panels.append(plots.EdfPanel(optimizer, epochs, raw_curves))
            scatter_panels.append(plots.ScatterPanel(optimizer, epochs, series))
    section.figures.append(("edf", plots.plot_edf(dtop_panels, colors, xlabel="dtop-1 (points)")))
    if raw_panels:
        section.figures.append(("edf_raw", plots.plot_edf(raw_panels, colors, xlabel="error (%)")))
        section.figures.append(("scatter", plots.plot_scatter(scatter_panels, colors)))
    else:
        section.notes.append("No finished trial: raw-error EDF and lr/wd scatter skipped.")
    return section


def _scatter_series(
    model: str, cell: pd.DataFrame, options: Options, seed: list[int]
) -> plots.ScatterSeries:
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
    return plots.ScatterSeries(
        model, {k: v[finished] for k, v in values.items()}, errors[finished], best
    )


def _length_section(best: pd.DataFrame, colors: dict[str, str]) -> Section:
    section = Section(
        "length",
        "Training-length stability (Fig 2)",
        "dtop-1 of each schedule length against the longest schedule with a finished result, "
        "per model and optimizer; a cell's error is its best error over the sampled (lr, wd).",
    )
    length = tables.length_stability(best)
    if length.empty:
        section.notes.append(
            "Skipped: needs at least two schedule lengths with finished trials for some model."
        )
        return section
    section.figures.append(("length", plots.plot_length(length, colors)))
    section.tables.append(("dtop-1 against the longest schedule", length))
    return section


def _optimizer_section(best: pd.DataFrame) -> Section:
    section = Section(
        "optimizer",
        "Optimizer stability (Fig 3)",
        "Best error per schedule length with AdamW and with SGD; numbers are the SGD - AdamW gap. "
        "A cell whose trials all diverged is replaced by the best shorter-schedule result of the "
        "same model and optimizer and drawn dashed, as the paper does.",
    )
    if not {"adamw", "sgd"} <= set(best["optimizer"]):
        section.notes.append("Skipped: needs both AdamW and SGD trials.")
        return section
    table = tables.optimizer_stability(best)
    if table.empty:
        section.notes.append("Skipped: no finished trials.")
        return section
    gaps = tables.optimizer_gaps(table)
    section.figures.append(("optimizer", plots.plot_optimizer(table, gaps)))
    section.tables.append(("SGD - AdamW gap (points)", gaps))
    substituted = table[table["substituted"]]
    if not substituted.empty:
        section.tables.append(("Diverged cells replaced by a shorter schedule", substituted))
    return section


def _peak_section(best: pd.DataFrame) -> Section:
    section = Section(
        "peak", "Peak error (Table 2)", "Best error (%) per model, optimizer and schedule length."
    )
    table = tables.peak_table(best)
    if table.isna().all().all():
        section.notes.append("Skipped: no finished trials.")
    else:
        section.tables.append(("Best error (%)", table))
    return section


def _complexity_section(
    spec: StudySpec, results: pd.DataFrame, data_shape: tuple[int, int, int] | None
) -> Section:
    section = Section(
        "complexity",
        "Complexity (Table 1)",
        "flops (multiply-adds), params and activations for one forward pass at the input size "
        "each model trains at; s/epoch and images/s are medians over this study's finished trials (this machine).",
    )
    from optbench.models.complexity import model_complexity  # torch and timm: only when asked

    shapes = {model: data_shape or _dataset_shape(spec, model) for model in spec.models}
    num_classes, in_chans, _ = shapes[spec.models[0]]
    sizes = {model: shape[2] for model, shape in shapes.items()}
    one_size = len(set(sizes.values())) == 1
    rows = []
    finished = results[results["status"] == "finished"]
    for model in spec.models:
        try:
            measured = model_complexity(
                model, num_classes=num_classes, in_chans=in_chans, img_size=sizes[model]
            )
        except Exception as err:  # one unmeasurable model must not sink the page
            section.notes.append(f"{model}: complexity not measured ({type(err).__name__}: {err})")
            continue
        mine = finished[finished["model"] == model]
        rows.append(
            {
                "model": model,
                **({} if one_size else {"input px": sizes[model]}),
                **measured,
                "s/epoch": float((mine["wall_s"] / mine["epochs"]).median())
                if len(mine)
                else np.nan,
                "images/s": float(mine["images_per_s"].median()) if len(mine) else np.nan,
            }
        )
    if rows:
        size = next(iter(sizes.values()))
        at = f"{size}x{size}" if one_size else "each model's input size"
        section.tables.append(
            (
                f"Complexity at {at}, {in_chans} channels, {num_classes} classes",
                pd.DataFrame(rows),
            )
        )
    return section


def _dataset_shape(spec: StudySpec, model: str) -> tuple[int, int, int]:
    """(num_classes, in_chans, img_size) of the study's dataset as `model` trains on it."""
    from optbench.train.datasets import dataset_info

    info = dataset_info(spec.dataset, model)
    return info.num_classes, info.in_chans, info.img_size


def _curves_section(results: pd.DataFrame, colors: dict[str, str]) -> Section:
    section = Section(
        "curves",
        "Training curves",
        "Validation error per epoch of the best (solid), median (dashed) and worst (dotted) "
        "finished trial of each cell.",
    )
    picks = tables.curve_picks(results)
    if picks.empty:
        section.notes.append("Skipped: no finished trial recorded per-epoch metrics.")
        return section
    panels = []
    for (optimizer, epochs), panel in tables.panels(picks):
        curves = []
        for _, row in panel.iterrows():
            metrics = pd.DataFrame(row["metrics"])
            if not {"epoch", "val_error"} <= set(metrics.columns):
                continue
            curves.append(
                (
                    row["model"],
                    row["rank"],
                    metrics["epoch"].to_numpy(),
                    metrics["val_error"].to_numpy(),
                )
            )
        panels.append(plots.CurvePanel(optimizer, epochs, curves))
    section.figures.append(("curves", plots.plot_curves(panels, colors)))
    return section


# --- files ----------------------------------------------------------------------------------


def write_trials(trials: pd.DataFrame, out_dir: Path) -> list[str]:
    """trials.csv (no per-epoch metrics), and trials.parquet when pyarrow is installed."""
    first = [c for c in CSV_FIRST_COLUMNS if c in trials.columns]
    rest = [c for c in trials.columns if c not in first and c != "metrics"]
    trials[first + rest].to_csv(out_dir / "trials.csv", index=False)
    written = ["trials.csv"]
    if importlib.util.find_spec("pyarrow") is not None:
        trials.to_parquet(out_dir / "trials.parquet", index=False)
        written.append("trials.parquet")
    return written


def _save(fig: Figure, out_dir: Path, name: str) -> str:
    """Save PNG and SVG; return the PNG as base64 for the page."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    (out_dir / f"{name}.png").write_bytes(buffer.getvalue())
    fig.set_layout_engine("none")  # the layout is settled: do not solve it again for the SVG
    # No date and fixed element ids: the same numbers give the same SVG bytes, so a regenerated
    # report differs (in git, say) only where a measurement did.
    with matplotlib.rc_context({"svg.hashsalt": f"optbench-{name}"}):
        fig.savefig(out_dir / f"{name}.svg", metadata={"Date": None})
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def build_sections(
    spec: StudySpec,
    trials: pd.DataFrame,
    figures: set[str] | None = None,
    options: Options | None = None,
    data_shape: tuple[int, int, int] | None = None,
) -> list[Section]:
    """The page's sections (figures still in memory), in FIGURES order. `trials` must already be
    in spec order (see write_report)."""
    options = options or Options()
    wanted = set(FIGURES) if figures is None else set(figures)
    results = tables.with_errors(trials, options.metric)
    if results.empty:
        empty = Section("results", "Results")
        empty.notes.append("No finished or diverged trial yet: no figure or table.")
        return [empty]
    colors = plots.model_colors(list(dict.fromkeys([*spec.models, *trials["model"]])))
    best = tables.best_by_cell(results)
    builders: dict[str, Callable[[], Section]] = {
        "edf": lambda: _edf_section(results, colors, options),
        "length": lambda: _length_section(best, colors),
        "optimizer": lambda: _optimizer_section(best),
        "peak": lambda: _peak_section(best),
        "complexity": lambda: _complexity_section(spec, results, data_shape),
        "curves": lambda: _curves_section(results, colors),
    }
    sections = [builders[key]() for key in FIGURES if key in wanted]
    return sections + (claims.sections(results, options, spec.name) if figures is None else [])


def write_report(
    spec: StudySpec,
    trials: pd.DataFrame,
    out_dir: Path,
    figures: set[str] | None = None,
    metric: str = "final_error",
    *,
    n_boot: int = N_BOOT,
    seed: int = 0,
    data_shape: tuple[int, int, int] | None = None,
) -> dict[str, Any]:
    """Write the study's report into `out_dir` and return the summary.

    `figures` picks sections from FIGURES (None: every section the data supports; a requested
    section without data gets a note instead of an empty figure). `data_shape` is
    (num_classes, in_chans, img_size) for the complexity table, looked up when None.
    """
    unknown = set(figures or ()) - set(FIGURES)
    if unknown:
        raise UsageError(f"figures: unknown {sorted(unknown)}; choose from {list(FIGURES)}")
    if metric not in METRICS:
        raise UsageError(f"metric: {metric!r} is not one of {list(METRICS)}")
    options = Options(metric=metric, n_boot=n_boot, seed=seed)

    trials = _ordered(trials, spec)
    summary = summarize(spec.name, trials, options)
    summary["claims"] = claims.records(tables.with_errors(trials, metric), options, spec.name)
    sections = build_sections(spec, trials, figures, options, data_shape)

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    images = {
        name: _save(fig, out_dir, name) for section in sections for name, fig in section.figures
    }
    write_trials(trials, out_dir)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")
    (out_dir / "index.html").write_text(render_html(spec, summary, sections, images))
    return summary

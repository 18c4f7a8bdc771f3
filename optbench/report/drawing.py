"""The report's figures, drawn from precomputed data with matplotlib's object API (a `Figure`
saves itself without pyplot, so the user's backend is left alone). Every function returns a new
Figure; the caller saves it. figures.py computes that data from a trials DataFrame.

Each data curve carries a label; helper lines (best values, zero lines) have labels that start
with "_" so that tests count only the data. Legends are the figure's, below the panels, so they
never cover data; what differs per panel (trial counts) is in the panel's title.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.legend_handler import HandlerTuple
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter
from matplotlib.transforms import offset_copy

from optbench.report.stats import Interval

PANEL_SIZE = (4.2, 3.2)
OPTIMIZER_NAMES = {"adamw": "AdamW", "sgd": "SGD"}
OPTIMIZER_COLORS = {"adamw": "C0", "sgd": "C3"}
OPTIMIZER_SHIFT = {"adamw": -3.0, "sgd": 3.0}  # points: the two optimizers' seed bars side by side
RANK_STYLES = {"best": "-", "median": "--", "worst": ":"}
HYPERPARAMETERS: tuple[str, ...] = ("lr", "wd", "lr*wd")
NEAR_CHANCE_STYLE = ":"  # an EDF of a cell whose best error is near chance level
# What an EDF's shaded band is (figures.edf_figure's `band`): one kind per figure, so that no
# two kinds of band overlap; the legend says which. Bands are shaded, never edged: a band's
# edge drawn as a line reads as another curve.
EDF_BANDS: dict[str, str] = {
    "simultaneous": "simultaneous 95% band (whole curve)",
    "pointwise": "pointwise 95% band (each x alone)",
    "none": "",
}
BAND_ALPHA = 0.18
AREA_MARK_COLOR = "0.45"  # the grey line that bounds claim (a)'s EDF area
TITLE_WIDTH = 52  # characters per line of a panel's title


def model_colors(models: Sequence[str]) -> dict[str, str]:
    """A fixed color per model, in the given order, shared by every figure of a report."""
    palette = [f"C{i}" for i in range(10)]
    return {m: palette[i % len(palette)] for i, m in enumerate(models)}


def cell_title(optimizer: str, epochs: int) -> str:
    return f"{OPTIMIZER_NAMES.get(optimizer, optimizer)}, {epochs} epochs"


def _grid(n_panels: int, ncols: int, *, sharey: bool = False) -> tuple[Figure, list[Axes]]:
    ncols = max(1, min(ncols, n_panels))
    nrows = -(-n_panels // ncols)
    fig = Figure(figsize=(PANEL_SIZE[0] * ncols, PANEL_SIZE[1] * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=sharey).ravel().tolist()
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig, axes[:n_panels]


def _legend_below(
    fig: Figure,
    handles: list,
    ncols: int = 3,
    labels: list[str] | None = None,
    fontsize: str | float = "small",
) -> None:
    """One legend for the whole figure, under its panels (constrained layout makes room), with
    as many columns as fit its width. A tuple in `handles` (with its entry of `labels`) draws
    its artists on top of each other: a band's shading with its curve, as the panels show it."""
    if handles:
        labels = labels or [h.get_label() for h in handles]
        longest = max(len(label) for label in labels)
        fit = int(fig.get_figwidth() // (0.6 + 0.075 * longest))  # inches per entry, "small" text
        fig.legend(
            handles=handles,
            labels=labels,
            loc="outside lower center",
            ncols=max(1, min(ncols, len(handles), fit)),
            fontsize=fontsize,
            frameon=False,
            handler_map={tuple: HandlerTuple(ndivide=1)},
        )


def _model_handles(models: Sequence[str], colors: dict[str, str], **style) -> list[Line2D]:
    return [Line2D([], [], color=colors[m], label=m, **style) for m in dict.fromkeys(models)]


def _wrap(text: str) -> str:
    return "\n".join(textwrap.wrap(text, TITLE_WIDTH))


@dataclass(frozen=True)
class EdfCurve:
    """One model's EDF in one panel, with its optional band (low, high) of the kind the
    figure draws (EDF_BANDS). `beyond`: finite values past the end of the x-axis (not drawn);
    `near_chance`: the cell's best error is near chance level (its trials barely learned),
    drawn dotted."""

    model: str
    xs: np.ndarray
    fraction: np.ndarray
    n: int
    n_diverged: int
    band: tuple[np.ndarray, np.ndarray] | None = None
    beyond: int = 0
    near_chance: bool = False
    best: float | None = None  # the cell's best error (%), what dtop-1 is relative to
    area: float | None = None  # claim (a)'s EDF area to `area_to` points (dtop-1 curves only)


@dataclass(frozen=True)
class EdfPanel:
    optimizer: str
    epochs: int
    curves: list[EdfCurve] = field(default_factory=list)


def edf_counts(curves: Sequence[EdfCurve], x_max: float | None = None) -> str:
    """A panel's counts: trials per model, diverged ones, and those past the x-axis."""
    sizes = {c.n for c in curves}
    parts = [
        f"n = {sizes.pop()} per model"
        if len(sizes) == 1
        else "n = " + ", ".join(f"{c.model} {c.n}" for c in curves)
    ]
    diverged = [f"{c.model} {c.n_diverged}" for c in curves if c.n_diverged]
    parts.append("diverged: " + ", ".join(diverged) if diverged else "none diverged")
    beyond = [f"{c.model} {c.beyond}" for c in curves if c.beyond]
    if beyond:
        parts.append(f"beyond {x_max:g} points (not drawn): " + ", ".join(beyond))
    return "; ".join(parts)


def plot_edf(
    panels: Sequence[EdfPanel],
    colors: dict[str, str],
    *,
    xlabel: str,
    ncols: int = 3,
    x_max: float | None = None,
    chance_error: float | None = None,
    n_boot: int | None = None,
    band: str = "simultaneous",
    area_to: float | None = None,
) -> Figure:
    """One panel per (optimizer, epochs), one step curve per model with its band shaded in the
    model's colour (`band`: which kind the curves carry, EDF_BANDS); the x-axis ends at `x_max`
    (default: the curves' grid). A cell near chance level is dotted. The legend gives each
    model's best error per panel (each curve is relative to its own), each swatch drawn as the
    panels draw the model (band and curve), and says what the band is. With `area_to`, a grey
    vertical line at that x bounds the area claim (a) compares, and the legend gives each
    model's area (the curves' `area`)."""
    fig, axes = _grid(len(panels), ncols, sharey=True)
    for ax, panel in zip(axes, panels, strict=True):
        for curve in panel.curves:
            color = colors[curve.model]
            style = NEAR_CHANCE_STYLE if curve.near_chance else "-"
            ax.step(curve.xs, curve.fraction, style, where="post", color=color, label=curve.model)
            if curve.band is not None:
                low, high = curve.band
                ax.fill_between(
                    curve.xs, low, high, step="post", color=color, alpha=BAND_ALPHA, lw=0
                )
        if area_to is not None:  # "_" label: a mark, not a data curve
            ax.axvline(area_to, color=AREA_MARK_COLOR, lw=0.8, zorder=0, label="_area")
            ax.annotate(
                f"area to {area_to:g} pts",
                (area_to, 0.02),
                xytext=(-3, 0),
                textcoords="offset points",
                ha="right",
                va="bottom",
                fontsize="small",
                color=AREA_MARK_COLOR,
            )
        counts = edf_counts(panel.curves, x_max)
        ax.set_title(
            f"{cell_title(panel.optimizer, panel.epochs)}\n{_wrap(counts)}", fontsize="medium"
        )
        ax.set_xlabel(xlabel)
        if x_max is not None:
            ax.set_xlim(0, x_max)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("cumulative prob.")
    banded = any(c.band is not None for p in panels for c in p.curves)
    handles, labels = [], []
    for model in dict.fromkeys(c.model for p in panels for c in p.curves):
        # "vit_p: best 8.1%" (one number per panel, in panel order)
        bests = [c.best for p in panels for c in p.curves if c.model == model]
        said = " / ".join("–" if b is None else f"{b:.1f}%" for b in bests)
        if area_to is not None:
            areas = [c.area for p in panels for c in p.curves if c.model == model]
            said += ", area " + " / ".join("–" if a is None else f"{a:.2f}" for a in areas)
        line = Line2D([], [], color=colors[model])
        shade = Patch(facecolor=colors[model], alpha=BAND_ALPHA, lw=0)
        handles.append((shade, line) if banded else line)
        labels.append(f"{model}: best {said}")
    notes = []
    if banded:
        resamples = f", {n_boot} resamples" if n_boot else ""
        notes.append(f"shaded: {EDF_BANDS[band]}{resamples}")
    if area_to is not None:
        notes.append(f"area: under the curve left of the grey line, / {area_to:g} (claim (a))")
    if len(panels) > 1:
        notes.append("(best errors per panel, left to right)")
    for note in notes:  # text only: no swatch that the panels do not draw
        handles.append(Line2D([], [], ls=""))
        labels.append(note)
    if any(c.near_chance for p in panels for c in p.curves):
        handles.append(Line2D([], [], color="0.3", ls=NEAR_CHANCE_STYLE))
        labels.append(f"dotted: best error near chance ({chance_error:.0f}%): barely learned")
    _legend_below(fig, handles, ncols=4, labels=labels)
    return fig


@dataclass(frozen=True)
class ScatterSeries:
    """One model's finished trials in one cell: hyperparameter values, errors and, per
    hyperparameter, the best run's value with its bootstrap good range."""

    model: str
    values: dict[str, np.ndarray]
    errors: np.ndarray
    best: dict[str, Interval | None]


@dataclass(frozen=True)
class ScatterPanel:
    optimizer: str
    epochs: int
    series: list[ScatterSeries] = field(default_factory=list)


SCATTER_PANEL = (2.9, 2.5)  # inches: three columns fill the page (1200 px at 150 dpi) at 1:1
SCATTER_FONT = 10  # points, so text stays >= 9 pt where the page shows the PNG at its width
# Above the dots, a row per model: its good range as an outlined box, its best value as a tick
# in it. Drawn where no dot is (the y-axis grows to make room), so neither hides the other, and
# models whose ranges overlap stay apart (a row each).
RANGE_ROW = 0.075  # axes fraction per model's row
RANGE_BOX = 0.6  # of a row: the box's height


def _log_tick_label(value: float, _pos=None) -> str:
    """1e-3, 2e-3, 5e-3 ...: every major tick of a log axis labelled, short."""
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _scatter_limits(ax: Axes, values: list[np.ndarray], ranges: list[Interval]) -> None:
    """An x-range holding every trial and every good range, with a margin on a log scale, so a
    best value never sits on the frame."""
    points = [v[v > 0] for v in values] + [np.array([r.low, r.high, r.estimate]) for r in ranges]
    points = np.concatenate(points) if points else np.array([])
    points = points[np.isfinite(points) & (points > 0)]
    if len(points):
        low, high = np.log10(points.min()), np.log10(points.max())
        pad = max(0.08 * (high - low), 0.05)
        ax.set_xlim(10 ** (low - pad), 10 ** (high + pad))


def _log_tick_steps(low: float, high: float, most: int = 6) -> tuple[float, ...]:
    """The densest of the 1-2-5, 1-3 and 1 steps per decade with at most `most` ticks in
    [low, high], so every tick can carry a label that does not run into its neighbour's
    (searched ranges often span less than two decades, products of two ranges four or more)."""
    for steps in ((1.0, 2.0, 5.0), (1.0, 3.0)):
        decades = range(int(np.floor(np.log10(low))), int(np.ceil(np.log10(high))) + 1)
        ticks = [s * 10.0**d for d in decades for s in steps]
        if sum(low <= t <= high for t in ticks) <= most:
            return steps
    return (1.0,)


def plot_scatter(panels: Sequence[ScatterPanel], colors: dict[str, str]) -> Figure:
    """Rows: cells; columns: lr, wd, lr*wd (log x). A dot per finished trial and, in a strip
    above the dots, a row per model: its bootstrap good range as an outlined box with a tick at
    its best value."""
    n = len(HYPERPARAMETERS)
    fig = Figure(
        figsize=(SCATTER_PANEL[0] * n, SCATTER_PANEL[1] * len(panels) + 0.9), layout="constrained"
    )
    axes = fig.subplots(len(panels), n, squeeze=False).ravel().tolist()
    for row, panel in enumerate(panels):
        for col, name in enumerate(HYPERPARAMETERS):
            ax = axes[row * n + col]
            ranges = []
            for s in panel.series:
                # markers on a Line2D draw far faster than a PathCollection; rasterized keeps
                # the SVG small when a cell has hundreds of trials
                ax.plot(s.values[name], s.errors, "o", ms=3, ls="", color=colors[s.model],
                        alpha=0.7, label=s.model, rasterized=True)  # fmt: skip
                ranges += [r for r in [s.best.get(name)] if r is not None]
            _good_range_strip(ax, panel.series, name, colors)
            ax.set_xscale("log")
            _scatter_limits(ax, [s.values[name] for s in panel.series], ranges)
            ax.xaxis.set_major_locator(LogLocator(subs=_log_tick_steps(*ax.get_xlim())))
            ax.xaxis.set_major_formatter(FuncFormatter(_log_tick_label))
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.tick_params(labelsize=SCATTER_FONT)
            ax.set_xlabel(name, fontsize=SCATTER_FONT)
            ax.set_title(cell_title(panel.optimizer, panel.epochs), fontsize=SCATTER_FONT)
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel("error (%)", fontsize=SCATTER_FONT)
    models = list(dict.fromkeys(s.model for p in panels for s in p.series))
    handles: list = [
        (Patch(fill=False, edgecolor=colors[m], lw=1.2), Line2D([], [], color=colors[m],
         marker="o", ms=4, ls="")) for m in models
    ]  # fmt: skip
    labels = list(models)
    handles.append(Line2D([], [], ls=""))  # text only
    labels.append("dots: trials; box: good range (95%); tick: best trial")
    _legend_below(fig, handles, ncols=4, labels=labels, fontsize=SCATTER_FONT)
    return fig


def _good_range_strip(
    ax: Axes, series: Sequence[ScatterSeries], name: str, colors: dict[str, str]
) -> None:
    """Each model's good range of `name` as an outlined box, with a tick at its best value, in
    a row of its own above the dots (x in data, y in axes coordinates); the y-axis is grown so
    that no dot lies under the strip, and its ticks stop where the dots do."""
    errors = np.concatenate([s.errors for s in series]) if series else np.array([])
    errors = errors[np.isfinite(errors)]
    if not len(errors) or not any(s.best.get(name) is not None for s in series):
        return
    low, high = float(errors.min()), float(errors.max())
    pad = max(0.05 * (high - low), 0.5)
    strip = RANGE_ROW * len(series)
    bottom, top = low - pad, high + pad
    ax.set_ylim(bottom, top + (top - bottom) * strip / (1 - strip))
    ax.set_yticks([t for t in ax.yaxis.get_major_locator()() if bottom <= t <= top])
    ax.axhline(top, color="0.75", lw=0.8, label="_strip")
    where = ax.get_xaxis_transform()  # x: data, y: axes fraction
    for i, s in enumerate(series):
        best = s.best.get(name)
        if best is None:
            continue
        color, y = colors[s.model], 1 - RANGE_ROW * (i + 0.5 + RANGE_BOX / 2)
        height = RANGE_ROW * RANGE_BOX
        box = Rectangle((best.low, y), best.high - best.low, height, transform=where,
                        fill=False, edgecolor=color, lw=1.2, label="_good_range")  # fmt: skip
        ax.add_patch(box)
        ax.plot([best.estimate] * 2, [y - 0.15 * height, y + 1.15 * height], color=color,
                lw=2, transform=where, label="_best")  # fmt: skip


def _seed_bars(ax: Axes, x, y, low, high, color: str) -> list:
    """Vertical bars from each point's lowest to its highest seed (nothing with one seed);
    returns the artists drawn."""
    y, low, high = (np.asarray(v, dtype=float) for v in (y, low, high))
    if not np.nanmax(high - low, initial=0.0) > 0:
        return []
    bars = ax.errorbar(x, y, yerr=[y - low, high - y], fmt="none", ecolor=color, capsize=3, lw=1)
    _, caps, lines = bars.lines
    return [*caps, *lines]


def _shift_right(artists: list, ax: Axes, points: float) -> None:
    """Draw `artists` `points` to the right of their data (after the axes took their limits)."""
    shifted = offset_copy(ax.transData, ax.figure, x=points, units="points")
    for artist in artists:
        artist.set_transform(shifted)


def plot_length(length: pd.DataFrame, colors: dict[str, str]) -> Figure:
    """Fig 2: one panel per optimizer, one line per model of dtop-1 against the longest schedule,
    with bars spanning each point's seeds."""
    optimizers = list(dict.fromkeys(length["optimizer"]))
    fig, axes = _grid(len(optimizers), 2)
    for ax, optimizer in zip(axes, optimizers, strict=True):
        part = length[length["optimizer"] == optimizer]
        for model, rows in part.groupby("model", sort=False):
            ref = int(rows["ref_epochs"].iloc[0])
            ax.plot(
                rows["epochs"],
                rows["dtop1"],
                "o-",
                color=colors[model],
                label=f"{model} (vs {ref})",
            )
            _seed_bars(
                ax,
                rows["epochs"],
                rows["dtop1"],
                rows["dtop1_low"],
                rows["dtop1_high"],
                colors[model],
            )
        ax.axhline(0, color="0.5", lw=0.8, label="_zero")
        ax.set_xscale("log", base=2)
        ax.set_xticks(
            sorted(part["epochs"].unique()), [str(e) for e in sorted(part["epochs"].unique())]
        )
        ax.set_title(OPTIMIZER_NAMES.get(optimizer, optimizer))
        ax.set_xlabel("epochs")
        ax.set_ylabel("dtop-1 vs longest schedule (points)")
        ax.grid(alpha=0.3)
    _legend_below(fig, _unique_handles(axes) + _bar_handles(axes))
    return fig


def _bar_handles(axes: Sequence[Axes]) -> list:
    """The legend entry that says what the seed bars are, where any axes has one."""
    if not any(ax.collections for ax in axes):  # errorbar's bars are LineCollections
        return []
    return [Line2D([], [], color="0.3", marker="|", ms=10, ls="",
                   label="bars: lowest to highest seed of the best (lr, wd)")]  # fmt: skip


def _unique_handles(axes: Sequence[Axes]) -> list:
    """Each labelled data line of the axes once, in order of appearance."""
    seen: dict[str, object] = {}
    for ax in axes:
        for line in data_lines(ax):
            seen.setdefault(line.get_label(), line)
    return list(seen.values())


def plot_optimizer(stability: pd.DataFrame, gaps: pd.DataFrame) -> Figure:
    """Fig 3: one panel per model, error against schedule length with AdamW and with SGD.
    Substituted (diverged) cells are joined by a dashed line; each SGD-AdamW gap is annotated;
    bars span each point's seeds."""
    models = list(dict.fromkeys(stability["model"]))
    fig, axes = _grid(len(models), 3)
    for ax, model in zip(axes, models, strict=True):
        part = stability[stability["model"] == model]
        for optimizer, rows in part.groupby("optimizer", sort=False):
            rows = rows.sort_values("epochs")
            color = OPTIMIZER_COLORS.get(optimizer, "C7")
            name = OPTIMIZER_NAMES.get(optimizer, optimizer)
            substituted = rows["substituted"].to_numpy()
            # NaN breaks a line: solid through real results, dashed into and out of substitutes
            near = substituted | np.roll(substituted, 1) & (np.arange(len(rows)) > 0)
            near |= np.roll(substituted, -1) & (np.arange(len(rows)) < len(rows) - 1)
            errors = rows["error"].to_numpy()
            solid = np.where(substituted, np.nan, errors)
            drawn = ax.plot(rows["epochs"], solid, "o-", color=color, label=name)
            drawn += _seed_bars(ax, rows["epochs"], errors, rows["low"], rows["high"], color)
            if substituted.any():
                dashed = np.where(near, errors, np.nan)
                drawn += ax.plot(
                    rows["epochs"],
                    dashed,
                    "o--",
                    color=color,
                    mfc="none",
                    label=f"{name}, dashed: diverged, best shorter schedule",
                )
            _shift_right(drawn, ax, OPTIMIZER_SHIFT.get(optimizer, 0.0))
        for _, gap in gaps[gaps["model"] == model].iterrows():
            ax.annotate(
                f"{gap['gap']:+.1f}",
                (gap["epochs"], part.loc[part["epochs"] == gap["epochs"], "high"].max()),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize="small",
            )
        epochs = sorted(part["epochs"].unique())
        ax.margins(y=0.15)  # room for the gap labels above the points
        ax.set_xscale("log", base=2)
        ax.set_xticks(epochs, [str(e) for e in epochs])
        ax.set_title(model)
        ax.set_xlabel("epochs")
        ax.set_ylabel("error (%)")
        ax.grid(alpha=0.3)
    gap = Line2D([], [], ls="", marker="$+1.0$", ms=14, color="0.2",
                 label="number: SGD - AdamW gap (points)")  # fmt: skip
    _legend_below(fig, _unique_handles(axes) + [gap] + _bar_handles(axes))
    return fig


def plot_stem(best: pd.DataFrame, order: Sequence[str]) -> Figure:
    """Table 3 as a figure: one panel per schedule length, each cell's error along the stem
    order (models in `order`) with AdamW and with SGD, bars spanning each point's seeds."""
    lengths = sorted(best["epochs"].unique())
    fig, axes = _grid(len(lengths), 2)
    for ax, epochs in zip(axes, lengths, strict=True):
        part = best[best["epochs"] == epochs]
        for optimizer, rows in part.groupby("optimizer", sort=False):
            rows = rows.set_index("model").reindex(order)
            x = np.arange(len(order))
            color = OPTIMIZER_COLORS.get(optimizer, "C7")
            name = OPTIMIZER_NAMES.get(optimizer, optimizer)
            # categories, not a scale: points only, no line joining one model to the next
            drawn = ax.plot(x, rows["best_error"], "o", ls="", ms=6, color=color, label=name)
            drawn += _seed_bars(
                ax, x, rows["best_error"], rows["seed_low"], rows["seed_high"], color
            )
            _shift_right(drawn, ax, OPTIMIZER_SHIFT.get(optimizer, 0.0))
        ax.set_xticks(np.arange(len(order)), list(order), rotation=15)
        ax.set_xlim(-0.5, len(order) - 0.5)
        ax.set_title(f"{int(epochs)} epochs")
        ax.set_ylabel("error (%)")
        ax.grid(alpha=0.3, axis="y")
    _legend_below(fig, _unique_handles(axes) + _bar_handles(axes))
    return fig


@dataclass(frozen=True)
class CurvePanel:
    optimizer: str
    epochs: int
    # (model, rank, epoch numbers, val errors)
    curves: list[tuple[str, str, np.ndarray, np.ndarray]] = field(default_factory=list)


def plot_curves(panels: Sequence[CurvePanel], colors: dict[str, str], ncols: int = 3) -> Figure:
    """Validation error against epoch: per cell, the best, median and worst trial of each model."""
    fig, axes = _grid(len(panels), ncols)
    for ax, panel in zip(axes, panels, strict=True):
        for model, rank, epochs, errors in panel.curves:
            ax.plot(epochs, errors, RANK_STYLES[rank], color=colors[model], label=f"{model} {rank}")
        ax.set_title(cell_title(panel.optimizer, panel.epochs))
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("val error (%)")
        ax.grid(alpha=0.3)
    handles = _model_handles([m for p in panels for m, *_ in p.curves], colors)
    handles += [
        Line2D([], [], color="0.3", ls=ls, label=f"{rank} trial")
        for rank, ls in RANK_STYLES.items()
    ]
    _legend_below(fig, handles, ncols=3)
    return fig


def data_lines(ax: Axes) -> list:
    """The lines of `ax` that are data curves (their label does not start with "_")."""
    return [line for line in ax.get_lines() if not line.get_label().startswith("_")]


@dataclass
class LookPanel:
    """One claim panel's path over a sequential study's looks: at each look its size n, the
    estimate and the repeated confidence interval [low, high] (estimate +- t x se, t at the
    level of the look's boundary c), and the boundary c itself; `outcome` is the last look's."""

    title: str
    statistic: str
    unit: str
    n: list[int]
    estimate: list[float]
    low: list[float]
    high: list[float]
    boundary: list[float]
    outcome: str
    n_max: int
    margin: float | None = None


def plot_looks(panels: Sequence[LookPanel], ncols: int = 2) -> Figure:
    """Each panel's estimate and repeated interval at every look, against the size at that look,
    with 0 (and the equivalence margin, shaded) as reference; the boundary c_k of each look is
    written above its interval. A decision is the first interval wholly on one side of 0 or
    inside the margin."""
    fig, axes = _grid(len(panels), ncols)
    for ax, panel in zip(axes, panels, strict=False):
        x = np.asarray(panel.n, dtype=float)
        est = np.asarray(panel.estimate, dtype=float)
        low, high = np.asarray(panel.low, dtype=float), np.asarray(panel.high, dtype=float)
        if panel.margin:
            ax.axhspan(-panel.margin, panel.margin, color="0.85", zorder=0, label="_margin")
        ax.axhline(0.0, color="0.3", linewidth=0.8, label="_zero")
        ax.errorbar(
            x, est, yerr=[est - low, high - est], fmt="o-", color="C0", capsize=4,
            label="estimate and repeated 95% interval",
        )  # fmt: skip
        for xi, hi, c in zip(x, high, panel.boundary, strict=True):
            text = "c=inf" if not np.isfinite(c) else f"c={c:.2f}"
            # upright: looks a few samples apart with intervals ending at one height would
            # write level labels over each other and over the next interval's cap
            ax.annotate(text, (xi, hi), xytext=(0, 4), textcoords="offset points", rotation=90,
                        ha="center", va="bottom", fontsize=7, color="0.35")  # fmt: skip
        ax.set_xlim(0, panel.n_max * 1.1)  # room for the last look's boundary, written above it
        ax.margins(y=0.3)  # room for the boundaries written above the intervals
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(f"{panel.unit} per cell at the look (at most {panel.n_max})")
        ax.set_ylabel(_wrap(panel.statistic), fontsize=8)
        ax.set_title(_wrap(f"{panel.title}: {panel.outcome}"), fontsize=9)
    handles = [
        Line2D([], [], marker="o", color="C0", label="estimate, repeated 95% interval"),
        Patch(color="0.85", label="equivalence margin"),
    ]
    if not any(p.margin for p in panels):
        handles = handles[:1]
    _legend_below(fig, handles)
    return fig


def plot_tunability(curves: pd.DataFrame, colors: dict[str, str]) -> Figure:
    """One panel per (optimizer, epochs), one line per model of the expected best error after k
    random (lr, wd) samples against k (log x), its bootstrap band shaded
    (report/tunability.py: tunability_curves' rows)."""
    cells = list(dict.fromkeys(zip(curves["optimizer"], curves["epochs"], strict=True)))
    fig, axes = _grid(len(cells), 3, sharey=True)
    for ax, (optimizer, epochs) in zip(axes, cells, strict=True):
        part = curves[(curves["optimizer"] == optimizer) & (curves["epochs"] == epochs)]
        for model, rows in part.groupby("model", sort=False):
            color = colors[model]
            ax.fill_between(rows["k"], rows["low"], rows["high"], color=color, alpha=0.15, lw=0)
            ax.plot(rows["k"], rows["expected_best"], "-", color=color, label=model)
        ax.set_xscale("log", base=2)
        ks = sorted(part["k"].unique())
        ticks = [k for k in ks if k & (k - 1) == 0]  # powers of 2
        ax.set_xticks(ticks, [str(k) for k in ticks])
        ax.set_xlim(1, max(ks))
        ax.set_title(cell_title(optimizer, int(epochs)))
        ax.set_xlabel("(lr, wd) samples k")
        ax.set_ylabel("expected best error (%)")
        ax.grid(alpha=0.3)
    _legend_below(fig, _unique_handles(axes))
    return fig

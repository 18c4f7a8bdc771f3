"""The figures of a cell's sampled (lr, wd) trials, drawn from precomputed data
(figures.edf_figure and figures.scatter_figure compute it): the EDF of each model's errors with
its bootstrap band (`plot_edf`), and each trial's error against its lr, wd and lr*wd with each
model's good range (`plot_scatter`). drawing.py holds what they share with the other figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from optbench.decision.stats import Interval
from optbench.report.drawing import cell_title, grid, legend_below, wrap_title

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
    fig, axes = grid(len(panels), ncols, sharey=True)
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
            ax.annotate(  # at the line's top on white, over the bands, under the curves
                f"area to {area_to:g} pts",
                (area_to, 0.97),
                xycoords=("data", "axes fraction"),
                xytext=(3, 0),
                textcoords="offset points",
                ha="left",
                va="top",
                fontsize="small",
                color=AREA_MARK_COLOR,
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85},
                zorder=1.5,  # fill_between's bands draw at 1, step curves at 2
            )
        counts = edf_counts(panel.curves, x_max)
        ax.set_title(
            f"{cell_title(panel.optimizer, panel.epochs)}\n{wrap_title(counts)}", fontsize="medium"
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
    legend_below(fig, handles, ncols=4, labels=labels)
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
    legend_below(fig, handles, ncols=4, labels=labels, fontsize=SCATTER_FONT)
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

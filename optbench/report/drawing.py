"""What every figure of the report shares, drawn with matplotlib's object API (a `Figure` saves
itself without pyplot, so the user's backend is left alone): the panel grid, the one legend
below the panels, a colour per model, the optimizers' names and colours, seed bars and the
title of a cell's panel. Each figure family draws in a module of its own, from precomputed data
(figures.py computes it from a trials frame; every function returns a new Figure, the caller
saves it):
- `drawing_samples.py`: the figures of a cell's sampled (lr, wd) trials (EDF, scatter);
- `drawing_cells.py`: each cell's error across cells (length, optimizer, stem);
- `drawing_curves.py`: lines against a count (training curves, tunability, a sequential
  study's looks).

Each data curve carries a label; helper lines (best values, zero lines) have labels that start
with "_" so that tests count only the data (`data_lines`). Legends are the figure's, below the
panels, so they never cover data; what differs per panel (trial counts) is in the panel's title.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.legend_handler import HandlerTuple
from matplotlib.lines import Line2D
from matplotlib.transforms import offset_copy

from optbench.spec.optimizers import display_name

PANEL_SIZE = (4.2, 3.2)
OPTIMIZER_COLORS = {"adamw": "C0", "sgd": "C3"}
OPTIMIZER_SHIFT = {"adamw": -3.0, "sgd": 3.0}  # points: the two optimizers' seed bars side by side
TITLE_WIDTH = 52  # characters per line of a panel's title


def model_colors(models: Sequence[str]) -> dict[str, str]:
    """A fixed color per model, in the given order, shared by every figure of a report."""
    palette = [f"C{i}" for i in range(10)]
    return {m: palette[i % len(palette)] for i, m in enumerate(models)}


def cell_title(optimizer: str, epochs: int) -> str:
    return f"{display_name(optimizer)}, {epochs} epochs"


def grid(n_panels: int, ncols: int, *, sharey: bool = False) -> tuple[Figure, list[Axes]]:
    ncols = max(1, min(ncols, n_panels))
    nrows = -(-n_panels // ncols)
    fig = Figure(figsize=(PANEL_SIZE[0] * ncols, PANEL_SIZE[1] * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=sharey).ravel().tolist()
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig, axes[:n_panels]


def legend_below(
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


def model_handles(models: Sequence[str], colors: dict[str, str], **style) -> list[Line2D]:
    return [Line2D([], [], color=colors[m], label=m, **style) for m in dict.fromkeys(models)]


def wrap_title(text: str, width: int = TITLE_WIDTH) -> str:
    return "\n".join(textwrap.wrap(text, width))


def fit_titles(fig: Figure, axes: Sequence[Axes]) -> None:
    """Wrap each panel's title to its panel's own width, so none runs past the figure's edge: a
    title is centred on its panel, whose ylabel shifts it right, and constrained layout leaves
    a title's width out of the margins. Panels take their widths from the figure's layout
    (titles change only its heights), so one layout measures them all."""
    fig.draw_without_rendering()
    for ax in axes:
        title = ax.title
        words = " ".join(title.get_text().split())
        width = TITLE_WIDTH
        while width > 1 and title.get_window_extent().width > ax.bbox.width:
            width -= 1
            title.set_text(wrap_title(words, width))


def seed_bars(ax: Axes, x, y, low, high, color: str) -> list:
    """Vertical bars from each point's lowest to its highest seed (nothing with one seed);
    returns the artists drawn."""
    y, low, high = (np.asarray(v, dtype=float) for v in (y, low, high))
    if not np.nanmax(high - low, initial=0.0) > 0:
        return []
    bars = ax.errorbar(x, y, yerr=[y - low, high - y], fmt="none", ecolor=color, capsize=3, lw=1)
    _, caps, lines = bars.lines
    return [*caps, *lines]


def shift_right(artists: list, ax: Axes, points: float) -> None:
    """Draw `artists` `points` to the right of their data (after the axes took their limits)."""
    shifted = offset_copy(ax.transData, ax.figure, x=points, units="points")
    for artist in artists:
        artist.set_transform(shifted)


def bar_handles(axes: Sequence[Axes]) -> list:
    """The legend entry that says what the seed bars are, where any axes has one."""
    if not any(ax.collections for ax in axes):  # errorbar's bars are LineCollections
        return []
    return [Line2D([], [], color="0.3", marker="|", ms=10, ls="",
                   label="bars: lowest to highest seed of the best (lr, wd)")]  # fmt: skip


def unique_handles(axes: Sequence[Axes]) -> list:
    """Each labelled data line of the axes once, in order of appearance."""
    seen: dict[str, object] = {}
    for ax in axes:
        for line in data_lines(ax):
            seen.setdefault(line.get_label(), line)
    return list(seen.values())


def data_lines(ax: Axes) -> list:
    """The lines of `ax` that are data curves (their label does not start with "_")."""
    return [line for line in ax.get_lines() if not line.get_label().startswith("_")]

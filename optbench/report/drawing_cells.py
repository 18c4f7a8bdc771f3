"""The figures of each cell's error across cells, drawn from precomputed tables
(decision/frames.py's, through figures.py): training-length stability (`plot_length`, Fig 2),
optimizer stability (`plot_optimizer`, Fig 3) and the stem ablation (`plot_stem`, Table 3),
each point's seeds spanned by a bar. drawing.py holds what they share with the other figures.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from optbench.report.drawing import (
    OPTIMIZER_COLORS,
    OPTIMIZER_SHIFT,
    bar_handles,
    grid,
    legend_below,
    seed_bars,
    shift_right,
    unique_handles,
)
from optbench.spec.optimizers import display_name


def plot_length(length: pd.DataFrame, colors: dict[str, str]) -> Figure:
    """Fig 2: one panel per optimizer, one line per model of dtop-1 against the longest schedule,
    with bars spanning each point's seeds."""
    optimizers = list(dict.fromkeys(length["optimizer"]))
    fig, axes = grid(len(optimizers), 2)
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
            seed_bars(
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
        ax.set_title(display_name(optimizer))
        ax.set_xlabel("epochs")
        ax.set_ylabel("dtop-1 vs longest schedule (points)")
        ax.grid(alpha=0.3)
    legend_below(fig, unique_handles(axes) + bar_handles(axes))
    return fig


def plot_optimizer(stability: pd.DataFrame, gaps: pd.DataFrame) -> Figure:
    """Fig 3: one panel per model, error against schedule length with AdamW and with SGD.
    Substituted (diverged) cells are joined by a dashed line; each SGD-AdamW gap is annotated;
    bars span each point's seeds."""
    models = list(dict.fromkeys(stability["model"]))
    fig, axes = grid(len(models), 3)
    for ax, model in zip(axes, models, strict=True):
        part = stability[stability["model"] == model]
        for optimizer, rows in part.groupby("optimizer", sort=False):
            rows = rows.sort_values("epochs")
            color = OPTIMIZER_COLORS.get(optimizer, "C7")
            name = display_name(optimizer)
            substituted = rows["substituted"].to_numpy()
            # NaN breaks a line: solid through real results, dashed into and out of substitutes
            near = substituted | np.roll(substituted, 1) & (np.arange(len(rows)) > 0)
            near |= np.roll(substituted, -1) & (np.arange(len(rows)) < len(rows) - 1)
            errors = rows["error"].to_numpy()
            solid = np.where(substituted, np.nan, errors)
            drawn = ax.plot(rows["epochs"], solid, "o-", color=color, label=name)
            drawn += seed_bars(ax, rows["epochs"], errors, rows["low"], rows["high"], color)
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
            shift_right(drawn, ax, OPTIMIZER_SHIFT.get(optimizer, 0.0))
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
    legend_below(fig, unique_handles(axes) + [gap] + bar_handles(axes))
    return fig


def plot_stem(best: pd.DataFrame, order: Sequence[str]) -> Figure:
    """Table 3 as a figure: one panel per schedule length, each cell's error along the stem
    order (models in `order`) with AdamW and with SGD, bars spanning each point's seeds."""
    lengths = sorted(best["epochs"].unique())
    fig, axes = grid(len(lengths), 2)
    for ax, epochs in zip(axes, lengths, strict=True):
        part = best[best["epochs"] == epochs]
        for optimizer, rows in part.groupby("optimizer", sort=False):
            rows = rows.set_index("model").reindex(order)
            x = np.arange(len(order))
            color = OPTIMIZER_COLORS.get(optimizer, "C7")
            name = display_name(optimizer)
            # categories, not a scale: points only, no line joining one model to the next
            drawn = ax.plot(x, rows["best_error"], "o", ls="", ms=6, color=color, label=name)
            drawn += seed_bars(
                ax, x, rows["best_error"], rows["seed_low"], rows["seed_high"], color
            )
            shift_right(drawn, ax, OPTIMIZER_SHIFT.get(optimizer, 0.0))
        ax.set_xticks(np.arange(len(order)), list(order), rotation=15)
        ax.set_xlim(-0.5, len(order) - 0.5)
        ax.set_title(f"{int(epochs)} epochs")
        ax.set_ylabel("error (%)")
        ax.grid(alpha=0.3, axis="y")
    legend_below(fig, unique_handles(axes) + bar_handles(axes))
    return fig

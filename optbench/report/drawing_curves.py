"""The figures of lines against a count, drawn from precomputed data (figures.py computes
it): validation error per epoch of each cell's best, median and worst trial (`plot_curves`),
the expected best error after k (lr, wd) samples (`plot_tunability`) and a sequential study's
claims over its looks (`plot_looks`). drawing.py holds what they share with the other figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from optbench.report.drawing import (
    cell_title,
    fit_titles,
    grid,
    legend_below,
    model_handles,
    unique_handles,
    wrap_title,
)

RANK_STYLES = {"best": "-", "median": "--", "worst": ":"}


@dataclass(frozen=True)
class CurvePanel:
    optimizer: str
    epochs: int
    # (model, rank, epoch numbers, val errors)
    curves: list[tuple[str, str, np.ndarray, np.ndarray]] = field(default_factory=list)


def plot_curves(panels: Sequence[CurvePanel], colors: dict[str, str], ncols: int = 3) -> Figure:
    """Validation error against epoch: per cell, the best, median and worst trial of each model."""
    fig, axes = grid(len(panels), ncols)
    for ax, panel in zip(axes, panels, strict=True):
        for model, rank, epochs, errors in panel.curves:
            ax.plot(epochs, errors, RANK_STYLES[rank], color=colors[model], label=f"{model} {rank}")
        ax.set_title(cell_title(panel.optimizer, panel.epochs))
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("val error (%)")
        ax.grid(alpha=0.3)
    handles = model_handles([m for p in panels for m, *_ in p.curves], colors)
    handles += [
        Line2D([], [], color="0.3", ls=ls, label=f"{rank} trial")
        for rank, ls in RANK_STYLES.items()
    ]
    legend_below(fig, handles, ncols=3)
    return fig


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
    fig, axes = grid(len(panels), ncols)
    for ax, panel in zip(axes, panels, strict=False):
        x = np.asarray(panel.n, dtype=float)
        est = np.asarray(panel.estimate, dtype=float)
        low, high = np.asarray(panel.low, dtype=float), np.asarray(panel.high, dtype=float)
        if panel.margin:
            ax.axhspan(-panel.margin, panel.margin, color="0.85", zorder=0, label="_margin")
        ax.axhline(0.0, color="0.3", linewidth=0.8, label="_zero")
        ax.errorbar(
            x, est, yerr=[est - low, high - est], fmt="o-", color="C0", capsize=4,
            label="estimate and repeated interval",
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
        ax.set_ylabel(wrap_title(panel.statistic), fontsize=8)
        ax.set_title(wrap_title(f"{panel.title}: {panel.outcome}"), fontsize=9)
    handles = [
        Line2D([], [], marker="o", color="C0", label="estimate, repeated interval (its level: c)"),
        Patch(color="0.85", label="equivalence margin"),
    ]
    if not any(p.margin for p in panels):
        handles = handles[:1]
    legend_below(fig, handles)
    fit_titles(fig, axes)
    return fig


def plot_tunability(curves: pd.DataFrame, colors: dict[str, str]) -> Figure:
    """One panel per (optimizer, epochs), one line per model of the expected best error after k
    random (lr, wd) samples against k (log x), its bootstrap band shaded
    (decision/tunability.py: tunability_curves' rows)."""
    cells = list(dict.fromkeys(zip(curves["optimizer"], curves["epochs"], strict=True)))
    fig, axes = grid(len(cells), 3, sharey=True)
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
    legend_below(fig, unique_handles(axes))
    return fig

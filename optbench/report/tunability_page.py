"""The tunability table as the page shows it (`page_table`): decision/tunability.py's numbers
in words, each E_k with its band and the samples within X flagged where they rest on one trial."""

from __future__ import annotations

import pandas as pd

from optbench.decision.tunability import CELL, PROBABILITY, TABLE_KS, WITHIN_POINTS


def _shown(value: float, low: float, high: float) -> str:
    if pd.isna(value):
        return ""
    if pd.isna(low):
        return f"{value:.2f} (no band)"
    return f"{value:.2f} [{low:.2f}, {high:.2f}]"


def _within_shown(samples: int, count: int) -> str:
    return f"{samples} (rests on one trial)" if count == 1 else str(samples)


def page_table(table: pd.DataFrame) -> pd.DataFrame:
    """`tunability_table` as the page shows it: each E_k as "value [low, high]" (%), "value (no
    band)" past n / 2, and the samples within X flagged where one trial is all
    that lies within X of the best."""
    shown = table[[*CELL, "n", "best"]].copy()
    shown["best"] = shown["best"].map(lambda v: f"{v:.2f}")
    for k in TABLE_KS:
        if f"e{k}" in table:
            shown[f"k = {k}"] = [
                _shown(v, lo, hi)
                for v, lo, hi in zip(
                    table[f"e{k}"], table[f"e{k}_low"], table[f"e{k}_high"], strict=True
                )
            ]
    if "samples_within" in table:
        shown[f"samples within {WITHIN_POINTS:g} pt (p {PROBABILITY:g})"] = [
            _within_shown(int(s), int(c))
            for s, c in zip(table["samples_within"], table["within_count"], strict=True)
        ]
    return shown

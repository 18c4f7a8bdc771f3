"""A declared ranking on the page: its order in one line (`order_line`), its table
(`table`: a row per cell with its possible places) and its sentence (`summary_line`), from the
places decision/ranking.py decides."""

from __future__ import annotations

import pandas as pd

from optbench.decision.ranking import groups, places
from optbench.spec.claim_kinds import declared_panel


def order_line(rows: pd.DataFrame) -> str:
    """The ranking in one line, tied groups in brackets: "a > [b, c] > d"."""
    parts = [
        group[0].cell if len(group) == 1 else f"[{', '.join(p.cell for p in group)}]"
        for group in groups(places(rows))
    ]
    return " > ".join(parts)


def _names(cells: tuple[str, ...], implied: tuple[str, ...] = ()) -> str:
    return ", ".join(f"{c}*" if c in implied else c for c in cells) or "–"


def table(rows: pd.DataFrame) -> pd.DataFrame:
    """The page's table of a ranking: a row per cell, best first, with its possible places."""
    ranked = places(rows)
    return pd.DataFrame(
        {
            "place": [
                str(low) if low == high else f"{low}-{high}"
                for low, high in (p.places for p in ranked)
            ],
            "cell": [p.cell for p in ranked],
            "mean advantage": [f"{p.advantage:+.3g}" for p in ranked],
            "shown better than": [_names(p.better_than, p.implied) for p in ranked],
            "shown worse than": [_names(p.worse_than, p.implied) for p in ranked],
            "equivalent to": [_names(p.tied_with) for p in ranked],
            "not decided against": [_names(p.open_with) for p in ranked],
        }
    )


def summary_line(name: str, rows: pd.DataFrame) -> str:
    """A ranking's sentence: its order, its statistic, and how many places are decided."""
    ranked = places(rows)
    decided = sum(p.places[0] == p.places[1] for p in ranked)
    first = rows.iloc[0]
    best_of = None if pd.isna(first["best_of"]) else int(first["best_of"])
    statistic = declared_panel(name, first["kind"], first["cells"], best_of).measure
    return (
        f"ranking ({name}) of {len(ranked)} cells by {statistic}: {order_line(rows)} "
        f"({decided} of {len(ranked)} places decided; {len(rows)} pairs, brackets: still tied)"
    )

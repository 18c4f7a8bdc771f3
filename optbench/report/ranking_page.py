"""A declared ranking on the page: its order in one line (`order_line`), its table
(`table`: a row per cell with its possible places) and its sentence (`summary_line`), from the
places decision/ranking.py decides. The line and the table name each cell by the words that set
it apart from the others (its optimizer, where a ranking's cells share the model and schedule)
and say once what they share."""

from __future__ import annotations

import pandas as pd

from optbench.decision.ranking import Place, groups, places
from optbench.spec.claim_kinds import declared_panel


def short_names(cells: list[str]) -> tuple[dict[str, str], str]:
    """Each cell's words without those every cell of the ranking shares, and the shared ones:
    ["vit_p_x muon 20ep", "vit_p_x lion 20ep", ...] gives {"vit_p_x muon 20ep": "muon", ...}
    and "vit_p_x 20ep"; cells that share nothing keep their words (shared: "")."""
    words = [cell.split(" ") for cell in cells]
    same = [
        len({len(w) for w in words}) == 1 and len({w[i] for w in words}) == 1
        for i in range(len(words[0]))
    ]
    if all(same):  # one cell: nothing sets it apart
        return {cell: cell for cell in cells}, ""
    short = {
        cell: " ".join(t for t, shared in zip(w, same, strict=True) if not shared)
        for cell, w in zip(cells, words, strict=True)
    }
    return short, " ".join(t for t, shared in zip(words[0], same, strict=True) if shared)


def _shortened(ranked: list[Place]) -> tuple[dict[str, str], str]:
    return short_names([p.cell for p in ranked])


def order_line(rows: pd.DataFrame) -> str:
    """The ranking in one line, tied groups in brackets, each cell by what sets it apart from
    the others (`short_names`): "a > [b, c] > d"."""
    ranked = places(rows)
    short, _ = _shortened(ranked)
    parts = [
        short[group[0].cell] if len(group) == 1 else f"[{', '.join(short[p.cell] for p in group)}]"
        for group in groups(ranked)
    ]
    return " > ".join(parts)


def _names(short: dict, cells: tuple[str, ...], implied: tuple[str, ...] = ()) -> str:
    return ", ".join(f"{short[c]}*" if c in implied else short[c] for c in cells) or "–"


def table(rows: pd.DataFrame) -> pd.DataFrame:
    """The page's table of a ranking: a row per cell, best first, with its possible places;
    each cell by what sets it apart, what they all share in the cell column's header."""
    ranked = places(rows)
    short, shared = _shortened(ranked)
    return pd.DataFrame(
        {
            "place": [
                str(low) if low == high else f"{low}-{high}"
                for low, high in (p.places for p in ranked)
            ],
            f"cell (each {shared})" if shared else "cell": [short[p.cell] for p in ranked],
            "mean advantage": [f"{p.advantage:+.3g}" for p in ranked],
            "shown better than": [_names(short, p.better_than, p.implied) for p in ranked],
            "shown worse than": [_names(short, p.worse_than, p.implied) for p in ranked],
            "equivalent to": [_names(short, p.tied_with) for p in ranked],
            "not decided against": [_names(short, p.open_with) for p in ranked],
        }
    )


def summary_line(name: str, rows: pd.DataFrame) -> str:
    """A ranking's sentence: its cells' shared words, its statistic, its order, and how many
    places are decided."""
    ranked = places(rows)
    decided = sum(p.places[0] == p.places[1] for p in ranked)
    first = rows.iloc[0]
    best_of = None if pd.isna(first["best_of"]) else int(first["best_of"])
    statistic = declared_panel(name, first["kind"], first["cells"], best_of).measure
    _, shared = _shortened(ranked)
    each = f", each {shared}," if shared else ""
    return (
        f"ranking ({name}) of {len(ranked)} cells{each} by {statistic}: {order_line(rows)} "
        f"({decided} of {len(ranked)} places decided; {len(rows)} pairs, brackets: still tied)"
    )

"""A declared ranking's order (spec/comparisons.py, `kind: rank`) from its pairs' rows of the
claims table: which cell is shown better than which, each cell's possible places, the groups
still tied, as the page's table and one line.

Each pair row decides one relation (its verdict, or at a look its outcome): holds (negligible
or not) shows the pair's first-listed cell better, opposite the other; equivalent shows them
within the margin, a tie that is decided; anything else (continue, undecided, nothing learned,
not shown, not tested) leaves the pair open. A cell shown worse than `losses` cells and better
than `wins` of its k - 1 rivals can take places 1 + losses to k - wins: its place is decided
when the two meet (every pair of it decided one way, shown or implied by the order of shown
pairs: a > b and b > c give a > c, `places`). Cells are listed by wins minus losses,
then by their mean advantage (the pair estimates oriented towards the cell, in the statistic's
units), and consecutive cells whose possible places overlap form a tied group, drawn in
brackets: "a > [b, c] > d". The line and the table name each cell by the words that set it
apart from the others (its optimizer, where a ranking's cells share the model and schedule) and
say once what they share. Nothing here decides: the relations are the rows' (report/claims.py
and, in a sequential study, its looks under Holm's step-down: report/sequential.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from optbench.report import sequential
from optbench.spec.claim_kinds import declared_panel, side_words

WINS = {
    "holds": 0,
    sequential.HOLDS_NEGLIGIBLE: 0,
    "opposite": 1,
    sequential.OPPOSITE_NEGLIGIBLE: 1,
}
TIED = "equivalent"


def rankings(table: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The claims table's rankings: each declared comparison with more than one row (its
    pairs), by name, in the table's order."""
    declared = table[table["kind"] != table["claim"]]
    counts = declared["claim"].value_counts()
    return {
        name: declared[declared["claim"] == name]
        for name in dict.fromkeys(declared["claim"])
        if counts[name] > 1
    }


@dataclass(frozen=True)
class Place:
    """One cell of a ranking and what its pairs show."""

    cell: str  # its words, e.g. "vit_c_w64_16px adamw 20ep"
    advantage: float  # the mean of its pairs' estimates oriented towards it
    better_than: tuple[str, ...]  # shown, or implied by the order of shown pairs (`implied`)
    worse_than: tuple[str, ...]
    tied_with: tuple[str, ...]  # shown equivalent (within the margin)
    open_with: tuple[str, ...]  # pairs neither shown nor implied
    rivals: int
    implied: tuple[str, ...] = ()  # the rivals of better_than and worse_than only implied

    @property
    def places(self) -> tuple[int, int]:
        """The best and worst place its decided pairs leave it (1 is the best)."""
        return 1 + len(self.worse_than), self.rivals + 1 - len(self.better_than)


def places(rows: pd.DataFrame) -> list[Place]:
    """A ranking's cells from its pair rows, best first (module docstring). A pair whose order
    follows from shown ones (a > b and b > c give a > c) counts as decided, `implied`: where
    every shown pair is right, so is every implied one, so the study's error rate covers them;
    shown pairs that contradict each other (a cycle, possible only through a wrong decision)
    imply nothing."""
    cells: list[str] = []
    advantage: dict[str, list[float]] = {}
    shown: set[tuple[str, str]] = set()  # (winner, loser)
    tied: set[frozenset] = set()
    for row in rows.itertuples():
        better, other = declared_panel(row.claim, row.kind, row.cells).sides
        first, second = side_words(*better), side_words(*other)
        cells += [c for c in (first, second) if c not in cells]
        estimate = float(row.estimate) if pd.notna(row.estimate) else 0.0
        advantage.setdefault(first, []).append(estimate)
        advantage.setdefault(second, []).append(-estimate)
        if row.verdict in WINS:
            shown.add((first, second) if WINS[row.verdict] == 0 else (second, first))
        elif row.verdict == TIED:
            tied.add(frozenset((first, second)))
    beats = _closure(cells, shown)
    found = []
    for cell in cells:
        rivals = [c for c in cells if c != cell]
        better = tuple(c for c in rivals if (cell, c) in beats)
        worse = tuple(c for c in rivals if (c, cell) in beats)
        decided = set(better) | set(worse)
        found.append(
            Place(
                cell,
                sum(advantage[cell]) / len(advantage[cell]),
                better,
                worse,
                tuple(c for c in rivals if frozenset((cell, c)) in tied and c not in decided),
                tuple(c for c in rivals if c not in decided and frozenset((cell, c)) not in tied),
                len(rivals),
                tuple(c for c in decided if (cell, c) not in shown and (c, cell) not in shown),
            )
        )
    return sorted(found, key=lambda p: (len(p.worse_than) - len(p.better_than), -p.advantage))


def _closure(cells: list[str], shown: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The shown relations with every one their order implies; the shown ones alone where
    they contradict each other (a cycle)."""
    beats = set(shown)
    for middle in cells:  # Warshall's transitive closure
        beats |= {(a, b) for a, m in beats if m == middle for m2, b in beats if m2 == middle}
    if any((c, c) in beats for c in cells):
        return set(shown)
    return beats


def groups(ranked: list[Place]) -> list[list[Place]]:
    """Consecutive cells whose possible places overlap: the groups still tied, best first."""
    out: list[list[Place]] = []
    for place in ranked:
        if out and place.places[0] <= max(p.places[1] for p in out[-1]):
            out[-1].append(place)
        else:
            out.append([place])
    return out


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

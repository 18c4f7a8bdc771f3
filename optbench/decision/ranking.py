"""A declared ranking's order (spec/comparisons.py, `kind: rank`) from its pairs' rows of the
claims table: which cell is shown better than which, each cell's possible places, the groups
still tied (report/ranking_page.py draws them: the page's table and one line).

Each pair row decides one relation (its verdict, or at a look its outcome): holds (negligible
or not) shows the pair's first-listed cell better, opposite the other; equivalent shows them
within the margin, a tie that is decided; anything else (continue, undecided, nothing learned,
not shown, not tested) leaves the pair open. A cell shown worse than `losses` cells and better
than `wins` of its k - 1 rivals can take places 1 + losses to k - wins: its place is decided
when the two meet (every pair of it decided one way, shown or implied by the order of shown
pairs: a > b and b > c give a > c, `places`). Cells are listed by wins minus losses,
then by their mean advantage (the pair estimates oriented towards the cell, in the statistic's
units), and consecutive cells whose possible places overlap form a tied group, drawn in
brackets: "a > [b, c] > d". Nothing here decides: the relations are the rows' (decision/claims.py
and, in a sequential study, its looks under Holm's step-down: decision/sequential.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from optbench.decision import sequential
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

"""The comparisons a study declares (`comparisons:`, docs/study.md), as data: each one's name,
its kind (a kind of claim_kinds.py that reads two cells: its `better` is set), its two sides (a
cell each, by model, optimizer and epochs) and the side expected to do better (`expect`).
`Comparison.panel` is it as a panel of its kind, its cells ordered so that a positive estimate
says the expected side does better; the claims table and the rounds compute it beside the
paper's claims, and `decide.claims` names it as it names (a)-(d). `check_comparisons` refuses,
in one line naming the field, what the study's grid cannot test."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt, field_validator

from optbench.errors import did_you_mean
from optbench.spec.claim_kinds import (
    KINDS,
    CellKey,
    Panel,
    declared_panel,
    side_words,
)
from optbench.spec.recipe import StrictModel

# the kinds a study can declare on two cells of its own
DECLARABLE = [name for name, kind in KINDS.items() if kind.better is not None]
MAX_COMPARISONS = 20


class Side(StrictModel):
    """One side of a comparison: a cell of the study's grid."""

    model: str
    optimizer: str
    epochs: StrictInt

    @property
    def cell(self) -> CellKey:
        return (self.model, self.optimizer, self.epochs)


class Comparison(StrictModel):
    """One declared comparison (module docstring)."""

    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*$", max_length=40)
    kind: str
    sides: list[Side] = Field(min_length=2, max_length=2)
    expect: Literal["first", "second"]  # the side expected to do better

    @field_validator("name")
    @classmethod
    def _not_the_papers(cls, v: str) -> str:
        if v in KINDS:
            raise ValueError(f"{v!r} names the paper's claim ({v}); give the comparison its own")
        return v

    @field_validator("kind")
    @classmethod
    def _two_cells(cls, v: str) -> str:
        if v not in KINDS:
            raise ValueError(f"unknown kind {v!r}{did_you_mean(v, DECLARABLE)}")
        if v not in DECLARABLE:
            raise ValueError(
                f"kind {v!r} reads more than two cells; a comparison of two sides is one of "
                f"{', '.join(DECLARABLE)}"
            )
        return v

    def panel(self) -> Panel:
        """It as a panel of its kind: the expected side where a positive estimate favours."""
        first, second = (side.cell for side in self.sides)
        expected, other = (first, second) if self.expect == "first" else (second, first)
        cells = (other, expected) if KINDS[self.kind].better == 1 else (expected, other)
        return declared_panel(self.name, self.kind, cells)


def declared_words(panel: Panel) -> str:
    """A declared comparison in words, the side expected to do better first (the rows' `paper`),
    e.g. "mine: vit_c_x adamw 20ep vs vit_p_x adamw 20ep, EDF area to 10 points"."""
    return f"{panel.claim}: {panel.words}, {panel.kind.measure}"


def check_comparisons(
    comparisons: list[Comparison], cells: list[CellKey], seeds: int, n_samples: int, sampler: str
) -> None:
    """ValueError (one line naming the field) for a name declared twice, sides that name one
    cell, a side that is no cell of the grid, or a kind whose statistic the study's sizes cannot test (fewer seeds or
    (lr, wd) samples than its smallest look)."""
    grid = set(cells)
    seen: set[str] = set()
    for i, comparison in enumerate(comparisons):
        where = f"comparisons.{i}"
        if comparison.name in seen:
            raise ValueError(f"{where}.name: {comparison.name!r} is declared twice")
        seen.add(comparison.name)
        first, second = (side.cell for side in comparison.sides)
        if first == second:
            raise ValueError(f"{where}.sides: both name {side_words(first)}; compare two cells")
        for j, side in enumerate(comparison.sides):
            if side.cell not in grid:
                raise ValueError(
                    f"{where}.sides.{j}: {side_words(side.cell)} is no cell of the study "
                    "(its models x optimizers x epochs)"
                )
        kind = KINDS[comparison.kind]
        size = seeds if kind.unit == "seeds" else n_samples
        if kind.unit == "samples" and sampler == "good":
            size = 1  # one fixed (lr, wd) pair per cell
        if size < kind.smallest_look:
            has = "seeds" if kind.unit == "seeds" else "(lr, wd) samples per cell"
            raise ValueError(
                f"{where}.kind: {comparison.kind!r} compares {kind.unit} and needs at least "
                f"{kind.smallest_look}; the study has {size} {has}"
            )

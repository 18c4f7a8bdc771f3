"""The comparisons a study declares (`comparisons:`, docs/study.md), as data: each one's name,
its kind (a kind of claim_kinds.py that compares two sides: its `better` is set), its two sides
(a cell each, by model, optimizer and epochs; for a kind of TWO_LENGTHS a model and optimizer
with a short and a long schedule, `epochs: [short, long]`), the side expected to do better
(`expect`) and, for kind best-error, `k`: the (lr, wd) samples whose expected best it compares,
and `calibration: none` to decide it where no trained nulls calibrate its design
(spec/calibrations.py).
A *ranking* (`kind: rank`) orders three or more cells (`cells`, each a side of one schedule) by
a two-sided kind's statistic (`by`: a or best-error, RANK_BY): it is the comparisons of its
k (k - 1) / 2 pairs, each the pair's panel of that kind, the cell listed first as the side
expected to do better (a positive estimate: the earlier cell does better; the order listed
claims nothing), all under its name. `Comparison.panels` is it as panels of its kind (one for
two sides, its cells ordered so that a positive estimate says the expected side does better;
a ranking's pairs); the claims table and the rounds compute them beside the paper's claims,
and `decide.claims` names it as it names (a)-(d). `check_comparisons` refuses, in one line
naming the field, what the study's grid cannot test."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt, field_validator, model_serializer, model_validator

from optbench.errors import did_you_mean
from optbench.spec.claim_kinds import (
    BEST_OF_DEFAULT,
    KINDS,
    PAPER,
    TWO_LENGTHS,
    CellKey,
    Panel,
    declared_panel,
    side_words,
)
from optbench.spec.recipe import StrictModel

# the kinds a study can declare on two cells of its own
DECLARABLE = [name for name, kind in KINDS.items() if kind.better is not None]
MAX_COMPARISONS = 20
RANK = "rank"  # a ranking's kind: its pairs are comparisons of its `by` kind
# the kinds a ranking may order its cells by: the two-sided ones of one cell per side that add
# (lr, wd) samples (the EDF area, the expected best of k samples)
RANK_BY = [name for name in DECLARABLE if KINDS[name].unit == "samples" and name not in TWO_LENGTHS]
# a ranking's most cells: 8 make 28 pairs, each a share of the study's alpha
MAX_RANKED = 8


class Side(StrictModel):
    """One side of a comparison: a cell of the study's grid, or (a kind of TWO_LENGTHS) a short
    and a long schedule of one model and optimizer, two cells."""

    model: str
    optimizer: str
    epochs: StrictInt | list[StrictInt]

    @property
    def cells(self) -> tuple[CellKey, ...]:
        """Its cells, the short schedule first."""
        lengths = self.epochs if isinstance(self.epochs, list) else [self.epochs]
        return tuple((self.model, self.optimizer, e) for e in lengths)

    @property
    def cell(self) -> CellKey:
        """The cell of a side of one schedule."""
        (cell,) = self.cells
        return cell


class Comparison(StrictModel):
    """One declared comparison (module docstring)."""

    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*$", max_length=40)
    kind: str
    # two sides and the one expected to do better; None for a ranking (check_comparisons)
    sides: list[Side] | None = Field(default=None, min_length=2, max_length=2)
    expect: Literal["first", "second"] | None = None
    # a ranking's cells (one schedule each) and the kind of its pairs; None for two sides
    cells: list[Side] | None = Field(default=None, min_length=3, max_length=MAX_RANKED)
    by: str | None = None
    # kind best-error (or a ranking by it): the (lr, wd) samples drawn (BEST_OF_DEFAULT where
    # none is given)
    k: StrictInt | None = Field(default=None, ge=1)
    # kind best-error (or a ranking by it): "none" decides it where no trained nulls calibrate
    # its design (spec/calibrations.py), the page saying so; unset, `optbench run` refuses it
    calibration: Literal["none"] | None = None

    @field_validator("name")
    @classmethod
    def _not_the_papers(cls, v: str) -> str:
        if v in PAPER:
            raise ValueError(f"{v!r} names the paper's claim ({v}); give the comparison its own")
        if v in KINDS:  # a row whose name is its kind reads as the paper's
            raise ValueError(f"{v!r} names a kind; give the comparison its own name")
        return v

    @field_validator("kind")
    @classmethod
    def _two_cells(cls, v: str) -> str:
        if v == RANK:
            return v
        if v not in KINDS:
            raise ValueError(f"unknown kind {v!r}{did_you_mean(v, [*DECLARABLE, RANK])}")
        if v not in DECLARABLE:
            raise ValueError(
                f"kind {v!r} reads more than two cells; a comparison of two sides is one of "
                f"{', '.join(DECLARABLE)}, or {RANK!r} over three or more cells"
            )
        return v

    @model_validator(mode="before")
    @classmethod
    def _best_of(cls, data):
        """A best-error comparison's k spelled out (spec.yaml, the design's fingerprint); one
        given to another kind is refused by check_comparisons, which names the field."""
        if isinstance(data, dict) and data.get("k") is None:
            drawn = data.get("by") if data.get("kind") == RANK else data.get("kind")
            if drawn == "best-error":  # a best-error comparison, or a ranking by it
                data = {**data, "k": BEST_OF_DEFAULT}
        return data

    @model_serializer(mode="wrap")
    def _as_declared(self, handler) -> dict:
        """Only the keys its form has: k on a best-error comparison (or a ranking by it),
        sides and expect on two sides, cells and by on a ranking; it dumps as it was declared
        (spec.yaml, the page's YAML, the design's fingerprint, as an earlier optbench's),
        never with a null it does not have."""
        data = handler(self)
        for key in ("k", "sides", "expect", "cells", "by", "calibration"):
            if data.get(key) is None:
                data.pop(key, None)
        return data

    @property
    def pair_kind(self) -> str:
        """The kind of its panels: its own, a ranking's `by`."""
        return self.by if self.kind == RANK else self.kind

    def panels(self) -> list[Panel]:
        """It as panels of its kind: two sides' one panel (the expected side where a positive
        estimate favours), or a ranking's pairs, the earlier cell of each as the side a
        positive estimate favours (module docstring)."""
        if self.kind == RANK:
            cells = [side.cell for side in self.cells]
            return [
                self._panel(self.by, (cells[i],), (cells[j],))
                for i in range(len(cells))
                for j in range(i + 1, len(cells))
            ]
        first, second = (side.cells for side in self.sides)
        expected, other = (first, second) if self.expect == "first" else (second, first)
        return [self._panel(self.kind, expected, other)]

    def _panel(self, kind: str, expected, other) -> Panel:
        cells = (*other, *expected) if KINDS[kind].better == 1 else (*expected, *other)
        return declared_panel(self.name, kind, cells, self.k)


def declared_words(panel: Panel) -> str:
    """A declared comparison in words, the side expected to do better first (the rows' `paper`),
    e.g. "mine: vit_c_x adamw 20ep vs vit_p_x adamw 20ep, EDF area to 10 points"."""
    return f"{panel.claim}: {panel.words}, {panel.measure}"


def check_comparisons(
    comparisons: list[Comparison], cells: list[CellKey], seeds: int, n_samples: int, sampler: str
) -> None:
    """ValueError (one line naming the field) for a name declared twice, a side's epochs that
    are not its kind's (one value; a short and a long one for a kind of TWO_LENGTHS), a `k`
    given to another kind than best-error or above the study's samples, sides that name the
    same cells, a side that is no cell of the grid, or a kind whose statistic the study's sizes
    cannot test (fewer seeds or (lr, wd) samples than its smallest look); for a ranking, keys
    of two sides, no `cells` or `by`, a `by` not in RANK_BY, a cell listed twice or none of
    the grid's."""
    grid = set(cells)
    seen: set[str] = set()
    for i, comparison in enumerate(comparisons):
        where = f"comparisons.{i}"
        if comparison.name in seen:
            raise ValueError(f"{where}.name: {comparison.name!r} is declared twice")
        seen.add(comparison.name)
        if comparison.kind == RANK:
            _check_ranking(where, comparison, grid)
        else:
            _check_form(where, comparison)
            _check_sides(where, comparison, grid)
        kind = KINDS[comparison.pair_kind]
        size = seeds if kind.unit == "seeds" else n_samples
        if kind.unit == "samples" and sampler == "good":
            size = 1  # one fixed (lr, wd) pair per cell
        if size < kind.smallest_look:
            has = "seeds" if kind.unit == "seeds" else "(lr, wd) samples per cell"
            field = "by" if comparison.kind == RANK else "kind"
            raise ValueError(
                f"{where}.{field}: {comparison.pair_kind!r} compares {kind.unit} and needs at "
                f"least {kind.smallest_look}; the study has {size} {has}"
            )
        _check_best_of(where, comparison, n_samples)
        if comparison.calibration is not None and comparison.pair_kind != "best-error":
            raise ValueError(
                f"{where}.calibration: only kind 'best-error' (or a ranking by it) is "
                f"calibrated; kind {comparison.kind!r} takes no calibration"
            )


def _check_form(where: str, comparison: Comparison) -> None:
    """ValueError naming the field unless a comparison of two sides has its sides and expect
    and none of a ranking's keys."""
    for key in ("cells", "by"):
        if getattr(comparison, key) is not None:
            raise ValueError(
                f"{where}.{key}: only kind {RANK!r} takes {key}; kind {comparison.kind!r} "
                "compares two sides (sides:, expect:)"
            )
    for key in ("sides", "expect"):
        if getattr(comparison, key) is None:
            raise ValueError(
                f"{where}.{key}: missing (kind {comparison.kind!r} compares two sides)"
            )


def _check_ranking(where: str, comparison: Comparison, grid: set[CellKey]) -> None:
    """ValueError naming the field unless a ranking has cells and a `by` of RANK_BY and none
    of two sides' keys, each cell one schedule of the grid, none named twice."""
    for key in ("sides", "expect"):
        if getattr(comparison, key) is not None:
            raise ValueError(
                f"{where}.{key}: a ranking takes cells: (three or more) and by:, not {key}"
            )
    if comparison.cells is None:
        raise ValueError(f"{where}.cells: missing (a ranking orders three or more cells)")
    if comparison.by not in RANK_BY:
        given = "missing" if comparison.by is None else f"{comparison.by!r} is not one"
        raise ValueError(
            f"{where}.by: {given}; a ranking orders its cells by one of {', '.join(RANK_BY)}"
            f"{did_you_mean(str(comparison.by), RANK_BY) if comparison.by else ''}"
        )
    seen: set[CellKey] = set()
    for j, side in enumerate(comparison.cells):
        _check_epochs(f"{where}.cells.{j}.epochs", comparison.by, side.epochs)
        if side.cell not in grid:
            raise ValueError(
                f"{where}.cells.{j}: {side_words(side.cell)} is no cell of the study "
                "(its models x optimizers x epochs)"
            )
        if side.cell in seen:
            raise ValueError(f"{where}.cells.{j}: {side_words(side.cell)} is listed twice")
        seen.add(side.cell)


def _check_sides(where: str, comparison: Comparison, grid: set[CellKey]) -> None:
    """ValueError naming the field unless two sides have their kind's epochs, differ, and
    are cells of the grid."""
    for j, side in enumerate(comparison.sides):
        _check_epochs(f"{where}.sides.{j}.epochs", comparison.kind, side.epochs)
    first, second = (side.cells for side in comparison.sides)
    if first == second:
        raise ValueError(
            f"{where}.sides: both name {side_words(*first)}; compare two different sides"
        )
    for j, side in enumerate(comparison.sides):
        for cell in side.cells:
            if cell not in grid:
                raise ValueError(
                    f"{where}.sides.{j}: {side_words(cell)} is no cell of the study "
                    "(its models x optimizers x epochs)"
                )


def _check_epochs(where: str, kind: str, epochs: int | list[int]) -> None:
    """ValueError naming `where` unless a side's epochs are one value, or for a kind of
    TWO_LENGTHS a short and a longer one."""
    if kind not in TWO_LENGTHS:
        if isinstance(epochs, list):
            raise ValueError(
                f"{where}: kind {kind!r} compares one cell per side: give one epochs value, "
                f"not {epochs}"
            )
        return
    if not isinstance(epochs, list) or len(epochs) != 2:
        raise ValueError(
            f"{where}: kind {kind!r} compares a short and a long schedule of each side: give "
            f"[short, long], not {epochs}"
        )
    short, long = epochs
    if short >= long:
        raise ValueError(f"{where}: {epochs}: the short schedule is shorter than the long one")


def _check_best_of(where: str, comparison: Comparison, n_samples: int) -> None:
    """ValueError naming `where`.k for a k given to another kind than best-error, or for more
    samples than a cell of the study has."""
    k = comparison.k
    if k is None:
        return
    if comparison.pair_kind != "best-error":
        raise ValueError(
            f"{where}.k: only kind 'best-error' (or a ranking by it) draws k samples; kind "
            f"{comparison.kind!r} takes no k"
        )
    if k > n_samples:
        raise ValueError(
            f"{where}.k: {k} samples is more than the study's {n_samples} (lr, wd) samples "
            "per cell (search.n_samples)"
        )

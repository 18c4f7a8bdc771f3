"""The claim kinds: one home for what a comparison is, as data (no torch, no numpy).

A *kind* (`ClaimKind`) says once: its name, what its statistic computes, the unit a study adds
until it is decided (`samples`: (lr, wd) samples, or `seeds`), its smallest look (the fewest
units its interval needs), which cells of a grid it reads (`panels_of`: one `Panel` per
comparison the grid can test), what it reads of them (`reads`: an EDF over the samples, their
expected best of k, or per-seed contrasts), and its words: the paper's claim in the verdict sentence, what its
estimate measures, the panel's phrase, the report section whose figure it shows, and what a
grid needs for it. `KINDS` holds the paper's claims (a)-(d) (`PAPER`) and two kinds that only a
study declares (no `paper` words, no panels of a grid's own): `best-error`, the expected best
error of k (lr, wd) samples, and `length-stability`, claim (b)'s contrast on two declared sides
(decision/claims.py defines every statistic and interval); the study schema (`decide:`), the
rounds (run/rounds.py), the claims table and its page (decision/claims.py, claims_page.py)
iterate it, so a kind is added here and beside its statistic (decision/claims.py, `READERS`
and, for a seed kind, `SEED_CONTRASTS`). A kind with `better` compares two sides, and a study
may declare comparisons of it on cells of its own (spec/comparisons.py, `declared_panel`): a
side is one cell, or a short and a long schedule for a kind of `TWO_LENGTHS`; a panel's name
(`claim`: a-d or the declared name) is kept apart from its kind (`kind_name`, None where the
name is the kind).

A comparison (a kind on one panel of a grid) is named by `comparison_key`, made of its kind and
the cells it reads, never of display text: a sequential study's looks are stored and matched
under it (an earlier optbench stored them under the panel's words, `Panel.old_key`;
store/migrations.py reads those). Models take their roles from their zoo names (roles.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from optbench.spec.roles import Family, families

# An EDF over (lr, wd) needs sampled pairs: a cell with fewer (a `sampler: good` cell trains one
# fixed pair) gets no EDF figure, KS test or EDF claim; its seeds are compared instead.
MIN_EDF_SAMPLES = 4
# a t interval of 2 seeds has 1 degree of freedom (t = 12.7) and says next to nothing; from 3
# seeds (t = 4.3) a seed claim is tested
MIN_SEEDS = 3

CellKey = tuple[str, str, int]  # (model, optimizer, epochs)


@dataclass(frozen=True)
class Panel:
    """One comparison: a kind on one panel of a grid, and the cells its statistic reads."""

    claim: str  # its name: the paper's a-d, or a comparison the study declares
    optimizer: str
    epochs: int | str  # (b): "short vs long"; (c): the lengths, "4, 8"
    models: tuple[str, ...]  # (C, P), or the stem chain S1, ..., P for (d)
    cells: tuple[CellKey, ...]
    kind_name: str | None = None  # a declared comparison's kind; None: its name is its kind
    best_of: int | None = None  # a best-error comparison's k: the (lr, wd) samples drawn

    @property
    def kind(self) -> ClaimKind:
        return KINDS[self.kind_name or self.claim]

    @property
    def declared(self) -> bool:
        return self.kind_name is not None

    @property
    def key(self) -> str:
        """Its stable name, where its looks are stored (comparison_key)."""
        return comparison_key(self.claim, self.cells)

    @property
    def model_words(self) -> str:
        """The models in the order the claim reads them, e.g. "vit_c_x vs vit_p_x"."""
        return (" vs " if self.declared else self.kind.joiner).join(self.models)

    @property
    def sides(self) -> tuple[tuple[CellKey, ...], tuple[CellKey, ...]]:
        """A declared comparison's two sides, the one expected to do better first: its cells
        are two halves, one per side (one cell each, or a short and a long schedule)."""
        return _sides(self.cells, self.kind.better)

    @property
    def words(self) -> str:
        """The panel in words, e.g. "adamw 20ep vit_c_x vs vit_p_x" (lines and figures); a
        declared comparison's sides, the one expected to do better first."""
        if self.declared:
            better, other = self.sides
            return f"{side_words(*better)} vs {side_words(*other)}"
        return f"{self.optimizer} {self.epochs}ep {self.model_words}"

    @property
    def statistic(self) -> str:
        """What its estimate computes, in its unit; a declared comparison's on its own sides."""
        if not self.declared:
            return self.kind.statistic
        better, other = (side_words(*side) for side in self.sides)
        return self.kind.declared_statistic.format(better=better, other=other, k=self.best_of)

    @property
    def measure(self) -> str:
        """What its estimate measures, in words (a best-error comparison's with its k)."""
        return self.kind.measure.format(k=self.best_of)

    @property
    def old_key(self) -> str:
        """The display text an earlier optbench stored its looks under (store/migrations.py)."""
        return f"{self.claim} {self.words}"


class _Grid:
    """The cells of a grid, and which epochs some models share."""

    def __init__(self, cells: Iterable[CellKey]) -> None:
        self.cells = list(dict.fromkeys(tuple(c) for c in cells))
        self.optimizers = sorted({o for _, o, _ in self.cells})

    def epochs_of(self, *models: str, among: Iterable[str] | None = None) -> list[int]:
        """The epochs every one of `models` has with an optimizer of `among` (any if None)."""
        among = self.optimizers if among is None else list(among)
        shared = [{e for m_, o, e in self.cells if m_ == m and o in among} for m in models]
        return sorted(set.intersection(*shared)) if shared else []


def _edf_panels(fam: Family, grid: _Grid) -> Iterator[Panel]:
    if fam.p and fam.c:
        for opt in grid.optimizers:
            for ep in grid.epochs_of(fam.p, fam.c, among=[opt]):
                yield Panel("a", opt, ep, (fam.c, fam.p), ((fam.p, opt, ep), (fam.c, opt, ep)))


def _length_panels(fam: Family, grid: _Grid) -> Iterator[Panel]:
    if fam.p and fam.c:
        for opt in grid.optimizers:
            lengths = grid.epochs_of(fam.p, fam.c, among=[opt])
            if len(lengths) >= 2:
                short, long = lengths[0], lengths[-1]
                read = tuple((m, opt, e) for m in (fam.p, fam.c) for e in (short, long))
                yield Panel("b", opt, f"{short} vs {long}", (fam.c, fam.p), read)


def _optimizer_panels(fam: Family, grid: _Grid) -> Iterator[Panel]:
    if fam.p and fam.c:
        both = ("adamw", "sgd")
        lengths = sorted(
            set.intersection(
                *(set(grid.epochs_of(m, among=[o])) for m in (fam.p, fam.c) for o in both)
            )
        )
        if lengths:
            read = tuple((m, o, e) for m in (fam.p, fam.c) for o in both for e in lengths)
            epochs = ", ".join(map(str, lengths))
            yield Panel("c", "sgd - adamw", epochs, (fam.c, fam.p), read)


def _stem_panels(fam: Family, grid: _Grid) -> Iterator[Panel]:
    order = fam.stem_order
    if len(order) >= 2:
        for opt in grid.optimizers:
            for ep in grid.epochs_of(*order, among=[opt]):
                yield Panel("d", opt, ep, order, tuple((m, opt, ep) for m in order))


@dataclass(frozen=True)
class ClaimKind:
    """One kind of comparison (module docstring)."""

    name: str  # "a": how `decide.claims` and the page name it
    # the claim in the paper's words ({chain}: the stems that ran); None: no claim of the paper,
    # only a study's declared comparisons are of this kind
    paper: str | None
    statistic: str  # what it computes, in its unit (decision/claims.py defines it)
    unit: str  # what a study adds until it is decided: "samples" or "seeds"
    smallest_look: int  # the fewest units its interval needs
    # "edf": the cells' (lr, wd) samples' EDFs; "best": their expected best of k samples;
    # "seeds": per-seed contrasts
    reads: str
    panels_of: Callable[[Family, _Grid], Iterator[Panel]]  # the cells it reads in a grid
    needs: str  # what a grid needs for it, in words (the schema's refusal)
    measure: str  # what its estimate measures, beside it in the sentence ({k}: Panel.best_of)
    phrase: str  # its panel in the sentence ({optimizer}, {epochs})
    section: str  # the report section whose figure it reads
    margin_below: float  # the largest difference its statistic can take: a margin is below it
    margin_words: str  # that scale, in words
    joiner: str = " vs "  # between its models' names
    chain: bool = False  # a chain of steps: decided on every step's interval
    # a kind a study may declare on two sides of its own (spec/comparisons.py; its cells are
    # two halves, one per side): the place of the side a positive estimate says does better;
    # None: it reads more cells
    better: int | None = None
    # its statistic on two declared sides, {better} and {other} the sides in words ({k}: a
    # best-error comparison's samples drawn)
    declared_statistic: str | None = None


def _no_panels(fam: Family, grid: _Grid) -> Iterator[Panel]:
    """A kind of no claim of the paper: a grid tests it only where a study declares it."""
    return iter(())


# a best-error comparison's k where it names none: a small tuning budget, where how easily a
# model is tuned shows (at large k both sides reach their best sample), and no more samples
# than the fewest a study of the kind has (its smallest look), so never refused
BEST_OF_DEFAULT = 4


_EDF_AREA = (1.0, "a difference of EDF areas (each 0..1)")
_POINTS = (100.0, "error points")
KINDS: dict[str, ClaimKind] = {
    kind.name: kind
    for kind in (
        ClaimKind(
            "a",
            "ViT_C's lr/wd EDF is steeper than ViT_P's (Figs 4-5)",
            "auc_10(C) - auc_10(P) (EDF area, 0-1)",
            "samples",
            MIN_EDF_SAMPLES,
            "edf",
            _edf_panels,
            "a ViT_P / ViT_C pair (vit_p_<x>, vit_c_<x>) in models",
            "EDF area to 10 points",
            "with {optimizer} at {epochs} epochs",
            "edf",
            *_EDF_AREA,
            better=1,  # auc(cells[1]) - auc(cells[0])
            declared_statistic="auc_10({better}) - auc_10({other}) (EDF area, 0-1)",
        ),
        ClaimKind(
            "b",
            "ViT_C is closer to its asymptote at short schedules (Fig 2)",
            "[E(P,short) - E(P,long)] - [E(C,short) - E(C,long)] (points)",
            "seeds",
            MIN_SEEDS,
            "seeds",
            _length_panels,
            "a ViT_P / ViT_C pair and two or more epochs",
            "error points",
            "with {optimizer}, {epochs} epochs",
            "length",
            *_POINTS,
        ),
        ClaimKind(
            "c",
            "ViT_C's SGD - AdamW gap is smaller (Fig 3)",
            "mean over lengths of gap(P) - gap(C), gap = E(sgd) - E(adamw) (points)",
            "seeds",
            MIN_SEEDS,
            "seeds",
            _optimizer_panels,
            "a ViT_P / ViT_C pair and both optimizers",
            "error points",
            "over {epochs} epochs",
            "optimizer",
            *_POINTS,
        ),
        ClaimKind(
            "d",
            "error grows with the stem's patchify size, {chain} (Table 3)",
            "min step of E along the stem order (points)",
            "seeds",
            MIN_SEEDS,
            "seeds",
            _stem_panels,
            "vit_p_<x> and a stem ablation vit_s<k>_<x>",
            "smallest step, error points",
            "with {optimizer} at {epochs} epochs",
            "stem",
            *_POINTS,
            joiner=" < ",
            chain=True,
            better=0,  # on two cells: E(cells[1]) - E(cells[0])
            declared_statistic="E({other}) - E({better}) (points)",
        ),
        ClaimKind(
            "best-error",
            None,
            "best_k(other) - best_k(better): expected best error of k (lr, wd) samples (points)",
            "samples",
            MIN_EDF_SAMPLES,
            "best",
            _no_panels,
            "two sides declared in comparisons:",
            "expected best error of {k} (lr, wd) samples, points",
            "with {optimizer} at {epochs} epochs",
            "tunability",
            *_POINTS,
            better=1,  # best_k(cells[0]) - best_k(cells[1])
            declared_statistic=(
                "best_{k}({other}) - best_{k}({better}) (expected best error of {k} (lr, wd) "
                "samples, points)"
            ),
        ),
        ClaimKind(
            "length-stability",
            None,
            "[E(other,short) - E(other,long)] - [E(better,short) - E(better,long)] (points)",
            "seeds",
            MIN_SEEDS,
            "seeds",
            _no_panels,
            "two sides declared in comparisons:, each with a short and a long schedule",
            "error points",
            "with {optimizer}, {epochs} epochs",
            "length",
            *_POINTS,
            # claim (b)'s contrast, the cells read as other short, other long, better short,
            # better long
            better=1,
            declared_statistic=(
                "[E(short) - E(long)] of {other} - [E(short) - E(long)] of {better} (points)"
            ),
        ),
    )
}
# the paper's claims (a)-(d): the kinds `decide.claims` may name by themselves
PAPER = [name for name, kind in KINDS.items() if kind.paper is not None]
# the kinds whose comparisons read a short and a long schedule of each side
TWO_LENGTHS = ["length-stability"]


def panels(cells: Iterable[CellKey], claims: Iterable[str] | None = None) -> list[Panel]:
    """Every comparison of the kinds `claims` (all if None) that a grid of (model, optimizer,
    epochs) cells can test, in KINDS' order: what the claims table computes from the cells with
    results, and what a sequential study counts from its spec before any data (its alpha is
    split over them). An EDF kind also needs MIN_EDF_SAMPLES samples of both models, known only
    from data."""
    grid = _Grid(cells)
    fams = families(list(dict.fromkeys(m for m, _, _ in grid.cells)))
    named = KINDS if claims is None else set(claims)
    return [
        p
        for kind in KINDS.values()
        if kind.name in named
        for f in fams
        for p in kind.panels_of(f, grid)
    ]


def comparison_key(claim: str, cells: Iterable[Iterable]) -> str:
    """A comparison's stable name: its kind and the models, optimizers and epochs of the cells
    it reads, each in the order it reads them, e.g. "a:vit_p_x,vit_c_x:adamw:20"."""
    cells = [tuple(c) for c in cells]
    parts = (dict.fromkeys(str(c[i]) for c in cells) for i in range(3))
    return ":".join([claim, *(",".join(part) for part in parts)])


def panel_of(claim: str, cells: Iterable[Iterable]) -> Panel | None:
    """The comparison of kind `claim` on exactly `cells` (a look's record names it so), or None
    where no panel of that kind reads them."""
    cells = tuple((str(m), str(o), int(e)) for m, o, e in cells)
    found = [p for p in panels(cells, [claim]) if p.cells == cells]
    return found[0] if found else None


def _sides(cells: tuple[CellKey, ...], better: int) -> tuple[tuple[CellKey, ...], ...]:
    """A declared comparison's cells as its two sides (two halves), the better one first."""
    half = len(cells) // 2
    halves = (cells[:half], cells[half:])
    return halves[better], halves[1 - better]


def _epochs_words(side: tuple[CellKey, ...]) -> int | str:
    """A side's epochs: 20, or a short and a long schedule, "4->8"."""
    return side[0][2] if len(side) == 1 else "->".join(str(e) for _, _, e in side)


def side_words(*cells: Iterable) -> str:
    """One side of a declared comparison in words: its cell, e.g. "vit_p_x adamw 20ep", or its
    short and long schedules, "vit_p_x adamw 4->8ep"."""
    side = tuple(tuple(c) for c in cells)
    model, optimizer, _ = side[0]
    return f"{model} {optimizer} {_epochs_words(side)}ep"


def declared_panel(
    name: str, kind: str, cells: Iterable[Iterable], best_of: int | None = None
) -> Panel:
    """A declared comparison of kind `kind` (one with `better`) on its two sides' cells in the
    order its statistic reads them (spec/comparisons.py orders them by the side expected to do
    better); `best_of`: a best-error comparison's k."""
    cells = tuple((str(m), str(o), int(e)) for m, o, e in cells)
    better, other = _sides(cells, KINDS[kind].better)
    optimizers = " vs ".join(dict.fromkeys((better[0][1], other[0][1])))
    b, o = _epochs_words(better), _epochs_words(other)
    epochs = b if b == o else f"{b} vs {o}"
    models = (better[0][0], other[0][0])
    return Panel(name, optimizers, epochs, models, cells, kind_name=kind, best_of=best_of)


def cells_read(cells: Iterable[CellKey], claims: Iterable[str]) -> dict[CellKey, set[str]]:
    """The kinds of `claims` that read each cell of a grid (an empty set: none, and the cell
    never grows in a sequential study)."""
    cells = list(dict.fromkeys(tuple(c) for c in cells))
    out: dict[CellKey, set[str]] = {cell: set() for cell in cells}
    for panel in panels(cells, claims):
        for cell in panel.cells:
            out[cell].add(panel.claim)
    return out

"""A sequential study's looks as records and in words: the record the store keeps of each look
(`Look`: its fields checked by type, `from_record`; where it is kept, `record_key`; whether
records taken under a design are what a driver wrote, `inconsistent`), the line a driver prints
per look (`look_line`), and the claims rows of a study at their last looks (`with_looks`, with
what the last look says of the study's size).

A look is kept and matched under its comparison's stable key (spec/claim_kinds.py,
`comparison_key` of its claim and cells), never under display text; records an earlier optbench
kept under the panel's words are read under the stable key (store/migrations.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import pandas as pd

from optbench.decision import sequential
from optbench.decision.claims import NOT_TESTED
from optbench.spec.claim_kinds import KINDS, comparison_key, declared_panel, panel_of
from optbench.spec.decide import Decide


@dataclass(frozen=True)
class Look:
    """One panel's look, as the store records it."""

    panel: str  # the comparison's stable key (claim_kinds.comparison_key of claim and cells)
    claim: str
    k: int  # the look's index in decide.looks (0-based)
    n: int  # samples or seeds per cell it read
    n_max: int
    unit: str
    estimate: float
    se: float
    boundary: float  # the z boundary c_k; the interval is estimate +- critical(c_k) se
    low: float
    high: float
    outcome: str  # sequential.OUTCOMES: holds, opposite, equivalent, ..., continue, undecided
    cells: tuple[tuple[str, str, int], ...]  # (model, optimizer, epochs) it read
    design: str  # the design's fingerprint
    spending: str = "pocock"  # the design's, for the report's words
    margin: float | None = None
    # digest of the trials the look's round read (`Rounds.reads`); None in records written
    # before looks carried it (then only their cells are checked against the spec)
    read: str | None = None
    note: str | None = None  # why it decides nothing: degenerate data, a mixed chain (claims.py)
    alpha: float = sequential.ALPHA  # the study's, shared by its `panels` (Holm's step-down)
    panels: int = 1
    # a declared comparison's kind (spec/comparisons.py), `claim` being its name; None: the
    # claim is its own kind, (a)-(d) (and every record written before comparisons were declared)
    kind: str | None = None
    best_of: int | None = None  # a best-error comparison's k (its statistic's words); else None
    # the panel's alpha at this look (sequential.Design.level: Holm's step-down over the
    # study's panels); None in records written before it, taken at alpha / panels
    level: float | None = None

    @property
    def kind_of(self) -> str:
        """Its kind's name in claim_kinds.KINDS."""
        return self.kind or self.claim

    @property
    def done(self) -> bool:
        return self.outcome != "continue"

    @property
    def words(self) -> str:
        """Its panel in words, e.g. "adamw 20ep vit_c_x vs vit_p_x" (claim_kinds.Panel.words)."""
        return panel_words(self.claim, self.cells, self.kind)

    def record(self) -> dict:
        """What the store keeps: checked by the reader's rules, so that no run writes a record
        the next one refuses as damaged (a NaN note did, issue 56)."""
        out = asdict(self)
        out["cells"] = [list(c) for c in self.cells]
        Look.from_record(out)
        return out

    @classmethod
    def from_record(cls, data: dict) -> Look:
        """A look from its stored record, every field checked by type (ValueError naming the
        field otherwise): the record is data in a file a user can edit."""
        if not isinstance(data, dict):
            raise ValueError(f"not a look's record ({type(data).__name__})")
        missing = sorted(set(_REQUIRED) - set(data))
        if missing:
            raise ValueError(f"{', '.join(missing)}: missing")
        unknown = sorted(set(data) - set(_FIELD_TYPES))
        if unknown:
            raise ValueError(f"{unknown[0]}: not a field of a look")
        for name, check in _FIELD_TYPES.items():
            if name in data and not check(data[name]):
                raise ValueError(f"{name}: not {_FIELD_WORDS[name]} ({data[name]!r:.60})")
        if data["low"] > data["high"]:
            raise ValueError(f"low: above high ({data['low']!r:.30} > {data['high']!r:.30})")
        return cls(**{**data, "cells": tuple(tuple(c) for c in data["cells"])})


def _count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _number(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _finite(x) -> bool:
    return _number(x) and math.isfinite(x)


def _bound(x) -> bool:  # infinite where an optbench before f2cce69 wrote a look that spent nothing
    return _number(x) and not math.isnan(x)


def _text(x) -> bool:
    return isinstance(x, str) and 0 < len(x) <= 1000


def _cells(x) -> bool:
    return (
        isinstance(x, list)
        and len(x) > 0
        and all(
            isinstance(c, list) and len(c) == 3 and _text(c[0]) and _text(c[1]) and _count(c[2])
            for c in x
        )
    )


_FIELD_TYPES = {
    "panel": _text,
    "claim": _text,
    "k": _count,
    "n": _count,
    "n_max": _count,
    "unit": lambda x: x in ("samples", "seeds"),
    "estimate": _finite,
    "se": lambda x: _finite(x) and x >= 0,
    "boundary": lambda x: _bound(x) and x > 0,
    "low": _bound,
    "high": _bound,
    "outcome": lambda x: x in sequential.OUTCOMES,
    "cells": _cells,
    "design": _text,
    "spending": lambda x: x in sequential.SPENDING,
    "margin": lambda x: x is None or (_finite(x) and x > 0),
    "read": lambda x: x is None or _text(x),
    "note": lambda x: x is None or _text(x),
    "alpha": lambda x: _finite(x) and 0 < x < 1,
    "panels": lambda x: _count(x) and x >= 1,
    "kind": lambda x: x is None or x in KINDS,
    "best_of": lambda x: x is None or (_count(x) and x >= 1),
    "level": lambda x: x is None or (_finite(x) and 0 < x < 1),
}
_FIELD_WORDS = {
    "kind": f"a claim kind ({', '.join(KINDS)}) or null",
    "k": "a look's index (a count)",
    "n": "a count",
    "n_max": "a count",
    "unit": "samples or seeds",
    "outcome": f"an outcome ({', '.join(sequential.OUTCOMES)})",
    "cells": "a list of [model, optimizer, epochs]",
    "spending": f"a spending ({', '.join(sequential.SPENDING)})",
    "margin": "a positive number or null",
    "estimate": "a finite number",
    "se": "a finite number of at least 0",
    "boundary": "a positive number",
} | {name: "a number" for name in ("low", "high")}
_FIELD_WORDS |= {name: "text" for name in ("panel", "claim", "design", "read", "note")}
_FIELD_WORDS |= {"alpha": "a number in (0, 1)", "panels": "a count of at least 1"}
_FIELD_WORDS |= {"best_of": "a count of at least 1 or null", "level": "a number in (0, 1) or null"}
# A chain's recorded outcome against what its record's interval alone gives, where the two may
# differ (inconsistent): every step above 0, the smallest step's high inside the margin.
CHAIN_HOLDS = ("holds", "holds, negligible")
# fields that records written before them lack (their defaults read them)
_LATER = ("spending", "margin", "read", "note", "alpha", "panels", "kind", "best_of", "level")
_REQUIRED = [name for name in _FIELD_TYPES if name not in _LATER]


def panel_words(claim: str, cells, kind: str | None = None) -> str:
    """A comparison's panel in words from its claim and cells, e.g. "adamw 20ep vit_c_x vs
    vit_p_x" (a declared one of `kind`: its sides); the key itself where no panel of that claim
    reads those cells."""
    if kind is not None and KINDS[kind].better is not None:
        return declared_panel(claim, kind, cells).words
    panel = panel_of(claim, cells)
    return panel.words if panel else comparison_key(claim, cells)


def signed(x: float) -> str:
    """A look's number with its sign, as its lines show it."""
    return f"{x:+.3g}"


def look_line(look: Look) -> str:
    """One line per look, as the driver records it."""
    what = {"continue": "not decided yet, continues"}.get(look.outcome, look.outcome)
    if look.note:  # why it decides nothing (degenerate data, a mixed chain)
        what += f" ({look.note})"
    return (
        f"look {look.k + 1} ({look.n} of at most {look.n_max} {look.unit}): ({look.claim}) "
        f"{look.words}: {signed(look.estimate)} "
        f"[{signed(look.low)}, {signed(look.high)}]: {what}"
    )


def record_key(look: Look) -> str:
    """Where the store keeps a look: under its comparison's stable key and its index."""
    return f"look/{look.panel}/{look.k:03d}"


def inconsistent(decide: Decide, looks: list[Look]) -> Iterator[str]:
    """Why recorded looks taken under this design (its fingerprint) cannot be what a driver
    wrote: a look beyond the design, a size or unit that is not its look's, an outcome that
    its interval does not give, a level above what the panels rejected by then allow (Holm's
    step-down, `level_allowed`), a panel whose looks skip one or go on after a decision."""
    panels: dict[str, list[Look]] = {}
    for look in looks:
        where = f"{record_key(look)}: "
        allowed = level_allowed(look, looks)
        if look.k >= len(decide.looks):
            yield f"{where}look {look.k + 1} of a design of {len(decide.looks)} looks"
        elif look.n != decide.looks[look.k] or look.n_max != decide.looks[-1]:
            yield f"{where}{look.n} of at most {look.n_max} {look.unit}, not look {look.k + 1}'s size"
        elif (
            look.unit != decide.unit
            or look.claim not in decide.claims
            or look.kind_of != decide.kind_of(look.claim).name
        ):
            yield f"{where}claim ({look.claim}) in {look.unit} is not one this study decides"
        elif look.panel != comparison_key(look.claim, look.cells):
            yield f"{where}panel {look.panel!r} is not claim ({look.claim})'s on its cells"
        elif allowed is not None:
            yield f"{where}level {look.level!r}, but {allowed}"
        else:
            said = recorded_rule(look, decide.margin, look.k == len(decide.looks) - 1)
            if look.note is not None and look.outcome in sequential.DECIDED:
                yield f"{where}outcome {look.outcome!r}, but it decides nothing: {look.note}"
            elif look.outcome != said and (
                # a chain (d) decides on every step, which its record's one interval ([smallest
                # low, smallest high]) does not hold: only a decision is checked against it, and
                # "holds" stands where that interval alone would be negligible (another step's
                # high, not recorded, may reach the margin)
                not KINDS[look.kind_of].chain
                or (look.outcome in sequential.DECIDED and (look.outcome, said) != CHAIN_HOLDS)
            ):
                yield f"{where}outcome {look.outcome!r}, but its interval gives {said!r}"
        panels.setdefault(look.panel, []).append(look)
    for key, panel in panels.items():
        if [look.k for look in panel] != list(range(len(panel))):
            yield f"look/{key}: looks {[look.k + 1 for look in panel]}, not 1 to {len(panel)}"
        elif any(look.done for look in panel[:-1]):
            yield f"look/{key}: a look after its panel was decided"


def level_allowed(look: Look, looks: list[Look]) -> str | None:
    """Why a recorded look's level is not one Holm's step-down gives it (None where it is):
    alpha / (panels - r) for an r no larger than the other panels that rejected their zero null
    (sequential.REJECTS) at this look or before (sequential.Design.level). A record without a
    level was taken at alpha / panels."""
    if look.level is None:
        return None
    r = len(
        {
            other.panel
            for other in looks
            if other.panel != look.panel
            and other.k <= look.k
            and other.outcome in sequential.REJECTS
        }
    )
    levels = [look.alpha / (look.panels - j) for j in range(min(r, look.panels - 1) + 1)]
    if any(math.isclose(look.level, level, rel_tol=1e-9) for level in levels):
        return None
    return (
        f"{r} other panels had rejected by then: the levels alpha / (panels - r) allow are "
        f"{', '.join(f'{x:.4g}' for x in levels)}"
    )


def recorded_rule(look: Look, margin: float | None, last: bool) -> str:
    """The outcome that the look's rule (sequential.look_outcome, the one a look is taken by)
    gives on what its record keeps: its interval, se and margin, and its note as the look wrote
    it (the cells' "nothing learned" where it stopped so, else why it continued)."""
    stopped = look.outcome == sequential.NOTHING_LEARNED
    nothing, note = (look.note, None) if stopped else (None, look.note)
    found, _ = sequential.look_outcome(look.low, look.high, look.se, margin, last, nothing, note)
    return found


def with_looks(table: pd.DataFrame, looks: list[dict]) -> pd.DataFrame:
    """The claims of a sequential study (`looks`: the store's records, run/rounds.py): each
    panel that was looked at shows its last look, its repeated confidence interval and its
    outcome (holds, opposite, equivalent, undecided; "continue" while the study runs) instead
    of a fixed-size interval, which would not hold after stopping on the data. Columns `looks`
    (how many were taken), `n_max`, `alpha` (the study's), `panels` (the panels it is split
    over), `level` (the panel's alpha at its last look, Holm's step-down) and `margin` are
    added; rows without looks keep their own."""
    last: dict[str, dict] = {}
    for look in looks:  # matched by the comparison's key, whatever key the record was kept under
        key = comparison_key(look["claim"], look["cells"])
        if key not in last or look["k"] > last[key]["k"]:
            last[key] = look
    added = ("n_max", "alpha", "panels", "level", "margin")
    table = table.assign(looks=0, **dict.fromkeys(added, pd.NA)).astype(
        dict.fromkeys(added, "object")
    )
    for i, row in table.iterrows():
        look = last.get(comparison_key(row["claim"], row["cells"]))
        if look is None:
            continue
        advice = _look_advice(look)
        for column, value in (
            ("estimate", look["estimate"]),
            ("low", look["low"]),
            ("high", look["high"]),
            ("se", look["se"]),
            ("verdict", look["outcome"]),
            ("note", look.get("note")),  # records before it had none
            ("alpha", look.get("alpha", sequential.ALPHA)),
            ("panels", look.get("panels", 1)),  # before alpha was split: each panel its own
            ("level", _level(look)),
            ("margin", look.get("margin")),
            ("interval", "repeated"),
            ("curve_verdict", None),
            ("n_now", look["n"]),
            ("power_now", None),
            ("n_needed", None),
            ("advice", advice),
            ("looks", look["k"] + 1),
            ("n_max", look["n_max"]),
        ):
            table.loc[i, column] = value  # .loc: .at may not add a column (pandas 3)
    if (table["looks"] > 0).any():  # the study decided (or decides) some of its rows
        outside = (table["looks"] == 0) & (table["verdict"] != NOT_TESTED) & table["note"].isna()
        table.loc[outside, "note"] = NOT_DECIDED_HERE
    return table


def _level(record: dict) -> float:
    """A look record's level: its own, or alpha / panels where it has none (records before it)."""
    if record.get("level") is not None:
        return record["level"]
    return record.get("alpha", sequential.ALPHA) / record.get("panels", 1)


# beside the rows a sequential study decides, the rows of claims it does not decide keep their
# fixed-size interval, on as many trials as its decided claims' stops left: none of the study's
# error rate
NOT_DECIDED_HERE = (
    "not decided by this study (not in its decide:): a fixed-size 95% interval on the trials "
    "its decided claims left, outside the study's error rate"
)


def _look_advice(look: dict) -> str:
    """What the last look says of the study's size: where it stopped and why, or how far an
    undecided claim is from a decision (sequential.more_needed)."""
    n, n_max, unit = look["n"], look["n_max"], look["unit"]
    if look["outcome"] == "continue":
        return f"look {look['k'] + 1} at {n} of at most {n_max} {unit}: not decided yet"
    if look["outcome"] == sequential.NOTHING_LEARNED:
        return f"stopped after {n} of at most {n_max} {unit}: nothing learned, nothing decided"
    if look["outcome"] != "undecided":
        return f"decided after {n} of at most {n_max} {unit}"
    chain = KINDS[look.get("kind") or look["claim"]].chain and len(look["cells"]) > 2
    if chain:  # the record keeps the smallest step, not the chain's others
        return (
            f"undecided at the maximum ({n_max} {unit}); how many more would decide it is not "
            "estimated: a chain decides only when every step goes one way"
        )
    more = sequential.more_needed(
        look["estimate"], look["se"], n, look["boundary"], look.get("margin")
    )
    likely = (
        f"a last look at about {more} {unit} would likely decide it"
        if more
        else "no size would decide it"
    )
    return (
        f"undecided at the maximum ({n_max} {unit}); {likely} (if the effect is as estimated)"
        f"{_sizes_over_interval(look)}"
    )


def _sizes_over_interval(look: dict) -> str:
    """The range of `more_needed` over the effects the look's interval allows, evaluated where
    the gap to a decision is largest or smallest (the interval's ends, 0 and +-margin / 2 where
    inside), so that one size is not read as what the data pin down. Empty where the interval
    is not finite or no effect in it is decided by any size."""
    low, high, margin = look["low"], look["high"], look.get("margin")
    if not (math.isfinite(low) and math.isfinite(high)):
        return ""
    points = [low, high, 0.0] + ([margin / 2, -margin / 2] if margin else [])
    sizes = [
        sequential.more_needed(e, look["se"], look["n"], look["boundary"], margin)
        for e in points
        if low <= e <= high
    ]
    decided = [m for m in sizes if m]
    if not decided:
        return ""
    allowed = f"the effects its interval [{signed(low)}, {signed(high)}] allows"
    if len(decided) < len(sizes):  # 0 inside, no margin: no size shows an effect of 0
        return f"; from {min(decided):,} {look['unit']} to none for {allowed} (0 among them)"
    return f"; from {min(decided):,} to {max(decided):,} {look['unit']} for {allowed}"

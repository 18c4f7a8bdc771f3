"""The `decide:` block of a study (docs/sequential.md): its schema (`Decide`) and its checks
against the study's grid (`check_decidable`), both read off the claim kinds (claim_kinds.py):
each named claim's unit, smallest look, margin scale and what a grid needs for it. A named
claim is one of the paper's (a)-(d) or a comparison the study declares (spec/comparisons.py),
whose kind `read_kinds` looks up."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr, StrictFloat, StrictInt, field_validator

from optbench.errors import did_you_mean
from optbench.spec.claim_kinds import KINDS, PAPER, CellKey, ClaimKind, panels
from optbench.spec.comparisons import Comparison
from optbench.spec.recipe import StrictModel

MAX_LOOKS = 12  # more looks spend alpha thinner for little saving (docs/sequential.md)
# The smallest decide.alpha: a boundary beyond about 5 sd (alpha 1e-6) is never crossed by a
# study of optbench's sizes, and tinier ones spend less than a double holds at early looks.
MIN_ALPHA = 1e-6


class Decide(StrictModel):
    """Sample until decided (docs/sequential.md): train in rounds, look at the named claims
    after each, stop once each is decided. `looks` are the sizes (the claims' unit: samples for
    claim a, seeds for b-d) at which it looks, fixed before any data; the last one is the
    study's whole size (search.n_samples, or the number of seeds), so a study that stops is a
    prefix of it. `claims` names the paper's (a)-(d) and the study's declared comparisons
    (spec/comparisons.py); `check_decidable` reads each name's kind."""

    claims: list[str] = Field(min_length=1)
    looks: list[StrictInt] = Field(min_length=2, max_length=MAX_LOOKS)
    spending: Literal["pocock", "obrien-fleming"] = "pocock"
    alpha: StrictFloat = Field(default=0.05, ge=MIN_ALPHA, le=0.2)
    margin: StrictFloat | None = Field(
        default=None, gt=0, description="equivalent when the interval lies inside +-margin"
    )

    # each named declared comparison's kind (check_decidable); a name of (a)-(d) is its kind
    _kinds: dict[str, str] = PrivateAttr(default_factory=dict)

    @field_validator("claims")
    @classmethod
    def _once(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"duplicate entries in {v}")
        return v

    @field_validator("looks")
    @classmethod
    def _increasing(cls, v: list[int]) -> list[int]:
        if any(b <= a for a, b in zip(v, v[1:], strict=False)):
            raise ValueError(f"looks must increase, got {v}")
        return v

    def kind_of(self, claim: str) -> ClaimKind:
        """The kind of a named claim: (a)-(d) itself, a declared comparison's its `kind`."""
        return KINDS[self._kinds.get(claim, claim)]

    @property
    def unit(self) -> str:
        """What the named claims add until they are decided: samples or seeds."""
        return self.kind_of(self.claims[0]).unit

    @property
    def paper_claims(self) -> list[str]:
        """The named claims of the paper, (a)-(d), without the declared comparisons."""
        return [c for c in self.claims if c not in self._kinds]


def read_kinds(decide: Decide, comparisons: list[Comparison]) -> None:
    """Each named claim's kind (Decide._kinds), or ValueError naming one that is neither a
    paper's claim nor a declared comparison; then the units and the margin of those kinds."""
    declared = {c.name: c.pair_kind for c in comparisons}  # a ranking: the kind of its pairs
    for claim in decide.claims:
        if claim not in PAPER and claim not in declared:
            known = [*PAPER, *declared]
            # a kind of no paper's claim (best-error, ...) is decided only as a declared one
            raise ValueError(
                f"decide.claims: {claim!r} is neither a claim of the paper ({', '.join(PAPER)}) "
                f"nor a name in comparisons:{did_you_mean(claim, known)}"
            )
    decide._kinds = {c: declared[c] for c in decide.claims if c in declared}
    if len({decide.kind_of(c).unit for c in decide.claims}) > 1:
        raise ValueError(
            f"decide.claims {decide.claims}: some add (lr, wd) samples and some add seeds; "
            "decide one kind per study"
        )
    kind, v = decide.kind_of(decide.claims[0]), decide.margin
    if v is not None and v >= kind.margin_below:
        raise ValueError(
            f"decide.margin: {v:g} is not below {kind.margin_below:g}: claim "
            f"({decide.claims[0]})'s unit is {kind.margin_words}, so every interval would be "
            "'equivalent'"
        )


def check_decidable(
    decide: Decide,
    cells: list[CellKey],
    seeds: int,
    n_samples: int,
    sampler: str,
    seed_per_sample: bool,
) -> None:
    """ValueError (one line) unless a study's grid (`cells`) and sizes (its number of `seeds`,
    search.n_samples, search.sampler, and whether each sample has seeds of its own) let every
    named claim decide: the last look is the whole study, the first one at least each claim's
    smallest look, the units can grow as the claims resample them, and the grid has a panel of
    each claim. `read_kinds` comes first."""
    unit = decide.unit
    size = seeds if unit == "seeds" else n_samples
    where = "the number of seeds" if unit == "seeds" else "search.n_samples"
    fix = (
        f"list {decide.looks[-1]} seeds"
        if unit == "seeds"
        else f"set {where} to {decide.looks[-1]}"
    )
    if decide.looks[-1] != size:
        raise ValueError(
            f"decide.looks ends at {decide.looks[-1]} {unit}, but {where} is {size}: the "
            f"last look is the whole study ({fix})"
        )
    needs = max(decide.claims, key=lambda c: decide.kind_of(c).smallest_look)
    if decide.looks[0] < decide.kind_of(needs).smallest_look:
        raise ValueError(
            f"decide.looks starts at {decide.looks[0]} {unit}: the first look needs at "
            f"least {decide.kind_of(needs).smallest_look} (claim {needs}'s interval)"
        )
    if unit == "seeds" and seed_per_sample:
        raise ValueError(
            f"decide.claims {decide.claims}: adding seeds needs the same seeds in every "
            "sample, and search.seed_per_sample gives every sample its own; set it false"
        )
    if unit == "samples" and sampler == "good":
        raise ValueError("decide.claims [a] samples (lr, wd) pairs: search.sampler 'good' has one")
    for claim in decide.paper_claims:
        if not panels(cells, [claim]):
            raise ValueError(
                f"decide.claims: claim ({claim}) needs {KINDS[claim].needs}; this grid has none"
            )

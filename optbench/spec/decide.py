"""The `decide:` block of a study (docs/sequential.md): its schema (`Decide`) and its checks
against the study's grid (`check_decidable`), both read off the claim kinds (claim_kinds.py):
each named claim's unit, smallest look, margin scale and what a grid needs for it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictFloat, StrictInt, ValidationInfo, field_validator

from optbench.spec.claim_kinds import KINDS, CellKey, panels
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
    prefix of it."""

    claims: list[Literal[tuple(KINDS)]] = Field(min_length=1)  # type: ignore[valid-type]
    looks: list[StrictInt] = Field(min_length=2, max_length=MAX_LOOKS)
    spending: Literal["pocock", "obrien-fleming"] = "pocock"
    alpha: StrictFloat = Field(default=0.05, ge=MIN_ALPHA, le=0.2)
    margin: StrictFloat | None = Field(
        default=None, gt=0, description="equivalent when the interval lies inside +-margin"
    )

    @field_validator("claims")
    @classmethod
    def _one_unit(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"duplicate entries in {v}")
        if len({KINDS[c].unit for c in v}) > 1:
            raise ValueError(
                f"claims {v}: (a) adds (lr, wd) samples and (b)-(d) add seeds; decide one kind "
                "per study"
            )
        return v

    @field_validator("looks")
    @classmethod
    def _increasing(cls, v: list[int]) -> list[int]:
        if any(b <= a for a, b in zip(v, v[1:], strict=False)):
            raise ValueError(f"looks must increase, got {v}")
        return v

    @field_validator("margin")
    @classmethod
    def _in_the_claims_unit(cls, v: float | None, info: ValidationInfo) -> float | None:
        claims = info.data.get("claims")
        if v is None or not claims:  # claims invalid: its own line says why
            return v
        kind = KINDS[claims[0]]
        if v >= kind.margin_below:
            raise ValueError(
                f"{v:g} is not below {kind.margin_below:g}: claim ({claims[0]})'s unit is "
                f"{kind.margin_words}, so every interval would be 'equivalent'"
            )
        return v

    @property
    def unit(self) -> str:
        """What the named claims add until they are decided: samples or seeds."""
        return KINDS[self.claims[0]].unit


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
    each claim."""
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
    needs = max(decide.claims, key=lambda c: KINDS[c].smallest_look)
    if decide.looks[0] < KINDS[needs].smallest_look:
        raise ValueError(
            f"decide.looks starts at {decide.looks[0]} {unit}: the first look needs at "
            f"least {KINDS[needs].smallest_look} (claim {needs}'s interval)"
        )
    if unit == "seeds" and seed_per_sample:
        raise ValueError(
            f"decide.claims {decide.claims}: adding seeds needs the same seeds in every "
            "sample, and search.seed_per_sample gives every sample its own; set it false"
        )
    if unit == "samples" and sampler == "good":
        raise ValueError("decide.claims [a] samples (lr, wd) pairs: search.sampler 'good' has one")
    for claim in decide.claims:
        if not panels(cells, [claim]):
            raise ValueError(
                f"decide.claims: claim ({claim}) needs {KINDS[claim].needs}; this grid has none"
            )

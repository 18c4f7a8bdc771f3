"""What an undecided sequential claim's advice says of the size that would decide it
(decision/looks.py, `with_looks`): the size at the estimate, and the range of sizes over the
effects its interval allows, so that one number is not read as what the data pin down."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from optbench.decision import sequential
from optbench.decision.looks import with_looks

REFERENCE = Path(__file__).parents[1] / "docs" / "reference" / "lion_vs_adamw" / "summary.json"


def _advice(look: dict) -> str:
    row = {"claim": look["claim"], "kind": "a", "cells": look["cells"]}
    row |= {"optimizer": look["cells"][0][1], "epochs": look["cells"][0][2]}
    (shown,) = with_looks(pd.DataFrame([row]), [look]).to_dict("records")
    return shown["advice"]


def _reference_look() -> dict:
    """The committed lion_vs_adamw study's last look of lion_vit_c: undecided at 24 samples,
    estimate -0.172 in [-0.483, +0.138], margin 0.1 (the issue's "about 118 samples")."""
    looks = json.loads(REFERENCE.read_text())["looks"]
    return max((x for x in looks if x["claim"] == "lion_vit_c"), key=lambda x: x["k"])


def _sizes(look: dict, effects) -> list[int]:
    args = (look["se"], look["n"], look["boundary"], look.get("margin"))
    return [sequential.more_needed(float(e), *args) for e in effects]


def test_the_advice_gives_the_sizes_over_the_effects_its_interval_allows():
    look = _reference_look()
    advice = _advice(look)
    assert "about 118 samples would likely decide it" in advice
    found = re.search(r"from ([\d,]+) to ([\d,]+) samples for the effects its interval", advice)
    assert found, advice
    fewest, most = (int(x.replace(",", "")) for x in found.groups())
    # every effect across the interval needs a size inside the range, and the range's ends
    # are reached: the smallest and largest over a fine grid of the interval
    grid = _sizes(look, np.linspace(look["low"], look["high"], 1001))
    assert min(grid) == fewest and abs(max(grid) - most) <= 0.01 * most
    assert fewest < 118 < most and most > 10 * fewest


def test_without_a_margin_an_interval_holding_0_reaches_no_size():
    look = _reference_look() | {"margin": None}
    advice = _advice(look)
    assert "from 25 samples to none for the effects its interval [-0.483, +0.138] allows" in (
        advice
    )
    assert _sizes(look, [0.0]) == [0]  # an effect of 0 is shown by no size
    # an interval on one side of 0: both ends decide, the nearer one needs the most
    one_side = look | {"estimate": 0.3, "low": 0.1, "high": 0.5}
    found = re.search(r"from ([\d,]+) to ([\d,]+) samples", _advice(one_side))
    assert found and [int(x.replace(",", "")) for x in found.groups()] == _sizes(
        one_side, [0.5, 0.1]
    )

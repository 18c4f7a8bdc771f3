"""What the deciding code derives from the committed references is pinned by digest
(tests/data/decision_pinned.json), so that moving it (issue 67 item 10) or any refactor of it
changes no number: per reference (docs/reference/*/ and docs/reference/mini/*/, each with its
study in studies/) summary.json's content as the report computes it from trials.csv and the
recorded looks (cells, comparisons, claims, tunability), the claims' sentences, each recorded
look's line, and the boundaries of the references' sequential designs and variants of them.
Floats are rounded to 12 significant digits before hashing, so only a change in the arithmetic
moves a digest.

The imports are the report's and the driver's entry points (report/writer.py, run/rounds.py),
which the move leaves in place: this file is the same before and after it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import numbers
from pathlib import Path

import pandas as pd
import pytest

from optbench.report.claims_page import verdict_lines
from optbench.report.writer import Options, study_summary
from optbench.run.rounds import Look, design, look_line
from optbench.spec.schema import load_spec

REPO = Path(__file__).resolve().parents[1]
PINNED = Path(__file__).parent / "data" / "decision_pinned.json"
STUDIES = {
    "quickstart": "studies/quickstart.yaml",
    "lion_vs_adamw": "studies/lion_vs_adamw.yaml",
    "lion_claim_a": "studies/lion_claim_a.yaml",
    "rank_optimizers": "studies/rank_optimizers.yaml",  # a declared ranking
    **{
        f"mini/{name}": f"studies/mini/{name}.yaml"
        for name in ("mini_calibrate", "mini_edf", "mini_length", "mini_stem")
    },
}
N_BOOT = 50  # few resamples: the digest pins the arithmetic, not the statistics' precision


def canonical(value):
    """`value` with every float rounded to 12 significant digits (non-finite ones as text)."""
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    x = float(value)
    return float(f"{x:.12g}") if math.isfinite(x) else repr(x)


def digest(value) -> str:
    blob = json.dumps(canonical(value), sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def reference_outputs(name: str) -> dict:
    """The deciding outputs of one committed reference: its summary, its claims' sentences and
    its looks' lines."""
    spec = load_spec(REPO / STUDIES[name])
    folder = REPO / "docs" / "reference" / name
    trials = pd.read_csv(folder / "trials.csv")
    looks = json.loads((folder / "summary.json").read_text()).get("looks", [])
    summary = study_summary(spec, trials, Options(n_boot=N_BOOT), looks=looks)
    summary.pop("code")  # which code made the results: the trials', not the deciding code's
    lines = [look_line(Look.from_record(record)) for record in looks]
    return {"summary": summary, "verdicts": verdict_lines(summary), "look_lines": lines}


def design_outputs() -> dict:
    """Each sequential reference's design and variants of it (spending, panels, a margin):
    boundaries at each Holm level and the looks' critical values."""
    out = {}
    for name, study in STUDIES.items():
        spec = load_spec(REPO / study)
        if spec.decide is None:
            continue
        base = design(spec)
        for spending in ("pocock", "obrien-fleming"):
            for panels in (1, 3):
                variant = dataclasses.replace(base, spending=spending, panels=panels)
                levels = [variant.level(r) for r in range(panels)]
                out[f"{name}/{spending}/{panels}"] = {
                    "boundaries": [variant.boundaries(level) for level in levels],
                    "criticals": [variant.criticals(level) for level in levels],
                }
    return out


def current() -> dict[str, str]:
    digests = {name: digest(reference_outputs(name)) for name in STUDIES}
    digests["designs"] = digest(design_outputs())
    return digests


@pytest.mark.slow
def test_the_deciding_outputs_of_the_references_are_the_pinned_ones():
    pinned = json.loads(PINNED.read_text())["digests"]
    assert current() == pinned


if __name__ == "__main__":  # writes the pins: only where the arithmetic is meant to change
    print(json.dumps(current(), indent=1))

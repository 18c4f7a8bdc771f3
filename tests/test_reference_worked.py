"""The committed references of the worked studies of a question of one's own
(studies/lion_vs_adamw.yaml and studies/lion_claim_a.yaml, each with docs/reference/<name>/):
each is a run of its study as committed, and every look it recorded follows from its own
trials.csv by the code that takes looks, so the README's sentences about them can be checked
against what a rerun would decide; and the README's quote of the quickstart's reference."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from optbench.decision import frames
from optbench.decision.claims import claims_table
from optbench.decision.summary import Options
from optbench.run.rounds import declared, design
from optbench.spec.schema import load_spec

REPO = Path(__file__).resolve().parents[1]
WORKED = ["lion_vs_adamw", "lion_claim_a"]
worked = pytest.mark.parametrize("name", WORKED)


def _study(name: str):
    return load_spec(REPO / "studies" / f"{name}.yaml")


def _reference(name: str) -> Path:
    return REPO / "docs" / "reference" / name


def _summary(name: str) -> dict:
    return json.loads((_reference(name) / "summary.json").read_text())


@worked
def test_the_reference_is_a_run_of_the_committed_study(name):
    spec = _study(name)
    summary, trials = _summary(name), pd.read_csv(_reference(name) / "trials.csv")
    assert summary["study"] == spec.name and not summary["partial"]
    cells = {(c.model, c.optimizer, c.epochs) for c in spec.cells()}
    assert set(map(tuple, trials[frames.CELL_KEYS].itertuples(index=False))) == cells
    for optimizer, box in spec.search.ranges.items():  # each optimizer sampled its own box
        mine = trials[trials["optimizer"] == optimizer]
        assert mine["lr"].between(*box.lr).all() and mine["wd"].between(*box.wd).all()
    # every comparison the study decides was looked at, and only those
    looked = {look["claim"] for look in summary["looks"]}
    assert looked == set(spec.decide.claims)
    # each cell holds the samples of the last look that read it, no more
    for name in looked:
        last = [look for look in summary["looks"] if look["claim"] == name][-1]
        for cell_key in last["cells"]:
            cell = trials[(trials[frames.CELL_KEYS] == cell_key).all(axis=1)]
            assert sorted(cell["sample"]) == list(range(last["n"])), (name, cell_key)


@worked
def test_every_look_of_the_reference_follows_from_its_trials(name):
    # each look recomputed as the driver took it (run/rounds.py): the claims table of each
    # cell's first n samples at the look's boundary; a reference drawn by other code, or a
    # trials.csv edited afterwards, gives other estimates, intervals or outcomes
    spec = _study(name)
    trials = pd.read_csv(_reference(name) / "trials.csv")
    boundaries, looks = design(spec).boundaries(), spec.decide.looks
    recorded = _summary(name)["looks"]
    assert recorded
    for look in recorded:
        assert look["boundary"] == pytest.approx(boundaries[look["k"]])
        prefix = frames.with_errors(trials[trials["sample"] < look["n"]])
        last = look["k"] == len(looks) - 1
        rows = claims_table(
            prefix, Options(), spec.name, look["boundary"], spec.decide.margin, last, declared(spec)
        )
        (row,) = [r for _, r in rows.iterrows() if r["claim"] == look["claim"]]
        assert row["verdict"] == look["outcome"], look
        for key in ("estimate", "low", "high"):
            assert row[key] == pytest.approx(look[key], abs=1e-9), (look["claim"], key)
    # the summary's claim rows say what the last look of each comparison said
    for claim in _summary(name)["claims"]:
        if claim["claim"] in spec.decide.claims:
            last = [look for look in recorded if look["claim"] == claim["claim"]][-1]
            assert claim["verdict"] == last["outcome"] and claim["n_now"] == last["n"]


@worked
def test_the_readme_quotes_each_comparison_as_the_reference_decided_it(name):
    # the README's paragraph on this study quotes the page's sentence of each comparison up to
    # its interval; a redrawn reference that decides otherwise leaves the README behind
    from optbench.report.claims_page import sentence

    spec = _study(name)
    readme = " ".join((REPO / "README.md").read_text().replace("\n>", "\n").split())
    rows = [row for row in _summary(name)["claims"] if row["claim"] in spec.decide.claims]
    assert len(rows) == len(spec.decide.claims)
    for row in rows:
        words = sentence(pd.Series(row))
        assert words[: words.index("]") + 1] in readme, words


def test_the_readme_quotes_the_quickstart_references_sentence_whole():
    # the README's block quote under "Quick start" is what the committed reference's page says;
    # it lost the words on the estimate at an early stop when the page gained them
    from optbench.report.claims_page import verdict_lines

    readme = (REPO / "README.md").read_text()
    start = readme.index("\n> (a) ")
    quote = []
    for line in readme[start + 1 :].splitlines():
        if not line.startswith(">"):
            break
        quote.append(line.removeprefix(">").strip())
    summary = json.loads((REPO / "docs" / "reference" / "quickstart" / "summary.json").read_text())
    assert [" ".join(quote)] == verdict_lines(summary)

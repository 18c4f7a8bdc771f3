"""The committed references of the worked studies of a question of one's own
(studies/lion_vs_adamw.yaml, studies/lion_claim_a.yaml and studies/rank_optimizers.yaml, each
with docs/reference/<name>/):
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
from optbench.spec.claim_kinds import comparison_key
from optbench.spec.schema import load_spec

REPO = Path(__file__).resolve().parents[1]
WORKED = ["lion_vs_adamw", "lion_claim_a", "rank_optimizers"]
worked = pytest.mark.parametrize("name", WORKED)


def _study(name: str):
    return load_spec(REPO / "studies" / f"{name}.yaml")


def _reference(name: str) -> Path:
    return REPO / "docs" / "reference" / name


def _key(row) -> str:
    """A claims row's panel, as a look records it."""
    return comparison_key(row["claim"], row["cells"])


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
    # each cell holds the samples of the last look that read it, no more (a ranking's cell:
    # of the last of its pairs to stop)
    reads: dict[tuple, int] = {}
    for look in summary["looks"]:
        for cell_key in map(tuple, look["cells"]):
            reads[cell_key] = max(reads.get(cell_key, 0), look["n"])
    for cell_key, n in reads.items():
        cell = trials[(trials[frames.CELL_KEYS] == list(cell_key)).all(axis=1)]
        assert sorted(cell["sample"]) == list(range(n)), cell_key


@pytest.mark.parametrize(
    "name",
    # the ranking's 12 panels' looks, each a claims table with its bootstraps: about 40 CPU s
    [n if n != "rank_optimizers" else pytest.param(n, marks=pytest.mark.slow) for n in WORKED],
)
def test_every_look_of_the_reference_follows_from_its_trials(name):
    # each look recomputed as the driver took it (run/rounds.py): the claims table of each
    # cell's first n samples at the look's boundary (its panel's level under Holm's step-down:
    # alpha / (panels - rejected)); a reference drawn by other code, or a trials.csv edited
    # afterwards, gives other estimates, intervals or outcomes
    spec = _study(name)
    trials = pd.read_csv(_reference(name) / "trials.csv")
    study, looks = design(spec), spec.decide.looks
    levels = [study.boundaries(study.level(rejected)) for rejected in range(study.panels)]
    recorded = _summary(name)["looks"]
    assert recorded
    for look in recorded:
        assert any(look["boundary"] == pytest.approx(b[look["k"]]) for b in levels), look
        prefix = frames.with_errors(trials[trials["sample"] < look["n"]])
        last = look["k"] == len(looks) - 1
        rows = claims_table(
            prefix, Options(), spec.name, look["boundary"], spec.decide.margin, last, declared(spec)
        )
        (row,) = [r for _, r in rows.iterrows() if _key(r) == look["panel"]]
        assert row["verdict"] == look["outcome"], look
        for key in ("estimate", "low", "high"):
            assert row[key] == pytest.approx(look[key], abs=1e-9), (look["claim"], key)
    # the summary's claim rows say what the last look of each comparison (or pair) said
    for claim in _summary(name)["claims"]:
        if claim["claim"] in spec.decide.claims:
            last = [look for look in recorded if look["panel"] == _key(claim)][-1]
            assert claim["verdict"] == last["outcome"] and claim["n_now"] == last["n"]


@worked
def test_the_readme_quotes_each_comparison_as_the_reference_decided_it(name):
    # the README's paragraph on this study quotes the page's sentence of each comparison up to
    # its interval, and of each ranking its order line whole; a redrawn reference that decides
    # otherwise leaves the README behind
    from optbench.report.claims_page import ranking_lines, sentence

    spec = _study(name)
    readme = " ".join((REPO / "README.md").read_text().replace("\n>", "\n").split())
    rows = [row for row in _summary(name)["claims"] if row["claim"] in spec.decide.claims]
    assert {row["claim"] for row in rows} == set(spec.decide.claims)
    ranked = {c.name for c in spec.comparisons if c.kind == "rank"}
    for row in rows:
        if row["claim"] not in ranked:
            words = sentence(pd.Series(row))
            assert words[: words.index("]") + 1] in readme, words
    lines = ranking_lines(pd.DataFrame([row for row in rows if row["claim"] in ranked]))
    assert len(lines) == len(ranked)
    for line in lines:
        assert line in readme, line


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

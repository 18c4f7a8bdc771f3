"""Comparisons a study declares (`comparisons:`, spec/comparisons.py): the block and its
refusals, a declared comparison computed as the paper's claim of its kind on the same cells,
and a sequential study that decides only a declared comparison."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from test_decide import _frame  # the store's frame of trials with made-up errors

from optbench.errors import SpecError
from optbench.plan.trials import plan
from optbench.report import frames
from optbench.report.claims import claims_table
from optbench.report.looks import Look
from optbench.run.rounds import Rounds, size_lines
from optbench.spec.claim_kinds import comparison_key
from optbench.spec.schema import parse_spec

P, C, S1, D = "vit_p_w64_16px", "vit_c_w64_16px", "vit_s1_w64_16px", "dhvt_w64_16px"


def _side(model: str, optimizer: str = "adamw", epochs: int = 1) -> dict:
    return {"model": model, "optimizer": optimizer, "epochs": epochs}


def _declaring(tiny_dict, kind="a", sides=(C, P), expect="first", n_samples=8, **more) -> dict:
    """The tiny study of ViT_P and ViT_C, with one declared comparison `mine`."""
    data = copy.deepcopy(tiny_dict)
    data["search"]["n_samples"] = n_samples
    mine = {"name": "mine", "kind": kind, "sides": [_side(m) for m in sides], "expect": expect}
    data["comparisons"] = [mine]
    return data | more


def _errors(spread: dict, noise: float = 0.3, seed: int = 0):
    """A model's error grows with the sample's offset times its spread (a steeper EDF: less)."""
    rng = np.random.default_rng(seed)
    offsets = rng.uniform(0, 1, 64)
    return lambda t: 10 + spread[t.cell.model] * offsets[t.sample] + noise * rng.normal()


# --- the block ------------------------------------------------------------------------------------


def test_a_declared_comparison_is_parsed_and_named_by_decide(tiny_dict):
    data = _declaring(tiny_dict, decide={"claims": ["mine"], "looks": [4, 8]})
    spec = parse_spec(data)
    (mine,) = spec.comparisons
    assert (mine.kind, [s.cell for s in mine.sides]) == ("a", [(C, "adamw", 1), (P, "adamw", 1)])
    assert spec.decide.unit == "samples" and spec.decide.paper_claims == []
    # the paper's claims beside it, in the same unit
    data["decide"]["claims"] = ["a", "mine"]
    assert parse_spec(data).decide.claims == ["a", "mine"]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            {"sides": [_side(C), _side(P, epochs=7)]},
            "comparisons.0.sides.1: vit_p_w64_16px adamw 7ep is no cell of the study",
        ),
        ({"sides": [_side(C), _side("vit_x", "sgd")]}, "comparisons.0.sides.1: vit_x sgd 1ep"),
        ({"sides": [_side(C), _side(C)]}, "comparisons.0.sides: both name vit_c_w64_16px adamw"),
        ({"kind": "edf"}, "comparisons.0.kind: unknown kind 'edf'"),
        ({"kind": "A"}, "did you mean a?"),
        ({"kind": "b"}, "kind 'b' reads more than two cells; a comparison of two sides is one of"),
        ({"kind": "d"}, "comparisons.0.kind: 'd' compares seeds and needs at least 3; the study"),
        ({"name": "a"}, "comparisons.0.name: 'a' names the paper's claim (a)"),
        ({"name": "1st"}, "comparisons.0.name: String should match pattern"),
        ({"expect": "up"}, "comparisons.0.expect: Input should be 'first' or 'second'"),
        ({"side": []}, "comparisons.0.side: unknown key"),
        # a best-error comparison's k: its own kind's only, and no more than the samples
        (
            {"k": 3},
            "comparisons.0.k: only kind 'best-error' (or a ranking by it) draws k samples; kind "
            "'a' takes no k",
        ),
        (
            {"kind": "best-error", "k": 9},
            "comparisons.0.k: 9 samples is more than the study's 8 (lr, wd) samples per cell",
        ),
        ({"kind": "best-error", "k": 0}, "comparisons.0.k: Input should be greater than or equal"),
        ({"name": "best-error"}, "comparisons.0.name: 'best-error' names a kind; give the"),
        # a length-stability side: a short and a longer schedule of one model and optimizer
        (
            {"kind": "length-stability"},
            "comparisons.0.sides.0.epochs: kind 'length-stability' compares a short and a long "
            "schedule of each side: give [short, long], not 1",
        ),
        (
            {"kind": "length-stability", "sides": [_side(C, epochs=[1]), _side(P, epochs=[1])]},
            "comparisons.0.sides.0.epochs: kind 'length-stability' compares a short and a long",
        ),
        (
            {"kind": "length-stability", "sides": [_side(C, epochs=[1, 2]), _side(P)]},
            "comparisons.0.sides.1.epochs: kind 'length-stability' compares a short and a long",
        ),
        (
            {"kind": "length-stability", "sides": [_side(C, epochs=[2, 1]), _side(P)]},
            "comparisons.0.sides.0.epochs: [2, 1]: the short schedule is shorter than the long",
        ),
        (
            {
                "kind": "length-stability",
                "sides": [_side(C, epochs=[1, 7]), _side(P, epochs=[1, 7])],
            },
            "comparisons.0.sides.0: vit_c_w64_16px adamw 7ep is no cell of the study",
        ),
        (
            {"sides": [_side(C, epochs=[1, 2]), _side(P)]},
            "comparisons.0.sides.0.epochs: kind 'a' compares one cell per side: give one epochs",
        ),
    ],
)
def test_a_bad_comparison_is_one_line_naming_the_field(tiny_dict, change, needle):
    data = _declaring(tiny_dict)
    data["comparisons"][0] |= change
    with pytest.raises(SpecError) as err:
        parse_spec(data, "study.yaml")
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_duplicate_name_an_unknown_claim_and_a_grid_without_samples_are_refused(tiny_dict):
    data = _declaring(tiny_dict)
    data["comparisons"].append(copy.deepcopy(data["comparisons"][0]))
    with pytest.raises(SpecError, match=r"comparisons.1.name: 'mine' is declared twice"):
        parse_spec(data, "study.yaml")
    data = _declaring(tiny_dict, decide={"claims": ["mien"], "looks": [4, 8]})
    with pytest.raises(SpecError, match=r"decide.claims: 'mien' is neither .* did you mean mine"):
        parse_spec(data, "study.yaml")
    # an EDF over (lr, wd) samples needs at least 4 of them
    with pytest.raises(SpecError, match=r"comparisons.0.kind: 'a' compares samples and needs at"):
        parse_spec(_declaring(tiny_dict, n_samples=3), "study.yaml")
    # a declared comparison in seeds and the paper's (a) in samples: one unit per study
    data = _declaring(tiny_dict, "d", seeds=[0, 1, 2], decide={"claims": ["a", "mine"]})
    data["decide"]["looks"] = [4, 8]
    with pytest.raises(SpecError, match=r"decide one kind per study"):
        parse_spec(data, "study.yaml")
    # a kind of no paper's claim is decided only as a comparison the study declares
    data = _declaring(tiny_dict, "best-error", decide={"claims": ["best-error"], "looks": [4, 8]})
    with pytest.raises(SpecError, match=r"decide.claims: 'best-error' is neither a claim of the"):
        parse_spec(data, "study.yaml")


def _tree(folder: Path) -> dict:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} if folder.exists() else {}


@pytest.mark.parametrize("command", [["--executor", "debug"], ["--dry-run"]])
@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            {"sides": [_side(C), _side(P, epochs=7)]},
            "comparisons.0.sides.1: vit_p_w64_16px adamw 7ep is no cell",
        ),
        (
            {"kind": "length-stability", "sides": [_side(C, epochs=[1, 2]), _side(P, epochs=2)]},
            "comparisons.0.sides.1.epochs: kind 'length-stability' compares a short and a long",
        ),
        ({"kind": "best-error", "k": 9}, "comparisons.0.k: 9 samples is more than the study's 8"),
    ],
)
def test_the_cli_refuses_a_bad_comparison_in_one_line_before_any_write(
    tmp_path, tiny_dict, cli, command, change, needle
):
    data = _declaring(tiny_dict, epochs=[1, 2], seeds=[0, 1, 2])
    data["comparisons"][0] |= change
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(data))
    code, out, err = cli("run", "study.yaml", *command)
    assert code == 2 and len(err.strip().splitlines()) == 1, (out, err)
    assert needle in err
    assert _tree(Path(data["output"])) == {}


# --- the statistic: the paper's claim of its kind on the same cells -----------------------------


def _results(spec, error_of):
    return frames.with_errors(_frame(plan(spec), error_of), "final_error")


def test_a_declared_edf_comparison_of_vit_c_and_vit_p_is_claim_a(tiny_dict):
    spec = parse_spec(_declaring(tiny_dict, "a", (C, P), "first"))
    table = claims_table(_results(spec, _errors({P: 12.0, C: 4.0})), comparisons=spec.comparisons)
    paper, mine = (table[table["claim"] == name].iloc[0] for name in ("a", "mine"))
    columns = ["estimate", "low", "high", "se", "verdict", "cells", "design", "unit"]
    assert paper[columns].tolist() == mine[columns].tolist()
    assert paper["verdict"] == "holds" and (paper["kind"], mine["kind"]) == ("a", "a")
    assert mine["paper"] == (
        "mine: vit_c_w64_16px adamw 1ep vs vit_p_w64_16px adamw 1ep, EDF area to 10 points"
    )
    # the same sides expecting the other to do better: the same cells read the other way round
    spec = parse_spec(_declaring(tiny_dict, "a", (P, C), "first"))
    table = claims_table(_results(spec, _errors({P: 12.0, C: 4.0})), comparisons=spec.comparisons)
    paper, mine = (table[table["claim"] == name].iloc[0] for name in ("a", "mine"))
    assert mine["estimate"] == pytest.approx(-paper["estimate"]) and mine["verdict"] == "opposite"
    # its statistic names its own sides, the expected one first (not the paper's C and P)
    assert mine["statistic"] == (
        "auc_10(vit_p_w64_16px adamw 1ep) - auc_10(vit_c_w64_16px adamw 1ep) (EDF area, 0-1)"
    )
    assert paper["statistic"] == "auc_10(C) - auc_10(P) (EDF area, 0-1)"
    # the page's heading says whose claims it shows
    from optbench.report import claims_page
    from optbench.report.summary import Options

    titles = {
        rows: claims_page.sections(table[table["claim"].isin(rows)], Options())[0].title
        for rows in (("a",), ("mine",), ("a", "mine"))
    }
    assert titles == {
        ("a",): "The paper's claims",
        ("mine",): "Your comparisons",
        ("a", "mine"): "The paper's claims and your comparisons",
    }


def test_a_declared_seed_comparison_of_two_stems_is_claim_d_on_them(tiny_dict):
    data = _declaring(tiny_dict, "d", (S1, P), "first", n_samples=2, seeds=[0, 1, 2, 3])
    data["models"] = [S1, P]
    spec = parse_spec(data)
    rng = np.random.default_rng(1)
    base = {S1: 20.0, P: 24.0}
    table = claims_table(
        _results(spec, lambda t: base[t.cell.model] + rng.normal(0, 0.5)),
        comparisons=spec.comparisons,
    )
    paper, mine = (table[table["claim"] == name].iloc[0] for name in ("d", "mine"))
    columns = ["estimate", "low", "high", "se", "verdict", "cells", "n_now"]
    assert paper[columns].tolist() == mine[columns].tolist() and mine["verdict"] == "holds"
    assert (
        mine["statistic"] == "E(vit_p_w64_16px adamw 1ep) - E(vit_s1_w64_16px adamw 1ep) (points)"
    )


# --- kinds of no paper's claim: expected best error, stability across epochs ------------------


def test_a_comparison_is_written_back_as_declared_k_only_where_drawn(tiny_dict):
    # spec.yaml and the page's YAML dump the spec: a kind-a comparison has no k to show (a
    # "k: null" there reads as a setting the user left out), a best-error one spells its k out
    import json

    edf = parse_spec(_declaring(tiny_dict)).model_dump(mode="json")["comparisons"][0]
    assert "k" not in edf and edf["kind"] == "a"
    best = parse_spec(_best_error(tiny_dict, k=None)).model_dump(mode="json")["comparisons"][0]
    assert best["k"] >= 1  # the default, spelled out
    dumped = json.loads(parse_spec(_declaring(tiny_dict)).model_dump_json())
    assert "k" not in dumped["comparisons"][0]


def _by_enumeration(errors, k: int) -> float:
    """The expected best of k draws with replacement, as the mean over every ordered draw."""
    return float(np.mean([min(draw) for draw in itertools.product(errors, repeat=k)]))


def _best_error(tiny_dict, expect="first", k=3, **more) -> dict:
    data = _declaring(tiny_dict, "best-error", (C, P), expect, seeds=[0, 1], **more)
    data["comparisons"][0]["k"] = k
    return data


@pytest.mark.parametrize(("expect", "verdict"), [("first", "holds"), ("second", "opposite")])
def test_a_best_error_comparison_is_the_difference_of_expected_bests_of_k(
    tiny_dict, expect, verdict
):
    spec = parse_spec(_best_error(tiny_dict, expect))
    # ViT_C's errors 3 points below ViT_P's at every (lr, wd) sample
    error_of = _errors({P: 4.0, C: 4.0})
    results = _results(spec, lambda t: error_of(t) + (3.0 if t.cell.model == P else 0.0))
    (mine,) = claims_table(results, comparisons=spec.comparisons).query("claim == 'mine'").iloc
    # a sample's error is its seeds' mean; best_k over every ordered draw of k samples
    sample = results.groupby(["model", "sample"])["error"].mean()
    better, other = (C, P) if expect == "first" else (P, C)
    expected = _by_enumeration(sample[other], 3) - _by_enumeration(sample[better], 3)
    assert mine["estimate"] == pytest.approx(expected, rel=1e-9)
    assert mine["low"] < mine["estimate"] < mine["high"] and mine["verdict"] == verdict
    assert (mine["kind"], mine["unit"], mine["design"], mine["n_now"]) == (
        "best-error",
        "samples",
        "paired",
        8,
    )
    assert mine["statistic"].startswith(f"best_3({other} adamw 1ep) - best_3({better} adamw 1ep)")
    assert (
        f"mine: {better} adamw 1ep vs {other} adamw 1ep, expected best error of 3"
        in (mine["paper"])
    )


def _best_of_3_shown(tiny_dict) -> tuple[pd.DataFrame, dict]:
    """The claims table of a study declaring "mine", ViT_C's best of 3 samples against ViT_P's
    with ViT_C 3 points better at every sample, and its summary.json rows as JSON reads them."""
    import json

    from optbench.report.claims_page import records

    spec = parse_spec(_best_error(tiny_dict, k=3))
    error_of = _errors({P: 4.0, C: 4.0})
    results = _results(spec, lambda t: error_of(t) + (3.0 if t.cell.model == P else 0.0))
    table = claims_table(results, comparisons=spec.comparisons)
    return table, json.loads(json.dumps({"claims": records(table)}))


def test_a_best_error_comparisons_sentence_names_its_k(tiny_dict):
    # the page's sentence said "expected best error of k (lr, wd) samples": its row kept no k
    from optbench.report.claims_page import sentence, verdict_lines

    table, summary = _best_of_3_shown(tiny_dict)
    assert set(table["claim"]) == {"a", "mine"}  # the paper's (a) on the same cells: no k
    (on_page,) = [sentence(r) for r in table.itertuples() if r.claim == "mine"]
    (on_terminal,) = [line for line in verdict_lines(summary) if line.startswith("mine:")]
    for words in (on_page, on_terminal):
        assert "(expected best error of 3 (lr, wd) samples, points: +" in words, words
        assert " of k " not in words, words
    # summary.json keeps the k as a count, null where the kind draws none
    assert {row["claim"]: row["best_of"] for row in summary["claims"]} == {"a": None, "mine": 3}


def test_a_declared_comparison_is_on_every_page_and_the_terminal_says_what_the_page_shows(
    tiny_dict,
):
    # `optbench report --edf` left a declared best-error comparison (its figure: tunability)
    # off the page while the terminal printed it
    from optbench.report.claims_page import sections, verdict_lines
    from optbench.report.summary import Options

    table, summary = _best_of_3_shown(tiny_dict)
    for drawn, shown in ((None, {"a", "mine"}), ({"edf"}, {"a", "mine"}), ({"peak"}, {"mine"})):
        (section,) = sections(table, Options(n_boot=50), drawn)
        lead = section.lead
        assert {line.split()[0].rstrip(":").strip("()") for line in lead} == shown, drawn
        assert verdict_lines(summary, drawn) == lead, drawn


def test_a_claim_a_sequential_study_does_not_decide_says_its_interval_is_outside_the_rule(
    tiny_dict,
):
    # the study decides "mine" by its looks; (a) on the same cells kept a fixed-size interval at
    # the size mine's stop chose, and its sentence read like a decision of the study
    from optbench.report.claims_page import sentence
    from optbench.report.looks import NOT_DECIDED_HERE, with_looks

    table, _ = _best_of_3_shown(tiny_dict)
    (mine,) = table.query("claim == 'mine'").to_dict("records")
    look = {
        "panel": "mine", "claim": "mine", "kind": "best-error", "k": 0, "n": 8, "n_max": 8,
        "unit": "samples", "estimate": 3.0, "se": 0.5, "boundary": 2.5, "low": 1.75,
        "high": 4.25, "outcome": "holds", "cells": mine["cells"], "note": None,
    }  # fmt: skip
    shown = {row.claim: row for _, row in with_looks(table, [look]).iterrows()}
    assert shown["mine"].note is None and shown["a"].note == NOT_DECIDED_HERE
    words = {claim: sentence(row) for claim, row in shown.items()}
    assert "not decided by this study" in words["a"] and "holds with 8 samples" in words["a"]
    assert "not decided by this study" not in words["mine"]
    # a study whose looks decide none of these rows (another study's records) adds no note
    other = look | {"cells": [[C, "sgd", 1], [P, "sgd", 1]]}
    assert with_looks(table, [other])["note"].isna().all()


def test_a_best_error_comparison_of_equal_sides_does_not_hold(tiny_dict):
    spec = parse_spec(_best_error(tiny_dict, k=2))
    results = _results(spec, _errors({P: 4.0, C: 4.0}))  # the same errors but for the noise
    (mine,) = claims_table(results, comparisons=spec.comparisons).query("claim == 'mine'").iloc
    assert mine["verdict"] != "holds" and abs(mine["estimate"]) < 0.5


def _length(tiny_dict, expect="first", loss=None, seeds=(0, 1, 2, 3)) -> tuple:
    """A length-stability comparison of ViT_C and ViT_P over 1 and 2 epochs, and its results:
    each model loses `loss` points at the short schedule, plus noise."""
    data = _declaring(tiny_dict, "length-stability", (C, P), expect, n_samples=1)
    data |= {"epochs": [1, 2], "seeds": list(seeds)}
    data["comparisons"][0]["sides"] = [_side(C, epochs=[1, 2]), _side(P, epochs=[1, 2])]
    spec = parse_spec(data)
    rng = np.random.default_rng(3)
    loss = loss or {C: 2.0, P: 10.0}

    def error_of(t):
        return 20 + loss.get(t.cell.model, 0.0) * (t.cell.epochs == 1) + rng.normal(0, 0.5)

    return spec, error_of


@pytest.mark.parametrize(("expect", "verdict"), [("first", "holds"), ("second", "opposite")])
def test_a_length_comparison_is_claim_bs_contrast_on_its_own_sides(tiny_dict, expect, verdict):
    spec, error_of = _length(tiny_dict, expect)
    results = _results(spec, error_of)
    table = claims_table(results, comparisons=spec.comparisons)
    (mine,) = table.query("claim == 'mine'").iloc
    # per seed: what the other side loses by shortening minus what the expected side loses
    e = results.pivot_table(index="seed", columns=["model", "epochs"], values="error")
    better, other = (C, P) if expect == "first" else (P, C)
    contrast = (e[(other, 1)] - e[(other, 2)]) - (e[(better, 1)] - e[(better, 2)])
    assert mine["estimate"] == pytest.approx(contrast.mean(), rel=1e-9)
    assert mine["low"] < mine["estimate"] < mine["high"] and mine["verdict"] == verdict
    assert (mine["kind"], mine["unit"], mine["n_now"], mine["epochs"]) == (
        "length-stability",
        "seeds",
        4,
        "1->2",
    )
    assert mine["paper"] == f"mine: {better} adamw 1->2ep vs {other} adamw 1->2ep, error points"
    assert mine["statistic"] == (
        f"[E(short) - E(long)] of {other} adamw 1->2ep - [E(short) - E(long)] of {better} "
        "adamw 1->2ep (points)"
    )


def test_a_length_comparison_of_sides_losing_alike_does_not_hold(tiny_dict):
    spec, error_of = _length(tiny_dict, loss={C: 5.0, P: 5.0})
    (mine,) = (
        claims_table(_results(spec, error_of), comparisons=spec.comparisons)
        .query("claim == 'mine'")
        .iloc
    )
    assert mine["verdict"] != "holds"


def test_a_sequential_best_error_comparison_decides_and_its_look_keeps_k(tiny_dict):
    data = _best_error(tiny_dict, n_samples=8, decide={"claims": ["mine"], "looks": [6, 8]})
    spec = parse_spec(data)
    rounds, trials = Rounds(spec, []), plan(spec)
    error_of = _errors({P: 4.0, C: 4.0})
    (look,) = rounds.look(
        _frame(rounds.asked(trials), lambda t: error_of(t) + 5 * (t.cell.model == P))
    )
    assert (look.claim, look.kind, look.best_of, look.unit, look.outcome) == (
        "mine",
        "best-error",
        3,
        "samples",
        "holds",
    )
    assert Look.from_record(look.record()) == look
    from optbench.report.figures import looks_figure

    (ax,) = [ax for ax in looks_figure([look.record()]).axes if ax.get_visible()]
    assert " ".join(ax.get_ylabel().split()).startswith(f"best_3({P} adamw 1ep) - best_3({C}")
    # the dry run names its kind, sides and statistic
    hours = {(c.model, c.optimizer, c.epochs): 0.5 for c in spec.cells()}
    assert f"decide: (mine) best-error, {C} adamw 1ep vs {P} adamw 1ep: best_3(" in "\n".join(
        size_lines(spec, trials, hours, [])
    )


def test_a_sequential_length_comparison_grows_its_four_cells_only(tiny_dict):
    spec, error_of = _length(tiny_dict, loss={C: 5.0, P: 5.0}, seeds=(0, 1, 2, 3, 4))
    data = spec.model_dump(mode="json") | {"decide": {"claims": ["mine"], "looks": [3, 5]}}
    data["models"] = [P, C, D]  # a model no comparison reads
    spec = parse_spec(data)
    rounds, trials = Rounds(spec, []), plan(spec)
    (look,) = rounds.look(_frame(rounds.asked(trials), error_of))
    assert look.outcome == "continue" and look.unit == "seeds"
    assert look.words == f"{C} adamw 1->2ep vs {P} adamw 1->2ep"
    assert look.panel == comparison_key("mine", look.cells) and len(look.cells) == 4
    rounds.add([look])
    targets = rounds.targets()
    assert {cell for cell, n in targets.items() if n == 5} == set(look.cells)


# --- a sequential study of a declared comparison only ----------------------------------------


def _only_declared(tiny_dict, looks=(4, 6, 8), **decide) -> dict:
    data = _declaring(tiny_dict, "a", (C, P), "first", n_samples=looks[-1])
    data["models"] = [P, C, D]  # a model no comparison reads
    data["decide"] = {"claims": ["mine"], "looks": list(looks), **decide}
    return data


def test_a_study_deciding_only_a_declared_comparison_decides_and_stops(tiny_dict):
    # a first look at 6: at 4 samples Student's t (3 degrees of freedom) is too wide for it
    spec = parse_spec(_only_declared(tiny_dict, looks=(6, 8, 10)))
    rounds, trials = Rounds(spec, []), plan(spec)
    assert rounds.design.panels == 1  # the paper's (a) on the same cells is not decided
    error_of = _errors({P: 40.0, C: 1.0, D: 5.0})
    (look,) = rounds.look(_frame(rounds.asked(trials), error_of))
    assert (look.claim, look.kind, look.outcome, look.k) == ("mine", "a", "holds", 0)
    assert look.words == "vit_c_w64_16px adamw 1ep vs vit_p_w64_16px adamw 1ep"
    rounds.add([look])
    assert rounds.finished and len(rounds.asked(trials)) == 3 * 6  # stopped at the first look
    # its record reads back with its kind; a record of before kinds reads its claim as its kind
    assert Look.from_record(look.record()) == look
    old = {k: v for k, v in look.record().items() if k != "kind"} | {"claim": "a"}
    assert Look.from_record(old).kind_of == "a"
    # the looks figure reads its estimate as the comparison's own, not the paper's C - P
    from optbench.report.figures import looks_figure

    (ax,) = [ax for ax in looks_figure([look.record()]).axes if ax.get_visible()]
    label = " ".join(ax.get_ylabel().split())
    assert label.startswith("auc_10(vit_c_w64_16px adamw 1ep) - auc_10(vit_p_w64_16px"), label


def test_a_look_of_a_declared_name_under_another_kind_is_not_this_studys(tiny_dict):
    import dataclasses

    from optbench.report.looks import inconsistent

    spec = parse_spec(_only_declared(tiny_dict))
    rounds, trials = Rounds(spec, []), plan(spec)
    (look,) = rounds.look(_frame(rounds.asked(trials), _errors({P: 5.0, C: 5.0, D: 5.0})))
    assert list(inconsistent(spec.decide, [look])) == []
    (why,) = inconsistent(spec.decide, [dataclasses.replace(look, kind="d")])
    assert "claim (mine) in samples is not one this study decides" in why


def test_an_open_declared_comparison_grows_only_its_cells(tiny_dict):
    spec = parse_spec(_only_declared(tiny_dict))
    rounds, trials = Rounds(spec, []), plan(spec)
    error_of = _errors({P: 5.0, C: 5.0, D: 5.0}, noise=3.0)
    (look,) = rounds.look(_frame(rounds.asked(trials), error_of))
    assert look.outcome == "continue"
    rounds.add([look])
    targets = rounds.targets()
    assert targets[(P, "adamw", 1)] == targets[(C, "adamw", 1)] == 6
    assert targets[(D, "adamw", 1)] == 4


def test_the_alpha_split_counts_declared_comparisons_and_the_dry_run_says_so(tiny_dict):
    data = _only_declared(tiny_dict)
    data["decide"]["claims"] = ["a", "mine"]
    spec = parse_spec(data)
    assert Rounds(spec, []).design.panels == 2
    hours = {(c.model, c.optimizer, c.epochs): 0.5 for c in spec.cells()}
    design = size_lines(spec, plan(spec), hours, [])[0]
    assert "decide: (a), (mine) looked at" in design
    assert "0.025 for each of its 2 panels, 1 of them declared" in design


def test_the_dry_run_of_a_declared_seed_comparison_names_it_not_the_papers_claims(tiny_dict):
    # one seed per cell decides no seed claim: the line names the claims this study decides
    data = _declaring(tiny_dict, "d", (C, P), "first", n_samples=1, seeds=[0, 1, 2, 3])
    data["decide"] = {"claims": ["mine"], "looks": [3, 4]}
    spec = parse_spec(data)
    hours = {(c.model, c.optimizer, c.epochs): 0.5 for c in spec.cells()}
    *_, fixed = size_lines(spec, plan(spec), hours, [])
    assert "; one seed per cell, which decides none of (mine): 2, 1 device-hours" in fixed, fixed


@pytest.mark.slow  # trains 12 one-epoch trials and renders a report
def test_a_trained_study_of_a_declared_comparison_decides_stops_and_reports_it(
    tmp_path, tiny_dict, cli
):
    from optbench.store.database import Store

    data = _declaring(tiny_dict, "a", (C, P), "first", n_samples=6)
    data["decide"] = {"claims": ["mine"], "looks": [4, 6], "alpha": 1e-6}  # two rounds at most
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(data))
    code, out, err = cli("run", "study.yaml", "--executor", "debug")
    assert code == 0, err
    said = " ".join(out.split())
    assert "look 1 (4 of at most 6 samples): (mine) vit_c_w64_16px adamw 1ep vs" in said, said
    spec = parse_spec(data)
    looks = Store(spec, create=False).looks()
    assert {(r["claim"], r["kind"]) for r in looks} == {("mine", "a")}
    assert looks[-1]["outcome"] != "continue"  # decided, or undecided at the last look: done
    code, out, _ = cli("run", "study.yaml", "--executor", "debug")
    assert code == 0 and "nothing to run" in out
    code, _, err = cli("report", "study.yaml", "--out", str(tmp_path / "reports"))
    assert code == 0, err
    summary = yaml.safe_load((tmp_path / "reports" / "tiny" / "summary.json").read_text())
    (row,) = [r for r in summary["claims"] if r["claim"] == "mine"]
    assert row["kind"] == "a" and row["looks"] == len(looks) and row["panels"] == 1
    page = (tmp_path / "reports" / "tiny" / "index.html").read_text()
    assert "mine: vit_c_w64_16px adamw 1ep vs vit_p_w64_16px adamw 1ep, EDF area to 10" in page
    # the paper's (a) on the same cells beside the declared comparison: the heading says both
    assert "<h2 id='claims'>The paper&#x27;s claims and your comparisons</h2>" in page


@pytest.mark.slow  # trains 10 one-epoch trials and renders a report
def test_a_trained_study_decides_a_best_error_comparison_and_reports_it(tmp_path, tiny_dict, cli):
    from optbench.store.database import Store

    data = _best_error(tiny_dict, n_samples=5, decide={"claims": ["mine"], "looks": [4, 5]})
    # no trained nulls calibrate the tiny design: decided as accepted (spec/calibrations.py)
    data["comparisons"][0]["calibration"] = "none"
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(data))
    code, out, err = cli("run", "study.yaml", "--dry-run")
    assert code == 0 and f"decide: (mine) best-error, {C} adamw 1ep vs {P} adamw 1ep" in out, err
    code, out, err = cli("run", "study.yaml", "--executor", "debug")
    assert code == 0, err
    looks = Store(parse_spec(data), create=False).looks()
    assert {(r["claim"], r["kind"], r["best_of"]) for r in looks} == {("mine", "best-error", 3)}
    code, _, err = cli("report", "study.yaml", "--out", str(tmp_path / "reports"))
    assert code == 0, err
    summary = yaml.safe_load((tmp_path / "reports" / "tiny" / "summary.json").read_text())
    (row,) = [r for r in summary["claims"] if r["claim"] == "mine"]
    assert row["kind"] == "best-error" and row["looks"] == len(looks)
    assert row["statistic"].startswith(f"best_3({P} adamw 1ep) - best_3({C} adamw 1ep)")
    page = (tmp_path / "reports" / "tiny" / "index.html").read_text()
    assert f"mine: {C} adamw 1ep vs {P} adamw 1ep, expected best error of 3 (lr, wd)" in page
    assert "not calibrated for this design: no trained nulls measure its rule" in page


def test_an_undecided_declared_step_still_says_how_far_a_decision_is():
    # a declared "d" comparison of two cells is one step: its last look's advice estimates a
    # size, as for (a); a stem chain of three cells (claim d) does not (test_decide)
    from optbench.report.looks import with_looks

    cells = [["vit_s2_w64_16px", "adamw", 8], ["vit_p_w64_16px", "adamw", 8]]
    row = {"claim": "mine", "kind": "d", "cells": cells, "optimizer": "adamw", "epochs": 8}
    look = {
        "panel": "mine", "claim": "mine", "kind": "d", "k": 2, "n": 6, "n_max": 6,
        "unit": "seeds", "estimate": 1.0, "se": 0.8, "boundary": 2.5, "low": -1.0, "high": 3.0,
        "outcome": "undecided", "cells": cells, "note": None,
    }  # fmt: skip
    (shown,) = with_looks(pd.DataFrame([row]), [look]).to_dict("records")
    assert "undecided at the maximum (6 seeds)" in shown["advice"]
    assert "about" in shown["advice"] or "no size would decide it" in shown["advice"]

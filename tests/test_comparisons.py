"""Comparisons a study declares (`comparisons:`, spec/comparisons.py): the block and its
refusals, a declared comparison computed as the paper's claim of its kind on the same cells,
and a sequential study that decides only a declared comparison."""

from __future__ import annotations

import copy
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


def _tree(folder: Path) -> dict:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} if folder.exists() else {}


@pytest.mark.parametrize("command", [["--executor", "debug"], ["--dry-run"]])
def test_the_cli_refuses_a_bad_comparison_in_one_line_before_any_write(
    tmp_path, tiny_dict, cli, command
):
    data = _declaring(tiny_dict)
    data["comparisons"][0]["sides"][1]["epochs"] = 7
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(data))
    code, out, err = cli("run", "study.yaml", *command)
    assert code == 2 and len(err.strip().splitlines()) == 1, (out, err)
    assert "comparisons.0.sides.1: vit_p_w64_16px adamw 7ep is no cell" in err
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

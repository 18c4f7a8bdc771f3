"""A best-error comparison is decided only where trained nulls of its design calibrate its rule
(spec/calibrations.py; issue 67 item 7): `run` and `--dry-run` refuse another in one line unless
it says `calibration: none`, report and status never refuse, and the page, claims.md and
`optbench status` print the measured null rate (or that none was measured) beside it."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from test_comparisons import _best_error, _errors, _results
from test_decide import _frame

from optbench.decision.summary import Options
from optbench.errors import SpecError
from optbench.plan.trials import plan
from optbench.report import claims_page
from optbench.report.sections import claims_with_looks
from optbench.run.preflight import check_spec
from optbench.run.rounds import Rounds, decision_lines, fingerprint, size_lines
from optbench.spec.calibrations import CALIBRATIONS
from optbench.spec.schema import parse_spec

ROOT = Path(__file__).resolve().parents[1]
P, C, D = "vit_p_w64_16px", "vit_c_w64_16px", "dhvt_w64_16px"


def _quickstart_best_error(tmp_path, **search) -> dict:
    """studies/quickstart.yaml deciding a best-error comparison of ViT_C and ViT_P alone, as
    bench/RESULTS.md's replicates-best-error replayed it (k unset, no margin)."""
    data = yaml.safe_load((ROOT / "studies" / "quickstart.yaml").read_text())
    data["search"] |= search
    data["models"] = [P, C]  # DHVT reads in no comparison: the sides' trainings are the same
    data["output"] = str(tmp_path / "results")
    sides = [{"model": m, "optimizer": "adamw", "epochs": 20} for m in (C, P)]
    data["comparisons"] = [
        {"name": "mine", "kind": "best-error", "sides": sides, "expect": "first"}
    ]
    data["decide"] = {"claims": ["mine"], "looks": [6, 8, 10, 12, 16, 24]}
    return data


def _planned(data: dict) -> None:
    """What `run --dry-run` checks before it plans (no data on this machine needed)."""
    check_spec(parse_spec(data), data=False, sized=True, import_code=True)


def _bench_line() -> dict:
    text = (ROOT / "bench" / "RESULTS.md").read_text()
    (line,) = re.findall(r'^\{"bench": "replicates-best-error".*\}$', text, re.M)
    return json.loads(line)


# --- what the table holds ----------------------------------------------------------------------


def test_each_calibration_is_the_measurement_it_cites():
    # every entry's rate and error are the bench line's, for its nulls, spending and size
    measured = _bench_line()
    rows = {
        (key, row["design"]["spending"]): row
        for key in ("best_error_shared_null_seed_per_sample", "best_error_shared_null_swapped")
        for row in measured[key]
    }
    assert len(CALIBRATIONS) == len(rows)
    for calibration in CALIBRATIONS:
        design = calibration.design
        nulls = "seed_per_sample" if "seed per sample" in calibration.what else "swapped"
        row = rows[(f"best_error_shared_null_{nulls}", design.spending)]
        assert list(design.looks) == row["design"]["looks"]
        assert (design.alpha, design.margin) == (row["design"]["alpha"], row["design"]["margin"])
        assert (calibration.nulls, calibration.wrong, calibration.mc_se) == (
            row["replicates"],
            row["wrong"],
            row["wrong_mc_se"],
        )


# --- refused where no calibration covers it ---------------------------------------------------


@pytest.mark.parametrize("seed_per_sample", [True, False])
@pytest.mark.parametrize("spending", ["pocock", "obrien-fleming"])
def test_the_quickstarts_design_is_calibrated(tmp_path, seed_per_sample, spending):
    data = _quickstart_best_error(tmp_path, seed_per_sample=seed_per_sample, seed=7)
    data["decide"]["spending"] = spending
    _planned(data)  # another search seed draws other pairs from the same box: the same design


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(epochs=10),  # another training
        lambda d: d["recipe"].update(label_smoothing=0.0),
        lambda d: d["search"]["ranges"]["adamw"].update(lr=[1e-4, 1e-2]),
        lambda d: d.update(seeds=[0, 1]),
        lambda d: d["comparisons"][0].update(k=8),
        lambda d: d["decide"].update(looks=[8, 12, 16, 24]),
        lambda d: d["decide"].update(alpha=0.1),
        lambda d: d["decide"].update(margin=0.1),
        lambda d: d.pop("decide"),  # decided once, at 24 samples
    ],
)
def test_a_best_error_comparison_of_another_design_is_refused_in_one_line(tmp_path, change):
    data = _quickstart_best_error(tmp_path)
    change(data)
    for side in data["comparisons"][0]["sides"]:
        side["epochs"] = data["epochs"]
    with pytest.raises(SpecError) as refused:
        _planned(data)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("<spec>: comparisons.0: best-error comparison 'mine' is not ")
    assert "bench/replicates.py, analyse-best-error" in message
    assert "set comparisons.0.calibration: none" in message
    # accepted explicitly, it is planned
    data["comparisons"][0]["calibration"] = "none"
    _planned(data)


def test_a_ranking_by_best_error_is_refused_and_other_kinds_take_no_calibration(tiny_dict):
    cells = [{"model": m, "optimizer": "adamw", "epochs": 1} for m in (P, C, D)]
    data = copy.deepcopy(tiny_dict) | {"models": [P, C, D]}
    data["search"]["n_samples"] = 8
    data["comparisons"] = [{"name": "order", "kind": "rank", "by": "best-error", "cells": cells}]
    with pytest.raises(SpecError, match=r"comparisons.0: best-error comparison 'order' is not"):
        _planned(data)
    data["comparisons"][0]["by"] = "a"
    data["comparisons"][0]["calibration"] = "none"
    with pytest.raises(SpecError, match=r"comparisons.0.calibration: only kind 'best-error'"):
        parse_spec(data)


def test_accepting_an_uncalibrated_design_keeps_its_cells_and_looks(tiny_dict):
    data = _best_error(tiny_dict, n_samples=8, decide={"claims": ["mine"], "looks": [6, 8]})
    spec = parse_spec(data)
    data["comparisons"][0]["calibration"] = "none"
    accepted = parse_spec(data)
    assert fingerprint(accepted) == fingerprint(spec)
    assert [accepted.cell_id(c) for c in accepted.cells()] == [
        spec.cell_id(c) for c in spec.cells()
    ]
    # written down as declared: unset, no key
    assert "calibration" not in spec.model_dump(mode="json")["comparisons"][0]
    assert accepted.model_dump(mode="json")["comparisons"][0]["calibration"] == "none"


@pytest.mark.slow  # the command line's dry run, status and report (imports, plan, page)
def test_run_refuses_writing_nothing_and_status_reads_it(tmp_path, tiny_dict, cli):
    data = _best_error(tiny_dict, n_samples=6, decide={"claims": ["mine"], "looks": [4, 6]})
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(data))
    for args in (["--dry-run"], ["--executor", "debug"]):
        code, out, err = cli("run", "study.yaml", *args)
        said = " ".join(err.split())
        assert code == 2, (out, err)
        assert "study.yaml: comparisons.0: best-error comparison 'mine' is not calibrated" in said
        assert not (tmp_path / "results").exists()
    code, out, err = cli("status", "study.yaml")
    assert code == 0, err


# --- the rate beside the decision -------------------------------------------------------------


def _lead(spec, error_of) -> tuple[str, str]:
    """The page's sentence of "mine" and claims.md's line, through summary.json's rows."""
    table = claims_with_looks(spec, _results(spec, error_of), Options(n_boot=200), None)
    (row,) = [r for r in table.itertuples() if r.claim == "mine"]
    records = [r for r in claims_page.records(table) if r["claim"] == "mine"]
    md = claims_page.markdown(pd.DataFrame(records).assign(study=spec.name))
    return claims_page.sentence(row), md.splitlines()[0]


@pytest.mark.slow  # the claims of 48 samples' trials, bootstrapped: over a second here
def test_the_page_and_claims_md_print_the_null_rate_of_its_design(tmp_path):
    spec = parse_spec(_quickstart_best_error(tmp_path))
    error_of = _errors({P: 4.0, C: 4.0, D: 4.0})
    for line in _lead(spec, lambda t: error_of(t) + 5 * (t.cell.model == P)):
        assert "holds" in line
        assert "its rule decided 400 trained nulls of this design wrongly in 2.2% +- 0.7% " in line
        assert "(bench/RESULTS.md, replicates-best-error; the +- a lower bound" in line


def test_the_page_says_an_accepted_design_is_not_calibrated(tiny_dict):
    data = _best_error(tiny_dict)
    data["comparisons"][0]["calibration"] = "none"
    spec = parse_spec(data)
    for line in _lead(spec, _errors({P: 4.0, C: 4.0, D: 4.0})):
        assert "; not calibrated for this design: no trained nulls measure its rule" in line


def test_status_prints_the_null_rate_beside_the_decision(tmp_path):
    spec = parse_spec(_quickstart_best_error(tmp_path))
    rounds, trials = Rounds(spec, []), plan(spec)
    error_of = _errors({P: 4.0, C: 4.0, D: 4.0})
    looks = rounds.look(
        _frame(rounds.asked(trials), lambda t: error_of(t) + 5 * (t.cell.model == P))
    )
    assert [look.outcome for look in looks] == ["holds"]
    (line,) = decision_lines(Rounds(spec, looks), waiting=None)
    assert line.startswith("(mine) ") and ": holds after 6 of at most 24 samples: " in line
    assert "wrongly in 2.2% +- 0.7% (bench/RESULTS.md, replicates-best-error; " in line
    assert line.endswith("the +- a lower bound, the nulls share trainings)")


def test_the_dry_run_names_the_null_rate_of_its_design(tmp_path):
    spec = parse_spec(_quickstart_best_error(tmp_path, seed_per_sample=False))
    hours = {(c.model, c.optimizer, c.epochs): 0.5 for c in spec.cells()}
    (line,) = [
        x
        for x in size_lines(spec, plan(spec), hours, [])
        if x.startswith("decide: (mine) best-error, ")
    ]
    assert line.endswith(
        "; its rule decided 200 trained nulls of this design wrongly in 5.0% +- 1.5% "
        "(bench/RESULTS.md, replicates-best-error; the +- a lower bound, the nulls share "
        "trainings)"
    )

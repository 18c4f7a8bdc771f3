"""The newcomer's path on a tiny study: `optbench run` (real process pool) then `optbench report`."""

from __future__ import annotations

import csv
import json
import sys

import pytest
import torch
import yaml

from optbench.cli.app import main


def _cli(monkeypatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["optbench", *args])
    try:
        main()
    except SystemExit as exit_:
        return exit_.code or 0
    return 0


@pytest.mark.slow
def test_run_then_report(tmp_path, monkeypatch, tiny_dict):
    tiny_dict["output"] = "results"
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(tiny_dict))
    monkeypatch.chdir(tmp_path)

    assert _cli(monkeypatch, "run", "tiny.yaml") == 0
    assert _cli(monkeypatch, "report", "tiny.yaml", "--edf") == 0

    out = tmp_path / "reports" / "tiny"
    # 2 (lr, wd) samples per cell are too few for an EDF over (lr, wd): the page says so
    assert not (out / "edf.png").exists()
    assert (
        "not drawn: no cell has 4 or more sampled (lr, wd) pairs"
        in (out / "index.html").read_text()
    )
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert len(rows) == 4 and {r["status"] for r in rows} == {"finished"}
    assert {r["model"] for r in rows} == {"vit_p_w64_16px", "vit_c_w64_16px"}
    # what a digest depends on, recorded for `optbench compare` to name
    assert {r["torch"] for r in rows} == {torch.__version__} and {r["threads"] for r in rows} == {
        "1"
    }
    summary = json.loads((out / "summary.json").read_text())
    assert summary["study"] == "tiny"
    cells = {c["model"]: c for c in summary["cells"]}
    for model, cell in cells.items():
        errors = [float(r["final_error"]) for r in rows if r["model"] == model]
        assert cell["n"] == 2 and cell["n_diverged"] == 0
        assert cell["best_error"] == pytest.approx(min(errors))
        # and no EDF quantity: 2 pairs do not describe lr/wd sensitivity
        assert cell["frac_within"] is None and cell["auc_10"] is None

    # Without a study, every study under the results root is reported.
    (out / "summary.json").unlink()
    assert _cli(monkeypatch, "report", "--edf") == 0
    assert (out / "summary.json").is_file()

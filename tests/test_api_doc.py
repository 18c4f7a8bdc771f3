"""docs/api.md's code runs: its Python blocks, in order, in one namespace, on a short run of the
quickstart study (2 samples of 3 epochs per model, a fixed size, instead of 6 to 24 of 20)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import matplotlib.image
import pytest
import yaml

import optbench

REPO = Path(__file__).resolve().parent.parent


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


@pytest.mark.slow
def test_the_api_doc_runs_on_a_short_quickstart(cli, tmp_path, capsys):
    quickstart = yaml.safe_load((REPO / "studies" / "quickstart.yaml").read_text())
    quickstart["search"]["n_samples"], quickstart["epochs"] = 2, 3  # its warmup is 2
    del quickstart["decide"]  # a fixed size: 2 samples are below a sequential study's first look
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "quickstart.yaml").write_text(yaml.safe_dump(quickstart))
    code, _, err = cli("run", "studies/quickstart.yaml", "--executor", "debug")
    assert code == 0, err

    blocks = _python_blocks((REPO / "docs" / "api.md").read_text())
    assert len(blocks) == 3
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/api.md", "exec"), namespace)  # noqa: S102
    out = capsys.readouterr().out

    trials = namespace["trials"]
    assert len(trials) == 6 and set(trials["status"]) == {"finished"}
    assert len(namespace["epochs"]) == 18 and set(namespace["epochs"]["epoch"]) == {1, 2, 3}
    assert [c["n"] for c in namespace["summary"]["cells"]] == [2, 2, 2]
    for name in ("edf.png", "curves.png", "scatter_vits.png"):
        assert matplotlib.image.imread(tmp_path / name).shape[1] > 0
    assert "no length figure: needs at least two schedule lengths" in out
    assert "[(2, 64, 4, 4), (2, 64, 4, 4), (2, 64, 4, 4)] [4, 4, 4]" in out
    shutil.rmtree(tmp_path / "results")


def test_import_optbench_exposes_the_api_lazily():
    assert {"load_trials", "load_summary", "edf_figure", "curves_figure"} <= set(dir(optbench))
    assert optbench.load_trials.__module__ == "optbench.api"
    with pytest.raises(AttributeError):
        optbench.no_such_thing  # noqa: B018


def _documented_columns() -> list[str]:
    """The column names of docs/api.md's table of load_trials' columns, in order."""
    text = (REPO / "docs" / "api.md").read_text()
    table = text.split("The columns of\n`load_trials`", 1)[1].split("\n\n", 2)[1]
    rows = [line.split("|")[1] for line in table.splitlines()[2:]]
    return [name for row in rows for name in re.findall(r"`(\w+)`", row)]


def test_the_api_doc_names_every_column_load_trials_and_trials_csv_have(tmp_path):
    from optbench.api import load_study
    from optbench.plan.trials import plan
    from optbench.report.trials_file import write_trials
    from optbench.store.database import Store

    study = str(REPO / "studies" / "quickstart.yaml")
    overrides = [f"output={tmp_path / 'results'}"]  # never run: every trial pending
    documented = _documented_columns()
    assert len(documented) == len(set(documented)) >= 20
    assert set(documented) == set(optbench.load_trials(study, overrides=overrides).columns)
    spec = load_study(study, overrides)
    write_trials(Store(spec, create=False).frame(plan(spec)), tmp_path)  # as `optbench report`
    header = (tmp_path / "trials.csv").read_text().splitlines()[0].split(",")
    assert set(documented) == set(header)

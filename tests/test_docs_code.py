"""The docs read against the code, so that they stay true: every module is in
docs/development.md's layout, every report figure is exported and documented as docs/api.md
says, and `load_summary` returns what the report writes to summary.json."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import optbench
from optbench.report import figures
from optbench.report.synthetic import synthetic_trials

REPO = Path(__file__).resolve().parents[1]


def _layout() -> dict[str, set[str]]:
    """docs/development.md's layout: package folder ("" for optbench/ itself) -> module names."""
    text = (REPO / "docs" / "development.md").read_text()
    block = text[text.index("- Layout") :].split("\n- ", 1)[0]
    named: dict[str, set[str]] = {}
    for item in block.split("\n  - ")[1:]:
        folder = re.match(r"`([\w/]+/)`:", item)
        key = folder.group(1) if folder else ""
        named.setdefault(key, set()).update(re.findall(r"`(\w+\.py)`", item))
    return named


def test_every_module_is_named_in_the_development_layout():
    named = _layout()
    package = REPO / "optbench"
    missing = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        folder = path.parent.relative_to(package).as_posix()
        folder = "" if folder == "." else folder + "/"
        if path.name not in named.get(folder, set()):
            missing.append(path.relative_to(package).as_posix())
    assert not missing, f"docs/development.md's layout does not name {missing}"


def test_every_report_figure_is_exported_and_documented():
    drawn = {
        name
        for name, fn in inspect.getmembers(figures, inspect.isfunction)
        if name.endswith("_figure") and fn.__module__ == figures.__name__
    }
    api_doc = (REPO / "docs" / "api.md").read_text()
    assert {"edf_figure", "stem_figure"} <= drawn
    for name in drawn:
        assert getattr(optbench, name) is getattr(figures, name)
        assert name in dir(optbench) and f"`{name}`" in api_doc, name


def test_load_summary_is_what_the_report_writes(tmp_path, monkeypatch, tiny_dict):
    from optbench.report.writer import write_report
    from optbench.spec.schema import parse_spec
    from optbench.store import database as store

    spec = parse_spec(tiny_dict)
    trials = synthetic_trials(list(spec.models), ["adamw"], [1], 8)
    monkeypatch.setattr(store.Store, "frame", lambda self, planned: trials.copy())
    monkeypatch.setattr(store.Store, "__init__", lambda self, spec, create: None)
    monkeypatch.setattr(store.Store, "looks", lambda self: [])
    write_report(spec, trials, tmp_path / "report", figures={"peak"}, n_boot=50)
    written = json.loads((tmp_path / "report" / "summary.json").read_text())
    loaded = json.loads(json.dumps(optbench.load_summary(spec, n_boot=50)))
    assert loaded == written
    assert {"claims", "code", "chance_error"} <= set(loaded)
    assert all("near_chance" in c for c in loaded["cells"])

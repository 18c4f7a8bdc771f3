"""The package rules, read from the source: each package's `__init__` docstring maps every module
and subpackage in it, and imports go one way, down `STAGES`: a module imports from its own stage
and the stages before it, never from a later one (module-level and deferred imports alike, as
tests/test_imports.py's graph reads them).

`STAGES` is the one statement of the order (docs/development.md points here). A later stage
builds on the earlier ones: the study as data, then the trial contract, the plan, the models and
the input pipeline, the trackers, the trainer, the store, the decision engine (numbers and
verdicts), the report that draws and writes them, the executors, the driver, and the entry
points on top. The driver reads the decision engine, not the report (issue 67).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from test_imports import PACKAGE, import_graph

# Each stage: the top-level packages and modules of optbench in it ("" is optbench/__init__.py).
STAGES: tuple[tuple[str, ...], ...] = (
    ("errors", "safefs", "host", "provenance", "user_code", "worker_lock"),  # utilities
    ("spec",),  # the study as data
    ("trial",),  # the driver-worker contract
    ("plan",),  # a study's trials and jobs
    ("models",),
    ("data",),  # the input pipeline
    ("trackers",),
    ("train",),  # the trainer: what a job runs
    ("store",),
    ("decision",),  # the decision engine: statistics, boundaries, claims, looks
    ("report",),  # what draws and writes a report's pages
    ("executors",),
    ("run",),  # the driver
    ("cli", "api", "__main__", ""),  # the entry points
)


def stage_of(module: str) -> int:
    """The index in STAGES of `module` ("optbench.x.y" is in the stage of "x")."""
    top = module.split(".")[1] if "." in module else ""
    for index, members in enumerate(STAGES):
        if top in members:
            return index
    raise AssertionError(f"{module}: its package {top!r} is in no stage of STAGES; add it there")


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, imported) for every import of a later stage than the importer's."""
    return {(m, dep) for m, deps in graph.items() for dep in deps if stage_of(dep) > stage_of(m)}


def unmapped(package: Path = PACKAGE) -> list[str]:
    """The modules (`x.py`) and subpackages (`x/`) that their package's `__init__` docstring
    does not name in backquotes, as paths below `package`."""
    missing = []
    for init in sorted(package.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        folder = init.parent.relative_to(package).as_posix()
        for child in sorted(init.parent.iterdir()):
            if child.suffix == ".py" and child.name != "__init__.py":
                name = child.name
            elif (child / "__init__.py").is_file():
                name = child.name + "/"
            else:
                continue
            if f"`{name}`" not in doc:
                missing.append(f"{folder}/{name}".removeprefix("./"))
    return missing


def _package(tmp_path: Path) -> Path:
    """A small optbench: spec/ and run/ with their maps, spec/schema.py importing the errors."""
    pkg = tmp_path / "optbench"
    for sub in ("spec", "run"):
        (pkg / sub).mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""`errors.py`, `spec/` and `run/`."""\n')
    (pkg / "errors.py").write_text("")
    (pkg / "spec" / "__init__.py").write_text('"""- `schema.py`: the schema."""\n')
    (pkg / "spec" / "schema.py").write_text("from optbench.errors import UsageError\n")
    (pkg / "run" / "__init__.py").write_text('"""- `driver.py`: the driver."""\n')
    (pkg / "run" / "driver.py").write_text("from optbench.spec import schema\n")
    return pkg


def test_the_rules_find_an_upward_import_and_an_unmapped_module(tmp_path):
    pkg = _package(tmp_path)
    assert upward_imports(import_graph(pkg)) == set() and unmapped(pkg) == []
    # a deferred import of the driver from the schema, and a module the map leaves out
    (pkg / "spec" / "schema.py").write_text("def f():\n    from ..run.driver import g\n")
    (pkg / "spec" / "roles.py").write_text("")
    assert upward_imports(import_graph(pkg)) == {("optbench.spec.schema", "optbench.run.driver")}
    assert unmapped(pkg) == ["spec/roles.py"]
    (pkg / "cache").mkdir()
    (pkg / "cache" / "__init__.py").write_text("")
    with pytest.raises(AssertionError, match="'cache' is in no stage"):
        upward_imports({"optbench.cache": set(), "optbench.run": {"optbench.cache"}})
    assert unmapped(pkg) == ["cache/", "spec/roles.py"]


def test_every_package_maps_its_modules():
    assert len(list(PACKAGE.rglob("__init__.py"))) > 10  # the packages were read
    missing = unmapped()
    assert not missing, f"name each in its package's __init__ docstring: {missing}"


def test_imports_go_down_the_stages():
    graph = import_graph()
    assert graph["optbench.cli.app"] and graph["optbench.spec.schema"]  # the graph was read
    upward = sorted(upward_imports(graph))
    assert not upward, f"imports of a later stage (tests/test_package_rules.py, STAGES): {upward}"


def test_the_driver_reads_the_decision_engine_not_the_report():
    graph = import_graph()
    assert graph["optbench.run.rounds"]  # the driver's imports were read
    into_report = sorted(
        (module, dep)
        for module, deps in graph.items()
        if module.startswith("optbench.run")
        for dep in deps
        if dep.startswith("optbench.report")
    )
    assert not into_report, f"the driver imports the report's package: {into_report}"


def test_each_stage_is_named_once_and_names_what_exists():
    named = [name for stage in STAGES for name in stage]
    assert len(named) == len(set(named))
    present = {p.stem if p.suffix == ".py" else p.name for p in PACKAGE.iterdir()}
    present = {
        n for n in present if re.fullmatch(r"\w+", n) and n not in ("__init__", "__pycache__")
    }
    assert set(named) - {""} == present  # no stage names a module that has gone

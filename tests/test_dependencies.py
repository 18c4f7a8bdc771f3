"""pyproject.toml's dependencies: every library that optbench imports is declared, each with a
lower bound, and scripts/floors.py turns those bounds into the exact pins that
scripts/check-floors.sh installs."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[1]
tomllib = pytest.importorskip("tomllib")  # Python 3.11+, as scripts/floors.py


def _floors_module():
    spec = importlib.util.spec_from_file_location("floors", REPO / "scripts" / "floors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _imported_top_level_modules() -> set[str]:
    names = set()
    for path in (REPO / "optbench").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"optbench"}


def test_every_library_optbench_imports_is_a_declared_dependency_or_extra():
    project = _project()
    declared = {_name(r) for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        declared |= {_name(r) for r in extra}
    distributions = importlib.metadata.packages_distributions()  # e.g. PIL -> Pillow
    undeclared = [
        module
        for module in sorted(_imported_top_level_modules())
        if not {_name(d) for d in distributions.get(module, [module])} & declared
    ]
    assert not undeclared


def test_every_dependency_has_a_floor_pinned_exactly_and_one_without_is_named():
    floors = _floors_module()
    project = _project()
    pins = floors.floor_pins(project, ["test"])
    requirements = project["dependencies"] + project["optional-dependencies"]["test"]
    assert [_name(p) for p in pins] == [_name(r) for r in requirements]
    for pin, requirement in zip(pins, requirements, strict=True):
        floor = re.search(r">=\s*([^,;\s]+)", requirement)[1]
        assert pin.endswith(f"=={floor}"), (pin, requirement)
    assert "psycopg[binary]==3.1" in floors.floor_pins(project, ["postgres"])
    unbounded = {"dependencies": ["numpy", "torch<3"], "optional-dependencies": {}}
    with pytest.raises(SystemExit, match="'numpy': no lower bound"):
        floors.floor_pins(unbounded, [])

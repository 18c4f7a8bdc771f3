"""The lower bounds of pyproject.toml's dependencies as exact pins (`numpy>=2.0` gives
`numpy==2.0`, which pip reads as 2.0.0), one a line, for scripts/check-floors.sh: the core
dependencies and those of the extras named on the command line. A dependency without a lower
bound is an error naming it. Python 3.11+ (tomllib)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

PYPROJECT = Path(__file__).parents[1] / "pyproject.toml"
REQUIREMENT = re.compile(r"(?P<name>[A-Za-z0-9_.\-]+)(?P<extras>\[[^\]]*\])?\s*(?P<spec>[^;]*)")


def floor_pins(project: dict, extras: list[str]) -> list[str]:
    """`name[extras]==floor` for each requirement of the core and of `extras`."""
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    pins = []
    for requirement in requirements:
        parts = REQUIREMENT.fullmatch(requirement.strip())
        floor = re.search(r">=\s*([0-9][0-9a-z.]*)", parts["spec"]) if parts else None
        if floor is None:
            raise SystemExit(f"pyproject.toml: {requirement!r}: no lower bound (>=) to check")
        pins.append(f"{parts['name']}{parts['extras'] or ''}=={floor[1]}")
    return pins


if __name__ == "__main__":
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    print("\n".join(floor_pins(project, sys.argv[1:])))

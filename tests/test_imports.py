"""optbench's modules import one another without a cycle (data flows one way: spec -> plan ->
jobs -> result files -> store -> report).

The graph is read from the source with ast, so it sees every import statement, also those
inside functions (a deferred import hides a cycle from Python, not from a reader). An edge
`a -> b` is a statement in `a` importing `b`; `from pkg import name` is an edge to the submodule
`pkg.name` when there is one, else to `pkg` (its __init__).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "optbench"


def _module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the optbench modules it imports anywhere in its source."""
    files = {_module_name(p, package): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from . import x, from ..y import z
                    anchor = name.split(".")[: len(name.split(".")) - node.level + is_package]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names
                ]
            else:
                continue
            graph[name] |= {t for t in targets if t in files and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (depth-first search, three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_cycle_finder_finds_a_deferred_import_cycle(tmp_path):
    pkg = tmp_path / "optbench"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from optbench.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import g\n")
    graph = import_graph(pkg)
    assert graph["optbench.a"] == {"optbench.sub.b"} and graph["optbench.sub.b"] == {"optbench.a"}
    assert find_cycle(graph) == ["optbench.a", "optbench.sub.b", "optbench.a"]
    (pkg / "sub" / "b.py").write_text("import os\n")
    assert find_cycle(import_graph(pkg)) is None


def test_optbench_has_no_import_cycle():
    graph = import_graph()
    assert "optbench.spec.schema" in graph and graph["optbench.cli.app"]  # the graph was read
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_spec_is_data():
    # The study schema must not need the models or the trainer (that made a cycle before).
    assert not {
        m
        for m in import_graph()["optbench.spec.schema"]
        if m.startswith(("optbench.models", "optbench.train"))
    }


@pytest.mark.slow
def test_the_trainer_does_not_import_the_study_schema():
    # A trial's recipe and dataset settings are spec/recipe.py's: the trainer knows no study.
    graph = import_graph()
    assert any(m.startswith("optbench.train.") for m in graph)  # the trainer was read
    assert not {
        m
        for m, deps in graph.items()
        if m.startswith("optbench.train") and "optbench.spec.schema" in deps
    }


# The trainer (optbench/train) is what a job runs. Outside it, only the places that run it import
# it, and only its entry points: a config, a result file or a constant that the driver, the
# report or a check needs lives in trial/, data/ or errors.py, never in the trainer.
RUNS_THE_TRAINER = {
    "optbench.cli.train_commands": {"optbench.train.run_trial", "optbench.train.signals"},
    "optbench.executors.local": {"optbench.train.run_trial"},
    "optbench.executors.slurm.job": {
        "optbench.train.distributed",  # the job's share of cores, from SLURM's variables
        "optbench.train.run_trial",
        "optbench.train.signals",
    },
    "optbench.run.measuring": {"optbench.train.measure"},  # --measure times a short training run
}


def test_outside_the_trainer_only_the_modules_that_run_it_import_it():
    graph = import_graph()
    importers = {
        module: {dep for dep in deps if dep.startswith("optbench.train.")}
        for module, deps in graph.items()
        if not module.startswith("optbench.train")
    }
    assert {m: deps for m, deps in importers.items() if deps} == RUNS_THE_TRAINER


def test_the_input_pipeline_and_the_report_do_not_import_the_trainer():
    # data/ is read by the checks and the report too: no path from it (or them) to the trainer
    graph = import_graph()

    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for dep in graph[todo.pop()] - seen:
                seen.add(dep)
                todo.append(dep)
        return seen

    for package in ("optbench.data", "optbench.report", "optbench.spec", "optbench.trial"):
        modules = [m for m in graph if m == package or m.startswith(package + ".")]
        assert len(modules) > 1, package
        for module in modules:
            assert not {m for m in reaches(module) if m.startswith("optbench.train")}, module


def test_the_cli_talks_to_executors_only_through_the_protocol():
    graph = import_graph()
    commands = [deps for m, deps in graph.items() if m.startswith("optbench.cli")]
    assert any("optbench.executors" in deps for deps in commands)
    assert not {m for deps in commands for m in deps if m.startswith("optbench.executors.")}


def test_executors_read_no_result_file():
    # executors say that a job ended; the driver (run/attempts.py) alone reads what it wrote
    readers = {"load_result", "read_result", "read_metrics"}
    for path in (PACKAGE / "executors").rglob("*.py"):
        names = {
            alias.name
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        }
        assert not names & readers, path


# Run in a fresh interpreter in which importing torch, torchvision or timm raises.
_WITHOUT_TORCH = """
import importlib, pkgutil, sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "torchvision", "timm"):
            raise ImportError(f"{name} is refused here")

sys.meta_path.insert(0, Refuse())
import optbench.trial
for module in pkgutil.iter_modules(optbench.trial.__path__, "optbench.trial."):
    importlib.import_module(module.name)
print(sorted(m for m in sys.modules if m.startswith("optbench.trial.")))
"""


def test_the_trial_contract_imports_without_torch():
    # The driver, the store and the report read configs and result files: the contract they
    # share with the workers must not load the trainer's libraries (nor need them installed).
    run = subprocess.run(
        [sys.executable, "-c", _WITHOUT_TORCH], capture_output=True, text=True, cwd=PACKAGE.parent
    )
    assert run.returncode == 0, run.stderr
    assert "'optbench.trial.config'" in run.stdout and "'optbench.trial.results'" in run.stdout
    refused = subprocess.run(
        [sys.executable, "-c", _WITHOUT_TORCH.replace("optbench.trial", "optbench.train")],
        capture_output=True,
        text=True,
        cwd=PACKAGE.parent,
    )
    assert "is refused here" in refused.stderr  # the guard does refuse the trainer's imports

"""Facts that have one home in optbench's source, each checked where a second home could come
back: the device a trial trains on (host.training_device), how `recipe.report` is read
(Recipe.reported_weights / reported_epoch), the input pipelines' names (recipe.Pipeline), the
note about a cell whose results mix input pipelines (trial/config.py: mixed_pipelines_note).

Each check reads the source with ast, so it sees every place that would state the fact again,
also inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "optbench"


def _where(matches) -> set[str]:
    """The modules (paths relative to optbench/) with a node for which `matches(node)`."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        if any(matches(node) for node in ast.walk(tree)):
            found.add(path.relative_to(PACKAGE).as_posix())
    return found


def _dotted(node: ast.AST) -> str:
    return ast.unparse(node) if isinstance(node, ast.Attribute | ast.Name) else ""


def test_the_device_rule_has_one_home():
    # "cuda" where torch sees a GPU, else "cpu": the local pool, the debug executor, SLURM jobs,
    # `--measure` and `optbench models --measure` all ask host.training_device
    def asks_cuda(node):
        return isinstance(node, ast.Call) and _dotted(node.func) == "torch.cuda.is_available"

    assert _where(asks_cuda) == {"host.py"}


def test_the_reported_model_is_parsed_in_one_place():
    # recipe.report ("ema_final", ...) is split into whose weights and which epoch by Recipe
    def parses_report(node):
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and _dotted(node.func.value).endswith(".report")
        )

    assert _where(parses_report) == {"spec/recipe.py"}


def test_the_pipeline_names_are_written_once():
    # "auto", "pil", "tensor" as a list of choices: recipe.Pipeline alone
    def lists_pipelines(node):
        if not isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Subscript):
            return False
        names = {n.value for n in ast.walk(node) if isinstance(n, ast.Constant)}
        return {"pil", "tensor"} <= names

    assert _where(lists_pipelines) == {"spec/recipe.py"}


def test_the_mixed_pipelines_note_is_written_once():
    def says_it(node):
        return isinstance(node, ast.Constant) and "mixes input pipelines" in str(node.value)

    assert _where(says_it) == {"trial/config.py"}


def test_training_device_is_cuda_where_torch_sees_a_gpu(monkeypatch):
    import torch

    from optbench.host import training_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert training_device() == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert training_device() == "cpu"


def test_the_report_setting_reads_as_whose_weights_and_which_epoch():
    from typing import get_args

    from optbench.spec.recipe import Recipe

    choices = get_args(Recipe.model_fields["report"].annotation)
    for report in choices:
        recipe = Recipe(report=report, ema=True)
        assert f"{recipe.reported_weights}_{recipe.reported_epoch}" == report
    assert {Recipe(report=r, ema=True).reported_weights for r in choices} == {"ema", "raw"}


def test_optbench_run_and_the_report_say_a_pipeline_mix_alike():
    from types import SimpleNamespace

    import pandas as pd

    from optbench.report.sections import _pipeline_notes
    from optbench.run.progress import input_notes

    rows = [("a", "pil"), ("a", "tensor"), ("a", "pil"), ("b", "tensor")]
    stored = [
        SimpleNamespace(
            is_result=True,
            trial=SimpleNamespace(cell_id=cell),
            record=SimpleNamespace(user_attrs={"pipeline": pipeline}),
        )
        for cell, pipeline in rows
    ]
    frame = pd.DataFrame(rows, columns=["cell_id", "pipeline"])
    (run_note,) = input_notes(stored)
    (report_note,) = _pipeline_notes(frame)
    assert report_note == run_note + "." and run_note.startswith("a mixes input pipelines (2 pil")

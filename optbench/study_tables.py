"""What a study would run and how far it is, as terminal tables: its plan with the compute it
needs (`optbench run --dry-run`, `plan_table`) and its trial counts per cell (`optbench
status`, `status_table`). Both only read the spec and the store; nothing here runs or writes.
"""

from __future__ import annotations

from rich.table import Table

from optbench.plan import plan
from optbench.runner import StudyProgress
from optbench.spec import StudySpec
from optbench.store import Store


def status_table(spec: StudySpec, running: set[str] = frozenset()) -> Table:
    """Counts per cell, read from the store without running or writing anything; `running`:
    the keys of trials whose job is running (SLURM)."""
    stored = Store(spec, create=False).read(plan(spec))
    return StudyProgress(stored, running=set(running)).table(
        f"{spec.name}: {sum(s.is_result for s in stored)} of {len(stored)} trials done"
    )


def plan_table(spec: StudySpec) -> Table:
    """The trial plan of `optbench run --dry-run`: what would run, per cell, and its compute:
    training images x forward multiply-adds per image (backward adds about 2x), each model at
    the input size it would train at (`px`: a class-folder dataset takes it from the model
    unless the study sets dataset.img_size). Writes nothing."""
    from optbench.models.complexity import model_complexity
    from optbench.train.datasets import dataset_info

    info = {model: dataset_info(spec.dataset, model) for model in spec.models}
    n_train = info[spec.models[0]].n_train
    stored = Store(spec, create=False).read(plan(spec))
    table = Table(title=f"{spec.name}: plan ({spec.dataset.name}, {n_train} training images)")
    for col in (
        "model",
        "optimizer",
        "epochs",
        "trials",
        "to run",
        "lr range",
        "wd range",
        "px",
        "GF/img",
        "PF to run",
    ):
        table.add_column(col, no_wrap=col == "model")
    total = 0.0
    flops_of: dict[str, int] = {}
    for cell in spec.cells():
        items = [s for s in stored if s.trial.cell == cell]
        todo = sum(not s.is_result for s in items)
        b = spec.search.bounds(cell.model, cell.optimizer)
        shape = info[cell.model]
        if cell.model not in flops_of:  # one count per model, not per cell
            flops_of[cell.model] = model_complexity(
                cell.model,
                num_classes=shape.num_classes,
                in_chans=shape.in_chans,
                img_size=shape.img_size,
            )["flops"]
        flops = flops_of[cell.model]
        cell_flops = todo * cell.epochs * n_train * flops
        total += cell_flops
        table.add_row(
            cell.model,
            cell.optimizer,
            str(cell.epochs),
            str(len(items)),
            str(todo),
            f"{b.lr[0]:.3g} .. {b.lr[1]:.3g}",
            f"{b.wd[0]:.3g} .. {b.wd[1]:.3g}",
            str(shape.img_size),
            f"{flops / 1e9:.3g}",
            f"{cell_flops / 1e15:.3g}",
        )
    to_run = sum(not s.is_result for s in stored)
    table.caption = (
        f"{len(stored)} trials, {to_run} to run: {total / 1e15:.3g} PF of forward "
        f"multiply-adds ({total * 3 / 1e15:.3g} PF with backward)"
    )
    return table

"""What a study needs from this install and this machine: its models registered, its dataset
known and, for a real run, the dataset's files where `dataset.root` says. The spec is pure data
(spec.py); the CLI calls `check_spec` with what each command needs before it writes anything.
"""

from __future__ import annotations

from pathlib import Path

from optbench.errors import SpecError
from optbench.models import is_model
from optbench.spec import StudySpec
from optbench.train.datasets import DATASETS, check_dataset


def check_spec(spec: StudySpec, *, data: bool, source: Path | str = "<spec>") -> None:
    """Raise SpecError naming `source` and the field if a model or the dataset is unknown; with
    `data`, a UsageError naming the path if the dataset's files are not where it says."""
    problems = []
    unknown = [m for m in spec.models if not is_model(m)]
    if unknown:
        problems.append(
            f"{source}: models: unknown model(s) {unknown}; `optbench models` lists optbench's "
            "models, and any timm model name works"
        )
    if spec.dataset.name not in DATASETS:
        problems.append(
            f"{source}: dataset.name: unknown dataset {spec.dataset.name!r}; "
            f"known: {sorted(DATASETS)}"
        )
    if problems:
        raise SpecError("\n".join(problems))
    if data:
        check_dataset(spec.dataset)

"""What a study needs from this install and this machine: its models registered, its dataset
known and, for a real run, the dataset's files where `dataset.root` says. The spec is pure data
(spec.py); the CLI calls `check_spec` with what each command needs before it writes anything.
Without data, a study of the zoo's models is checked without importing torch or timm.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from optbench.errors import SpecError, did_you_mean, source_of
from optbench.spec import StudySpec

# The datasets train/datasets.py reads (its DATASETS), named here so that checking a study needs
# no torch; tests/test_fast_commands.py checks that the two agree.
DATASET_NAMES: tuple[str, ...] = ("digits", "cifar10", "cifar100", "imagenet", "imagefolder")


def check_spec(
    spec: StudySpec,
    *,
    data: bool,
    source: Path | str = "<spec>",
    sources: Mapping[str, str] | None = None,
) -> None:
    """Raise SpecError naming `source` and the field if a model or the dataset is unknown (with
    the closest known name); with `data`, a UsageError naming the path if the dataset's files
    are not where it says. `sources` maps dotted keys to what set them ("--set models=[...]")."""
    from optbench.models import is_model, model_names

    def origin(key: str) -> str:
        return source_of(key, source, sources or {})

    problems = []
    for model in spec.models:
        if not is_model(model):
            problems.append(
                f"{origin('models')}: models: unknown model {model!r}"
                f"{did_you_mean(model, model_names())} (`optbench models` lists optbench's "
                "models; any timm model name works)"
            )
    if spec.dataset.name not in DATASET_NAMES:
        problems.append(
            f"{origin('dataset.name')}: dataset.name: unknown dataset {spec.dataset.name!r}"
            f"{did_you_mean(spec.dataset.name, DATASET_NAMES)} (known: {sorted(DATASET_NAMES)})"
        )
    if problems:
        raise SpecError("\n".join(problems))
    if data:
        from optbench.train.datasets import check_dataset  # torch: only for a real run

        check_dataset(spec.dataset)

"""What names a cell: the identity table of every recipe and dataset field, read by
spec.StudySpec.cell_config (whose hash is the cell id).

Each field declares what it is to a cell:
- "cell": its value names the cell; editing it makes new cells instead of mixing with old
  results;
- "cell_if_folder": names the cell only where the data are image files resized one by one
  (catalogue.is_image_dataset); elsewhere it changes nothing and stays out of the id;
- "cell_optimizer": a mapping by optimizer name whose entry for a cell's optimizer names that
  cell (StudySpec.cell_config hashes the recipe with that entry only: Recipe.for_optimizer); a
  cell whose optimizer has no entry keeps the id it had before the field existed;
- "location": where the data are read from; the same trials from any copy;
- "execution": how the trials are fed, recorded in result.json's `execution` block, not a cell.

amp, channels_last and compile are "cell" although the CPU ignores them: on CUDA they change
the trained numbers (bf16 autocast; other kernels and summation orders), so a cell trained
with and one without them are two configurations.

IDENTITY_VERSION counts the table's revisions; a revision that renames cells says which in
MIGRATIONS (a renamed cell's finished trials are found under its old id no more).
"""

from __future__ import annotations

from typing import Literal

Identity = Literal["cell", "cell_if_folder", "cell_optimizer", "location", "execution"]

IDENTITY_VERSION = 3
MIGRATIONS: dict[int, str] = {
    1: "the table written down (2026-12); every cell keeps the id the code gave it before",
    2: "optimizer_args (cell_optimizer) added; every cell without them keeps its id",
    3: "search.seed_per_sample left unset is true where decide reads claim (a) (2026-12, "
    "issue 53): such a study gets new cells, unless its storage holds trials in the cells it "
    "had with the earlier default (false): then it keeps those, finds its trials and says so "
    "(store/migrations.py); every other study keeps its cell ids",
}

RECIPE_IDENTITY: dict[str, Identity] = {
    "preset": "cell",
    "schedule": "cell",
    "schedule_step": "cell",
    "warmup_epochs": "cell",
    "warmup_ref_epochs": "cell",
    "warmup_factor": "cell",
    "min_lr": "cell",
    "momentum": "cell",
    "nesterov": "cell",
    "betas": "cell",
    "eps": "cell",
    "optimizer_args": "cell_optimizer",
    "wd_exclude": "cell",
    "label_smoothing": "cell",
    "ema": "cell",
    "ema_rule": "cell",
    "ema_horizon": "cell",
    "ema_period": "cell",
    "ema_alpha": "cell",
    "ema_decay": "cell",
    "precise_bn_images": "cell",
    "report": "cell",
    "diverge_loss": "cell",
    "normalize": "cell",
    "hflip": "cell",
    "translate": "cell",
    "auto_augment": "cell",
    "autoaugment_policy": "cell",
    "randaugment_n": "cell",
    "randaugment_m": "cell",
    "augment_group": "cell",
    "lighting_std": "cell",
    "mixup_alpha": "cell",
    "cutmix_alpha": "cell",
    "random_erasing": "cell",
    "repeated_aug": "cell",
    "drop_path": "cell",
    "interpolation": "cell_if_folder",
    "weight_init": "cell",
    "amp": "cell",
    "channels_last": "cell",
    "compile": "cell",
}

DATASET_IDENTITY: dict[str, Identity] = {
    "name": "cell",
    "img_size": "cell",
    "root": "location",
    "layout": "location",  # class folders or WebDataset shards of the same images
    "pipeline": "execution",
}


def names_cell(identity: Identity, folder_dataset: bool) -> bool:
    """Whether a field of this identity is part of the cell id for this kind of dataset."""
    return identity in ("cell", "cell_optimizer") or (
        identity == "cell_if_folder" and folder_dataset
    )


def cell_fields(table: dict[str, Identity], values: dict, folder_dataset: bool) -> dict:
    """`values` (a model's fields by name) with only the fields that name a cell. A field the
    table does not declare is an error: every new field must say what it is."""
    missing = sorted(set(values) - set(table))
    if missing:
        raise KeyError(
            f"fields without an identity declaration (optbench/spec/identity.py): {missing}"
        )
    return {k: v for k, v in values.items() if names_cell(table[k], folder_dataset)}

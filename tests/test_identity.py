"""Every recipe and dataset field declares whether it names a cell (optbench/spec/identity.py), and
the cell id behaves as declared: editing a "cell" field gives a new id, editing any other
field keeps it. A field added without a declaration fails here (and in cell_config)."""

from __future__ import annotations

import copy
import typing

import pytest

from optbench.errors import SpecError
from optbench.spec.catalogue import CATALOGUE
from optbench.spec.identity import DATASET_IDENTITY, RECIPE_IDENTITY, cell_fields
from optbench.spec.recipe import Recipe, StudyDataset
from optbench.spec.schema import parse_spec

# an image dataset (read image by image: where interpolation and the layout apply)
IMAGE_DATASET = next(k.name for k in CATALOGUE.values() if k.format == "images")


def _with(data: dict, section: str, field: str, value) -> dict:
    data = copy.deepcopy(data)
    data.setdefault(section, {})[field] = value
    return data


def _candidates(annotation, current) -> list:
    """Values to try for a field: another Literal choice, the other bool, nearby numbers."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is typing.Literal:
        return [a for a in args if a != current]
    if current is True or current is False:
        return [not current]
    if isinstance(current, tuple):
        return [(0.8, 0.99), ("bias",)]
    if isinstance(current, dict):  # optimizer_args: another optimizer's (the study's is adamw)
        return [{"lion": {"caution": True}}]
    if isinstance(current, str):
        return ["pycls_v0", "rand-m9-n2", "none"]
    numbers = [v for v in (current,) if isinstance(v, int | float)]
    base = numbers[0] if numbers else 1
    return [base + 1, base * 0.5, 0.05, 0.5, 2, 8, 1]


# keys a field is read with (spec/recipe.py refuses it without them): the base study sets them too
COMPANIONS = {
    "ema": {"report": "raw_final"},
    "ema_alpha": {"ema_rule": "pycls"},
    "ema_period": {"ema_rule": "pycls"},
    "ema_decay": {"ema_rule": "decay"},
    "autoaugment_policy": {"auto_augment": "autoaugment"},
}


def _an_edit(data: dict, field: str):
    """A study dict with recipe `field` changed to another valid value (the resolved recipe's
    value differs), or None where no candidate validates."""
    resolved = parse_spec(data).recipe
    current = getattr(resolved, field)
    annotation = Recipe.model_fields[field].annotation
    for value in _candidates(annotation, current):
        try:
            spec = parse_spec(_with(data, "recipe", field, value))
        except SpecError:
            continue
        if getattr(spec.recipe, field) != current:
            return spec
    return None


def test_every_recipe_and_dataset_field_is_declared():
    assert set(RECIPE_IDENTITY) == set(Recipe.model_fields)
    assert set(DATASET_IDENTITY) == set(StudyDataset.model_fields)


def test_an_undeclared_field_is_an_error_not_a_silent_identity():
    with pytest.raises(KeyError, match="new_key"):
        cell_fields(RECIPE_IDENTITY, {"new_key": 1, "amp": True}, folder_dataset=False)


@pytest.mark.parametrize("folder", [False, True], ids=["digits", "imagefolder"])
@pytest.mark.parametrize("field", sorted(RECIPE_IDENTITY))
def test_a_recipe_field_changes_the_cell_id_exactly_when_declared(
    tiny_dict, tmp_path, field, folder
):
    data = copy.deepcopy(tiny_dict)
    data.setdefault("recipe", {}).update(COMPANIONS.get(field, {}))
    if folder:
        data["dataset"] = {"name": IMAGE_DATASET, "root": str(tmp_path), "img_size": 16}
    base = parse_spec(data)
    edited = _an_edit(data, field)
    assert edited is not None, f"no other valid value found for recipe.{field}"
    cell = base.cells()[0]
    # a "cell_optimizer" edit of another optimizer's entry leaves this (adamw) cell's id
    names = RECIPE_IDENTITY[field] == "cell" or (
        RECIPE_IDENTITY[field] == "cell_if_folder" and folder
    )
    assert (edited.cell_id(cell) != base.cell_id(cell)) == names


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "cifar10"),
        ("img_size", 32),
        ("root", "/another/copy"),
        ("pipeline", "tensor"),
        ("layout", "wds"),
    ],
)
def test_a_dataset_field_changes_the_cell_id_exactly_when_declared(tiny_dict, field, value):
    image = {"name": IMAGE_DATASET, "root": "data", "img_size": 16}  # every field applies
    data = {**tiny_dict, "dataset": image} if field in ("layout", "root") else tiny_dict
    base = parse_spec(data)
    edited = parse_spec(_with(data, "dataset", field, value))
    assert str(getattr(edited.dataset, field)) != str(getattr(base.dataset, field))
    cell = base.cells()[0]
    assert (edited.cell_id(cell) != base.cell_id(cell)) == (DATASET_IDENTITY[field] == "cell")

"""Class-folder resampling as each recipe's code does it (recipe.interpolation): pycls's
OpenCV INTER_LINEAR (no antialiasing) for `paper`, PIL bicubic for `deit` (DHVT), measured on a
fixture against a numpy transcription of OpenCV's formula (bench/interpolation.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from optbench.data.batches import _train_transform, _val_transform
from optbench.data.datasets import FolderData
from optbench.data.input_plan import InputPlan, input_plan
from optbench.spec.recipe import Recipe
from optbench.spec.schema import parse_spec

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("interp", ROOT / "bench" / "interpolation.py")
interp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(interp)


def folder_plan(recipe: Recipe, size: int, crop_pct: float = 0.875, pipeline="pil") -> InputPlan:
    """The input plan of `recipe` on a class-folder dataset of `size` (no files needed)."""
    return input_plan(recipe, FolderData(Path("."), ("a",), size, crop_pct), pipeline, "cpu")


def test_opencv_transcription_on_a_hand_case():
    # 4 -> 2 columns: each output pixel's centre sits halfway between two inputs
    row = np.array([[[0.0], [10.0], [20.0], [30.0]]], dtype=np.float32)
    np.testing.assert_allclose(interp.opencv_linear(row, 2, 1)[0, :, 0], [5.0, 25.0])
    # 2 -> 4: source x = -0.25 (clamped to 0), 0.25, 0.75, 1.25 (clamped to the last)
    two = np.array([[[0.0], [8.0]]], dtype=np.float32)
    np.testing.assert_allclose(interp.opencv_linear(two, 4, 1)[0, :, 0], [0.0, 2.0, 6.0, 8.0])


@pytest.mark.parametrize("scale, size", [(256, 224), (64, 56)])
def test_paper_preset_resizes_as_opencv_linear_within_rounding(scale, size):
    img = interp.fixture()
    want = interp.pycls_eval(img, scale, size, offsets=round)
    ours = interp._ours(img, "bilinear", size, size / scale)
    assert np.abs(ours - want).max() <= 1.0  # uint8 rounding of the same bilinear values
    # the antialiased default resamples differently, most when shrinking a lot
    old = interp._ours(img, "bilinear_antialias", size, size / scale)
    assert np.abs(old - want).max() > 20


def test_deit_preset_resizes_as_pil_bicubic():
    img = Image.fromarray(interp.fixture())
    want = np.asarray(img.resize((341, 256), Image.BICUBIC).crop((58, 16, 282, 240)))
    ours = _val_transform(folder_plan(Recipe(preset="deit"), 224, 224 / 256))(img)
    ours = ours.permute(1, 2, 0).numpy()
    np.testing.assert_array_equal(ours, want)


def test_presets_carry_their_codes_interpolation_and_the_crop_uses_it():
    from torchvision.transforms import InterpolationMode, v2

    assert Recipe(preset="paper").interpolation == "bilinear"
    assert Recipe(preset="deit").interpolation == "bicubic"
    assert Recipe().interpolation == "bilinear_antialias"
    crops = {
        p: next(t for t in _train_transform(folder_plan(Recipe(preset=p), 32), Recipe()).transforms
                if isinstance(t, v2.RandomResizedCrop))
        for p in ("basic", "paper", "deit")
    }  # fmt: skip
    assert (crops["paper"].interpolation, crops["paper"].antialias) == (
        InterpolationMode.BILINEAR,
        False,
    )
    assert crops["deit"].interpolation == InterpolationMode.BICUBIC
    assert crops["basic"].antialias is True


def _study(dataset: dict, interpolation: str):
    return parse_spec(
        {
            "name": "s",
            "dataset": dataset,
            "models": ["vit_p_w64_16px"],
            "optimizers": ["adamw"],
            "epochs": 1,
            "batch_size": 8,
            "search": {"n_samples": 1, "ranges": {"adamw": {"lr": [1e-3, 1e-2], "wd": [0.1, 0.2]}}},
            "recipe": {"interpolation": interpolation},
        }
    )


def test_interpolation_names_a_cell_only_where_images_are_resized():
    def cell_id(dataset, interpolation):
        spec = _study(dataset, interpolation)
        return spec.cell_id(spec.cells()[0])

    cifar = {"name": "cifar100", "root": "data"}
    folder = {"name": "imagefolder", "root": "data"}
    assert cell_id(cifar, "bicubic") == cell_id(cifar, "bilinear_antialias")
    assert cell_id(folder, "bicubic") != cell_id(folder, "bilinear_antialias")


# The bound docs/recipes.md states for the tensor pipeline against the PIL one (the tensor
# policy's table, resampling row), from `python bench/interpolation.py --pipelines` (30
# training crops per image); here 4 per image. split: (max levels, % of pixels that differ,
# % that differ by more than 1 level)
PIPELINE_BOUNDS = {
    "bilinear": {"eval": (0, 0, 0), "train": (0, 0, 0)},  # both resample the uint8 tensor
    "bilinear_antialias": {"eval": (1, 0.5, 0), "train": (1, 3, 0)},
    "bicubic": {"eval": (1, 1, 0), "train": (32, 3, 0.5)},
}


@pytest.mark.parametrize("interpolation", sorted(PIPELINE_BOUNDS))
@pytest.mark.parametrize("image", ["fixture", "noise"])
def test_both_pipelines_resample_within_the_documented_bound(interpolation, image):
    img = interp.fixture() if image == "fixture" else interp.noise()
    for split, d in interp.pipeline_diffs(img, interpolation, crops=4).items():
        most, pct_off, pct_far = PIPELINE_BOUNDS[interpolation][split]
        assert d.max() <= most, split
        assert 100 * (d > 0).float().mean() <= pct_off, split
        assert 100 * (d > 1).float().mean() <= pct_far, split


@pytest.mark.parametrize(
    "model", ["vit_p_4gf", "regnety_4gf", "resnet50", "deit_small_patch16_224", "convnext_tiny"]
)
def test_the_evaluation_resize_is_timms_for_the_models_own_crop(model):
    # timm evaluates a model at floor(input size / crop_pct) (transforms_imagenet_eval); a
    # crop_pct such as 0.95 or 0.9 is where rounding would differ from it by a pixel
    from types import SimpleNamespace

    from timm.data import create_transform, resolve_data_config
    from torchvision.transforms import Resize

    from optbench.data.datasets import model_input

    size, crop_pct = model_input(model)
    config = resolve_data_config(pretrained_cfg=timm_cfg(model).to_dict())
    [resize] = [t for t in create_transform(**config).transforms if isinstance(t, Resize)]
    data = SimpleNamespace(img_size=size, crop_pct=crop_pct, mean=(0.5,) * 3, std=(0.25,) * 3)
    plan = input_plan(Recipe(), data, "pil", "cpu")
    assert (plan.img_size, plan.eval_resize) == (config["input_size"][-1], resize.size)


def timm_cfg(model: str):
    import timm

    from optbench import models  # noqa: F401  (registers optbench's models and their cfgs)

    return timm.get_pretrained_cfg(model)


def test_a_crop_pct_given_as_train_over_test_gives_the_test_size_back():
    # 232 / (232 / 262) is 261.99999999999997 in floating point: a plain floor would evaluate
    # such a model one pixel short of its test size
    from optbench.data.input_plan import eval_resize

    assert [eval_resize(train, train / test) for train, test in [(232, 262), (240, 272)]] == [
        262,
        272,
    ]
    assert eval_resize(32, 0.875) == 36  # DeiT's int(256 / 224 * 32) and timm's floor

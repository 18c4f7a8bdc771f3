"""The input plan of a trial (`input_plan`): what its images go through before the model,
resolved once from the recipe, the dataset, the pipeline asked for and the device, and read by
both pipelines (batches.py's PIL transforms, tensor_folder.py's tensor ops) and by
augment.BatchAugment: the pipeline (`auto` resolved, `resolve_pipeline`), the training crop
(RandomResizedCrop's scale and ratio) and flip, the evaluation resize and centre crop, the
resampling, where the policy runs, and the normalization. How a torchvision policy's draws are
grouped is one rule, `augment.policy_group`, which BatchAugment and tensor_folder.device_policy
both apply. What the two pipelines' pixels differ by is measured in docs/recipes.md
(tests/test_interpolation.py, tests/test_image_formats.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from optbench.spec.recipe import TORCHVISION_POLICIES, Recipe
from optbench.trial.config import Execution

if TYPE_CHECKING:  # imported where used: `optbench run`'s checks read this module without
    from torchvision.transforms import InterpolationMode  # torchvision and timm (augment.py)

# torchvision's RandomResizedCrop defaults, which both pipelines draw the training crop with
CROP_SCALE = (0.08, 1.0)
CROP_RATIO = (3 / 4, 4 / 3)


@dataclass(frozen=True)
class Resampling:
    """`recipe.interpolation` as torchvision's resize arguments: `bilinear` without
    antialiasing (pycls's cv2 INTER_LINEAR), `bicubic` and `bilinear_antialias` antialiased.
    `on_tensor`: the PIL pipeline resamples a uint8 tensor (torch's half-pixel bilinear), not
    the PIL image (Pillow's filters, which widen their support when shrinking)."""

    mode: InterpolationMode
    antialias: bool

    @property
    def on_tensor(self) -> bool:
        return not self.antialias

    @property
    def kwargs(self) -> dict:
        return {"interpolation": self.mode, "antialias": self.antialias}


def resampling(interpolation: str) -> Resampling:
    from torchvision.transforms import InterpolationMode

    mode = InterpolationMode.BICUBIC if interpolation == "bicubic" else InterpolationMode.BILINEAR
    return Resampling(mode, antialias=interpolation != "bilinear")


def missing_tensor_ops(recipe: Recipe) -> tuple[str, ...]:
    """The ops of the recipe's policy that have no tensor version (tensor_policy.py); () when
    the tensor pipeline can run it (none, torchvision's, or a timm / pycls policy it covers)."""
    if recipe.auto_augment == "none" or recipe.auto_augment in TORCHVISION_POLICIES:
        return ()
    from optbench.data.tensor_policy import missing_ops  # timm: only for its policies

    return missing_ops(recipe.auto_augment)


def resolve_pipeline(pipeline: str, device_type: str, recipe: Recipe) -> str:
    """`dataset.pipeline` on a device of `device_type`: `auto` is tensor on CUDA unless the
    recipe's policy has an op without a tensor version (then pil, which the driver says in one
    line: checks.pipeline_note), pil elsewhere. `tensor` with such a policy is refused before
    anything runs (checks.check_pipeline)."""
    if pipeline != "auto":
        return pipeline
    if device_type == "cuda" and not missing_tensor_ops(recipe):
        return "tensor"
    return "pil"


def resolve_execution(execution: Execution, device_type: str, recipe: Recipe) -> Execution:
    """`execution` (a job's settings) on a device of `device_type` ("cpu", "cuda") for
    `recipe`: no "auto" left (`resolve_pipeline`). result.json records these."""
    pipeline = resolve_pipeline(execution.pipeline, device_type, recipe)
    return execution.model_copy(update={"pipeline": pipeline})


@dataclass(frozen=True)
class InputPlan:
    """What a trial's images go through (module docstring); small datasets read only
    `pipeline`, the policy fields and the normalization (their images are not resized)."""

    pipeline: str  # "pil" or "tensor"
    img_size: int  # the training crop's side, and the evaluation crop's
    eval_resize: int  # the shorter side before the evaluation centre crop
    crop_scale: tuple[float, float]
    crop_ratio: tuple[float, float]
    resampling: Resampling
    hflip: bool
    policy_per_sample: bool  # a timm / pycls policy in the tensor pipeline (tensor_policy.py)
    mean: tuple[float, ...]  # the normalization (augment.input_stats)
    std: tuple[float, ...]


def eval_resize(img_size: int, crop_pct: float) -> int:
    """The shorter side before the evaluation centre crop: timm's floor(img_size / crop_pct)
    (transforms_imagenet_eval), less a rounding error of the division: optbench's models give
    crop_pct as train / test, and 232 / (232 / 262) is 261.99999999999997."""
    return math.floor(img_size / crop_pct + 1e-6)


def input_plan(recipe: Recipe, data, pipeline: str, device_type: str) -> InputPlan:
    """The plan of `recipe` on `data` (a FolderData or DeviceData: its img_size, mean, std and,
    for class folders, crop_pct) through `pipeline` ("auto", "pil", "tensor") on a device of
    `device_type`."""
    from optbench.data.augment import input_stats, policy_group

    resolved = resolve_pipeline(pipeline, device_type, recipe)
    crop_pct = getattr(data, "crop_pct", 1.0)
    per_image = recipe.auto_augment != "none" and policy_group(recipe) is None
    mean, std = input_stats(recipe, data.mean, data.std)
    return InputPlan(
        pipeline=resolved,
        img_size=data.img_size,
        eval_resize=eval_resize(data.img_size, crop_pct),
        crop_scale=CROP_SCALE,
        crop_ratio=CROP_RATIO,
        resampling=resampling(recipe.interpolation),
        hflip=recipe.hflip,
        policy_per_sample=resolved == "tensor" and per_image,
        mean=mean,
        std=std,
    )

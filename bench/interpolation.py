"""How far optbench's class-folder resampling is from each recipe's reference code, on a fixture.

pycls (the `paper` preset) resizes float32 images with OpenCV's `cv2.resize(...,
INTER_LINEAR)` (pycls/datasets/transforms.py, branch vitconfigs); OpenCV is not installed
here, so `opencv_linear` below is OpenCV's INTER_LINEAR written out in numpy as its resize.cpp
computes it for float images: source x = (dx + 0.5) * scale - 0.5, floor and fraction, clamped
to the border, weights 1 - fx and fx (an exact 2x shrink switches to INTER_AREA, the same
numbers there). DHVT's code (the `deit` preset) resizes PIL images with bicubic (Pillow's
filter, through torchvision / timm). The fixture is a seeded synthetic 375x500 RGB image
(smooth gradients, edges and noise). Each case compares optbench's transform with the
reference, in uint8 levels (0-255). The last line is JSON.

`--pipelines`: the two input pipelines against each other instead (data/batches.py's PIL transforms,
data/tensor_folder.py's tensor ops, the same input plan), per interpolation, at 224 px from the
fixture and from a uniform-noise image of its size: the evaluation resize + centre crop, and
`--crops` training crops per image (each drawn as the same box in both pipelines, no flip).

    PYTHONPATH=. python bench/interpolation.py [--pipelines [--crops 30]]
"""

from __future__ import annotations

import json
from math import ceil
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from optbench.data.batches import _val_transform
from optbench.data.datasets import FolderData
from optbench.data.input_plan import input_plan
from optbench.spec.recipe import Recipe


def fixture(h: int = 375, w: int = 500, seed: int = 0) -> np.ndarray:
    """(h, w, 3) uint8: gradients, a few sharp-edged discs and fine noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    img = np.stack([200 * x, 200 * y, 100 + 80 * np.sin(12 * x * y)], axis=-1)
    for _ in range(6):
        cy, cx, r = rng.uniform(0, 1, 3) * [h, w, 80]
        disc = (np.mgrid[0:h, 0:w][0] - cy) ** 2 + (np.mgrid[0:h, 0:w][1] - cx) ** 2 < r**2
        img[disc] = rng.uniform(0, 255, 3)
    img += rng.normal(0, 12, img.shape)
    return np.clip(img, 0, 255).round().astype(np.uint8)


def _axis(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    scale = n_in / n_out
    f = ((np.arange(n_out) + 0.5) * scale - 0.5).astype(np.float32)
    s = np.floor(f).astype(int)
    f = f - s
    low = s < 0
    f[low], s[low] = 0.0, 0
    high = s >= n_in - 1
    f[high], s[high] = 0.0, n_in - 1
    return s, np.minimum(s + 1, n_in - 1), f


def opencv_linear(img: np.ndarray, out_w: int, out_h: int) -> np.ndarray:
    """cv2.resize(img, (out_w, out_h), interpolation=cv2.INTER_LINEAR) for a float (h, w, c)."""
    y0, y1, fy = _axis(img.shape[0], out_h)
    x0, x1, fx = _axis(img.shape[1], out_w)
    rows = img[y0] * (1 - fy)[:, None, None] + img[y1] * fy[:, None, None]
    return rows[:, x0] * (1 - fx)[None, :, None] + rows[:, x1] * fx[None, :, None]


def pycls_eval(img: np.ndarray, scale_size: int, crop_size: int, offsets=ceil) -> np.ndarray:
    """pycls's scale_and_center_crop on img / 255 as float32, back in levels (float). pycls
    places the crop at ceil((w - crop) / 2); `offsets=round` places it as torchvision's
    CenterCrop does (Python's round), to compare the resampling alone."""
    im = img.astype(np.float32) / 255
    h, w = im.shape[:2]
    if w < h:
        w, h = scale_size, int(h / w * scale_size)
    else:
        w, h = int(w / h * scale_size), scale_size
    im = opencv_linear(im, w, h)
    x, y = int(offsets((w - crop_size) / 2)), int(offsets((h - crop_size) / 2))
    return im[y : y + crop_size, x : x + crop_size] * 255


def _ours(img: np.ndarray, interpolation: str, size: int, crop_pct: float) -> np.ndarray:
    data = FolderData(Path("."), (), size, crop_pct)
    plan = input_plan(Recipe(interpolation=interpolation), data, "pil", "cpu")
    out = _val_transform(plan)(Image.fromarray(img))
    return out.permute(1, 2, 0).numpy().astype(float)


def pipeline_diffs(img: np.ndarray, interpolation: str, crops: int, size: int = 224) -> dict:
    """|PIL pipeline - tensor pipeline| in levels, as flat int tensors: "eval" (one evaluation
    image) and "train" (`crops` training crops, seeds 0..crops-1)."""
    from optbench.data.batches import _train_transform
    from optbench.data.tensor_folder import train_images, val_images

    recipe = Recipe(interpolation=interpolation, hflip=False)
    plan = input_plan(recipe, FolderData(Path("."), ("a",), size, 0.875), "pil", "cpu")
    pil, t = Image.fromarray(img), torch.from_numpy(img).permute(2, 0, 1).contiguous()
    evals = _val_transform(plan)(pil).int() - val_images([t], plan)[0].int()
    train, crop = [], _train_transform(plan, recipe)
    for seed in range(crops):  # the same box: crop_params draws as torchvision does
        torch.manual_seed(seed)
        theirs = crop(pil).int()
        ours = train_images([t], plan, torch.Generator().manual_seed(seed), None)[0].int()
        train.append((theirs - ours).flatten())
    return {"eval": evals.abs().flatten(), "train": torch.cat(train).abs()}


def noise(shape=(375, 500, 3)) -> np.ndarray:
    return np.random.default_rng(1).integers(0, 256, shape, dtype=np.uint8)


def measure_pipelines(crops: int) -> dict:
    out = {}
    for kind, img in (("fixture", fixture()), ("noise", noise())):
        for interpolation in ("bilinear_antialias", "bilinear", "bicubic"):
            for split, d in pipeline_diffs(img, interpolation, crops).items():
                out[f"{interpolation}_{kind}_{split}"] = {
                    "max": int(d.max()),
                    "pct_off": round(100 * float((d > 0).float().mean()), 3),
                    "pct_off_by_more_than_1": round(100 * float((d > 1).float().mean()), 3),
                }
    out["crops"], out["torch_threads"] = crops, torch.get_num_threads()
    return out


def measure() -> dict:
    img = fixture()
    out = {}
    # pycls's ViT evaluation 256 -> 224, and a 5.9x shrink (64 -> 56) where antialiasing matters
    for case, scale, size in (("eval224", 256, 224), ("eval56", 64, 56)):
        same_place = pycls_eval(img, scale, size, offsets=round)
        pycls = pycls_eval(img, scale, size)
        for name, interpolation in (("bilinear", "bilinear"), ("antialias", "bilinear_antialias")):
            ours = _ours(img, interpolation, size, size / scale)
            diff = np.abs(ours - same_place)
            out[f"{name}_vs_opencv_{case}_max"] = round(float(diff.max()), 3)
            out[f"{name}_vs_opencv_{case}_mean"] = round(float(diff.mean()), 3)
        # what pycls's ceil offsets add to the bilinear case (a 1 px shift when w - crop is odd)
        diff = np.abs(_ours(img, "bilinear", size, size / scale) - pycls)
        out[f"bilinear_vs_pycls_{case}_mean"] = round(float(diff.mean()), 3)
    # DHVT: Resize(bicubic) of the PIL image, as torchvision and timm call Pillow
    pil = Image.fromarray(img).resize((341, 256), Image.BICUBIC).crop((58, 16, 282, 240))
    ours = _ours(img, "bicubic", 224, 224 / 256)
    out["bicubic_vs_pil_eval224_max"] = float(np.abs(ours - np.asarray(pil, float)).max())
    out["torch_threads"] = torch.get_num_threads()
    return out


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--pipelines", action="store_true", help="the two pipelines, not OpenCV")
    p.add_argument("--crops", type=int, default=30, help="--pipelines: training crops per image")
    args = p.parse_args()
    print(json.dumps(measure_pipelines(args.crops) if args.pipelines else measure()))

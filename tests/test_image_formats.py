"""Every image the up-front check counts (torchvision's IMG_EXTENSIONS) is read by both pipelines
with the same pixels (issue 35): JPEGs through torchvision's decoder, every other format through
PIL in the tensor pipeline's reader threads, each converted as PIL's `convert("RGB")` does
(palette, grey, alpha, CMYK and 16-bit images included); a file neither can read fails its trial
naming it, and an empty file is refused before anything runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from test_input_pipeline import folder_config, make_jpeg_folders, natural_image, unreadable_line
from torchvision.datasets.folder import IMG_EXTENSIONS, default_loader

from optbench.data.batches import FolderBatches
from optbench.data.datasets import UnreadableImage, load_dataset
from optbench.data.tensor_folder import TensorFolderBatches, _read, decode
from optbench.spec.recipe import Dataset, Recipe
from optbench.train.run_trial import run_trial
from optbench.trial.config import Execution

CPU = torch.device("cpu")
SIDE = 16  # images are SIDE x SIDE: at img_size 14 (crop_pct 0.875) evaluation resizes to 16,
# which both pipelines leave untouched, so their evaluation batches must be equal pixel for pixel


def _sixteen_bit(rgb: np.ndarray) -> Image.Image:
    # a 16-bit grey PNG with values up to ~50,000 (what a scientific camera writes)
    return Image.fromarray((rgb[..., 0].astype(np.uint16) * 196).astype(np.uint16))


# name: (file suffix, how PIL writes it from an RGB uint8 array, save options)
FORMATS = {
    "jpeg": (".jpg", lambda a: Image.fromarray(a), {"quality": 90}),
    "jpeg-grey": (".jpeg", lambda a: Image.fromarray(a).convert("L"), {"quality": 90}),
    "jpeg-cmyk": (".jpg", lambda a: Image.fromarray(a).convert("CMYK"), {"quality": 90}),
    "png": (".png", lambda a: Image.fromarray(a), {}),
    "png-rgba": (".png", lambda a: Image.fromarray(a).convert("RGBA"), {}),
    "png-palette": (".png", lambda a: Image.fromarray(a).quantize(16), {}),
    "png-grey": (".png", lambda a: Image.fromarray(a).convert("L"), {}),
    "png-16bit": (".png", _sixteen_bit, {}),
    "bmp": (".bmp", lambda a: Image.fromarray(a), {}),
    "tiff": (".tif", lambda a: Image.fromarray(a), {}),
    "tiff-palette": (".tiff", lambda a: Image.fromarray(a).quantize(8), {}),
    "ppm": (".ppm", lambda a: Image.fromarray(a), {}),
    "pgm": (".pgm", lambda a: Image.fromarray(a).convert("L"), {}),
    "webp": (".webp", lambda a: Image.fromarray(a), {"lossless": True}),
}


def write_images(root: Path, formats, classes=("a", "b"), per_class: int = 2) -> list[Path]:
    """A class-folder dataset of SIDE x SIDE images in `formats`, written by PIL."""
    rng, paths = np.random.default_rng(0), []
    for split in ("train", "val"):
        for c in classes:
            (root / split / c).mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                for name in formats:
                    suffix, make, options = FORMATS[name]
                    path = root / split / c / f"{i}-{name}{suffix}"
                    make(natural_image(rng, SIDE, SIDE)).save(path, **options)
                    paths.append(path)
    return paths


def test_the_fixture_covers_every_extension_the_check_counts():
    assert {suffix for suffix, _, _ in FORMATS.values()} == set(IMG_EXTENSIONS)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_each_format_decodes_to_pils_rgb_pixels_in_the_tensor_pipeline(tmp_path, name):
    # before: BMP, TIFF, PPM and PGM were "Unsupported image file"; a 16-bit PNG came back as
    # uint16 values up to ~50,000 ("Promotion for uint16" once batched with 8-bit images)
    for path in write_images(tmp_path, [name]):
        (image,) = decode([_read(str(path))], [str(path)], CPU)
        assert image.dtype == torch.uint8 and image.shape == (3, SIDE, SIDE)
        want = np.asarray(default_loader(str(path)))  # the PIL pipeline's loader
        assert np.array_equal(image.permute(1, 2, 0).numpy(), want), path


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_both_pipelines_read_each_format_with_the_same_pixels(tmp_path, name):
    write_images(tmp_path, [name])
    data = load_dataset(Dataset(name="imagefolder", root=tmp_path, img_size=SIDE - 2))
    assert round(data.img_size / data.crop_pct) == SIDE  # evaluation: no resampling
    pil = FolderBatches(data, 2, Recipe(), seed=0, device=CPU, workers=0)
    tensor = TensorFolderBatches(data, 2, Recipe(), seed=0, device=CPU, readers=2)
    for (xa, ya), (xb, yb) in zip(pil.val(), tensor.val(), strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    for batches in (pil, tensor):  # training crops resample: both run, 8-bit RGB
        x = torch.cat([x for x, _ in batches.train(epoch=0)])
        assert x.shape == (4, 3, SIDE - 2, SIDE - 2) and x.dtype == torch.uint8


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", ["pil", "tensor"])
def test_a_folder_of_every_format_trains_in_both_pipelines(tmp_path, pipeline):
    write_images(tmp_path / "data", sorted(FORMATS), per_class=1)
    cfg = folder_config(tmp_path / "data", epochs=1)
    result = run_trial(cfg, tmp_path / "out", workers=1, execution=Execution(pipeline=pipeline))
    assert result.status == "finished", result.message
    assert result.execution.pipeline == pipeline


@pytest.mark.parametrize("pipeline", ["pil", "tensor"])
@pytest.mark.parametrize("what", ["empty", "garbage"])
@pytest.mark.slow
def test_a_file_neither_decoder_reads_fails_its_trial_naming_it(tmp_path, pipeline, what):
    # before: an empty file gave "ValueError: both buffer length (0) and count (-1) must not be
    # 0" in the tensor pipeline, raised outside its error guard, the file not named (the
    # up-front check refuses empty files; this one emptied after it, as on a shared disk)
    make_jpeg_folders(tmp_path / "data")
    bad = tmp_path / "data" / "train" / "b" / "3.tif"
    (tmp_path / "data" / "train" / "b" / "3.jpg").unlink()
    bad.write_bytes(b"" if what == "empty" else b"II*\x00 not a TIFF after all" * 4)
    line = unreadable_line(tmp_path / "data", pipeline)
    assert line.startswith(f"{bad}: not a readable image (") and "\n" not in line


@pytest.mark.slow
def test_a_jpeg_torchvision_cannot_decode_is_read_by_pil_or_named(tmp_path, monkeypatch):
    # the per-file fallback: torchvision's decoder refusing a JPEG hands it to PIL (same pixels
    # where PIL reads it); a JPEG neither reads fails naming the file
    import optbench.data.tensor_folder as tf

    make_jpeg_folders(tmp_path, per_class=1)
    path = str(tmp_path / "train" / "a" / "0.jpg")
    real = tf.decode_jpeg

    def refusing(data, **kw):
        if isinstance(data, list):
            raise RuntimeError("batch refused")
        raise RuntimeError("not for torchvision")

    monkeypatch.setattr(tf, "decode_jpeg", refusing)
    (image,) = decode([_read(path)], [path], CPU)
    assert np.array_equal(image.permute(1, 2, 0).numpy(), np.asarray(default_loader(path)))
    assert torch.equal(image, real(_read(path)))
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(Path(path).read_bytes()[:150])
    with pytest.raises(UnreadableImage, match=f"^{broken}: not a readable image"):
        decode([_read(str(broken))], [str(broken)], CPU)

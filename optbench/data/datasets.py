"""Datasets, as the catalogue (optbench/spec/catalogue.py) lists them: the checks of their files
and loading them, in their on-disk formats (cifar.py: torchvision's pickles; folders.py: class
folders; shards.py: WebDataset tar shards).

- Small datasets (digits, cifar10, cifar100) load whole into uint8 tensors (`DeviceData`); the
  trial moves them to its device and batches them there (batches.py).
- Image datasets (imagenet, imagefolder) are described by a `FolderData` (root, classes, input
  size, evaluation crop; a shard index in the wds layout), whose images (`split_samples`) the
  pipelines read one by one. Their input size and evaluation crop come from the model's timm
  pretrained cfg (`model_input`) unless the study sets `dataset.img_size`: train at input_size,
  evaluate by resizing the shorter side to floor(size / crop_pct) (timm's) and center-cropping
  size (pycls: 256 and 224).

torch is imported where tensors are made (`load_digits`, `load_cifar`): the driver's checks and
plans read this module without it (its import is a second and a half of every driver's start).

`check_dataset` verifies a layout without reading images; the CLI calls it, through
`checks.check_spec`, before a command that needs the data, so it must stay cheap; before a run
it also calls `check_dataset_files` (each CIFAR batch read once, each class folder's images
counted by name, the shards' index built or read; nothing decoded, nothing written).

- cifar10:  ROOT/cifar-10-batches-py/{data_batch_1..5, test_batch}   (torchvision's python pickles)
- cifar100: ROOT/cifar-100-python/{train, test}                      (torchvision's python pickles)
- imagenet, imagefolder: ROOT/train/<class>/<image> and ROOT/val/<class>/<image>, with the same
  class folders in both; or (`layout: wds`) ROOT/*train*.tar and ROOT/*val*.tar.

CIFAR's validation split is its test set. Nothing is downloaded unless `download_dataset` is
called (`optbench train --download`). `dataset_info` gives a dataset's shape and size (from the
published sizes where it can) for plans and complexity tables.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from optbench.data import folders, shards
from optbench.data.cifar import check_cifar, check_cifar_files, cifar_layout, read_cifar_batches
from optbench.data.cifar import download_cifar as download_dataset  # noqa: F401  (the CLI's)
from optbench.errors import UsageError
from optbench.spec import catalogue
from optbench.spec.catalogue import CATALOGUE, FOLDER_IMG_SIZE, IMAGENET_MEAN, IMAGENET_STD
from optbench.spec.recipe import Dataset

if TYPE_CHECKING:
    import torch

# Image datasets, for a model whose pretrained cfg gives no crop_pct (nor input size:
# catalogue.FOLDER_IMG_SIZE):
EVAL_CROP_PCT = 0.875  # val images: resize the shorter side to img_size / 0.875, center crop


# --- in-memory datasets -----------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceData:
    """A train/val split as uint8 image tensors (N, C, H, W) and int64 labels, on one device."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]

    @property
    def in_chans(self) -> int:
        return self.train_x.shape[1]

    @property
    def img_size(self) -> int:
        return self.train_x.shape[-1]

    @property
    def num_train(self) -> int:
        return len(self.train_y)

    def to(self, device: torch.device | str) -> DeviceData:
        return DeviceData(
            self.train_x.to(device),
            self.train_y.to(device),
            self.val_x.to(device),
            self.val_y.to(device),
            self.num_classes,
            self.mean,
            self.std,
        )


def _resize_uint8(x: torch.Tensor, size: int | None) -> torch.Tensor:
    import torch
    import torch.nn.functional as F

    if size is None or size == x.shape[-1]:
        return x
    y = F.interpolate(x.float(), size=(size, size), mode="bilinear", align_corners=False)
    return y.round().clamp(0, 255).to(torch.uint8)


def _channel_stats(x: torch.Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of uint8 images, in [0, 1] units."""
    xf = x.float().div_(255.0).transpose(0, 1).reshape(x.shape[1], -1)
    return tuple(xf.mean(1).tolist()), tuple(xf.std(1).tolist())


def _stratified_split(
    y: np.ndarray, val_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    train, val = train_test_split(idx, test_size=val_fraction, stratify=y, random_state=seed)
    return np.sort(train), np.sort(val)


def load_digits(spec: Dataset) -> DeviceData:
    """scikit-learn's 1,797 real 8x8 handwritten digits (bundled, nothing downloaded).

    Pixel values 0..16 are scaled to 0..255. The split is fixed: stratified, 20% validation,
    split seed 0, independent of any trial's seed.
    """
    import torch
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    images = np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8)  # (N, 8, 8)
    x = torch.from_numpy(images).unsqueeze(1)  # (N, 1, 8, 8)
    x = _resize_uint8(x, spec.img_size)
    y = torch.from_numpy(bunch.target.astype(np.int64))
    train, val = _stratified_split(bunch.target, 0.2, seed=0)
    train_x = x[train]
    mean = (train_x.float().mean().item() / 255.0,)
    std = (train_x.float().std().item() / 255.0,)
    return DeviceData(train_x, y[train], x[val], y[val], 10, mean, std)


def _check_nothing(spec: Dataset) -> None:
    if spec.root is not None:
        raise UsageError(
            f"dataset.root: {spec.name} is bundled and takes no root (got {spec.root})"
        )


def load_cifar(spec: Dataset) -> DeviceData:
    """CIFAR-10 / CIFAR-100 from torchvision's pickles (cifar.py); validation = the test set."""
    layout = cifar_layout(spec.name)
    folder = Path(spec.root) / layout.folder
    train_x, train_y = read_cifar_batches(folder, layout.train_files, layout)
    val_x, val_y = read_cifar_batches(folder, layout.val_files, layout)
    train_x, val_x = _resize_uint8(train_x, spec.img_size), _resize_uint8(val_x, spec.img_size)
    mean, std = _channel_stats(train_x)
    return DeviceData(train_x, train_y, val_x, val_y, layout.num_classes, mean, std)


# --- class-folder datasets --------------------------------------------------------------------


class UnreadableImage(RuntimeError):
    """An image file found unreadable while training: one line that starts with its path."""

    @classmethod
    def of(cls, path: str | Path, why: str) -> UnreadableImage:
        return cls(f"{path}: not a readable image ({why.strip().splitlines()[0] if why else '?'})")

    @classmethod
    def from_worker(cls, err: UnreadableImage) -> UnreadableImage:
        """The worker's own line out of the traceback a DataLoader re-raises it with."""
        line = str(err).strip().splitlines()[-1]
        return cls(line.removeprefix(f"{cls.__module__}.{cls.__qualname__}: "))


# What PIL raises for a file it cannot decode. DecompressionBombError, a header claiming more
# than 2 x Image.MAX_IMAGE_PIXELS pixels (about 179 million: a few bytes that would decode to
# gigabytes), is not an OSError.
IMAGE_ERRORS = (OSError, ValueError, SyntaxError, Image.DecompressionBombError)


def refuse_bomb(path: str | Path, data: bytes) -> None:
    """PIL's decompression-bomb limit for an image's bytes before another decoder takes them
    (the tensor pipeline's torchvision has none: a PNG header claiming 30000 x 30000 crashed
    the process in libpng): read from the header alone, as the PIL pipeline applies it.
    UnreadableImage naming the file; a file PIL does not know is left to the decoder."""
    try:
        with Image.open(io.BytesIO(data)):  # lazy: the header only, nothing decoded
            pass
    except Image.DecompressionBombError as err:
        raise UnreadableImage.of(path, str(err)) from None
    except IMAGE_ERRORS:
        pass


@dataclass(frozen=True)
class FolderData:
    """An image dataset, read image by image by the pipelines (`split_samples`): class folders
    (`index` None) or WebDataset shards (their `index`, shards.py)."""

    root: Path
    classes: tuple[str, ...]
    img_size: int
    crop_pct: float = EVAL_CROP_PCT
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    in_chans: int = 3
    index: shards.ShardIndex | None = None
    # each split's samples where a warm worker listed them once for its trials (train/parts.py:
    # warm_dataset); None: split_samples lists them when asked. Read only.
    listed: dict[str, list] | None = field(default=None, compare=False, repr=False)

    @property
    def num_classes(self) -> int:
        return len(self.classes)


def split_samples(data: FolderData, split: str) -> list[tuple[str | shards.Member, int]]:
    """(sample, class index) of every image of a split, in the dataset's order: a file's path
    (folders.folder_samples) or a shard member. Both pipelines read these (shards.read_bytes,
    shards.load_rgb), so an index means the same image and label in each, and the same in a
    folder and in the shards `optbench data pack` made of it."""
    if data.listed is not None:
        return data.listed[split]
    if data.index is not None:
        return data.index.samples(split)
    return folders.folder_samples(data.root / split, data.classes)


def model_input(model: str | None) -> tuple[int, float]:
    """A model's default input size and evaluation crop_pct, from its timm pretrained cfg
    (`input_size`, `crop_pct`); FOLDER_IMG_SIZE and EVAL_CROP_PCT where it gives none."""
    import timm

    from optbench import models  # noqa: F401  (registers optbench's models and their cfgs)

    cfg = timm.get_pretrained_cfg(model) if model else None
    size = cfg.input_size[-1] if cfg is not None and cfg.input_size else FOLDER_IMG_SIZE
    crop_pct = cfg.crop_pct if cfg is not None and cfg.crop_pct else EVAL_CROP_PCT
    return int(size), float(crop_pct)


def _image_dataset(spec: Dataset, cache_dir: Path | None) -> tuple[tuple[str, ...], object]:
    """(classes, shard index or None) of an image dataset in its layout."""
    root = Path(spec.root)
    if spec.layout == "folders":
        return tuple(folders.class_dirs(root / "train")), None
    index, cached = shards.open_index(root, cache_dir)
    if not cached and cache_dir is not None:  # a trial: the next ones read it
        shards.save_index(index, cache_dir)
    return shards.class_names(root, index.num_classes), index


def load_folders(
    spec: Dataset, model: str | None = None, cache_dir: Path | None = None
) -> FolderData:
    """An image dataset, at `spec.img_size` if set, else at `model`'s input size and with its
    crop_pct (a set img_size evaluates with crop_pct EVAL_CROP_PCT). Shards: their index,
    cached (shards.save_index) when `cache_dir` is given."""
    root = Path(spec.root)
    classes, index = _image_dataset(spec, cache_dir)
    if spec.img_size is not None:
        return FolderData(root, classes, spec.img_size, index=index)
    size, crop_pct = model_input(model)
    return FolderData(root, classes, size, crop_pct, index=index)


def _check_shards(spec: Dataset) -> None:
    root = catalogue.require_root(spec.name, spec.root, shards.WDS_LAYOUT)
    shards.check_manifest(root, shards.shard_files(root))


def _check_shard_files(spec: Dataset, cache_dir: Path | None) -> None:
    root = Path(spec.root)
    index = shards.open_index(root, cache_dir)[0]
    shards.check_manifest(root, shards.shard_files(root), index)
    shards.check_index(index, spec.name, CATALOGUE[spec.name].classes)


# (format, layout) -> (check the location without loading, check the files' contents cheaply;
# the latter also takes where a shard index may be cached)
_CHECKS: dict[tuple[str, str], tuple[Callable, Callable]] = {
    ("bundled", "folders"): (_check_nothing, lambda spec, cache_dir: None),
    ("cifar", "folders"): (check_cifar, lambda spec, cache_dir: check_cifar_files(spec)),
    ("images", "folders"): (
        folders.check_folders,
        lambda spec, cache_dir: folders.check_folder_files(spec),
    ),
    ("images", "wds"): (_check_shards, _check_shard_files),
}


@contextmanager
def _readable(spec: Dataset) -> Iterator[None]:
    """A dataset file or folder this process may not read (chmod 000): one line naming it. Only
    PermissionError: any other exception of a check is a bug, and shows as one."""
    try:
        yield
    except PermissionError as err:
        path = err.filename or spec.root
        raise UsageError(f"dataset.root: {path} cannot be read ({err.strerror})") from None


def _checks(spec: Dataset) -> tuple[Callable, Callable]:
    if spec.name not in CATALOGUE:
        known = sorted(CATALOGUE)
        raise UsageError(f"dataset.name: unknown dataset {spec.name!r}; known: {known}")
    return _CHECKS[CATALOGUE[spec.name].format, spec.layout]


def check_dataset(spec: Dataset) -> None:
    """Raise UsageError naming the path and expected layout if `spec` cannot be loaded."""
    check = _checks(spec)[0]
    with _readable(spec):
        check(spec)


def check_dataset_files(spec: Dataset, cache_dir: Path | None = None) -> None:
    """check_dataset, then what can be seen of the files' contents cheaply, before anything
    runs: each CIFAR batch read once (the shape of its images, its labels in range), each class
    folder holding images (counted by name), the shards' index (built from their headers, or
    read from its cache) with an image and a class for every sample and every class in both
    splits (an index cached in `cache_dir`, the study folder, read too). A UsageError names the
    file or folder. Writes nothing. What only decoding shows (a corrupt JPEG) fails its trial,
    naming the file (UnreadableImage)."""
    check_dataset(spec)
    with _readable(spec):
        _checks(spec)[1](spec, cache_dir)


@dataclass(frozen=True)
class DatasetInfo:
    """What a dataset looks like to a model, and how many training images an epoch has."""

    num_classes: int
    in_chans: int
    img_size: int
    n_train: int


def input_size(spec: Dataset, model: str | None = None) -> int:
    """The side of the square images a trial of `model` trains on: dataset.img_size if set,
    else the dataset's own (image datasets: the model's input size, model_input). Reads no
    dataset files."""
    kind = CATALOGUE[spec.name]
    if spec.img_size is not None:
        return spec.img_size
    if kind.format == "images":
        return model_input(model)[0]
    return kind.img_size  # digits' and CIFAR's: the catalogue's


def dataset_info(spec: Dataset, model: str | None = None) -> DatasetInfo:
    """Shape and size of a dataset (for compute estimates and complexity tables); image
    datasets at `model`'s input size when the spec sets none."""
    kind = CATALOGUE[spec.name]
    if kind.n_train is not None:  # digits, CIFAR, ImageNet: no file read, no bundle loaded
        return DatasetInfo(kind.classes, kind.in_chans, input_size(spec, model), kind.n_train)
    data = load_dataset(spec, model)  # imagefolder: only its files tell (class folders)
    with _readable(spec):
        n_train = len(split_samples(data, "train")) if data.index else _counted(data)
    return DatasetInfo(data.num_classes, data.in_chans, data.img_size, n_train)


def _counted(data: FolderData) -> int:
    return sum(folders.class_images(data.root / "train", data.classes).values())


_LOADERS: dict[str, Callable[..., DeviceData | FolderData]] = {
    "bundled": lambda spec, model, cache_dir: load_digits(spec),
    "cifar": lambda spec, model, cache_dir: load_cifar(spec),
    "images": load_folders,
}


def load_dataset(
    spec: Dataset, model: str | None = None, cache_dir: Path | None = None
) -> DeviceData | FolderData:
    """Load a dataset; image datasets take their input size from `model` (load_folders). A
    shard index found in no cache is saved with `cache_dir` given (a trial's study folder,
    shards.save_index: beside the shards if their folder is writable, else there); without it
    nothing is written (the checks, plans)."""
    check_dataset(spec)
    return _LOADERS[CATALOGUE[spec.name].format](spec, model, cache_dir)

"""Datasets: their on-disk formats, the checks of those formats, and loading.

- Small datasets (digits, cifar10, cifar100) load whole into uint8 tensors (`DeviceData`); the
  trial moves them to its device and batches them there (batches.py).
- Class-folder datasets (imagenet, imagefolder) are described by a `FolderData` (root, classes,
  input size, evaluation crop), which batches.py streams through a DataLoader. Their input size
  and evaluation crop come from the model's timm pretrained cfg (`model_input`) unless the study
  sets `dataset.img_size`: train at input_size, evaluate by resizing the shorter side to
  round(size / crop_pct) and center-cropping size (pycls: 256 and 224).

On-disk layouts (`check_dataset` verifies them without reading images; the CLI calls it, through
`checks.check_spec`, before a command that needs the data, so it must stay cheap; before a run
it also calls `check_dataset_files`: each CIFAR batch read once, its arrays' shapes and labels,
and the images of each class folder counted by name, none decoded):

- cifar10:  ROOT/cifar-10-batches-py/{data_batch_1..5, test_batch}   (torchvision's python pickles)
- cifar100: ROOT/cifar-100-python/{train, test}                      (torchvision's python pickles)
- imagenet, imagefolder: ROOT/train/<class>/<image> and ROOT/val/<class>/<image>, with the same
  class folders in both.

CIFAR's validation split is its test set. Nothing is downloaded unless `download_dataset` is
called (`optbench train --download`). `dataset_info` gives a dataset's shape and size (from the
published sizes where it can) for plans and complexity tables.
"""

from __future__ import annotations

import codecs
import functools
import io
import os
import pickle
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from optbench.errors import UsageError
from optbench.recipe import Dataset
from optbench.train.augment import IMAGENET_MEAN, IMAGENET_STD

# Class-folder datasets, for a model whose pretrained cfg gives no input size or crop_pct:
FOLDER_IMG_SIZE = 224  # train (and evaluate) at this size
EVAL_CROP_PCT = 0.875  # val images: resize the shorter side to img_size / 0.875, center crop
CIFAR_SIDE = 32  # CIFAR's images: 32x32 RGB, a batch row holds 3 * 32 * 32 bytes


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


@dataclass(frozen=True)
class CifarLayout:
    """torchvision's on-disk CIFAR format: python pickles in one folder under the root."""

    folder: str
    train_files: tuple[str, ...]
    val_files: tuple[str, ...]
    label_key: str
    num_classes: int

    def describe(self) -> str:
        files = ", ".join(self.train_files + self.val_files)
        return f"ROOT/{self.folder}/{{{files}}} (torchvision's python-pickle CIFAR format)"


def _cifar_layout(name: str) -> CifarLayout:
    from torchvision.datasets import CIFAR10, CIFAR100

    cls, label_key, classes = (
        (CIFAR10, "labels", 10) if name == "cifar10" else (CIFAR100, "fine_labels", 100)
    )
    return CifarLayout(
        folder=cls.base_folder,
        train_files=tuple(f for f, _ in cls.train_list),
        val_files=tuple(f for f, _ in cls.test_list),
        label_key=label_key,
        num_classes=classes,
    )


def _require_root(spec: Dataset, layout: str) -> Path:
    if spec.root is None:
        raise UsageError(f"dataset.root: {spec.name} needs a root folder laid out as {layout}")
    return Path(spec.root)


def _check_cifar(spec: Dataset) -> None:
    layout = _cifar_layout(spec.name)
    root = _require_root(spec, layout.describe())
    folder = root / layout.folder
    hint = f"expected {layout.describe()}; `optbench train --download` fetches {spec.name} there (needs internet)"
    if not folder.is_dir():
        raise UsageError(f"dataset.root: {folder} is not a folder; {hint}")
    missing = [f for f in layout.train_files + layout.val_files if not (folder / f).is_file()]
    if missing:
        raise UsageError(f"dataset.root: {folder} lacks {missing}; {hint}")


def _cifar_globals() -> dict[tuple[str, str], object]:
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct

    return {
        # numpy's array reconstruction, under its names before and since numpy 2
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): codecs.encode,  # bytes, as Python 3 writes them at protocol 2
    }


class CifarUnpickler(pickle.Unpickler):
    """Unpickles what a CIFAR batch holds (dicts, lists, strings, numbers and numpy arrays)
    and nothing else: a pickle naming any other callable (os.system in a crafted file) is an
    UnpicklingError before anything is called. A dataset file is data, never code."""

    allowed = _cifar_globals()

    def find_class(self, module: str, name: str):
        try:
            return self.allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"it names {module}.{name}, which a CIFAR batch never holds (a crafted file?)"
            ) from None


def _text_keys(entry):
    """Python 2's batches have str keys; written by Python 3, they may be bytes."""
    if not isinstance(entry, dict):
        raise TypeError(f"a {type(entry).__name__}, not a dict")
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in entry.items()}


def _read_cifar_batch(path: Path, layout: CifarLayout) -> tuple[np.ndarray, np.ndarray]:
    """One batch file's images (N, 3, 32, 32) uint8 and labels (N,) int64; a UsageError naming
    the file if it is not a batch of this dataset: no dict of 'data' and labels, data not N rows
    of 3 * 32 * 32 bytes, labels not N integers in [0, num_classes)."""
    key, row = layout.label_key, 3 * CIFAR_SIDE * CIFAR_SIDE
    try:
        with open(path, "rb") as f:  # torchvision's protocol-2 pickles of Python 2 str
            entry = _text_keys(CifarUnpickler(f, encoding="latin1").load())
        data, labels = np.asarray(entry["data"]), np.asarray(entry[key])
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError) as err:
        raise UsageError(
            f"dataset.root: {path} is not a CIFAR pickle batch with 'data' and "
            f"'{key}' ({type(err).__name__}: {err})"
        ) from None
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != row:
        raise UsageError(
            f"dataset.root: {path}: its 'data' is {data.dtype} of shape {data.shape}, not rows "
            f"of {row} uint8 ({CIFAR_SIDE}x{CIFAR_SIDE} RGB images)"
        )
    if labels.dtype.kind not in "iu" or labels.shape != (len(data),):
        raise UsageError(
            f"dataset.root: {path}: its '{key}' are {labels.dtype} of shape {labels.shape}, "
            f"not {len(data)} integers (one per image)"
        )
    outside = labels[(labels < 0) | (labels >= layout.num_classes)]
    if len(outside):
        raise UsageError(
            f"dataset.root: {path}: label {outside[0]} is outside 0..{layout.num_classes - 1} "
            f"({layout.folder} has {layout.num_classes} classes)"
        )
    return data.reshape(-1, 3, CIFAR_SIDE, CIFAR_SIDE), labels.astype(np.int64)


def _read_cifar_batches(folder: Path, files: tuple[str, ...], layout: CifarLayout):
    batches = [_read_cifar_batch(folder / name, layout) for name in files]
    xs, ys = zip(*batches, strict=True)
    return torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys))


def _check_cifar_files(spec: Dataset) -> None:
    layout = _cifar_layout(spec.name)
    folder = Path(spec.root) / layout.folder
    for name in layout.train_files + layout.val_files:
        _read_cifar_batch(folder / name, layout)


def load_cifar(spec: Dataset) -> DeviceData:
    """CIFAR-10 / CIFAR-100 from torchvision's pickles; validation = the test set."""
    layout = _cifar_layout(spec.name)
    folder = Path(spec.root) / layout.folder
    train_x, train_y = _read_cifar_batches(folder, layout.train_files, layout)
    val_x, val_y = _read_cifar_batches(folder, layout.val_files, layout)
    train_x, val_x = _resize_uint8(train_x, spec.img_size), _resize_uint8(val_x, spec.img_size)
    mean, std = _channel_stats(train_x)
    return DeviceData(train_x, train_y, val_x, val_y, layout.num_classes, mean, std)


def download_dataset(spec: Dataset) -> None:
    """Fetch a downloadable dataset (cifar10, cifar100) into spec.root with torchvision."""
    from torchvision.datasets import CIFAR10, CIFAR100

    downloaders = {"cifar10": CIFAR10, "cifar100": CIFAR100}
    if spec.name not in downloaders:
        raise UsageError(f"--download: {spec.name} cannot be downloaded by optbench")
    root = _require_root(spec, _cifar_layout(spec.name).describe())
    try:
        for train in (True, False):
            downloaders[spec.name](str(root), train=train, download=True)
    except (OSError, RuntimeError) as err:
        raise UsageError(f"--download: could not fetch {spec.name} into {root}: {err}") from None


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


FOLDER_LAYOUT = "ROOT/train/<class>/<image> and ROOT/val/<class>/<image> (same classes in both)"


def _class_dirs(split: Path) -> list[str]:
    with os.scandir(split) as entries:
        return sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))


def _check_folders(spec: Dataset) -> None:
    root = _require_root(spec, FOLDER_LAYOUT)
    classes = {}
    for split in ("train", "val"):
        path = root / split
        if not path.is_dir():
            raise UsageError(f"dataset.root: {path} is not a folder; expected {FOLDER_LAYOUT}")
        classes[split] = _class_dirs(path)
        if not classes[split]:
            raise UsageError(f"dataset.root: {path} has no class folders; expected {FOLDER_LAYOUT}")
    if classes["train"] != classes["val"]:
        only = sorted(set(classes["train"]) ^ set(classes["val"]))[:5]
        raise UsageError(
            f"dataset.root: {root}/train and {root}/val have different class folders "
            f"(e.g. {only}); expected {FOLDER_LAYOUT}"
        )


def _raise(err: OSError) -> None:
    raise err


@functools.cache  # a plan asks once per model; walking an ImageNet-sized tree takes seconds
@functools.cache  # a plan asks once per model; walking an ImageNet-sized tree takes seconds
def class_images(split: Path, classes: tuple[str, ...]) -> dict[str, int]:
    """How many files of each class folder of `split` the loaders read as images: those whose
    name ends in one of torchvision's IMG_EXTENSIONS, in subfolders too (ImageFolder's
    make_dataset). Counted by name: nothing is opened (a bad image fails only its trial)."""
    from torchvision.datasets.folder import IMG_EXTENSIONS, has_file_allowed_extension

    return {
        c: sum(
            has_file_allowed_extension(name, IMG_EXTENSIONS)
            for _, _, names in os.walk(split / c, onerror=_raise, followlinks=True)
            for name in names
        )
        for c in classes
    }


def folder_samples(split: Path, classes: Sequence[str]) -> list[tuple[str, int]]:
    """(path, class index) of every image of one split's class folders `classes` (the dataset's,
    dot-folders left out), in torchvision ImageFolder's order: both pipelines read these, so
    an index means the same file and label in each."""
    from torchvision.datasets.folder import IMG_EXTENSIONS, make_dataset

    class_to_idx = {c: i for i, c in enumerate(classes)}
    return make_dataset(str(split), class_to_idx, extensions=IMG_EXTENSIONS)


def _check_folder_files(spec: Dataset) -> None:
    root = Path(spec.root)
    classes = tuple(_class_dirs(root / "train"))
    for split in ("train", "val"):
        empty = [c for c, n in class_images(root / split, classes).items() if n == 0]
        if empty:
            raise UsageError(
                f"dataset.root: {root / split / empty[0]} holds no image (no file named "
                f"*.jpg, *.png, ...: torchvision's IMG_EXTENSIONS); every class folder needs one"
            )
        _refuse_empty_images(root / split, classes)


def _refuse_empty_images(split: Path, classes: tuple[str, ...]) -> None:
    """No image file of the split is empty (a copy cut short): PIL's pipeline would fail its
    trial, the tensor pipeline too or, where the file never reached a batch, train without a
    word. One stat per file (the folders' listing is read anyway)."""
    for path, _ in folder_samples(split, classes):
        if os.stat(path).st_size == 0:
            raise UsageError(f"dataset.root: {path} is an empty file, not an image")


@dataclass(frozen=True)
class FolderData:
    """A class-folder dataset, read image by image by DataLoader workers."""

    root: Path
    classes: tuple[str, ...]
    img_size: int
    crop_pct: float = EVAL_CROP_PCT
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    in_chans: int = 3

    @property
    def num_classes(self) -> int:
        return len(self.classes)


def model_input(model: str | None) -> tuple[int, float]:
    """A model's default input size and evaluation crop_pct, from its timm pretrained cfg
    (`input_size`, `crop_pct`); FOLDER_IMG_SIZE and EVAL_CROP_PCT where it gives none."""
    import timm

    from optbench import models  # noqa: F401  (registers optbench's models and their cfgs)

    cfg = timm.get_pretrained_cfg(model) if model else None
    size = cfg.input_size[-1] if cfg is not None and cfg.input_size else FOLDER_IMG_SIZE
    crop_pct = cfg.crop_pct if cfg is not None and cfg.crop_pct else EVAL_CROP_PCT
    return int(size), float(crop_pct)


def load_folders(spec: Dataset, model: str | None = None) -> FolderData:
    """A class-folder dataset, at `spec.img_size` if set, else at `model`'s input size and with
    its crop_pct (a set img_size evaluates with crop_pct EVAL_CROP_PCT)."""
    root = Path(spec.root)
    classes = tuple(_class_dirs(root / "train"))
    if spec.img_size is not None:
        return FolderData(root, classes, spec.img_size)
    size, crop_pct = model_input(model)
    return FolderData(root, classes, size, crop_pct)


# name -> (check the location without loading, load); a loader may take the model name
DATASETS: dict[str, tuple[Callable[[Dataset], None], Callable[..., DeviceData | FolderData]]] = {
    "digits": (_check_nothing, load_digits),
    "cifar10": (_check_cifar, load_cifar),
    "cifar100": (_check_cifar, load_cifar),
    "imagenet": (_check_folders, load_folders),
    "imagefolder": (_check_folders, load_folders),
}
# name -> the cheap checks of the files' contents (check_dataset_files)
_FILE_CHECKS: dict[str, Callable[[Dataset], None]] = {
    "cifar10": _check_cifar_files,
    "cifar100": _check_cifar_files,
    "imagenet": _check_folder_files,
    "imagefolder": _check_folder_files,
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


def check_dataset(spec: Dataset) -> None:
    """Raise UsageError naming the path and expected layout if `spec` cannot be loaded."""
    if spec.name not in DATASETS:
        raise UsageError(f"dataset.name: unknown dataset {spec.name!r}; known: {sorted(DATASETS)}")
    with _readable(spec):
        DATASETS[spec.name][0](spec)


def check_dataset_files(spec: Dataset) -> None:
    """check_dataset, then what can be seen of the files' contents cheaply, before anything
    runs: each CIFAR batch read once (the shape of its images, its labels in range), each class
    folder holding images (counted by name). A UsageError names the file or folder. What only
    decoding shows (a corrupt JPEG) fails its trial, naming the file (UnreadableImage)."""
    check_dataset(spec)
    if spec.name in _FILE_CHECKS:
        with _readable(spec):
            _FILE_CHECKS[spec.name](spec)


@dataclass(frozen=True)
class DatasetInfo:
    """What a dataset looks like to a model, and how many training images an epoch has."""

    num_classes: int
    in_chans: int
    img_size: int
    n_train: int


# Published sizes, so a plan or a complexity table needs no copy of the data on this machine.
_KNOWN_SIZES = {  # name: (num_classes, native img_size, training images)
    "cifar10": (10, CIFAR_SIDE, 50_000),
    "cifar100": (100, CIFAR_SIDE, 50_000),
    "imagenet": (1000, FOLDER_IMG_SIZE, 1_281_167),
}


def input_size(spec: Dataset, model: str | None = None) -> int:
    """The side of the square images a trial of `model` trains on: dataset.img_size if set,
    else the dataset's own (class folders: the model's input size, model_input). Reads no
    dataset files."""
    if spec.img_size is not None:
        return spec.img_size
    if spec.name in ("imagenet", "imagefolder"):
        return model_input(model)[0]
    if spec.name in _KNOWN_SIZES:
        return _KNOWN_SIZES[spec.name][1]
    return load_digits(spec).img_size  # bundled: nothing to find


def dataset_info(spec: Dataset, model: str | None = None) -> DatasetInfo:
    """Shape and size of a dataset (for compute estimates and complexity tables); class-folder
    datasets at `model`'s input size when the spec sets none."""
    if spec.name in _KNOWN_SIZES:
        classes, _, n_train = _KNOWN_SIZES[spec.name]
        return DatasetInfo(classes, 3, input_size(spec, model), n_train)
    data = load_dataset(spec, model)  # digits: bundled and small; imagefolder: its folders
    if isinstance(data, FolderData):
        with _readable(spec):
            n_train = sum(class_images(data.root / "train", data.classes).values())
        return DatasetInfo(data.num_classes, data.in_chans, data.img_size, n_train)
    return DatasetInfo(data.num_classes, data.in_chans, data.img_size, len(data.train_y))


def load_dataset(spec: Dataset, model: str | None = None) -> DeviceData | FolderData:
    """Load a dataset; class-folder datasets take their input size from `model` (load_folders)."""
    check_dataset(spec)
    load = DATASETS[spec.name][1]
    return load(spec, model) if load is load_folders else load(spec)

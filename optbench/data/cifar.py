"""The CIFAR-10/100 format as torchvision writes it (python pickles in one folder under the
root): its layout, the checks of its files, reading them without running any code a file
names (`CifarUnpickler`), and fetching them (`download_cifar`). data/datasets.py turns what is
read into a dataset.
"""

from __future__ import annotations

import codecs
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from optbench.errors import UsageError
from optbench.spec.catalogue import CIFAR_SIDE, require_root
from optbench.spec.recipe import Dataset

if TYPE_CHECKING:
    import torch


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


def cifar_layout(name: str) -> CifarLayout:
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


def check_cifar(spec: Dataset) -> None:
    """The root holds the dataset's batch files (their contents: check_cifar_files)."""
    layout = cifar_layout(spec.name)
    root = require_root(spec.name, spec.root, layout.describe())
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


def read_cifar_batches(
    folder: Path, files: tuple[str, ...], layout: CifarLayout
) -> tuple[torch.Tensor, torch.Tensor]:
    import torch  # here only: the driver checks the files without it (datasets.py)

    batches = [_read_cifar_batch(folder / name, layout) for name in files]
    xs, ys = zip(*batches, strict=True)
    return torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys))


def check_cifar_files(spec: Dataset) -> None:
    """Each batch file read once: a UsageError naming one that is not a batch of the dataset."""
    layout = cifar_layout(spec.name)
    folder = Path(spec.root) / layout.folder
    for name in layout.train_files + layout.val_files:
        _read_cifar_batch(folder / name, layout)


def download_cifar(spec: Dataset) -> None:
    """Fetch cifar10 or cifar100 into spec.root with torchvision (needs internet)."""
    from torchvision.datasets import CIFAR10, CIFAR100

    downloaders = {"cifar10": CIFAR10, "cifar100": CIFAR100}
    if spec.name not in downloaders:
        raise UsageError(f"--download: {spec.name} cannot be downloaded by optbench")
    root = require_root(spec.name, spec.root, cifar_layout(spec.name).describe())
    try:
        for train in (True, False):
            downloaders[spec.name](str(root), train=train, download=True)
    except (OSError, RuntimeError) as err:
        raise UsageError(f"--download: could not fetch {spec.name} into {root}: {err}") from None

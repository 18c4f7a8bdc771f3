"""Class folders on disk: ROOT/train/<class>/<image> and ROOT/val/<class>/<image>. Which
folders are classes, which files are their images (`image_files`: one walk that both the
checks and the loaders read), and the checks of the layout. Dot-folders (`.ipynb_checkpoints`,
`.git`, ...) are left out at any depth: not classes, and nothing inside them is an image.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from optbench.errors import UsageError
from optbench.spec.catalogue import require_root
from optbench.spec.recipe import Dataset

FOLDER_LAYOUT = "ROOT/train/<class>/<image> and ROOT/val/<class>/<image> (same classes in both)"


def class_dirs(split: Path) -> list[str]:
    """The class folders of one split, sorted (class index = position)."""
    with os.scandir(split) as entries:
        return sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))


def _raise(err: OSError) -> None:
    raise err


def image_files(folder: Path) -> Iterator[str]:
    """The images of one class folder, subfolders included, in torchvision ImageFolder's
    order (make_dataset: folders sorted by path, files by name; links followed), minus
    dot-folders at any depth. An image is a file whose name ends in one of torchvision's
    IMG_EXTENSIONS: counted by name, nothing opened."""
    from torchvision.datasets.folder import IMG_EXTENSIONS, has_file_allowed_extension

    walked = []
    for top, dirs, names in os.walk(folder, onerror=_raise, followlinks=True):
        dirs[:] = [d for d in dirs if not d.startswith(".")]  # pruned: not walked into
        walked.append((top, names))
    for top, names in sorted(walked):
        for name in sorted(names):
            if has_file_allowed_extension(name, IMG_EXTENSIONS):
                yield os.path.join(top, name)


@functools.cache  # a plan asks once per model; walking an ImageNet-sized tree takes seconds
def class_images(split: Path, classes: tuple[str, ...]) -> dict[str, int]:
    """How many images (`image_files`) each class folder of `split` holds."""
    return {c: sum(1 for _ in image_files(split / c)) for c in classes}


def folder_samples(split: Path, classes: Sequence[str]) -> list[tuple[str, int]]:
    """(path, class index) of every image of one split's class folders `classes`, class by
    class in `image_files` order: both pipelines read these, so an index means the same file
    and label in each."""
    return [(path, i) for i, c in enumerate(classes) for path in image_files(split / c)]


def check_folders(spec: Dataset) -> None:
    """Both splits are folders with the same class folders (nothing inside them read)."""
    root = require_root(spec.name, spec.root, FOLDER_LAYOUT)
    classes = {}
    for split in ("train", "val"):
        path = root / split
        if not path.is_dir():
            raise UsageError(f"dataset.root: {path} is not a folder; expected {FOLDER_LAYOUT}")
        classes[split] = class_dirs(path)
        if not classes[split]:
            raise UsageError(f"dataset.root: {path} has no class folders; expected {FOLDER_LAYOUT}")
    if classes["train"] != classes["val"]:
        only = sorted(set(classes["train"]) ^ set(classes["val"]))[:5]
        raise UsageError(
            f"dataset.root: {root}/train and {root}/val have different class folders "
            f"(e.g. {only}); expected {FOLDER_LAYOUT}"
        )


def check_folder_files(spec: Dataset) -> None:
    """Every class folder of both splits holds an image (counted by name), and none of those
    image files is empty."""
    root = Path(spec.root)
    classes = tuple(class_dirs(root / "train"))
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

"""The dataset catalogue: every dataset optbench reads, by name, with its on-disk format, the
layouts it may take, and what is known of it without its files (published sizes). spec/schema.py,
run/preflight.py and data/datasets.py all read it, so a dataset is added here once. Pure data: no
torch, so a study's names are checked without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from optbench.errors import UsageError

Format = Literal["bundled", "cifar", "images"]
# How an image dataset lies under its root: class folders of image files, or WebDataset tar
# shards (data/shards.py). Where the data lies, not what it is: no part of a cell id.
Layout = Literal["folders", "wds"]
LAYOUTS: tuple[str, ...] = ("folders", "wds")


@dataclass(frozen=True)
class DatasetKind:
    """One dataset. `format`: bundled (loaded whole, no root), cifar (torchvision's pickles,
    loaded whole) or images (one image at a time, each resized on its own, in any LAYOUTS).
    `classes`, `img_size`, `n_train`, `n_val` (the training and validation split sizes),
    `in_chans`: published (digits' training size: the loader's fixed split), so a plan needs no
    copy of the data; None where only the files tell. A published `n_val` replaces a measured
    copy's in cost estimates (plan/costs.py: the copy may be a sample)."""

    name: str
    format: Format
    classes: int | None = None
    img_size: int | None = None
    n_train: int | None = None
    n_val: int | None = None
    in_chans: int = 3

    @property
    def sized_without_data(self) -> bool:
        return self.n_train is not None

    @property
    def layouts(self) -> tuple[str, ...]:
        return LAYOUTS if self.format == "images" else ("folders",)


CIFAR_SIDE = 32  # CIFAR's images: 32x32 RGB
FOLDER_IMG_SIZE = 224  # image datasets, for a model whose pretrained cfg gives no input size
# image datasets' normalization: ImageNet's channel means and stds in [0, 1] units (pycls, timm)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

CATALOGUE: dict[str, DatasetKind] = {
    d.name: d
    for d in (
        # scikit-learn's 1,797 grey 8x8 digits, 0-9: the training size of data/datasets.py's
        # fixed 80/20 split (stratified, seed 0), so a plan needs no load of the bundle
        DatasetKind("digits", "bundled", 10, 8, 1_437, in_chans=1),
        DatasetKind("cifar10", "cifar", 10, CIFAR_SIDE, 50_000, 10_000),
        DatasetKind("cifar100", "cifar", 100, CIFAR_SIDE, 50_000, 10_000),
        DatasetKind("imagenet", "images", 1000, FOLDER_IMG_SIZE, 1_281_167, 50_000),
        DatasetKind("imagefolder", "images"),  # any class folders (Flowers, Pets, ...)
    )
}
DATASET_NAMES: tuple[str, ...] = tuple(CATALOGUE)


def is_image_dataset(name: str) -> bool:
    """Read image by image (each resized on its own), as opposed to whole tensors."""
    kind = CATALOGUE.get(name)
    return kind is not None and kind.format == "images"


def require_root(name: str, root: Path | None, layout: str) -> Path:
    """The dataset's root, or a UsageError saying how it must be laid out."""
    if root is None:
        raise UsageError(f"dataset.root: {name} needs a root folder laid out as {layout}")
    return Path(root)

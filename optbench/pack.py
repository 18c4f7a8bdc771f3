"""`optbench data pack FOLDER OUT`: a class-folder dataset (ROOT/train/<class>/..., ROOT/val/...)
packed into WebDataset tar shards (train/shards.py reads them: `dataset.layout: wds`), in the
order the folder is read (folders.folder_samples), so a study on the shards trains on the same
images in the same order as on the folder. Each sample is `<key>.<ext>` (the file's bytes,
unchanged) and `<key>.cls` (its class index); keys are the sample's position in its split.
Deterministic: the same folder gives byte-identical shards. OUT gets the shards, manifest.json
(classes, images per split and class, each shard's images, bytes and sha256) and the index.

Bad input (FOLDER not a class-folder dataset, an empty image file, OUT not empty) is one line,
exit 2, before anything is written; the shards are written into a hidden folder beside OUT and
renamed to OUT when complete, so a failed pack leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import shutil
import tarfile
from pathlib import Path
from typing import Annotated

import typer

from optbench.errors import UsageError
from optbench.train.shards import INDEX_NAME, MANIFEST, build_index, shard_files

data_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help, as the app's (cli.py)
    help="Prepare datasets (pack class folders into shards).",
)
PER_SHARD = 5000  # images per shard by default (ImageNet's train split: 257 shards of ~0.5 GB)


def _member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o444, 0  # no owner, no time: reproducible
    tar.addfile(info, io.BytesIO(data))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _write_split(samples: list[tuple[str, int]], split: str, out: Path, per_shard: int) -> list:
    shards = []
    for start in range(0, len(samples), per_shard):
        name = f"{split}-{start // per_shard:06d}.tar"
        with tarfile.open(out / name, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i, (path, cls) in enumerate(samples[start : start + per_shard], start=start):
                key = f"{i:08d}"
                with open(path, "rb") as f:
                    _member(tar, f"{key}.{Path(path).suffix[1:].lower()}", f.read())
                _member(tar, f"{key}.cls", str(cls).encode())
        images = min(per_shard, len(samples) - start)
        size = (out / name).stat().st_size
        shards.append(
            {"name": name, "images": images, "bytes": size, "sha256": _sha256(out / name)}
        )
    return shards


def _check_out(out: Path) -> None:
    from optbench.checks import check_writable_folder

    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UsageError(f"OUT: {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        raise UsageError(f"OUT: {out} is not empty; optbench packs into a new or empty folder")
    check_writable_folder(out.parent, "OUT")


def _samples(folder: Path) -> tuple[tuple[str, ...], dict[str, list[tuple[str, int]]]]:
    """The folder's classes and samples of each split, checked as a study checks them, and
    no empty file among them."""
    from optbench.recipe import Dataset
    from optbench.train.datasets import check_dataset_files
    from optbench.train.folders import class_dirs, folder_samples

    try:
        check_dataset_files(Dataset(name="imagefolder", root=folder))
    except UsageError as err:
        raise UsageError(f"FOLDER: {str(err).removeprefix('dataset.root: ')}") from None
    classes = tuple(class_dirs(folder / "train"))
    samples = {split: folder_samples(folder / split, classes) for split in ("train", "val")}
    return classes, samples


def pack_folder(folder: Path, out: Path, per_shard: int = PER_SHARD) -> dict:
    """Pack `folder` into shards in `out` (module docstring); the manifest."""
    if per_shard < 1:
        raise UsageError(f"--per-shard: {per_shard} must be at least 1")
    _check_out(out)
    classes, samples = _samples(folder)
    work = out.parent / f".{out.name}.packing-{secrets.token_hex(4)}"
    work.mkdir()
    try:
        manifest = {"format": "webdataset", "classes": list(classes), "splits": {}}
        for split, split_samples in samples.items():
            counts = [0] * len(classes)
            for _, cls in split_samples:
                counts[cls] += 1
            manifest["splits"][split] = {
                "images": len(split_samples),
                "per_class": counts,
                "shards": _write_split(split_samples, split, work, per_shard),
            }
        (work / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        index = build_index(work, shard_files(work))
        (work / INDEX_NAME).write_text(index.to_json())
        os.replace(work, out)  # an empty `out` is replaced; the index names shards, not paths
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return manifest


@data_app.command("pack")
def pack(
    folder: Annotated[
        Path, typer.Argument(help="a class-folder dataset: FOLDER/{train,val}/<class>/")
    ],
    out: Annotated[Path, typer.Argument(help="a new (or empty) folder for the shards")],
    per_shard: Annotated[int, typer.Option(help="images per shard")] = PER_SHARD,
) -> None:
    """Pack a class folder into WebDataset tar shards.

    A study reads them with `dataset.layout: wds` (docs/datasets.md)."""
    manifest = pack_folder(folder, out, per_shard)
    for split, entry in manifest["splits"].items():
        typer.echo(f"{split}: {entry['images']} images in {len(entry['shards'])} shards")
    typer.echo(f"wrote {out} ({len(manifest['classes'])} classes; {out / MANIFEST})")

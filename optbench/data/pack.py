"""A class-folder dataset (ROOT/train/<class>/..., ROOT/val/...)
packed into WebDataset tar shards (data/shards.py reads them: `dataset.layout: wds`), in the
order the folder is read (folders.folder_samples), so a study on the shards trains on the same
images in the same order as on the folder. Each sample is `<key>.<ext>` (the file's bytes,
unchanged) and `<key>.cls` (its class index); keys are the sample's position in its split.
Deterministic: the same folder gives byte-identical shards. OUT gets the shards, manifest.json
(classes, images per split and class, each shard's images, bytes and sha256) and the index.

Bad input (FOLDER not a class-folder dataset, an empty or unreadable image file, OUT not
empty, OUT inside FOLDER or around it, OUT's folder missing) is one line, a UsageError (exit 2
from `optbench data pack FOLDER OUT`, cli/data_commands.py), before anything is written; the
shards are written into a hidden folder beside OUT and renamed to OUT when complete, so a failed
pack leaves nothing behind, and a write that fails there (a full disk) is one line naming the
file, a WriteError (exit 1).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import shutil
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from optbench.data.shards import INDEX_NAME, MANIFEST, build_index, shard_files
from optbench.errors import UsageError, WriteError

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


def _image_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as err:  # FOLDER's, not a write: bad input
        raise UsageError(f"FOLDER: {path} cannot be read ({err.strerror or err})") from None


@contextmanager
def _writing(path: Path) -> Iterator[None]:
    """A write of `path` that fails names it: a tar's writes on a full disk name no file."""
    try:
        yield
    except OSError as err:
        if err.filename is not None:
            raise
        raise OSError(err.errno, err.strerror, str(path)) from None


def _write_split(samples: list[tuple[str, int]], split: str, out: Path, per_shard: int) -> list:
    shards = []
    for start in range(0, len(samples), per_shard):
        name = f"{split}-{start // per_shard:06d}.tar"
        with (
            _writing(out / name),
            tarfile.open(out / name, "w", format=tarfile.USTAR_FORMAT) as tar,
        ):
            for i, (path, cls) in enumerate(samples[start : start + per_shard], start=start):
                key = f"{i:08d}"
                data = _image_bytes(path)
                _member(tar, f"{key}.{Path(path).suffix[1:].lower()}", data)
                _member(tar, f"{key}.cls", str(cls).encode())
        images = min(per_shard, len(samples) - start)
        size = (out / name).stat().st_size
        shards.append(
            {"name": name, "images": images, "bytes": size, "sha256": _sha256(out / name)}
        )
    return shards


def _check_out(folder: Path, out: Path) -> None:
    from optbench.host import check_writable_folder

    # resolved (links, `..`), as the writes and reads will go: OUT within FOLDER would pack its
    # own shards into the dataset it reads (which then fails its checks), FOLDER within OUT
    # would be replaced by them
    within, around = out.resolve(), folder.resolve()
    if within == around or around in within.parents:
        raise UsageError(f"OUT: {out} lies inside FOLDER {folder}; pack into a folder outside it")
    if within in around.parents:
        raise UsageError(f"OUT: {out} holds FOLDER {folder}; pack into a folder outside it")
    if not out.parent.is_dir() and not out.parent.is_symlink():
        raise UsageError(f"OUT: {out}: its folder {out.parent} does not exist; make it first")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UsageError(f"OUT: {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        raise UsageError(f"OUT: {out} is not empty; optbench packs into a new or empty folder")
    check_writable_folder(out.parent, "OUT")


def _samples(folder: Path) -> tuple[tuple[str, ...], dict[str, list[tuple[str, int]]]]:
    """The folder's classes and samples of each split, checked as a study checks them, and
    no empty file among them."""
    from optbench.data.datasets import check_dataset_files
    from optbench.data.folders import class_dirs, folder_samples
    from optbench.spec.recipe import Dataset

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
    _check_out(folder, out)
    classes, samples = _samples(folder)
    work = out.parent / f".{out.name}.packing-{secrets.token_hex(4)}"
    try:
        work.mkdir()
    except OSError as err:
        raise WriteError(f"{out}: cannot write: {err.strerror or err}") from None
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
        with _writing(work / MANIFEST):
            (work / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        index = build_index(work, shard_files(work))
        with _writing(work / INDEX_NAME):
            (work / INDEX_NAME).write_text(index.to_json())
        os.replace(work, out)  # an empty `out` is replaced; the index names shards, not paths
    except OSError as err:  # a full disk, an I/O error: named as the file in OUT it was to be
        shutil.rmtree(work, ignore_errors=True)
        failed = Path(err.filename or work)
        where = out / failed.relative_to(work) if failed.is_relative_to(work) else failed
        raise WriteError(f"{where}: cannot write: {err.strerror or err}") from None
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return manifest

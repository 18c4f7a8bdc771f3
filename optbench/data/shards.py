"""WebDataset tar shards as an image dataset's layout (`dataset.layout: wds`): ROOT/*train*.tar
and ROOT/*val*.tar (e.g. `optbench data pack`'s train-000000.tar, or the imagenet1k-train-0000
/ imagenet1k-validation-00 shards ImageNet-1k is distributed in), read from the tar format
directly, with random access.

A sample is the members that share a key (WebDataset's rule: the name up to the first dot of
its last part): one image (torchvision's IMG_EXTENSIONS) and a `.cls` holding its class index;
other members (.json, .txt) are ignored. The member index (`ShardIndex`: every sample's
shard, data offset, size and class, split by split, in shard-name then tar order) is built
once by reading the tar headers and cached as JSON: beside the shards (ROOT/INDEX_NAME) where
ROOT is writable, else in `cache_dir` (a study's folder). A cached index is used only while
every shard's name, size and mtime match it; one that does not parse is refused. Member
names only label samples: nothing is extracted, and a read is `size` bytes at `offset` of a
shard found under ROOT, so no name in a tar (../x, /etc/passwd, a link) makes optbench read
or write anything else.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from optbench import safefs
from optbench.errors import UsageError

INDEX_NAME = ".optbench-wds-index.json"
MANIFEST = "manifest.json"  # written by `optbench data pack` (pack.py)
INDEX_VERSION = 1
SPLITS = {"train": "*train*.tar", "val": "*val*.tar"}  # glob under ROOT, sorted by name
WDS_LAYOUT = (
    "ROOT/*train*.tar and ROOT/*val*.tar (WebDataset shards: <key>.<image ext> + <key>.cls)"
)
_KEY = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")  # webdataset's base_plus_ext
_INDEX_LIMIT = 2**31  # bytes of a cached index read at most (ImageNet's: ~60 MB)


class Member(NamedTuple):
    """One sample's image: `size` bytes at `offset` of the shard file `shard`."""

    shard: str
    offset: int
    size: int
    name: str

    def __str__(self) -> str:  # how errors name it: <shard>:<member>
        return f"{self.shard}:{self.name}"

    def read(self) -> bytes:
        with open(self.shard, "rb") as f:
            f.seek(self.offset)
            data = f.read(self.size)
        if len(data) != self.size:
            raise OSError(f"truncated shard: {len(data)} of {self.size} bytes")
        return data


def read_bytes(sample: str | Member) -> bytes:
    """The encoded image of a sample: a file's bytes (class folders) or a shard member's."""
    if isinstance(sample, Member):
        return sample.read()
    with open(sample, "rb") as f:
        return f.read()


def load_rgb(sample: str | Member):
    """The sample as a PIL RGB image, decoded as torchvision's default_loader decodes a file."""
    import io

    from PIL import Image
    from torchvision.datasets.folder import default_loader

    if not isinstance(sample, Member):
        return default_loader(sample)
    with Image.open(io.BytesIO(sample.read())) as img:
        return img.convert("RGB")


@dataclass(frozen=True)
class ShardIndex:
    """Every sample of a shard dataset. `shards`: [name, size, mtime_ns] of each shard file
    (what the index was built from); `rows[split]`: [shard number, offset, size, member name,
    class index] of each sample."""

    root: Path
    shards: list[list]
    rows: dict[str, list[list]]

    @property
    def num_classes(self) -> int:
        return 1 + max(r[4] for r in self.rows["train"])

    def samples(self, split: str) -> list[tuple[Member, int]]:
        paths = [str(self.root / name) for name, _, _ in self.shards]
        return [
            (Member(paths[s], off, size, name), c) for s, off, size, name, c in self.rows[split]
        ]

    def to_json(self) -> str:
        body = {"version": INDEX_VERSION, "shards": self.shards, **self.rows}
        return json.dumps(body, separators=(",", ":"))


# Compressed tar files (WebDataset's .tgz, .tar.gz among them), which optbench does not read:
# it reads each sample at its offset in the shard, which a compressed stream has not.
COMPRESSED = (".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tar.zst")


def _compressed_note(root: Path, split: str) -> str:
    """Where ROOT holds a split's shards compressed: a clause naming the first and saying they
    are not read; "" otherwise."""
    stem = SPLITS[split].removesuffix(".tar")
    packed = sorted(p for ext in COMPRESSED for p in root.glob(stem + ext))
    if not packed:
        return ""
    return (
        f" ({len(packed)} compressed, such as {packed[0].name}: compressed shards are not read; "
        "decompress them to .tar files, with gunzip for .gz)"
    )


def shard_files(root: Path) -> dict[str, list[Path]]:
    """The shards of each split (sorted by name); a UsageError if a split has none, a name
    matches both splits, or a shard is not a regular file (a link to one is: the data root is
    the user's, as a Hugging Face download's links to its blobs)."""
    found = {split: sorted(root.glob(pattern)) for split, pattern in SPLITS.items()}
    for split, paths in found.items():
        if not paths:
            raise UsageError(
                f"dataset.root: {root} holds no {SPLITS[split]} shard"
                f"{_compressed_note(root, split)}; expected {WDS_LAYOUT}"
            )
    both = set(found["train"]) & set(found["val"])
    if both:
        raise UsageError(f"dataset.root: {min(both)} matches both *train* and *val*: rename it")
    for path in found["train"] + found["val"]:
        if not path.is_file():
            raise UsageError(f"dataset.root: {path} is not a regular file (a shard must be one)")
    return found


def _manifest(root: Path) -> dict | None:
    """`optbench data pack`'s manifest.json, parsed and checked (None where there is none): a
    regular file of at most _INDEX_LIMIT bytes (a FIFO or a link there is refused, not waited
    on) holding what pack writes of what is read here (`_manifest_problem`); UsageError naming
    the file and the field otherwise."""
    path = root / MANIFEST
    try:
        text = safefs.read_bytes(path, root, _INDEX_LIMIT)
        manifest = None if text is None else json.loads(text)
    except (OSError, ValueError, RecursionError) as err:  # UnsafePath: a UsageError
        why = "nested too deep" if isinstance(err, RecursionError) else err
        raise UsageError(f"dataset.root: {path} cannot be read ({why})") from None
    problem = None if manifest is None else _manifest_problem(manifest)
    if problem is not None:
        raise UsageError(f"dataset.root: {path}: {problem}")
    return manifest


def _manifest_problem(manifest) -> str | None:
    """What in a parsed manifest is not what pack writes, as "field: why"; None if nothing.
    Read here: `classes` (names), and each split's `shards`, each a `name` (a .tar file in
    ROOT) and its `images` (a count)."""
    if not isinstance(manifest, dict):
        return "not a JSON object"
    classes = manifest.get("classes")
    if not isinstance(classes, list):
        return "classes: not a list of class names"
    for i, name in enumerate(classes):
        if not isinstance(name, str):
            return f"classes.{i}: not a class name (a string)"
    splits = manifest.get("splits")
    if not isinstance(splits, dict):
        return "splits: not an object of splits"
    for split in SPLITS:
        shards = splits.get(split).get("shards") if isinstance(splits.get(split), dict) else None
        if not isinstance(shards, list):
            return f"splits.{split}.shards: not a list of shards"
        for i, entry in enumerate(shards):
            where = f"splits.{split}.shards.{i}"
            name = entry.get("name") if isinstance(entry, dict) else None
            images = entry.get("images") if isinstance(entry, dict) else None
            if not isinstance(name, str) or Path(name).name != name or not name.endswith(".tar"):
                return f"{where}.name: not the name of a .tar file in its folder ({name!r:.60})"
            if type(images) is not int or images < 0:
                return f"{where}.images: not a count of images ({images!r:.60})"
    return None


def check_manifest(root: Path, found: dict[str, list[Path]], index: ShardIndex | None = None):
    """The shards `optbench data pack`'s manifest.json lists are all there (and, with the
    index, hold the images it counts); nothing to compare without a manifest."""
    manifest = _manifest(root)
    if manifest is None:
        return
    listed = {
        s: [(e["name"], e["images"]) for e in manifest["splits"][s]["shards"]] for s in SPLITS
    }
    for split, entries in listed.items():
        names = {p.name for p in found[split]}
        missing = [n for n, _ in entries if n not in names]
        if missing:
            raise UsageError(
                f"dataset.root: {root / missing[0]} is missing (manifest.json lists "
                f"{len(entries)} {split} shards, {len(missing)} not found)"
            )
        expected = sum(n for _, n in entries)
        if index is not None and len(index.rows[split]) != expected:
            raise UsageError(
                f"dataset.root: {root}: the {split} shards hold {len(index.rows[split])} "
                f"samples, manifest.json counts {expected}"
            )


def _stats(found: dict[str, list[Path]]) -> list[list]:
    shards = []
    for path in found["train"] + found["val"]:
        st = path.stat()
        shards.append([path.name, st.st_size, st.st_mtime_ns])
    return shards


def _refuse(shard: Path, what: str) -> UsageError:
    return UsageError(f"dataset.root: {shard}: {what}")


def _scan(path: Path, number: int) -> list[list]:
    """The samples of one shard, from its tar headers (and its .cls members' few bytes)."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    images = {e.lstrip(".") for e in IMG_EXTENSIONS}
    samples: dict[str, dict] = {}
    try:
        with tarfile.open(path, "r:") as tar:  # uncompressed: members at fixed offsets
            for m in tar:
                if m.isdir():
                    continue
                if not m.isfile() or not m.name.isprintable():
                    raise _refuse(path, f"member {m.name!r} is not a regular file")
                match = _KEY.match(m.name)
                if match is None:
                    raise _refuse(path, f"member {m.name!r} has no extension: no sample's")
                key, ext = match.groups()
                entry = samples.setdefault(key, {})
                if ext.lower() in images:
                    if "image" in entry:
                        raise _refuse(path, f"sample {key!r} has two images")
                    entry["image"] = (m.offset_data, m.size, m.name)
                elif ext == "cls":
                    if "cls" in entry:  # tar keeps both, and the last would win
                        raise _refuse(path, f"sample {key!r} has two .cls members")
                    entry["cls"] = _class_of(tar, m, path)
    except (tarfile.TarError, EOFError) as err:
        raise _refuse(path, f"not a readable tar shard ({err})") from None
    rows = []
    for key, entry in samples.items():
        if "image" not in entry:
            raise _refuse(path, f"sample {key!r} has no image member (*.jpg, *.png, ...)")
        if "cls" not in entry:
            raise _refuse(path, f"sample {key!r} has no .cls member (its class index)")
        offset, size, name = entry["image"]
        if size == 0:
            raise _refuse(path, f"member {name!r} is empty, not an image")
        rows.append([number, offset, size, name, entry["cls"]])
    return rows


# A .cls member: decimal digits, and at most one newline after them (what WebDataset's writers
# and `echo` write). Python's int() would also read "1_0" (as 10), "+3", " 3 " and other
# scripts' digits; none of them is a class index here.
_CLASS_TEXT = re.compile(rb"[0-9]{1,32}\n?")


def _class_of(tar: tarfile.TarFile, member: tarfile.TarInfo, path: Path) -> int:
    text = tar.extractfile(member).read(33) if member.size <= 33 else b""
    if not _CLASS_TEXT.fullmatch(text):
        raise _refuse(path, f"member {member.name!r} is not a class index (decimal digits, >= 0)")
    return int(text)


def _cls_member(row: list) -> str:
    """The name of the .cls member of an index row's sample (the image's key + .cls)."""
    return f"{_KEY.match(row[3]).group(1)}.cls"


def build_index(root: Path, found: dict[str, list[Path]]) -> ShardIndex:
    """Scan every shard's headers (reads the tar headers, not the images). Every class is below
    the number of training samples, since every class needs one (check_index): a larger .cls is
    refused here, naming its shard and member, before anything counts up to it."""
    paths = found["train"] + found["val"]
    numbers = {p: i for i, p in enumerate(paths)}
    rows = {
        split: [row for p in split_paths for row in _scan(p, numbers[p])]
        for split, split_paths in found.items()
    }
    n_train = len(rows["train"])
    for split_rows in rows.values():
        for row in split_rows:
            if row[4] >= n_train:
                raise _refuse(
                    paths[row[0]],
                    f"member {_cls_member(row)!r}: class {row[4]}, but the train shards hold "
                    f"{n_train} samples, and every class needs a training sample",
                )
    return ShardIndex(root, _stats(found), rows)


def _parse(path: Path, text: bytes, root: Path) -> ShardIndex:
    """A cached index, each row checked against the shards it names: a crafted one can make a
    read go only to bytes inside a shard under ROOT."""
    try:
        body = json.loads(text)
        assert body["version"] == INDEX_VERSION
        shards = [[str(n), int(s), int(t)] for n, s, t in body["shards"]]
        assert all(n == Path(n).name and n.endswith(".tar") for n, _, _ in shards)
        rows = {split: [list(r) for r in body[split]] for split in SPLITS}
        for split_rows in rows.values():
            for number, offset, size, name, cls in split_rows:
                assert all(type(v) is int for v in (number, offset, size, cls)), "not integers"
                assert 0 <= number < len(shards) and type(name) is str and _KEY.match(name)
                assert 0 <= offset and 0 < size and offset + size <= shards[number][1]
                # as build_index: a class below the number of training samples
                assert 0 <= cls < len(rows["train"]), f"class {cls} of {name!r} out of range"
    except (ValueError, KeyError, TypeError, AssertionError) as err:
        raise UsageError(
            f"dataset.root: {path} is not a valid shard index ({type(err).__name__}: {err}); "
            "delete it and optbench builds a new one"
        ) from None
    return ShardIndex(root, shards, rows)


def cache_file(root: Path, cache_dir: Path) -> Path:
    """Where `cache_dir` keeps the index of the shards at `root` (one per root)."""
    tag = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:12]
    return cache_dir / f"wds-index-{tag}.json"


def _cached(root: Path, cache_dir: Path | None, shards: list[list]) -> ShardIndex | None:
    places = [(root / INDEX_NAME, root)]
    if cache_dir is not None:
        places.append((cache_file(root, cache_dir), cache_dir))
    for path, base in places:
        try:
            text = safefs.read_bytes(path, base, _INDEX_LIMIT)
        except FileNotFoundError:
            text = None
        if text is not None:
            index = _parse(path, text, root)
            if index.shards == shards:  # else stale: the shards changed since it was built
                return index
    return None


@functools.cache  # per process: the checks, a plan and the loaders read one index
def _index(root: Path, cache_dir: Path | None, stamps: tuple) -> tuple[ShardIndex, bool]:
    shards = [list(s) for s in stamps[0]]
    index = _cached(root, cache_dir, shards)
    return (index, True) if index is not None else (build_index(root, shard_files(root)), False)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def open_index(root: Path, cache_dir: Path | None = None) -> tuple[ShardIndex, bool]:
    """The shards' index and whether it came from a cache (read-only: `save_index` writes).
    Memoized while neither the shards nor a cached index file change."""
    shards = tuple(tuple(s) for s in _stats(shard_files(root)))
    caches = [root / INDEX_NAME] + ([cache_file(root, cache_dir)] if cache_dir else [])
    return _index(root, cache_dir, (shards, *map(_stamp, caches)))


def save_index(index: ShardIndex, cache_dir: Path | None = None) -> Path | None:
    """Write the index beside the shards, or where ROOT is not writable into `cache_dir`;
    where it went (None: nowhere writable, it stays in this process)."""
    places = [(index.root / INDEX_NAME, index.root)]
    if cache_dir is not None:
        places.append((cache_file(index.root, cache_dir), cache_dir))
    text = index.to_json()
    for path, base in places:
        try:
            safefs.write_text(path, base, text)
            return path
        except OSError:
            continue
    return None


def check_index(index: ShardIndex, dataset: str | None = None, classes: int | None = None) -> None:
    """Every class 0..K-1 has a training and a validation sample (as every class folder must
    hold an image), K = the largest training class + 1; with the dataset's published number of
    `classes` (the catalogue's: imagenet's 1000), no class is that or more."""
    if not index.rows["train"]:
        raise UsageError(f"dataset.root: {index.root}: the train shards hold no sample")
    for split in SPLITS:
        for row in index.rows[split] if classes is not None else ():
            if row[4] >= classes:
                raise _refuse(
                    index.root / index.shards[row[0]][0],
                    f"member {_cls_member(row)!r}: class {row[4]}, but {dataset} has "
                    f"{classes} classes (0..{classes - 1})",
                )
    k = index.num_classes
    for split in SPLITS:
        seen = {r[4] for r in index.rows[split]}
        missing = sorted(set(range(k)) - seen)
        if missing or max(seen) >= k:
            what = f"class {missing[0]}" if missing else f"a class above {k - 1}"
            raise UsageError(
                f"dataset.root: {index.root}: the {split} shards have no sample of {what} "
                f"(classes 0..{k - 1} from the train shards' .cls); every class needs one"
            )


def class_names(root: Path, k: int) -> tuple[str, ...]:
    """The classes' names from `optbench data pack`'s manifest.json (checked on read), where
    it names k, else their indices."""
    names = (_manifest(root) or {}).get("classes")
    return tuple(names) if names is not None and len(names) == k else tuple(map(str, range(k)))

"""Complexity counts, default inputs and patch sizes of models, cached on disk, so that
`optbench models`, a dry run's plan, `optbench run`'s checks and the report's complexity table
need neither torch nor timm once counted.

Counting runs each model's forward pass op by op through Python (complexity.py): about half a
second a model, 25 s for the zoo, after 5-10 s of importing torch and timm. A count is a pure
function of the model's code, its arguments and the installed torch and timm, so the cache is
keyed by a fingerprint of optbench/models/*.py and those two versions and starts afresh when any
of them changes; each entry is keyed by what its name builds (models.model_origin): a model of
the user's own (registered by a study's `imports`) under its module's source digest, so counts
made under one module's code are never read under another's, nor for optbench's or timm's
model of the same name. It lives in $XDG_CACHE_HOME/optbench/ (default ~/.cache/optbench/).

A cache never hangs or crashes a command: it is read and written through safefs (a link, a FIFO
or a device in its place is not opened for reading, only replaced on the next write), a file
that cannot be read, is not JSON or is too large is ignored, and an entry that is not the
numbers it should be (counts and defaults are non-negative integers under their names) is
treated as missing and counted again.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path

from optbench import safefs
from optbench.errors import UsageError
from optbench.models import input_multiple, model_origin

CACHE_FILE = "models.json"
# A zoo's entries take a few KB; a larger file is none of ours (and is not read into memory).
MAX_CACHE_BYTES = 1 << 20
COUNT_FIELDS = ("flops", "params", "acts")
DEFAULT_FIELDS = ("img_size", "in_chans", "num_classes")
MULTIPLE_FIELDS = ("multiple",)


def cache_path() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "optbench" / CACHE_FILE


def fingerprint() -> str:
    """What the cached numbers depend on: the zoo's source and the torch and timm versions."""
    h = hashlib.sha256()
    for package in ("torch", "timm"):
        try:
            h.update(f"{package} {metadata.version(package)}\n".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{package} none\n".encode())
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\n" + path.read_bytes())
    return h.hexdigest()[:16]


class _Cache:
    """The cache file's entries for the current fingerprint, read once per process."""

    def __init__(self) -> None:
        self.entries: dict[str, dict] | None = None
        self.key = ""

    def _load(self) -> dict[str, dict]:
        if self.entries is None:
            self.key = fingerprint()
            data = _read(cache_path())
            ok = isinstance(data, dict) and data.get("fingerprint") == self.key
            entries = data.get("entries") if ok else None
            self.entries = entries if isinstance(entries, dict) else {}
        return self.entries

    def get(self, key: str, fields: tuple[str, ...]) -> dict[str, int] | None:
        """The entry `key` if it is {field: non-negative int} for exactly `fields`; None (to
        be counted again) if it is missing or anything else."""
        entry = self._load().get(key)
        if not isinstance(entry, dict) or set(entry) != set(fields):
            return None
        numbers = all(type(v) is int and v >= 0 for v in entry.values())  # not bool, not float
        return entry if numbers else None

    def put(self, key: str, value: dict) -> None:
        entries = self._load()
        entries[key] = value
        path = cache_path()
        text = json.dumps({"fingerprint": self.key, "entries": entries})
        try:  # a temporary file renamed over the cache: a link or FIFO there is replaced
            safefs.write_text(path, path.parent, text)
        except (OSError, UsageError):
            pass  # a cache that cannot be written is only slower next time

    def clear(self) -> None:
        """Forget what was read (tests change XDG_CACHE_HOME or the code between calls)."""
        self.entries = None


def _read(path: Path) -> object:
    """The cache file's JSON, or None where there is none to trust: missing, unreadable, not a
    regular file (a FIFO would block an open for reading forever), too large, not JSON, or
    nested too deep for the parser."""
    try:
        raw = safefs.read_bytes(path, path.parent, MAX_CACHE_BYTES)
        return None if raw is None else json.loads(raw)
    except (OSError, UsageError, ValueError, RecursionError):
        return None


CACHE = _Cache()


def cached_counts(name: str, *, num_classes: int, in_chans: int, img_size: int) -> dict[str, int]:
    """{"flops", "params", "acts"} for one image of `name` (complexity.model_complexity), from
    the cache when this code has counted them before on this install."""

    def compute() -> dict[str, int]:
        from optbench.models.complexity import model_complexity

        return model_complexity(name, num_classes=num_classes, in_chans=in_chans, img_size=img_size)

    return _cached("counts", name, COUNT_FIELDS, compute, f"/{num_classes}/{in_chans}/{img_size}")


def cached_defaults(name: str, compute) -> dict[str, int]:
    """The default input and classes of `name` ({"img_size", "in_chans", "num_classes"}), from
    the cache, or `compute()` (which reads the model's timm cfg) the first time."""
    return _cached("defaults", name, DEFAULT_FIELDS, compute)


def cached_input_multiple(name: str) -> int:
    """models.input_multiple(name) (its patch size), from the cache once computed: checking a
    study's input size then needs no timm."""

    def compute() -> dict[str, int]:
        return {"multiple": input_multiple(name)}

    return _cached("multiple", name, MULTIPLE_FIELDS, compute)["multiple"]


def _cached(
    kind: str, name: str, fields: tuple[str, ...], compute, shape: str = ""
) -> dict[str, int]:
    """The entry `kind`/`name` (under what the name builds; `shape`: the input it was computed
    at) from the cache, or `compute()`, cached, the first time; never cached for code no key
    covers (model_origin None)."""
    origin = model_origin(name)
    if origin is None:
        return compute()
    key = f"{kind}/{name}{origin}{shape}"
    entry = CACHE.get(key, fields)
    if entry is None:
        entry = compute()
        CACHE.put(key, entry)
    return entry

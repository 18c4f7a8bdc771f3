"""Complexity counts and default inputs of models, cached on disk, so that `optbench models`, a
dry run's plan and the report's complexity table need neither torch nor timm once counted.

Counting runs each model's forward pass op by op through Python (complexity.py): about half a
second a model, 25 s for the zoo, after 5-10 s of importing torch and timm. A count is a pure
function of the model's code, its arguments and the installed torch and timm, so the cache is
keyed by a fingerprint of optbench/models/*.py and those two versions and starts afresh when any
of them changes. It lives in $XDG_CACHE_HOME/optbench/ (default ~/.cache/optbench/); a cache
that cannot be read or written is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path

CACHE_FILE = "models.json"


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
            try:
                data = json.loads(cache_path().read_text())
            except (OSError, ValueError):
                data = {}
            ok = isinstance(data, dict) and data.get("fingerprint") == self.key
            self.entries = data.get("entries", {}) if ok else {}
        return self.entries

    def get(self, key: str) -> dict | None:
        return self._load().get(key)

    def put(self, key: str, value: dict) -> None:
        entries = self._load()
        entries[key] = value
        path = cache_path()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps({"fingerprint": self.key, "entries": entries}))
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)

    def clear(self) -> None:
        """Forget what was read (tests change XDG_CACHE_HOME or the code between calls)."""
        self.entries = None


CACHE = _Cache()


def cached_counts(name: str, *, num_classes: int, in_chans: int, img_size: int) -> dict[str, int]:
    """{"flops", "params", "acts"} for one image of `name` (complexity.model_complexity), from
    the cache when this code has counted them before on this install."""
    key = f"counts/{name}/{num_classes}/{in_chans}/{img_size}"
    counts = CACHE.get(key)
    if counts is None:
        from optbench.models.complexity import model_complexity

        counts = model_complexity(
            name, num_classes=num_classes, in_chans=in_chans, img_size=img_size
        )
        CACHE.put(key, counts)
    return counts


def cached_defaults(name: str, compute) -> dict[str, int]:
    """The default input and classes of `name` ({"img_size", "in_chans", "num_classes"}), from
    the cache, or `compute()` (which reads the model's timm cfg) the first time."""
    key = f"defaults/{name}"
    defaults = CACHE.get(key)
    if defaults is None:
        defaults = compute()
        CACHE.put(key, defaults)
    return defaults

"""Result files: the only thing a worker hands back, and what the driver trusts of them.

Writes are atomic (a temporary file beside the target, fsynced, renamed over it), so a reader
sees either no file or a whole one, never a torn write, whatever kills the writer; and a rename
replaces a symbolic link planted in a trial folder instead of following it. A write that fails
(disk full, I/O error) raises an OSError that names the path.

Reads treat the files as untrusted data: a result.json or metrics.jsonl that is unreadable,
truncated, not JSON, wrongly typed or absurdly large raises `InvalidResultFile` with the reason
(the driver records it as a failed attempt), never a traceback; `read_result` is the lenient
form for callers that only poll for a valid result.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from pydantic import ValidationError

from optbench.errors import UsageError
from optbench.train.config import TrainConfig, TrialResult

RESULT_FILE = "result.json"
METRICS_FILE = "metrics.jsonl"
# A result.json is a few KB and a metrics line ~300 bytes: anything larger is not ours.
MAX_RESULT_BYTES = 1 << 20
MAX_METRICS_BYTES = 64 << 20


class InvalidResultFile(UsageError):
    """A result file that is not a valid result: its path and why."""


class ResumeMismatch(UsageError):
    """A trial folder holds the result or checkpoint of another configuration."""


@contextmanager
def atomic_open(path: Path, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside `path` for writing; on success fsync it and rename it over
    `path`, so a reader sees the old file or the new one, never a torn write. An OSError (disk
    full, I/O error, read-only file system) is raised again naming `path`."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Not mkstemp: its files are 0600 whatever the umask, and a lab group must read results.
        # Created 0666 & ~umask, as any file the user writes; a random name, exclusively.
        tmp = path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        _discard(tmp)
        raise OSError(err.errno, err.strerror or str(err), str(path)) from None
    except BaseException:
        _discard(tmp)
        raise


def _discard(tmp: Path | None) -> None:
    if tmp is not None:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_open(path) as f:
        f.write(text)


def write_result(out_dir: Path, result: TrialResult) -> Path:
    path = out_dir / RESULT_FILE
    atomic_write_text(path, result.model_dump_json(indent=2) + "\n")
    return path


def write_metrics(out_dir: Path, lines: list[dict]) -> None:
    """Replace metrics.jsonl with `lines`, one JSON object per completed epoch (rewritten whole
    at each epoch end: a few KB, and never appended through a planted symlink)."""
    atomic_write_text(out_dir / METRICS_FILE, "".join(json.dumps(m) + "\n" for m in lines))


def _read_capped(path: Path, limit: int) -> bytes:
    """The bytes of a regular file (not a link, a folder or a device) of at most `limit`."""
    if path.is_symlink():
        raise InvalidResultFile(f"{path}: a symbolic link, not a file a worker wrote")
    if not path.is_file():
        raise InvalidResultFile(f"{path}: not a regular file")
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as err:
        raise InvalidResultFile(f"{path}: unreadable ({err.strerror})") from None
    if len(data) > limit:
        raise InvalidResultFile(f"{path}: larger than {limit} bytes, not a result file")
    return data


def load_result(out_dir: Path) -> TrialResult | None:
    """The trial's result; None if it has not written one; InvalidResultFile (naming the file
    and the first problem) if the file is there but is not a valid result."""
    path = out_dir / RESULT_FILE
    if not path.exists() and not path.is_symlink():
        return None
    data = _read_capped(path, MAX_RESULT_BYTES)
    try:
        return TrialResult.model_validate_json(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        why = first["msg"].removeprefix("Value error, ")
        raise InvalidResultFile(
            f"{path}: not a valid result ({loc + ': ' if loc else ''}{why})"
        ) from None


def read_result(out_dir: Path) -> TrialResult | None:
    """The trial's result if it has written a valid one, else None (for callers that poll)."""
    try:
        return load_result(out_dir)
    except InvalidResultFile:
        return None


def read_metrics(out_dir: Path, *, partial: bool = False) -> list[dict]:
    """The per-epoch lines of metrics.jsonl ([] if there is none), the one reader of that file
    (at most MAX_METRICS_BYTES, a regular file). InvalidResultFile if a line is not a JSON
    object with an integer epoch and a numeric (or null) val_error.

    With `partial` (a trial still running: the live view, `optbench status --trials`), never an
    error: the lines up to the first that is not an epoch's metrics (a worker may be writing
    it), and [] for a file that cannot be read as metrics at all."""
    path = out_dir / METRICS_FILE
    if not path.exists() and not path.is_symlink():
        return []
    try:
        text = _read_capped(path, MAX_METRICS_BYTES)
    except InvalidResultFile:
        if partial:
            return []
        raise
    lines = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            if partial:
                break
            raise InvalidResultFile(f"{path}: line {n} is not JSON") from None
        epoch = line.get("epoch") if isinstance(line, dict) else None
        val = line.get("val_error") if isinstance(line, dict) else None
        if type(epoch) is not int or not (val is None or type(val) in (int, float)):
            if partial:
                break
            raise InvalidResultFile(
                f"{path}: line {n} is not an epoch's metrics (an object with an integer "
                "epoch and a numeric val_error)"
            )
        lines.append(line)
    return lines


def config_difference(expected: TrainConfig | dict, found: TrainConfig | dict) -> str:
    """Where two training configs differ, e.g. "epochs: 4 here, 3 there; seed: 0 here, 1
    there" (at most three keys, dotted paths)."""

    def flat(node, prefix=""):
        if isinstance(node, TrainConfig):
            node = node.model_dump(mode="json")
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                out.update(flat(value, f"{prefix}{key}."))
            return out
        return {prefix.rstrip("."): node}

    a, b = flat(expected), flat(found)
    missing = object()
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k, missing) != b.get(k, missing)]
    shown = [f"{k}: {a.get(k, '(none)')!r} here, {b.get(k, '(none)')!r} there" for k in keys[:3]]
    more = f" (and {len(keys) - 3} more)" if len(keys) > 3 else ""
    return "; ".join(shown) + more if shown else "the same configuration"


def finished_result(cfg: TrainConfig, out_dir: Path) -> TrialResult | None:
    """The result already in `out_dir` for `cfg` (what a resumed trial returns untouched), None
    if there is none; ResumeMismatch naming the difference if it belongs to another config."""
    result = load_result(out_dir)
    if result is not None and result.config != cfg:
        raise ResumeMismatch(
            f"{out_dir / RESULT_FILE}: the result of another configuration "
            f"({config_difference(cfg, result.config)}); use another folder, or remove it"
        )
    return result


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def runtime_info(device) -> dict:
    """What a trial's floating-point results depend on besides its config: torch's CPU thread
    count, the library versions and the device (CPU model or GPU name). Two trials of the same
    config give the same digest when all of these are equal (docs/faults.md)."""
    import numpy
    import timm
    import torch

    if device.type == "cuda":
        where = f"{device}: {torch.cuda.get_device_name(device)}"
    else:
        where = f"{device.type}: {_cpu_name()}"
    return {
        "threads": torch.get_num_threads(),
        "device": where,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "timm": timm.__version__,
            "numpy": numpy.__version__,
        },
    }

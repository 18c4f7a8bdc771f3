"""Result files: the only thing a worker hands back. Written atomically, so a reader sees either
no file or a whole one, never a torn write, whatever kills the worker."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from optbench.train.config import TrialResult

RESULT_FILE = "result.json"
METRICS_FILE = "metrics.jsonl"


@contextmanager
def atomic_open(path: Path, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside `path` for writing; on success fsync it and rename it over
    `path`, so a reader sees the old file or the new one, never a torn write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Not mkstemp: its files are 0600 whatever the umask, and a lab group must read results.
    # Created 0666 & ~umask, as any file the user writes; a random name, exclusively.
    tmp = path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_open(path) as f:
        f.write(text)


def write_result(out_dir: Path, result: TrialResult) -> Path:
    path = out_dir / RESULT_FILE
    atomic_write_text(path, result.model_dump_json(indent=2) + "\n")
    return path


def read_result(out_dir: Path) -> TrialResult | None:
    """The trial's result, or None if it has not written one yet."""
    path = out_dir / RESULT_FILE
    if not path.is_file():
        return None
    return TrialResult.model_validate_json(path.read_text())


def read_metrics(out_dir: Path) -> list[dict]:
    path = out_dir / METRICS_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

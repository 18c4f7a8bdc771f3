"""W&B's offline run files read back offline: the records of a run's .wandb file (W&B's
LevelDB-style log of protobuf `Record`s: a 7-byte header, then 32 KiB blocks of chunks, each
with a 4-byte checksum, a 2-byte length and a 1-byte type), and what a test asks of them. The
wandb package of 0.2x-0.3x has no Python reader of its own any more (its core is in Go)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

from wandb.proto import wandb_internal_pb2 as pb

HEADER = b":W&B"
BLOCK = 32768
CHUNK_HEAD = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> Iterator[pb.Record]:
    """Every record of the .wandb file `path`, in order."""
    data = path.read_bytes()
    assert data[:4] == HEADER, f"{path}: not a .wandb file"
    pos, parts = 7, []
    while pos + CHUNK_HEAD <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK_HEAD:  # a block's tail too short for a chunk is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEAD])
        payload = data[pos + CHUNK_HEAD : pos + CHUNK_HEAD + length]
        pos += CHUNK_HEAD + length
        if kind == FULL:
            parts = [payload]
        elif kind == FIRST:
            parts = [payload]
            continue
        elif kind == MIDDLE:
            parts.append(payload)
            continue
        elif kind == LAST:
            parts.append(payload)
        else:
            break  # zeros: the end of what was written
        record = pb.Record()
        record.ParseFromString(b"".join(parts))
        yield record


def offline_runs(study_dir: Path) -> dict[str, list[Path]]:
    """run id -> its offline run files under <study_dir>/wandb, oldest first (one per resume;
    by time written: a second session in the same second is "offline-run-<time>-<id>-1")."""
    runs: dict[str, list[Path]] = {}
    found = (study_dir / "wandb").glob("offline-run-*/run-*.wandb")
    for path in sorted(found, key=lambda p: p.stat().st_mtime_ns):
        runs.setdefault(path.stem.removeprefix("run-"), []).append(path)
    return runs


def read_run(files: list[Path]) -> dict:
    """What a run's files say: its run record's fields, config, history rows (step -> values,
    from every file: a step twice is a duplicate), summary, exit codes and saved files."""
    out: dict = {"history": [], "config": {}, "summary": {}, "exits": [], "files": []}
    for path in files:
        for record in records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run = record.run
                out |= {"id": run.run_id, "project": run.project, "group": run.run_group}
                out |= {"job_type": run.job_type, "name": run.display_name}
                out["config"] |= _items(run.config.update)
            elif kind == "config":
                out["config"] |= _items(record.config.update)
            elif kind == "history":
                row = _items(record.history.item)
                out["history"].append((record.history.step.num, row))
            elif kind == "summary":
                out["summary"] |= _items(record.summary.update)
            elif kind == "exit":
                out["exits"].append(record.exit.exit_code)
            elif kind == "files":
                out["files"] += [f.path for f in record.files.files]
    return out


def _items(items) -> dict:
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}

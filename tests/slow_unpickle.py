"""A job callable whose unpickling waits for a file: it holds a SLURM job step (as the test runs
it) inside the moment between Python's start and submitit's signal handlers."""

from __future__ import annotations

import time
from pathlib import Path


class WaitsWhileUnpickled:
    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def __getstate__(self) -> dict:
        return {"folder": self.folder}

    def __setstate__(self, state: dict) -> None:
        self.folder = state["folder"]
        (self.folder / "unpickling").touch()
        while not (self.folder / "go").exists():
            time.sleep(0.01)

    def __call__(self) -> str:
        return "ran"

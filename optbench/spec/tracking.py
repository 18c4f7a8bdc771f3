"""The study's `tracking:` block (`Tracking`): where each trial's tracker run is logged, as
settings only. The MLflow and W&B runs they name are trackers/backends.py's; the schema and the
trial contract read these settings without importing them.

`kind: none | mlflow | wandb`; MLflow takes `uri` (default: a file store in
<study folder>/mlruns), W&B `project` (default: the study's name) and `mode` (default
"offline": nothing leaves the machine). An execution setting: not part of any cell id; the plan
hands the resolved settings (`Tracking.resolved`) to every trial's job, and result.json records
them under `execution`. The packages are optional extras (`pip install 'optbench[mlflow]'`);
the study refuses a kind whose package is missing (`check_installed`).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from optbench.spec.recipe import StrictModel

MLFLOW_FOLDER = "mlruns"  # in the study folder: the default MLflow file store
URI_SCHEMES = ("file:", "sqlite:", "http://", "https://")


class Tracking(StrictModel):
    """The study's `tracking:` block (docs/study.md): where each trial's run is logged."""

    kind: Literal["none", "mlflow", "wandb"] = "none"
    uri: str | None = Field(default=None, max_length=1000)  # MLflow's tracking URI
    project: str | None = Field(default=None, max_length=128)  # W&B's project
    mode: Literal["offline", "online"] | None = None  # W&B's; default offline

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str | None) -> str | None:
        if v is not None and ":" in v.split("/")[0] and not v.startswith(URI_SCHEMES):
            raise ValueError(f"{v!r}: give a folder, or a URI starting {', '.join(URI_SCHEMES)}")
        return v

    @field_validator("project")
    @classmethod
    def _project(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", v):
            raise ValueError(f"{v!r}: a W&B project name uses letters, digits, '_', '.', '-'")
        return v

    @model_validator(mode="after")
    def _keys_of_its_kind(self) -> Tracking:
        if self.uri is not None and self.kind != "mlflow":
            raise ValueError(f"uri is MLflow's (kind mlflow), not {self.kind}'s")
        if (self.project, self.mode) != (None, None) and self.kind != "wandb":
            raise ValueError(f"project and mode are W&B's (kind wandb), not {self.kind}'s")
        return self

    def resolved(self, study_dir: Path) -> Tracking | None:
        """These settings with every default filled in for `study_dir` (a local store as an
        absolute file URI); None for kind none."""
        if self.kind == "none":
            return None
        if self.kind == "wandb":
            update = {"project": self.project or study_dir.name, "mode": self.mode or "offline"}
        else:
            uri = self.uri or str(study_dir / MLFLOW_FOLDER)
            if not uri.startswith(URI_SCHEMES):  # a folder: a file store
                uri = Path(uri).resolve().as_uri()
            update = {"uri": uri}
        return self.model_copy(update=update)


def installed(kind: str) -> bool:
    """Whether the package of tracker `kind` ("mlflow", "wandb") is installed."""
    return importlib.util.find_spec(kind) is not None


def check_installed(kind: str) -> None:
    """ValueError naming the extra to install where `kind`'s package is missing."""
    if kind != "none" and not installed(kind):
        raise ValueError(f"{kind} is not installed: pip install 'optbench[{kind}]'")

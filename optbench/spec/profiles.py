"""Cluster profiles: what belongs to a site, not to a study (docs/slurm.md).

A profile is a YAML file with at most four keys: `executor` (any executor key: kind, workers,
the SLURM settings), `storage` (the study database's URL), `tracking` (the site's experiment
tracker, e.g. its MLflow server; a study's own `tracking:` block replaces it whole, since a
block's keys belong to its kind) and `data` (dataset name -> the folder that holds it on this
site). `optbench run STUDY --profile site.yaml`, or
OPTBENCH_PROFILE=site.yaml, lays it under the study's mapping before the one validation of the
whole study (overrides.validate_study): a key the study sets wins, `--set` and the executor
flags win over both, and `dataset.root` comes from `data.<dataset name>` where the study gives
no root. Execution settings only: none of it is part of a cell id; result.json's `execution`
records the profile's path. The file is read by the strict YAML reader and validated with the
study schema's own models, so a bad key is one line naming the file and the field.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError, field_validator

from optbench.errors import SpecError, UsageError, did_you_mean, format_errors
from optbench.spec.recipe import StrictModel, plain_path
from optbench.spec.schema import ExecutorSettings, StudySpec
from optbench.spec.tracking import Tracking, check_installed
from optbench.spec.yamlio import read_study_yaml

PROFILE_ENV = "OPTBENCH_PROFILE"  # the default profile of `optbench run`, status, cancel, report


class ProfileSchema(StrictModel):
    """What a profile may say; each key is checked as the study's key of the same name."""

    executor: ExecutorSettings | None = None
    storage: str | None = None
    tracking: Tracking | None = None
    data: dict[str, Path] = {}

    @field_validator("storage")
    @classmethod
    def _storage(cls, v: str | None) -> str | None:
        from optbench.spec.storage_form import check_storage_url  # SQLAlchemy: only for a URL given

        return v if v is None else check_storage_url(v)

    @field_validator("tracking")
    @classmethod
    def _tracker_installed(cls, v: Tracking | None) -> Tracking | None:
        if v is not None:
            check_installed(v.kind)  # here too, so the line names the profile
        return v

    @field_validator("data")
    @classmethod
    def _data(cls, v: dict[str, Path]) -> dict[str, Path]:
        for root in v.values():
            plain_path(root)
        return v


@dataclass(frozen=True)
class Profile:
    """A validated profile: its file, the study keys it sets (as written) and its data roots."""

    path: Path
    layer: dict[str, Any]  # executor, storage and tracking, as the file spells them
    data: dict[str, str]

    def under(self, study: dict) -> dict:
        """The study mapping with this profile beneath it: the study's own keys win (its
        tracking block whole)."""
        merged = _merge(self.layer, study)
        if "tracking" in study:
            merged["tracking"] = copy.deepcopy(study["tracking"])
        executor = merged.get("executor")
        if isinstance(executor, dict):  # what ran it, unless the study records one already
            executor.setdefault("profile", str(self.path.resolve()))
        return merged

    def with_data_root(self, study: dict) -> dict:
        """`dataset.root` from `data.<name>` where the (overridden) study gives none."""
        dataset = study.get("dataset")
        if isinstance(dataset, dict) and dataset.get("root") is None:
            root = self.data.get(dataset.get("name"))  # type: ignore[arg-type]
            if root is not None:
                study = {**study, "dataset": {**dataset, "root": root}}
        return study

    def sources(self, spec: StudySpec) -> dict[str, str]:
        """Dotted key -> what set it, for the study keys that `spec` took from this profile
        and the machine checks (checks.check_spec) name: the data root and the storage."""
        named = {}
        root = self.data.get(spec.dataset.name)
        if root is not None and str(spec.dataset.root) == root:
            named["dataset.root"] = f"{self.path} (data.{spec.dataset.name})"
        if "storage" in self.layer and spec.storage == self.layer["storage"]:
            named["storage"] = str(self.path)
        return named


def _merge(base: dict, top: dict) -> dict:
    """`top` over `base`, mapping by mapping (a copy; `top` wins at every key it has)."""
    merged = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def read_profile(path: Path | str) -> Profile:
    """Read and validate a profile file; SpecError naming the file and the field."""
    from optbench.spec.catalogue import DATASET_NAMES

    path = Path(path)
    data = read_study_yaml(path, kind="profile")
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a profile must be a YAML mapping, got {type(data).__name__}")
    for key in data:
        if key in StudySpec.model_fields and key not in ProfileSchema.model_fields:
            raise SpecError(
                f"{path}: {key}: a study key, not a site's (a profile holds executor, storage, "
                "tracking and data); set it in the study or with --set"
            )
    try:
        schema = ProfileSchema.model_validate(data)
    except ValidationError as err:
        raise SpecError(format_errors(path, err, schema=ProfileSchema)) from None
    for name in schema.data:
        if name not in DATASET_NAMES:
            hint = did_you_mean(name, DATASET_NAMES, "data.")
            raise SpecError(f"{path}: data.{name}: unknown dataset{hint}")
    layer = {k: data[k] for k in ("executor", "storage", "tracking") if k in data}
    return Profile(path, layer, {k: str(v) for k, v in schema.data.items()})


def find_profile(flag: Path | None) -> Profile | None:
    """The profile `--profile` names, else OPTBENCH_PROFILE's (empty: none), read and validated."""
    if flag is not None:
        return read_profile(flag)
    env = os.environ.get(PROFILE_ENV, "")
    if not env:
        return None
    try:
        return read_profile(env)
    except SpecError as err:
        raise UsageError(f"{err} (the profile {PROFILE_ENV} names)") from None

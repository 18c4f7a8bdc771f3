"""Command-line overrides of a study: `--set KEY=VALUE`, a dotted key and a YAML value
(`--set search.n_samples=8 --set models='[vit_c_4gf]'`).

They replace keys of the study's YAML mapping before it is validated, so an override is checked,
stored (the study folder's spec.yaml is the resolved spec) and hashed into cell ids exactly as
the same edit of the YAML file would be. An error at an overridden key names the override.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from optbench.errors import SpecError, UsageError, format_errors
from optbench.spec.schema import StudySpec
from optbench.spec.yamlio import dump_yaml, read_study_yaml, read_yaml

if TYPE_CHECKING:
    from optbench.spec.profiles import Profile


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """{"search.n_samples": 8, ...} from ["search.n_samples=8", ...]; later ones win. Each value
    is read as a study file is (yamlio.read_yaml: a key given twice is an error)."""
    parsed: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise UsageError(f"--set {item}: expected KEY=VALUE with a dotted KEY, e.g. epochs=3")
        parsed[key] = read_yaml(text, f"--set {item}")  # as strict as a study file
    return parsed


def apply_overrides(data: dict, overrides: dict[str, Any]) -> dict:
    """A copy of the study mapping `data` with each dotted key set to its value (missing
    mappings on the way are created)."""
    data = yaml.safe_load(yaml.safe_dump(data))  # a deep copy of plain YAML data
    for key, value in overrides.items():
        *parents, last = key.split(".")
        node = data
        for depth, part in enumerate(parents):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                where = ".".join(parents[: depth + 1])
                raise UsageError(
                    f"--set {override_text(key, value)}: {where} is not a mapping "
                    f"(it is {child!r}); set it whole, e.g. --set {where}=..."
                )
            node = child
        node[last] = value
    return data


def override_text(key: str, value: Any) -> str:
    """How an override reads on the command line: `key=value` with the value as flow YAML."""
    text = dump_yaml(value, default_flow_style=True, width=10_000).strip()
    return f"{key}={text.removesuffix('...').strip()}"


def override_sources(overrides: dict[str, Any]) -> dict[str, str]:
    """Dotted key -> "--set key=value": what an error at that key (or below it) names."""
    return {key: f"--set {override_text(key, value)}" for key, value in overrides.items()}


def validate_study(
    data: Any,
    source: Path | str,
    overrides: dict[str, Any] | None = None,
    spelled: dict[str, str] | None = None,
    profile: Profile | None = None,
) -> StudySpec:
    """The study mapping `data` over `profile` (profiles.py: the study's keys win), with
    `overrides` applied, validated. A SpecError names the file and field, or the override where
    the field is overridden: "--set KEY=VALUE", or as `spelled` says for an override the
    command line gave as a flag ("--executor slurm"). The profile was validated on its own."""
    overrides = overrides or {}
    if not isinstance(data, dict):
        raise SpecError(f"{source}: a study must be a YAML mapping, got {type(data).__name__}")
    if profile is not None:
        data = profile.under(data)
    data = apply_overrides(data, overrides)
    if profile is not None:
        data = profile.with_data_root(data)
    try:
        return StudySpec.model_validate(data)
    except ValidationError as err:
        sources = {**override_sources(overrides), **(spelled or {})}
        raise SpecError(format_errors(source, err, schema=StudySpec, sources=sources)) from None


def load_study(
    path: Path | str,
    overrides: dict[str, Any] | None = None,
    spelled: dict[str, str] | None = None,
    profile: Profile | None = None,
) -> StudySpec:
    """Read a study YAML, lay it over `profile`, apply `overrides` (parse_overrides) and
    validate. Writes nothing."""
    return validate_study(read_study_yaml(path), path, overrides, spelled, profile)

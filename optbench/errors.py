"""The errors a user can cause, and how a validation error becomes one line per field.

`UsageError` is bad input (a study file, a flag, a dataset path): `optbench` prints it as one
message and exits with code 2, before anything is written (`UnfinishedWrite`, a database that
`optbench run` must recover first, is one too). `WriteError` is the machine's fault
(disk full, I/O error: the errnos of `DISK_FAULTS`): one message, exit code 1. `StorageUnavailable`
is a study database that does not answer, `MeasureFailed` a `--measure` process that failed: one
line, exit code 1. Every module raises these; this one imports nothing from optbench.
"""

from __future__ import annotations

import difflib
import errno
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError


class UsageError(Exception):
    """Bad input from the user (spec, flags, dataset paths): reported as one line, exit code 2."""


class SpecError(UsageError):
    """A study YAML that does not validate."""


class UnfinishedWrite(UsageError):
    """A study database that holds the unfinished write of a driver that was killed (SQLite's
    hot journal). Not damage: the study's one writer, `optbench run`, rolls it back under the
    study's lock; a command that only reads says so in one line (exit code 2), leaving it as it
    is."""


# A write that fails for these is the machine's fault, not the trial's: the trainer raises it
# instead of recording a failed trial (train/loop.py), and a pool worker reports it as a fault
# that stops the driver (executors/local.py).
DISK_FAULTS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS)


class WriteError(Exception):
    """A file or database that could not be written (disk full, I/O error, read-only file
    system): one line naming the path and the cause, exit code 1. Nothing recorded is lost, and
    the same command carries on once the cause is gone."""

    @classmethod
    def from_os(cls, err: OSError) -> WriteError:
        where = f"{err.filename}: " if err.filename else ""
        return cls(f"{where}cannot write: {err.strerror or err}")


class MeasureFailed(Exception):
    """`--measure`'s fresh process failed to time its configuration (not bad input: the study
    validated): one line with the process's last line, exit code 1."""


class StorageUnavailable(Exception):
    """The study's storage does not answer (a database server down, a file system gone): one
    line naming it, password masked, exit code 1 (not bad input). Nothing is lost: results stay
    in their trial folders and the next run records them."""


# What torchvision raises on import when it was built for another torch (pip mixing a CPU torch
# with PyPI's CUDA torchvision, say): its C++ operators do not load.
TORCHVISION_MISMATCH = ("torchvision::nms does not exist", "Couldn't load custom C++ ops")

# torch minor version -> the torchvision minor version released and built with it. Source:
# pytorch/vision's README, "Installation" (torch 2.0 - 2.13); 2.14 -> 0.29 from torchvision
# 0.29's wheel, which requires torch>=2.14.0. A torch beyond the table gets no version named.
TORCHVISION_OF_TORCH = {
    "2.0": "0.15", "2.1": "0.16", "2.2": "0.17", "2.3": "0.18", "2.4": "0.19", "2.5": "0.20",
    "2.6": "0.21", "2.7": "0.22", "2.8": "0.23", "2.9": "0.24", "2.10": "0.25", "2.11": "0.26",
    "2.12": "0.27", "2.13": "0.28", "2.14": "0.29",
}  # fmt: skip
PYTORCH_INDEX = "https://download.pytorch.org/whl/"  # + a build's label: cpu, cu130, rocm6.4


def torch_mismatch(err: BaseException) -> str | None:
    """One line with the fix when `err` is torchvision failing to load against the installed
    torch (None for any other error): which builds they are and the pair to install, by
    version, from PyTorch's index of torch's build or, where that is unreachable, from PyPI."""
    if not isinstance(err, (RuntimeError, ImportError)):
        return None
    if not any(sign in str(err) for sign in TORCHVISION_MISMATCH):
        return None
    torch, vision = built_version("torch"), built_version("torchvision")
    minor, label = _minor(torch), torch.partition("+")[2]
    want = TORCHVISION_OF_TORCH.get(minor)
    made_for = {v: t for t, v in TORCHVISION_OF_TORCH.items()}.get(_minor(vision))
    if want is not None and _minor(vision) != want:
        why = f"torchvision {vision} is torch {made_for or '(another version)'}'s, not torch {torch}'s"
    elif vision.partition("+")[2] != label:
        why = f"torchvision {vision} is built for {_built_for(vision)}, torch {torch} for {_built_for(torch)}"
    else:
        why = f"torchvision {vision} with torch {torch}"
    why += ": torchvision's C++ operators do not load; install "
    if want is None:
        return f"{why}the torchvision released with torch {minor} (pytorch/vision's README lists the pairs) from where torch came (docs/install.md)"
    vision_spec = f"'torchvision=={want}.*'"
    pypi = f"pip uninstall -y torch torchvision && pip install 'torch==={torch.partition('+')[0]}' {vision_spec}"
    if not label:  # a torch without a build label: PyPI's pair is the one to have
        return (
            f"{why}torch {minor}'s torchvision {want} with it from PyPI: {pypi} (docs/install.md)"
        )
    same_build = (
        f"pip install --force-reinstall --no-deps {vision_spec} --index-url {PYTORCH_INDEX}{label}"
    )
    return f"{why}torchvision {want} (torch {minor}'s) built for {_built_for(torch)}: {same_build}, or, where that index is unreachable, PyPI's pair (built for CUDA, it runs on a CPU too): {pypi} (docs/install.md)"


def built_version(package: str) -> str:
    """The version `package` (torch, torchvision) was built as, with its build label
    (2.13.0+cpu, 0.28.0+cu130), read from its version.py without importing it (torchvision's
    import is what fails); the installed metadata's version (PyPI's has no label) where that
    file is not there, "none" for a package not installed."""
    import importlib.util
    import re
    from importlib import metadata

    spec = importlib.util.find_spec(package)
    for folder in (spec and spec.submodule_search_locations) or []:
        try:
            text = (Path(folder) / "version.py").read_text(errors="replace")
        except OSError:
            continue
        found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
        if found:
            return found.group(1)
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


def _minor(version: str) -> str:
    """2.13 of 2.13.0+cpu."""
    return ".".join(version.partition("+")[0].split(".")[:2])


def _built_for(version: str) -> str:
    """What a version's build label says it is built for: cpu -> the CPU only, cu130 -> CUDA
    13.0, rocm6.4 -> ROCm 6.4."""
    label = version.partition("+")[2]
    if label == "cpu":
        return "the CPU only"
    if label.startswith("cu") and label[2:].isdigit() and len(label) >= 4:
        return f"CUDA {label[2:-1]}.{label[-1]}"
    if label.startswith("rocm"):
        return f"ROCm {label[4:]}"
    return label or "an unlabelled build"


def did_you_mean(word: str, choices: Sequence[str], prefix: str = "") -> str:
    """ "; did you mean <prefix>X?" for the closest of `choices` ignoring case (difflib), or "";
    a choice that differs from `word` only by case is named as such (names are case-sensitive)."""
    by_lower: dict[str, str] = {}
    for choice in choices:
        by_lower.setdefault(choice.lower(), choice)
    same = by_lower.get(word.lower())
    if same is not None and same != word:
        return f"; did you mean {prefix}{same}? (only the case differs: names are case-sensitive)"
    close = closest(word, choices)
    return f"; did you mean {prefix}{close}?" if close else ""


def closest(word: str, choices: Sequence[str]) -> str | None:
    """The choice `word` most likely meant, ignoring case (difflib), or None."""
    by_lower: dict[str, str] = {}
    for choice in choices:
        by_lower.setdefault(choice.lower(), choice)
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None


def format_errors(
    source: Path | str,
    err: ValidationError,
    *,
    schema: type[BaseModel] | None = None,
    sources: Mapping[str, str] | None = None,
) -> str:
    """One line per field, "<source>: <field.path>: <message>".

    With the `schema` that was validated, an unknown key gets a did-you-mean suggestion and the
    errors of a union's alternatives become one line ("should be a valid integer or 'auto'").
    `sources` maps dotted keys to what set them (e.g. "--set epochs=3"), named instead of
    `source` for errors at or below such a key."""
    groups: dict[tuple, list[dict]] = {}
    for e in err.errors():
        field, in_union = _field_loc(schema, e["loc"]) if schema else (tuple(e["loc"]), False)
        groups.setdefault((field, in_union), []).append(e)
    # A misspelt required key is two errors, the key missing and an unknown one beside it; the
    # unknown key's line names it ("did you mean ..."), so the missing one is left out.
    meant = {
        (*field[:-1], closest(str(field[-1]), _keys_at(schema, field[:-1])))
        for (field, _), errors in groups.items()
        if schema and any(e["type"] == "extra_forbidden" for e in errors)
    }
    groups = {
        key: kept
        for key, errors in groups.items()
        if (kept := [e for e in errors if not (e["type"] == "missing" and key[0] in meant)])
    }

    def label_of(field: tuple) -> str:
        where = ".".join(str(p) for p in field)
        # "--set epochs=x: ..." names the key already; a file or a key above it needs the field
        # (an error of the whole mapping, e.g. a warmup as long as the schedule, has none)
        label = (sources or {}).get(where) or ": ".join(
            filter(None, [source_of(where, source, sources or {}), where])
        )
        if not field and sources:  # a rule across keys: the overrides may be what broke it
            label = f"{source} with {' '.join(sources.values())}"
        return label

    lines: list = []  # a line, or the (label,) of a list whose items' errors make one line
    items: dict[str, list[tuple[str, int, str, str]]] = {}  # list's label -> its items' errors
    for (field, in_union), errors in groups.items():
        label = label_of(field)
        if in_union:
            options = [_clause(e["msg"]).removeprefix("Input should be ") for e in errors]
            lines.append(f"{label}: should be {' or '.join(options)}{_got(errors[0])}")
            continue
        for e in errors:
            if e["type"] == "extra_forbidden":
                allowed = _keys_at(schema, field[:-1]) if schema else []
                parent = "".join(f"{p}." for p in field[:-1])
                lines.append(f"{label}: unknown key{did_you_mean(str(field[-1]), allowed, parent)}")
                continue
            msg = e["msg"].removeprefix("Value error, ")
            if field and isinstance(field[-1], int):  # an item of a list: one line per list
                parent = label_of(field[:-1])
                if parent not in items:
                    items[parent] = []
                    lines.append((parent,))
                items[parent].append((label, field[-1], msg, _got(e)))
            else:
                lines.append(f"{label}: {msg}{_got(e)}")
    return "\n".join(
        line if isinstance(line, str) else _items_line(line[0], items[line[0]]) for line in lines
    )


def _items_line(label: str, errors: list[tuple[str, int, str, str]]) -> str:
    """One line for the errors of a list's items (item label, index, message, got): the
    item's own line for one, else "looks: items 0, 1: Input should be a valid integer (got
    4.0, 6.0)" when they say the same and each item's clause otherwise."""
    if len(errors) == 1:
        item, _, msg, got = errors[0]
        return f"{item}: {msg}{got}"
    if len({msg for _, _, msg, _ in errors}) == 1:
        got = [g.removeprefix(" (got ").removesuffix(")") for *_, g in errors if g]
        which = ", ".join(str(i) for _, i, _, _ in errors)
        said = f" (got {', '.join(got)})" if got else ""
        return f"{label}: items {which}: {errors[0][2]}{said}"
    return f"{label}: " + "; ".join(f"item {i}: {msg}{got}" for _, i, msg, got in errors)


def source_of(key: str, source: Path | str, sources: Mapping[str, str]) -> str:
    """What set the dotted `key`: the entry of `sources` for it or a key above it, else `source`."""
    for overridden, text in sources.items():
        if key == overridden or key.startswith(overridden + "."):
            return text
    return str(source)


def _clause(msg: str) -> str:
    return msg.split(",")[0]


def _got(error: dict) -> str:
    """ " (got 'x')" for a scalar input that failed a type check; nothing for the rest."""
    value = error.get("input")
    scalar = isinstance(value, (str, int, float, bool)) or value is None
    if not scalar or error["type"] in ("missing", "extra_forbidden", "value_error"):
        return ""
    return f" (got {value!r})"


# --- walking the schema along an error's location --------------------------------------------------


def _field_loc(schema: type[BaseModel], loc: Sequence) -> tuple[tuple, bool]:
    """The error's location without pydantic's union tags, and whether it was inside a union."""
    node: Any = schema
    field: list = []
    for part in loc:
        node = _strip_optional(node)
        if _is_union(node):  # pydantic names the alternative tried: not a key of the study
            return tuple(field), True
        field.append(part)
        node = _child(node, part)
    return tuple(field), False


def _keys_at(schema: type[BaseModel], loc: Sequence) -> list[str]:
    """The keys a mapping at `loc` may have (empty where `loc` is not a model)."""
    node: Any = schema
    for part in loc:
        node = _child(_strip_optional(node), part)
    node = _strip_optional(node)
    return list(node.model_fields) if _is_model(node) else []


def _child(node: Any, part: Any) -> Any:
    if _is_model(node):
        field = node.model_fields.get(part)
        return field.annotation if field is not None else None
    origin, args = typing.get_origin(node), typing.get_args(node)
    if origin in (dict, Mapping) and len(args) == 2:
        return args[1]
    if origin in (list, tuple, Sequence) and args:
        return args[0]
    return None


def _is_model(node: Any) -> bool:
    return isinstance(node, type) and issubclass(node, BaseModel)


def _is_union(node: Any) -> bool:
    return typing.get_origin(node) in (typing.Union, types.UnionType)


def _strip_optional(node: Any) -> Any:
    """X for Optional[X] (pydantic reports those without a union tag)."""
    if _is_union(node):
        members = [a for a in typing.get_args(node) if a is not type(None)]
        if len(members) == 1:
            return members[0]
    return node

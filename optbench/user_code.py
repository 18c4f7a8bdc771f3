"""The study's own code: the modules a study names under `imports:` (a model or an optimizer of
the user's, registered with timm when imported), checked as module names, imported where a trial
is trained or its training planned (never where a study or its results are read), refused where
they register a name timm's registries hold already, and described for provenance (each
module's version and a digest of its source files).

Importing a named module runs its code, as `import my_models` in a Python script would: that is
what `imports:` is for (docs/study.md). Only a plain dotted module name is taken (never a path, a
URL or anything else that Python's import system would not look up on sys.path), so no other key
of a study and no other file optbench reads makes it run code. Importing this loads nothing but
the standard library (timm, to compare its registries, once a module is imported).
"""

from __future__ import annotations

import hashlib
import importlib
import keyword
import logging
import re
import sys
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from types import ModuleType

MAX_MODULE_NAME = 200  # characters: a module path, not a file's contents
MAX_MODULES = 20  # a study's `imports:`, and so the modules a result's provenance records
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
DIGEST_CHARS = 16  # hex digits of a module's source digest (as provenance's fingerprint)
MAX_SOURCE_FILES = 10_000  # a package's .py files hashed: more is no module of one's own
# what ends a file of Python code: a module named `x.py` is the file's name, not its module's
SOURCE_SUFFIXES = ("py", "pyw", "pyc", "pyi")


def check_module_name(name: str) -> str:
    """`name` if it is a plain dotted module name (`my_models`, `lab.models.stems`); else
    ValueError saying why (a file path or name, a URL, a relative import, a keyword). A file
    name (`labm.py`) reads as a dotted name too, but importing it would run `labm` first: it is
    refused with the module it means."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_MODULE_NAME:
        raise ValueError(f"a module name of 1 to {MAX_MODULE_NAME} characters, got {name!r:.80}")
    meant = _meant_module(name)
    hint = f": did you mean {meant}?" if meant else ""
    if not _NAME.fullmatch(name) or any(keyword.iskeyword(part) for part in name.split(".")):
        raise ValueError(
            f"{name!r:.80} is not a module name: name an importable module (installed or on "
            f"PYTHONPATH) by its dotted name, e.g. my_models; never a file path or URL{hint}"
        )
    if name.rpartition(".")[2].lower() in SOURCE_SUFFIXES:
        raise ValueError(f"{name!r:.80} is a file name, not a module name{hint}")
    return name


def _meant_module(name: str) -> str | None:
    """The module a file's name or path means (`labm.py`: labm; `lab/models.py`: lab.models;
    `~/labm.py`: labm), or None (not a Python file's name, a URL)."""
    stem, dot, suffix = name.rpartition(".")
    if not dot or suffix.lower() not in SOURCE_SUFFIXES or "://" in name:
        return None
    dotted = stem.replace("\\", "/").replace("/", ".")
    return next((m for m in (dotted, dotted.rpartition(".")[2]) if _NAME.fullmatch(m)), None)


def check_module_names(names: Sequence[str]) -> list[str]:
    """Each of `names` a module name (check_module_name), none twice."""
    names = [check_module_name(n) for n in names]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate entries in {names}")
    return names


def import_modules(names: Iterable[str], where: str = "imports") -> list[ModuleType]:
    """Import each module of `names` (once per process, as Python does). One that cannot be
    imported (not found, or its own code raised) is a UsageError of one line naming it, `where`
    and the cause: the study's names cannot be built without it. So is one that registers a
    model or an optimizer under a name timm's registries hold already (optbench's, timm's or an
    earlier module's): a name means one thing, never the user's code under a built-in's name."""
    from optbench.errors import UsageError  # pydantic: not loaded by `import optbench`

    names = [check_module_name(name) for name in names]
    # what is registered before: timm and optbench's zoo (registered as timm is imported,
    # optbench/__init__.py), only where a module is still to be imported (a worker's later
    # trials find theirs imported)
    before = _registered() if any(name not in sys.modules for name in names) else None
    modules = []
    for name in names:
        try:
            with _registries_guarded():
                modules.append(importlib.import_module(name))
        except (Exception, SystemExit) as err:  # noqa: BLE001 - the user's code: any cause
            again = _REREGISTERED.match(str(err)) if isinstance(err, UserWarning) else None
            if again:  # nothing was replaced: the entry is still its first owner's
                from timm.models import model_entrypoint

                owner = model_entrypoint(again["name"]).__module__
                raise UsageError(_shadowing(where, name, "model", again["name"], owner)) from None
            cause = str(err).splitlines()[0] if str(err) else ""
            raise UsageError(
                f"{where}: cannot import module {name!r}: {type(err).__name__}"
                f"{': ' + cause[:300] if cause else ''} (is it installed or on PYTHONPATH?)"
            ) from None
        if before is not None:
            with _registries_guarded():
                _refuse_replaced(before, where, name)
    return modules


# timm's warning as register_model replaces an earlier registration (timm/models/_registry.py)
_REREGISTERED = re.compile(r"Overwriting (?P<name>\S+) in registry with ")


@contextmanager
def _registries_guarded() -> Iterator[None]:
    """While a module of the user's is imported: timm's warning that a model's name is
    registered again (after which timm replaces the entry) an error, so that the import stops
    before anything is replaced; timm's log line as an optimizer is replaced kept quiet (the
    replacement is refused, in one line, and undone)."""
    optimizers_log = logging.getLogger("timm.optim._optim_factory")
    quiet = optimizers_log.disabled
    optimizers_log.disabled = True
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("error", _REREGISTERED.pattern, UserWarning)
            yield
    finally:
        optimizers_log.disabled = quiet


def _registered() -> dict[str, dict[str, object]]:
    """timm's registries now: {"model": {name: entrypoint}, "optimizer": {name: OptimInfo}}."""
    import timm.models
    from timm.optim import get_optimizer_info, list_optimizers

    return {
        "model": {name: timm.models.model_entrypoint(name) for name in timm.list_models()},
        "optimizer": {name: get_optimizer_info(name) for name in list_optimizers()},
    }


def _refuse_replaced(before: dict[str, dict[str, object]], where: str, module: str) -> None:
    """A UsageError if importing `module` replaced an entry of `before` (timm's optimizer
    registry replaces without a warning, so every entry is compared), with the optimizers it
    replaced registered again first: none of its replacements stays."""
    from optbench.errors import UsageError

    now = _registered()
    replaced = [
        (kind, name)
        for kind, entries in before.items()
        for name, entry in entries.items()
        if now[kind].get(name) is not entry
    ]
    if not replaced:
        return
    from timm.optim._optim_factory import default_registry

    for kind, name in replaced:
        if kind == "optimizer":
            default_registry.register(before[kind][name])
    kind, name = replaced[0]
    owner = getattr(before[kind][name], "__module__", "") if kind == "model" else "timm"
    raise UsageError(_shadowing(where, module, kind, name, owner))


def _shadowing(where: str, module: str, kind: str, name: str, owner: str) -> str:
    """The line that refuses `module` for registering `name`, which module `owner` registered."""
    top = owner.partition(".")[0]
    whose = top if top in ("optbench", "timm") else f"module {top!r}"
    return (
        f"{where}: module {module!r} registers {kind} {name!r}, which {whose} already has: a "
        "module of your own may not replace it (register yours under another name)"
    )


def source_files(module: ModuleType) -> list[Path]:
    """The .py files of `module`: every one under a package's folders, or its own file (none for
    a module without files, a built-in one)."""
    folders = [Path(p) for p in getattr(module, "__path__", None) or []]
    if folders:
        files = sorted({p for folder in folders for p in folder.rglob("*.py")})
        return files[:MAX_SOURCE_FILES]
    file = getattr(module, "__file__", None)
    return [Path(file)] if file else []


def source_digest(module: ModuleType) -> str:
    """sha256 (first DIGEST_CHARS hex digits) over `module`'s .py files, each as its path
    relative to the module's folder and its bytes: any edit of its source changes it."""
    h = hashlib.sha256()
    files = source_files(module)
    base = files[0].parent if files and not hasattr(module, "__path__") else None
    for path in files:
        root = base or next(Path(p) for p in module.__path__ if path.is_relative_to(p))
        h.update(path.relative_to(root).as_posix().encode() + b"\n")
        h.update(path.read_bytes())
    return h.hexdigest()[:DIGEST_CHARS]


def module_version(module: ModuleType) -> str | None:
    """The module's `__version__`, else that of the nearest package above it (`lab` for
    `lab.models`), else the version of the installed distribution that holds its top-level
    package (`installed_version`), else None (a module on PYTHONPATH without one). Printable
    text only, at most 100 characters: provenance records it and `optbench compare` prints it
    (trial/config.py)."""
    parts = module.__name__.split(".")
    for depth in range(len(parts), 0, -1):
        owner = module if depth == len(parts) else sys.modules.get(".".join(parts[:depth]))
        version = _printable(getattr(owner, "__version__", None))
        if version:
            return version
    return installed_version(sys.modules.get(parts[0], module))


def installed_version(top: ModuleType) -> str | None:
    """The version of the distribution that installed the top-level module `top`: the one of
    its name, else one in the folder `top` was imported from that lists `top` among what it
    installs (`pip install lab-tools` may install `lab`); only that folder's distributions are
    read (all of site-packages' take half a second)."""
    try:
        return _printable(metadata.version(top.__name__))
    except (metadata.PackageNotFoundError, ValueError):
        pass
    files = source_files(top)
    folder = files[0].parent if files else None
    if folder is not None and hasattr(top, "__path__"):
        folder = next((Path(p).parent for p in top.__path__ if files[0].is_relative_to(p)), None)
    if folder is None:
        return None
    for distribution in metadata.distributions(path=[str(folder)]):
        listed = (distribution.read_text("top_level.txt") or "").split()
        listed += [f.parts[0].removesuffix(".py") for f in distribution.files or []]
        if top.__name__ in listed:
            return _printable(distribution.version)
    return None


def _printable(version: object) -> str | None:
    """`version` if it is printable text (at most 100 characters kept), else None."""
    return version[:100] if isinstance(version, str) and version.isprintable() else None


def describe_modules(names: Sequence[str]) -> dict[str, dict[str, str | None]]:
    """{module: {"version", "digest"}} of the (imported) modules `names`, for provenance."""
    described = {}
    for module in import_modules(names):
        described[module.__name__] = {
            "version": module_version(module),
            "digest": source_digest(module),
        }
    return described


def fold_fingerprint(fingerprint: str, described: dict[str, dict[str, str | None]]) -> str:
    """optbench's training-code `fingerprint` with the study's own modules' digests folded in:
    results of different user code then carry different fingerprints, so the report's
    mixed-code warning and `optbench compare` tell them apart. Unchanged without modules."""
    if not described:
        return fingerprint
    h = hashlib.sha256(fingerprint.encode())
    for name in sorted(described):
        h.update(f"\n{name} {described[name]['digest']}".encode())
    return h.hexdigest()[: len(fingerprint)]

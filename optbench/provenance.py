"""Which code made a result: optbench's version, the git commit of the checkout it runs from,
and a fingerprint of the source that trains (`provenance`, recorded in each result.json); and
the check that the results of one cell come from one training code (`mixed_code_warning`).

A cell id hashes only the configuration, so results of changed training code would otherwise
mix silently in one cell. The fingerprint is a sha256 over the sorted .py files of
the folders that decide what a trial computes, optbench/data (the input pipeline), models,
train (the trainer) and trial (its config), and of spec/catalogue.py (the image sizes the input
pipeline loads at), path and bytes: any edit there changes it, an edit of the report, the
command line or the trackers does not. A study that imports code of its own (`imports:`,
user_code.py) folds each such module's source digest into its results' fingerprint and records
the module's version and digest beside it. The commit is read from the .git folder
above the package (no `git` is run); it is None outside a checkout (an installed wheel) and does not
say whether the tree had uncommitted edits: the fingerprint does. A trial's result also records
the machine its arithmetic ran on (`machine`): the CPU's vendor, family, model, stepping and
vector flags, torch's CPU capability (the kernels it picked: AVX2, AVX512, ...) and on CUDA the
GPU's name, compute capability and driver, what makes two machines of one model name give other
digests (`optbench compare` names the one that differs). Importing this loads neither torch nor
pandas (`machine` asks torch, which a trial's process has loaded).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from optbench.host import cpu_identity, gpu_identity
from optbench.user_code import describe_modules, fold_fingerprint

__version__ = "0.1.0"  # optbench's version (pyproject.toml says the same; a test checks)
PACKAGE = Path(__file__).resolve().parent
# fingerprinted folders and files
TRAINING_CODE: tuple[str, ...] = ("data", "models", "train", "trial", "spec/catalogue.py")
FINGERPRINT_CHARS = 16
# What a result file's provenance may hold (trial/config.py's Provenance checks it): a git commit
# (SHA-1, or SHA-256 in a sha256 repository) and a fingerprint of hex digits
COMMIT_PATTERN = r"[0-9a-f]{40}([0-9a-f]{24})?"
FINGERPRINT_PATTERN = r"[0-9a-f]{16,64}"


@functools.cache
def code_fingerprint(package: Path = PACKAGE) -> str:
    """sha256 (first 16 hex digits) over the sorted .py files of the training code, each as its
    path relative to the package and its bytes."""
    h = hashlib.sha256()
    files = sorted(
        p
        for entry in TRAINING_CODE
        for p in ([package / entry] if entry.endswith(".py") else (package / entry).rglob("*.py"))
    )
    for path in files:
        h.update(path.relative_to(package).as_posix().encode() + b"\n")
        h.update(path.read_bytes())
    return h.hexdigest()[:FINGERPRINT_CHARS]


def _git_dir(root: Path) -> Path | None:
    """The git folder of a checkout at `root`: .git, or where a worktree's .git file points."""
    dot_git = root / ".git"
    if dot_git.is_dir():
        return dot_git
    if dot_git.is_file():
        line = dot_git.read_text().strip()
        if line.startswith("gitdir:"):
            return (root / line.removeprefix("gitdir:").strip()).resolve()
    return None


def _read_ref(git_dir: Path, ref: str) -> str | None:
    """The commit a ref names: a loose ref file, else packed-refs, in the worktree's own folder
    and then in the repository's common folder."""
    common = git_dir
    if (git_dir / "commondir").is_file():
        common = (git_dir / (git_dir / "commondir").read_text().strip()).resolve()
    for folder in dict.fromkeys([git_dir, common]):
        loose = folder / ref
        if loose.is_file():
            return loose.read_text().strip()
        packed = folder / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                sha, _, name = line.partition(" ")
                if name == ref:
                    return sha
    return None


@functools.cache
def git_commit(package: Path = PACKAGE) -> str | None:
    """The commit checked out where `package` lives (None outside a git checkout, or where the
    .git folder cannot be read)."""
    try:
        git_dir = _git_dir(package.parent)
        if git_dir is None:
            return None
        head = (git_dir / "HEAD").read_text().strip()
        sha = (
            _read_ref(git_dir, head.removeprefix("ref:").strip())
            if head.startswith("ref:")
            else head
        )
    except (OSError, UnicodeDecodeError):
        return None
    return sha if sha and re.fullmatch(COMMIT_PATTERN, sha) else None


def machine(device) -> dict[str, str | None]:
    """What a trial's digest depends on of the machine beyond its name (module docstring), on
    torch device `device`: cpu, cpu_flags, cpu_capability, and gpu and gpu_driver on CUDA."""
    import torch

    recorded = {**cpu_identity(), "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    if getattr(device, "type", device) == "cuda":
        recorded |= gpu_identity(device)
    return recorded


def provenance(imports: Sequence[str] = (), device=None) -> dict:
    """What result.json records of the code that made it: version, commit, code_fingerprint;
    with a study's `imports` (user_code.py) also `user_code`, each module's version and source
    digest, which the fingerprint then covers too (results of other user code are told apart);
    with the torch `device` a trial trained on, the `machine` it ran on."""
    fingerprint = code_fingerprint()
    recorded = {"version": __version__, "commit": git_commit(), "code_fingerprint": fingerprint}
    if device is not None:
        recorded["machine"] = machine(device)
    if imports:
        user_code = describe_modules(imports)
        recorded |= {
            "code_fingerprint": fold_fingerprint(fingerprint, user_code),
            "user_code": user_code,
        }
    return recorded


def mixed_code_warning(cells: Iterable[tuple[str, str | None]]) -> str | None:
    """One line naming the cells whose results carry more than one code fingerprint, from
    (cell id, fingerprint) pairs of their results (None: a result from before fingerprints,
    not counted); None when every cell's results come from one training code."""
    seen: dict[str, set[str]] = {}
    for cell_id, fingerprint in cells:
        if isinstance(fingerprint, str):
            seen.setdefault(cell_id, set()).add(fingerprint)
    mixed = {cell: prints for cell, prints in seen.items() if len(prints) > 1}
    if not mixed:
        return None
    named = "; ".join(f"{cell} ({', '.join(sorted(p))})" for cell, p in sorted(mixed.items()))
    return (
        f"warning: {len(mixed)} cell{'s' if len(mixed) > 1 else ''} mix results of different "
        f"training code (code_fingerprint): {named}; their trials were trained by edited "
        f"{', '.join(f + '/' for f in TRAINING_CODE)} code: re-run them in a new study, or "
        "compare like with like"
    )

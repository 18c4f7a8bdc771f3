"""The module paths of earlier layouts that a queued SLURM job's pickle may name, and where
each lives now (`LEGACY_MODULES`), so that a job queued before a move still runs after it.

submitit pickles each job's callable with its arguments (`TrialBatch` and its `TrialJob`s:
configs, recipes, tracking settings) into the job's folder at submission, and the job unpickles
it when it starts, perhaps days later, with the code installed then. A pickle names every class
by module and name; a module that has moved since would make the job fail before it trains.
Unpickling names `optbench.executors.slurm.job` (TrialBatch's module, a stable path) before any
of the classes it holds, so importing this package installs `install()`'s finder first; it
answers only the old names below, and only where no installed module has that name, by handing out
the module that holds those classes now (the same module object: the classes are the current
ones). The driver never unpickles a job's outcome (ends.py reads its log's text). A new entry is
needed when a module that defines a class pickled into a job moves; tests/test_slurm_legacy.py
unpickles a job written under every old name here.

A class that moved out of a module that still exists (`MOVED_CLASSES`) needs no finder: the old
module keeps importing it, so the pickle's old name finds the current class there.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from importlib.machinery import PathFinder
from types import ModuleType

# old module -> the module that holds its pickled classes now (issue 42's moves)
LEGACY_MODULES = {
    "optbench.executors.base": "optbench.trial.jobs",  # TrialJob, PopulationJob
    "optbench.recipe": "optbench.spec.recipe",  # Recipe, Dataset
    "optbench.tracking": "optbench.spec.tracking",  # Tracking (then trackers/backends.py)
    "optbench.train.config": "optbench.trial.config",  # TrainConfig, Execution
    "optbench.train.results": "optbench.trial.results",  # InvalidResultFile, ResumeMismatch
}
# (old module, class) -> the module that defines it now, where the old module still exists and
# imports it from there (issue 52's moves)
MOVED_CLASSES = {
    ("optbench.trackers.backends", "Tracking"): "optbench.spec.tracking",
}


class _LegacyPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: an old name is imported as the module that replaced it."""

    def find_spec(self, name, path=None, target=None):
        if name not in LEGACY_MODULES:
            return None
        return importlib.machinery.ModuleSpec(name, self)

    def create_module(self, spec) -> ModuleType:
        module = importlib.import_module(LEGACY_MODULES[spec.name])
        spec.loader_state = module.__spec__  # the import system stamps `spec` on the module
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = module.__spec__.loader_state  # it ran under its own name: its spec


def install() -> None:
    """Add the finder once, right after the finder of installed modules (PathFinder): a module
    that exists is never shadowed, and an editable install's finder (which may still find an
    old module's stale file in another checkout) comes after it."""
    if any(isinstance(finder, _LegacyPaths) for finder in sys.meta_path):
        return
    finders = [type(f) if not isinstance(f, type) else f for f in sys.meta_path]
    at = finders.index(PathFinder) + 1 if PathFinder in finders else len(sys.meta_path)
    sys.meta_path.insert(at, _LegacyPaths())

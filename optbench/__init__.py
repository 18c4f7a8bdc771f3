"""optbench: how easy is a vision model to optimize? (Xiao et al. 2021, extended to DHVT).

Importing optbench loads neither torch nor timm (the command line's read-only commands need
neither). optbench's models register with timm's registry as soon as timm is imported, before
or after optbench: `import optbench; import timm; timm.create_model("vit_c_4gf")` works.
The Python API (api.py, docs/api.md) is here too, loaded when first used:
`optbench.load_trials(...)`, `optbench.load_summary(...)`, `optbench.edf_figure(...)`, ...

Inside (docs/development.md), its packages in the order they build on each other: `spec/` (the
study as data), `trial/` (the driver-worker contract), `plan/` (a study's trials and jobs),
`models/`, `data/` (the input pipeline), `trackers/`, `train/` (the trainer), `store/` (the study
database), `decision/` (the decision engine: statistics, boundaries, claims, looks),
`report/` (its figures and pages), `executors/`, `run/` (the driver), `cli/` (the command
line); below them `errors.py` (what a user can cause), `safefs.py` (no-follow file access in a
study folder), `worker_lock.py` (the lock a local worker holds), `host.py` (this machine's
cores, device and CPU name), `provenance.py` (which code made a result), `user_code.py` (the
study's own modules, `imports:`); on top `api.py` (the Python API) and `__main__.py`.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

from optbench.provenance import __version__  # noqa: F401  (its one home)


def _register_zoo() -> None:
    from optbench.models import register_zoo

    register_zoo()


class _RegisterAfterTimm(importlib.abc.MetaPathFinder):
    """Finds timm for the import system as usual, and has the zoo registered right after timm's
    own import finishes (once: it then leaves sys.meta_path)."""

    def find_spec(self, name, path=None, target=None):
        if name != "timm":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("timm")
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenRegister(spec.loader)
        return spec


class _ThenRegister(importlib.abc.Loader):
    """timm's own loader, followed by the zoo's registration."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        _register_zoo()

    def __getattr__(self, name):  # anything else timm's loader offers (resources, source)
        return getattr(self.loader, name)


if "timm" in sys.modules:
    _register_zoo()
elif not any(isinstance(f, _RegisterAfterTimm) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterAfterTimm())


_API = ("NothingToDraw", "curves_figure", "edf_figure", "length_figure", "load_study",
        "load_summary", "load_trials", "looks_figure", "optimizer_figure", "scatter_figure",
        "stem_figure", "tunability_figure", "tunability_table")  # fmt: skip


def __getattr__(name: str):
    if name in _API:  # the API needs pandas and matplotlib: loaded on first use
        from optbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'optbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])

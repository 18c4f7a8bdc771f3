"""Which optimizers a study may name, and what arguments each takes: timm's registry by name
(spec/timm_optimizers.py, a torch-free copy of it), checked without importing torch or timm.

- The paper's optimizers, `adamw` and `sgd` (PAPER_OPTIMIZERS), train on optbench's pycls-exact
  path (train/optim.py, train/population_optim.py); their arguments are recipe keys (`betas`,
  `eps`, `momentum`, `nesterov`), so `recipe.optimizer_args` gives them none.
- Every other registry name trains with timm's `create_optimizer_v2` over the same
  weight-decay groups, with the arguments `recipe.optimizer_args.<name>` gives (each checked
  here against the optimizer's signature, by name and by the type of its default) and timm's
  defaults for the rest. A class from another package (apex, bitsandbytes: CUDA only) and a
  second-order one (its step needs the Hessian) are refused.
- Hybrid optimizers treat some parameters by a fallback rule of timm's own, which a trial
  records (`fallback`): Muon and AdaMuon orthogonalize the updates of matrix-shaped parameters
  and step the rest (norm gains, biases, embeddings with a unit dimension) with AdamW, or NAdamW
  with Nesterov momentum; PSGD Kron keeps a diagonal preconditioner for 1-D parameters and
  for dimensions of size 1 or above `max_size_triangular`.
- A population (`executor.population` > 1, train/population_optim.py) trains AdamW, SGD and
  Lion (POPULATION_OPTIMIZERS), Lion with every argument but `caution` (POPULATION_REFUSED:
  its mask is scaled per parameter tensor, which the population's stacked rows do not keep);
  `population_refusal` says why a study's optimizer cannot train in one.
- An optimizer of the study's own (a module under `imports:` registers it with timm's registry,
  docs/extending.md) is a name this table lacks: a study or trial config that names modules
  validates it as one of theirs (`own_names_of_imports`: its form only, OWN_NAME, and its
  arguments' values finite), and the commands that import them check it against timm's live
  registry, its arguments against its class's signature (`registry_entry`, as the table's) and
  by building it (run/preflight.py). Without `imports:` an unknown name is refused. A population
  trains none (no batched version of it).
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from optbench.errors import did_you_mean
from optbench.spec.timm_optimizers import TIMM_OPTIMIZERS, TIMM_VERSION

PAPER_OPTIMIZERS: tuple[str, ...] = ("adamw", "sgd")
POPULATION_OPTIMIZERS: tuple[str, ...] = (*PAPER_OPTIMIZERS, "lion")
# arguments a population does not implement (away from timm's default), per optimizer
POPULATION_REFUSED: dict[str, tuple[str, ...]] = {"lion": ("caution",)}
OPTIMIZER_NAMES: tuple[str, ...] = tuple(
    name for name, entry in TIMM_OPTIMIZERS.items() if "unsupported" not in entry
)
# recipe keys that are the paper optimizers' arguments
PAPER_ARGUMENTS = {"adamw": "recipe.betas and recipe.eps", "sgd": "recipe.momentum and nesterov"}
# the form of an optimizer name of the user's: timm's registry lower-cases the names it registers
# and create_optimizer_v2 reads "a_b" as optimizer b wrapped by a (its lookahead_ prefix), so a
# name with another character would train another optimizer than the one registered
OWN_NAME = re.compile(r"[a-z][a-z0-9]{0,63}")
# Arguments optbench sets itself: the parameter groups, the lr (the search's, scheduled) and the
# weight decay (the search's, on the decayed group only).
SET_BY_OPTBENCH = ("params", "lr", "weight_decay")
# whether the study or config being validated names modules of its own (`imports:`), which may
# register optimizers this table lacks: set around its validation by own_names_of_imports
_IMPORTS_NAMED: ContextVar[bool] = ContextVar("imports_named", default=False)


@contextmanager
def own_names_of_imports(imports: Sequence[str] | None) -> Iterator[None]:
    """While a study or a trial config is validated: with `imports` (its `imports:`), an
    optimizer name this table lacks is taken as one those modules register (check_optimizer);
    without, it is refused."""
    token = _IMPORTS_NAMED.set(bool(imports))
    try:
        yield
    finally:
        _IMPORTS_NAMED.reset(token)


def validated_with_imports(data, validate):
    """`validate(data)` (a model's validation: a study's, a trial config's) with its own
    optimizer names taken as its imports' where `data` names any (own_names_of_imports)."""
    imports = data.get("imports") if isinstance(data, dict) else getattr(data, "imports", None)
    with own_names_of_imports(imports):
        return validate(data)


def is_own_optimizer(name: str) -> bool:
    """Whether `name` is not timm's (its registry as this table has it): an optimizer of the
    study's own modules, where check_optimizer took it."""
    return name not in TIMM_OPTIMIZERS


def display_name(name: str) -> str:
    """How figures and sentences write an optimizer: its class's name where the registry name
    is that name in lower case ("adamw" AdamW, "lion" Lion, "sgd" SGD), else the registry name
    ("lionc", Lion with caution, stays "lionc")."""
    entry = TIMM_OPTIMIZERS.get(name) or {}
    short = str(entry.get("class", "")).rsplit(".", 1)[-1]
    return short if short.lower() == name else name


def check_optimizer(name: str) -> str:
    """`name` if it is an optimizer a study may train with, else ValueError (one line: the
    closest name, or why timm's entry is refused)."""
    entry = TIMM_OPTIMIZERS.get(name)
    if entry is None and _IMPORTS_NAMED.get():
        return check_own_name(name)
    if entry is None:
        raise ValueError(
            f"unknown optimizer {name!r}{did_you_mean(name, OPTIMIZER_NAMES)} (timm "
            f"{TIMM_VERSION}'s registry: timm.optim.list_optimizers(); an optimizer of your own "
            "once the module that registers it is imported: a study's `imports`, `--import`)"
        )
    if "unsupported" in entry:
        raise ValueError(f"optimizer {name!r} is not supported: {entry['unsupported']}")
    return name


def check_own_name(name: str) -> str:
    """`name` if timm can register and build an optimizer under it (OWN_NAME), else ValueError."""
    if not OWN_NAME.fullmatch(name):
        raise ValueError(
            f"optimizer {name!r}: an optimizer of your own takes a name of lower-case letters "
            "and digits (timm's registry lower-cases names and reads 'a_b' as b wrapped by a); "
            "register it under one"
        )
    return name


def _type_error(value, default) -> str | None:
    """Why `value` cannot stand for an argument whose default is `default`, or None. A default
    of None says nothing of the type: any value passes (the optimizer checks it)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "true or false"
    if isinstance(default, int) and not isinstance(default, bool):
        return None if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if isinstance(default, float):
        return None if number else "a number"
    if isinstance(default, str):
        return None if isinstance(value, str) else "a string"
    if isinstance(default, tuple):
        ok = isinstance(value, list | tuple) and len(value) == len(default)
        ok = ok and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
        return None if ok else f"a list of {len(default)} numbers"
    return None


def _listed(value) -> list:
    """`value`'s entries if it is a list, else [value]."""
    return list(value) if isinstance(value, list | tuple) else [value]


def accepted_values(default) -> str:
    """What optbench accepts for an argument whose timm default is `default`, in words (the
    check `check_optimizer_args` makes, as `optbench optimizers` lists it)."""
    return _type_error(object(), default) or "any value (the optimizer checks it when it starts)"


def check_optimizer_args(name: str, args: dict) -> dict:
    """`args` if each is an argument of optimizer `name` with a value of its default's type,
    else ValueError (one line naming the argument, with the closest one). An optimizer of the
    study's own modules (not in the table) has its values' finiteness checked here, its
    arguments once they are imported (run/preflight.py)."""
    check_optimizer(name)
    if name in PAPER_OPTIMIZERS:
        raise ValueError(
            f"{name}: the paper's optimizers take no optimizer_args: their arguments are "
            f"{PAPER_ARGUMENTS[name]}"
        )
    entry = TIMM_OPTIMIZERS.get(name)
    return check_arguments(name, args, None if entry is None else entry["args"])


def check_arguments(name: str, args: dict, known: dict | None) -> dict:
    """`args` if each is an argument of optimizer `name` in `known` (argument: default, as
    `registry_entry` gives them) with a value of its default's type; with `known` None (an
    optimizer not imported here), if none is one optbench sets and every value is finite."""
    whose = "its" if is_own_optimizer(name) else "timm's"
    for arg, value in args.items():
        if arg in SET_BY_OPTBENCH:
            raise ValueError(f"{name}.{arg}: set by optbench (the search's lr and wd, the groups)")
        if known is not None and arg not in known:
            raise ValueError(
                f"{name}.{arg}: not an argument of {name}{did_you_mean(arg, list(known))} "
                f"(its arguments: {', '.join(known)})"
            )
        if any(isinstance(v, float) and not math.isfinite(v) for v in _listed(value)):
            raise ValueError(f"{name}.{arg}: {value!r} is not finite (YAML's .inf or .nan)")
        wanted = None if known is None else _type_error(value, known[arg])
        if wanted:
            raise ValueError(
                f"{name}.{arg}: should be {wanted} ({whose} default: {known[arg]!r}), got {value!r}"
            )
    return args


def population_refusal(name: str, args: dict) -> str | None:
    """Why optimizer `name` with its optimizer_args `args` cannot train in a population (one
    line), or None."""
    if name not in POPULATION_OPTIMIZERS:
        *first, last = POPULATION_OPTIMIZERS
        own = " (an optimizer of the study's imports: it has no batched version)"
        return (
            f"a population trains {', '.join(first)} and {last} only "
            f"(train/population_optim.py), not {name!r}{own if is_own_optimizer(name) else ''}"
        )
    for arg in POPULATION_REFUSED.get(name, ()):
        default = TIMM_OPTIMIZERS[name]["args"][arg]
        if args.get(arg, default) != default:
            return (
                f"recipe.optimizer_args.{name}.{arg} {args[arg]!r}: a population implements "
                f"timm's default {default!r} only (train/population_optim.py)"
            )
    return None


def optimizer_kwargs(args: dict) -> dict:
    """A study's optimizer_args as the optimizer takes them: lists (from YAML) as the tuples
    its defaults are (betas)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in args.items()}


def optimizer_fallback(name: str, args: dict) -> str | None:
    """The rule a hybrid optimizer applies to the parameters it does not treat as matrices
    (module docstring): "adamw" or "nadamw" for Muon's family, "diagonal" for Kron's; None for
    every other optimizer."""
    entry = TIMM_OPTIMIZERS.get(name, {})
    if entry.get("class") == "timm.optim.muon.Muon":
        nesterov = args.get("nesterov", entry["args"]["nesterov"])
        return "nadamw" if nesterov else "adamw"
    if entry.get("class") == "timm.optim.kron.Kron":
        return "diagonal"
    return None


def registry_entry(info) -> dict:
    """One entry of timm's optimizer registry (a `timm.optim.OptimInfo`, timm's own or one a
    study's module registered) as the table spec/timm_optimizers.json holds it: the class and each
    argument a study may set with the default create_optimizer_v2 gives it (the class's,
    overridden by the registry's defaults, momentum 0.9 where timm adds it), leaving out what
    create_optimizer_v2 drops (eps, betas, momentum where the registry says the class has none)
    and what no study can spell; a class from another package (apex, bitsandbytes) or a
    second-order one is marked unsupported. Reads the entry only: no torch here."""
    if isinstance(info.opt_class, str):
        package = info.opt_class.split(".")[0]
        return {"class": info.opt_class, "unsupported": f"a {package} class (CUDA only)"}
    cls = info.opt_class
    entry = {"class": f"{cls.__module__}.{cls.__qualname__}"}
    if info.second_order:
        return {**entry, "unsupported": "second order (its step needs the Hessian)"}
    dropped = {"eps": not info.has_eps, "betas": not info.has_betas}
    dropped["momentum"] = not info.has_momentum
    args = {}
    for arg, param in inspect.signature(cls.__init__).parameters.items():
        if arg in ("self", *SET_BY_OPTBENCH) or dropped.get(arg):
            continue
        default = param.default
        if arg in (info.defaults or {}):
            default = info.defaults[arg]
        elif arg == "momentum":
            default = 0.9  # create_optimizer_v2's, for every optimizer with momentum
        value = _table_value(default)
        if value is not NOT_SETTABLE:
            args[arg] = value
    return {**entry, "args": args}


def _table_value(value):
    """A default as the table writes it (tuples as tuples), or NOT_SETTABLE for one no study can
    spell (a torch dtype, a required argument)."""
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, tuple | list) and all(isinstance(v, int | float) for v in value):
        return tuple(value)
    return NOT_SETTABLE


NOT_SETTABLE = object()

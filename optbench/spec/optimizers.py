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
"""

from __future__ import annotations

import math

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
    if entry is None:
        raise ValueError(
            f"unknown optimizer {name!r}{did_you_mean(name, OPTIMIZER_NAMES)} (timm "
            f"{TIMM_VERSION}'s registry: timm.optim.list_optimizers())"
        )
    if "unsupported" in entry:
        raise ValueError(f"optimizer {name!r} is not supported: {entry['unsupported']}")
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
    else ValueError (one line naming the argument, with the closest one)."""
    check_optimizer(name)
    if name in PAPER_OPTIMIZERS:
        raise ValueError(
            f"{name}: the paper's optimizers take no optimizer_args: their arguments are "
            f"{PAPER_ARGUMENTS[name]}"
        )
    known = TIMM_OPTIMIZERS[name]["args"]
    for arg, value in args.items():
        if arg in ("lr", "weight_decay", "params"):
            raise ValueError(f"{name}.{arg}: set by optbench (the search's lr and wd, the groups)")
        if arg not in known:
            raise ValueError(
                f"{name}.{arg}: not an argument of {name}{did_you_mean(arg, list(known))} "
                f"(its arguments: {', '.join(known)})"
            )
        if any(isinstance(v, float) and not math.isfinite(v) for v in _listed(value)):
            raise ValueError(f"{name}.{arg}: {value!r} is not finite (YAML's .inf or .nan)")
        wanted = _type_error(value, known[arg])
        if wanted:
            raise ValueError(
                f"{name}.{arg}: should be {wanted} (timm's default: {known[arg]!r}), got {value!r}"
            )
    return args


def population_refusal(name: str, args: dict) -> str | None:
    """Why optimizer `name` with its optimizer_args `args` cannot train in a population (one
    line), or None."""
    if name not in POPULATION_OPTIMIZERS:
        *first, last = POPULATION_OPTIMIZERS
        return (
            f"a population trains {', '.join(first)} and {last} only "
            f"(train/population_optim.py), not {name!r}"
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

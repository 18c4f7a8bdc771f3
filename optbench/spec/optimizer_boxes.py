"""A suggested (lr, wd) box for every optimizer a study may name, from AdamW's box by the
published rule of the optimizer's class where one exists (`RULES`), and the listing `optbench
optimizers` prints (`optimizer_listing`): each optimizer's arguments as optbench checks them
(spec/optimizers.py), its box, the rule and its source.

A rule multiplies AdamW's bounds, the low bound by its first factor and the high bound by its
second, so a range of factors (Lion: lr 3 to 10 times smaller) widens the box to cover it. The
boxes are starting points for `search.ranges.<name>`, not values tuned here (docs/recipes.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from optbench.spec.optimizers import (
    OPTIMIZER_NAMES,
    PAPER_ARGUMENTS,
    POPULATION_OPTIMIZERS,
    accepted_values,
    display_name,
    optimizer_fallback,
)
from optbench.spec.schema import Range
from optbench.spec.timm_optimizers import TIMM_OPTIMIZERS, TIMM_VERSION

# the quickstart's AdamW box (studies/quickstart.yaml, lrs at ref_batch 128)
QUICKSTART_ADAMW = Range(lr=(2.0e-4, 2.0e-2), wd=(3.0e-3, 0.5))


@dataclass(frozen=True)
class BoxRule:
    """How an optimizer's box follows from AdamW's: factors on (low, high) of lr and of wd."""

    lr: tuple[float, float]
    wd: tuple[float, float]
    rule: str  # in words
    source: str  # where the rule is published ("" where none is)

    def box(self, adamw: Range) -> Range:
        """This rule's box for AdamW's box `adamw`."""
        return Range(
            lr=(adamw.lr[0] * self.lr[0], adamw.lr[1] * self.lr[1]),
            wd=(adamw.wd[0] * self.wd[0], adamw.wd[1] * self.wd[1]),
        )


NO_RULE = BoxRule((1.0, 1.0), (1.0, 1.0), "no published rule: AdamW's box", "")
# The paper's ViT EDF intervals at batch 2048 (Xiao et al. 2021; studies/edf_adamw_cifar100.yaml
# and edf_sgd_cifar100.yaml): AdamW lr [2.5e-4, 8e-3], wd [0.02, 0.8]; SGD lr [0.1, 3.2], wd
# [4e-6, 1.2e-4]: SGD's bounds are AdamW's times these.
_SGD = BoxRule(
    (0.1 / 2.5e-4, 3.2 / 8e-3),
    (4e-6 / 0.02, 1.2e-4 / 0.8),
    "no rule relative to AdamW: the paper's SGD box, lr x400 and wd /5,000 to /6,667 of its "
    "AdamW box",
    "Xiao et al. 2021, the ViT EDF intervals (studies/edf_sgd_cifar100.yaml)",
)
# by the optimizer's class (timm_optimizers.json), so each registry name of a class shares it
RULES: dict[str, BoxRule] = {
    "timm.optim.lion.Lion": BoxRule(
        (1 / 10, 1 / 3),
        (3.0, 10.0),
        "lr 3 to 10x smaller, wd 3 to 10x larger than AdamW's",
        "Chen et al. 2023, Symbolic Discovery of Optimization Algorithms (arXiv:2302.06675)",
    ),
    "timm.optim.muon.Muon": BoxRule(
        (1.0, 1.0),
        (1.0, 1.0),
        "AdamW's box: with adjust_lr_fn match_rms_adamw (timm's default) each update has "
        "AdamW's RMS, so AdamW's lr and wd carry over",
        "Liu et al. 2025, Muon is Scalable for LLM Training (arXiv:2502.16982); AdaMuon: Si et "
        "al. 2025 (arXiv:2507.11005)",
    ),
    "torch.optim.sgd.SGD": _SGD,
    "timm.optim.sgdw.SGDW": _SGD,
    "timm.optim.sgdp.SGDP": _SGD,
    # SGD with a per-layer trust ratio (You et al. 2017): its lr is SGD's, scaled per layer
    "timm.optim.lars.Lars": _SGD,
}


def box_rule(name: str) -> BoxRule:
    """The rule that gives optimizer `name` its box (NO_RULE where its class has none)."""
    if name == "adamw":
        return BoxRule((1.0, 1.0), (1.0, 1.0), "AdamW's box itself", "")
    return RULES.get(TIMM_OPTIMIZERS[name]["class"], NO_RULE)


def _json_value(value):
    return list(value) if isinstance(value, tuple) else value


def optimizer_entry(name: str, adamw: Range = QUICKSTART_ADAMW) -> dict:
    """One optimizer as `optbench optimizers` lists it: its class, arguments (name, timm's
    default, what optbench accepts), suggested box, the rule and its source."""
    entry = TIMM_OPTIMIZERS[name]
    rule = box_rule(name)
    box = rule.box(adamw)
    if name in PAPER_ARGUMENTS:  # the pycls-exact path: its arguments are recipe keys
        arguments, where = [], PAPER_ARGUMENTS[name]
    else:
        arguments = [
            {"name": arg, "default": _json_value(default), "accepts": accepted_values(default)}
            for arg, default in entry["args"].items()
        ]
        where = f"recipe.optimizer_args.{name}"
    return {
        "name": name,
        "display": display_name(name),
        "class": entry["class"],
        "arguments": arguments,
        "arguments_in": where,
        "box": {"lr": list(box.lr), "wd": list(box.wd)},
        "rule": rule.rule,
        "source": rule.source,
        "population": name in POPULATION_OPTIMIZERS,
        "fallback": optimizer_fallback(name, {}),
    }


def optimizer_listing(names: list[str] | None = None, adamw: Range = QUICKSTART_ADAMW) -> dict:
    """`optbench optimizers --json`: timm's version, the AdamW box the boxes follow from, the
    optimizers `names` (all a study may name where None) and the registry's names it refuses,
    with why."""
    return {
        "timm_version": TIMM_VERSION,
        "adamw_box": {"lr": list(adamw.lr), "wd": list(adamw.wd)},
        "optimizers": [optimizer_entry(n, adamw) for n in names or OPTIMIZER_NAMES],
        "refused": {n: e["unsupported"] for n, e in TIMM_OPTIMIZERS.items() if "unsupported" in e},
    }

"""Which models play which part in the paper's claims, by zoo name (no torch, no timm):
`vit_p_<x>` and `vit_c_<x>` are a ViT_P / ViT_C pair, `vit_s<k>_<x>` the stem ablation with a
k-th patchify size of the same family `<x>` (Table 3's S1, S2, ...). Read by the claims
(decision/claims.py) and by the study's `decide:` validation (which claims a grid can test)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_ROLE = re.compile(r"^vit_(p|c|s(\d+))_(.+)$")


@dataclass(frozen=True)
class Family:
    """The ViT_P / ViT_C pair and stem ablations sharing one zoo suffix."""

    p: str | None
    c: str | None
    stems: tuple[str, ...]  # S1, S2, ... in patchify-size order

    @property
    def stem_order(self) -> tuple[str, ...]:
        return (*self.stems, self.p) if self.p else ()


def families(models: list[str]) -> list[Family]:
    """The model families named in `models`, by zoo name (module docstring)."""
    found: dict[str, dict[str, str]] = {}
    for model in models:
        match = _ROLE.match(model)
        if match:
            role = "p" if match[1] == "p" else "c" if match[1] == "c" else f"s{int(match[2]):04d}"
            found.setdefault(match[3], {})[role] = model
    return [
        Family(
            roles.get("p"),
            roles.get("c"),
            tuple(roles[k] for k in sorted(r for r in roles if r.startswith("s"))),
        )
        for roles in found.values()
    ]


def role_name(model: str) -> str:
    """A zoo model's short name in the paper's notation: P, C or S<k>."""
    match = _ROLE.match(model)
    return model if match is None else match.group(1).upper()

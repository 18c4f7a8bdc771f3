"""The zoo's table of contents: which models optbench offers, their default input and classes,
their complexity, and their measured training throughput. `optbench models` prints this, and
docs/models.md holds its output. Defaults and counts come from the disk cache (cache.py) once
counted, so the table needs neither torch nor timm then.

Any timm model name can be used in a study as well (timm's own regnety_* included: they are other
models than the paper's RegNetYs, which are regnety_{1,4,16}gf here).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from optbench.errors import UsageError
from optbench.models import ZOO, create_model, is_model
from optbench.models.cache import cached_counts, cached_defaults

if TYPE_CHECKING:
    import torch


def zoo_models() -> list[str]:
    """Every optbench model in display order: ViTs, stem ablations, DHVTs, RegNetYs."""
    return list(ZOO)


@dataclass(frozen=True)
class ModelDefaults:
    """The input and classes a model is built for unless told otherwise."""

    img_size: int
    in_chans: int
    num_classes: int


def model_defaults(name: str) -> ModelDefaults:
    """Defaults from the model's timm pretrained cfg (every optbench model has one)."""
    if not is_model(name):
        raise UsageError(f"model: unknown model {name!r} (see `optbench models`)")
    return ModelDefaults(**cached_defaults(name, lambda: _defaults_from_timm(name)))


def _defaults_from_timm(name: str) -> dict[str, int]:
    import timm

    cfg = timm.get_pretrained_cfg(name)
    in_chans, height, _ = cfg.input_size if cfg is not None else (3, 224, 224)
    num_classes = cfg.num_classes if cfg is not None and cfg.num_classes else 1000
    return dict(img_size=height, in_chans=in_chans, num_classes=num_classes)


def describe(name: str) -> dict:
    """One row of the zoo table: name, defaults and complexity (plain counts, one image)."""
    d = model_defaults(name)
    counts = cached_counts(
        name, num_classes=d.num_classes, in_chans=d.in_chans, img_size=d.img_size
    )
    return dict(name=name, img_size=d.img_size, num_classes=d.num_classes, **counts)


def measure_throughput(
    name: str, *, device: torch.device, batch_size: int, steps: int, warmup: int = 2
) -> float:
    """Training images/s of `name` at its defaults: forward, cross-entropy backward and an SGD step
    on random data, timed over `steps` steps after `warmup` untimed ones."""
    import torch
    from torch import nn

    d = model_defaults(name)
    model = create_model(
        name, num_classes=d.num_classes, in_chans=d.in_chans, img_size=d.img_size
    ).to(device)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x = torch.randn(batch_size, d.in_chans, d.img_size, d.img_size, device=device)
    y = torch.randint(0, d.num_classes, (batch_size,), device=device)
    criterion = nn.CrossEntropyLoss()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        criterion(model(x), y).backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return batch_size * steps / (time.perf_counter() - start)


def _sig3(x: float) -> str:
    """Three significant digits, trailing zeros kept (3.90, 0.0448), no dangling point (178)."""
    return f"{x:.0f}" if x >= 100 else f"{x:#.3g}"


def markdown_table(rows: list[dict]) -> str:
    """The zoo as a Markdown table (GF = 1e9 multiply-adds; params and acts in millions)."""
    measured = any("images_per_s" in r for r in rows)
    head = "| model | input | classes | GF | params (M) | acts (M) |"
    rule = "|---|---:|---:|---:|---:|---:|"
    if measured:
        head, rule = head + " train img/s |", rule + "---:|"
    lines = [head, rule]
    for r in rows:
        line = (
            f"| {r['name']} | {r['img_size']} | {r['num_classes']} | {_sig3(r['flops'] / 1e9)} "
            f"| {_sig3(r['params'] / 1e6)} | {_sig3(r['acts'] / 1e6)} |"
        )
        if measured:
            line += f" {r['images_per_s']:.1f} |"
        lines.append(line)
    return "\n".join(lines)

"""`optbench optimizers`: timm's optimizers as a study may name them, each with its arguments, a
suggested (lr, wd) box and the box's source (spec/optimizer_boxes.py), as text or `--json`.
Reads the package's table only: imports no torch or timm and writes nothing."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from optbench.errors import UsageError


def _bounds(values: list[float]) -> str:
    return f"[{values[0]:.3g}, {values[1]:.3g}]"


def _text(listing: dict) -> str:
    """The listing as text: a header, a block per optimizer, the refused names."""
    adamw = listing["adamw_box"]
    lines = [
        f"timm {listing['timm_version']}: {len(listing['optimizers'])} optimizer(s) a study may "
        f"name. Boxes follow from AdamW's lr {_bounds(adamw['lr'])}, wd {_bounds(adamw['wd'])} "
        "(--adamw-lr, --adamw-wd) for search.ranges.<name>; arguments go in "
        "recipe.optimizer_args.<name> (docs/recipes.md).",
    ]
    for o in listing["optimizers"]:
        extra = [f"{o['display']}, {o['class']}"]
        extra += ["trains in a population"] if o["population"] else []
        extra += [f"fallback {o['fallback']}"] if o["fallback"] else []
        lines += [
            "",
            f"{o['name']}  ({'; '.join(extra)})",
            f"  box   lr {_bounds(o['box']['lr'])}, wd {_bounds(o['box']['wd'])}",
            f"  rule  {o['rule']}",
        ]
        lines += [f"  from  {o['source']}"] if o["source"] else []
        if not o["arguments"]:
            lines.append(f"  args  {o['arguments_in']}")
        for a in o["arguments"]:
            lines.append(f"  arg   {a['name']} = {json.dumps(a['default'])}: {a['accepts']}")
    by_reason: dict[str, list[str]] = {}
    for name, why in listing["refused"].items():
        by_reason.setdefault(why, []).append(name)
    lines += ["", "refused:"] + [f"  {', '.join(n)}: {why}" for why, n in by_reason.items()]
    return "\n".join(lines)


def optimizers(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="NAME", help="optimizers to describe (default: every one a study may name)"
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print JSON instead")] = False,
    adamw_lr: Annotated[
        tuple[float, float] | None,
        typer.Option(metavar="LOW HIGH", help="AdamW's lr box the boxes follow from"),
    ] = None,
    adamw_wd: Annotated[
        tuple[float, float] | None,
        typer.Option(metavar="LOW HIGH", help="AdamW's wd box the boxes follow from"),
    ] = None,
) -> None:
    """List timm's optimizers: arguments, (lr, wd) box, its source.

    Each box follows from AdamW's (default: the quickstart's) by the optimizer's published rule
    where one exists, else it is AdamW's."""
    from optbench.spec.optimizer_boxes import QUICKSTART_ADAMW, optimizer_listing
    from optbench.spec.optimizers import check_optimizer
    from optbench.spec.schema import Range

    for name in names or []:
        try:
            check_optimizer(name)
        except ValueError as err:
            raise UsageError(f"NAME: {err}") from None
    try:
        adamw = Range(lr=adamw_lr or QUICKSTART_ADAMW.lr, wd=adamw_wd or QUICKSTART_ADAMW.wd)
    except ValueError as err:  # pydantic's: the first problem, in one line
        problem = err.errors()[0]
        flag = f"--adamw-{problem['loc'][0]}"
        raise UsageError(f"{flag}: {problem['msg'].removeprefix('Value error, ')}") from None
    listing = optimizer_listing(names, adamw)
    typer.echo(json.dumps(listing, indent=1) if json_out else _text(listing))

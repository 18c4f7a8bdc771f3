"""`optbench data pack FOLDER OUT`: a class folder packed into WebDataset shards
(optbench/data/pack.py does it; app.py registers the `data` group)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from optbench.data.pack import PER_SHARD, pack_folder
from optbench.data.shards import MANIFEST

data_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help, as the app's (app.py)
    help="Prepare datasets (pack class folders into shards).",
)


@data_app.command("pack")
def pack(
    folder: Annotated[
        Path, typer.Argument(help="a class-folder dataset: FOLDER/{train,val}/<class>/")
    ],
    out: Annotated[Path, typer.Argument(help="a new (or empty) folder for the shards")],
    per_shard: Annotated[int, typer.Option(help="images per shard")] = PER_SHARD,
) -> None:
    """Pack a class folder into WebDataset tar shards.

    A study reads them with `dataset.layout: wds` (docs/datasets.md)."""
    manifest = pack_folder(folder, out, per_shard)
    for split, entry in manifest["splits"].items():
        typer.echo(f"{split}: {entry['images']} images in {len(entry['shards'])} shards")
    typer.echo(f"wrote {out} ({len(manifest['classes'])} classes; {out / MANIFEST})")

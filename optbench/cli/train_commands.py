"""`optbench train` and `optbench models`: one configuration trained from flags, and the model
zoo described (app.py registers them)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated, get_args

import typer

from optbench.errors import UsageError, WriteError, format_errors
from optbench.spec.recipe import Pipeline, Recipe

# `--import MODULE`: a module of your own that registers models or optimizers (a study's
# `imports:`, optbench/user_code.py), imported before any name is looked up.
ImportFlag = Annotated[
    list[str] | None,
    typer.Option(
        "--import",
        metavar="MODULE",
        help="import this module first (a dotted name, installed or on PYTHONPATH): one that "
        "registers your own models or optimizers; repeatable",
    ),
]


def _import_flags(modules: list[str] | None) -> tuple[str, ...]:
    """The --import modules checked as names and imported: one line naming a bad one, exit 2."""
    from optbench.user_code import check_module_names, import_modules

    try:
        names = check_module_names(modules or [])
    except ValueError as err:
        raise UsageError(f"--import: {err}") from None
    import_modules(names, "--import")
    return tuple(names)


def _complete_model(incomplete: str) -> list[str]:
    from optbench.models.zoo import zoo_models

    return [name for name in zoo_models() if name.startswith(incomplete)]


def train(
    model: Annotated[
        str,
        typer.Argument(
            help="a registered model name (`optbench models`)", autocompletion=_complete_model
        ),
    ],
    dataset: Annotated[str, typer.Option(help="dataset name, e.g. digits")],
    optimizer: Annotated[
        str,
        typer.Option(help="adamw or sgd (the paper's), or any name of timm's optimizer registry"),
    ],
    lr: Annotated[float, typer.Option(help="learning rate, normalized to --ref-batch")],
    wd: Annotated[float, typer.Option(help="weight decay")],
    epochs: Annotated[int, typer.Option(help="schedule length")],
    out: Annotated[Path, typer.Option(help="folder for result.json and metrics.jsonl")],
    seed: int = 0,
    batch_size: int = 128,
    ref_batch: Annotated[
        int | None,
        typer.Option(
            help="batch size that --lr is normalized to (default: the preset's: paper 2048, "
            "deit 512, basic --batch-size, i.e. no scaling)"
        ),
    ] = None,
    data_root: Annotated[
        Path | None, typer.Option(help="dataset folder (on-disk datasets)")
    ] = None,
    img_size: Annotated[int | None, typer.Option(help="resize images to this size")] = None,
    layout: Annotated[
        str, typer.Option(help="image datasets: folders or wds (shards)")
    ] = "folders",
    warmup_epochs: Annotated[
        float | None, typer.Option(help="override recipe.warmup_epochs")
    ] = None,
    threads: Annotated[
        int | None, typer.Option(help="torch CPU threads (default: all cores)")
    ] = None,
    recipe: Annotated[
        str, typer.Option(help="recipe preset: basic, paper or deit (docs/recipes.md)")
    ] = "basic",
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="override one recipe key, KEY=VALUE (VALUE read as YAML); repeatable"
        ),
    ] = None,
    device: Annotated[str, typer.Option(help="torch device, e.g. cpu or cuda")] = "cpu",
    pipeline: Annotated[
        str,
        typer.Option(help="input pipeline: auto (tensor on CUDA, pil otherwise), pil or tensor"),
    ] = "auto",
    resume: Annotated[
        bool, typer.Option(help="continue from OUT/checkpoint.pt if there is one")
    ] = False,
    download: Annotated[
        bool, typer.Option(help="download the dataset into --data-root first (cifar10/100)")
    ] = False,
    imports: ImportFlag = None,
) -> None:
    """Train one configuration (writes OUT/result.json).

    A study's workers train each trial the same way. SIGTERM or SIGUSR2 saves
    OUT/checkpoint.pt and exits with 128 + the signal number; run the same command with
    --resume to continue."""
    import torch
    from pydantic import ValidationError

    from optbench.data.datasets import check_dataset_files, download_dataset
    from optbench.errors import did_you_mean
    from optbench.models import is_model, model_names
    from optbench.run.preflight import (
        check_batch,
        check_input_size,
        check_optimizer_runs,
        check_pipeline,
    )
    from optbench.spec.optimizers import check_optimizer, own_names_of_imports
    from optbench.spec.overrides import apply_overrides, parse_overrides
    from optbench.train.run_trial import run_trial
    from optbench.train.signals import STOP_SIGNALS, TrialInterrupted
    from optbench.trial.config import Execution, make_train_config

    modules = _import_flags(imports)
    try:  # an optimizer an --import registers: taken here, checked as it is built (below)
        with own_names_of_imports(modules):
            check_optimizer(optimizer)
    except ValueError as err:
        raise UsageError(f"--optimizer: {err}") from None
    if pipeline not in get_args(Pipeline):
        raise UsageError(f"--pipeline: must be one of {list(get_args(Pipeline))}, got {pipeline!r}")
    if not is_model(model):
        hint = did_you_mean(model, model_names())
        raise UsageError(f"MODEL: unknown model {model!r}{hint} (see `optbench models`)")
    keys: dict = {"preset": recipe}
    if warmup_epochs is not None:
        keys["warmup_epochs"] = warmup_epochs
    # the strict YAML reader, and dotted keys nested, as a study's --set
    keys = apply_overrides(keys, parse_overrides(set_ or []))
    try:
        with own_names_of_imports(modules):
            resolved_recipe = Recipe.model_validate(keys)
    except ValidationError as err:
        raise UsageError(format_errors("--recipe/--set", err, schema=Recipe)) from None
    cfg = make_train_config(
        "train",
        model=model,
        dataset={"name": dataset, "root": data_root, "img_size": img_size, "layout": layout},
        optimizer=optimizer,
        lr=lr,
        wd=wd,
        epochs=epochs,
        batch_size=batch_size,
        ref_batch=ref_batch,
        seed=seed,
        recipe=resolved_recipe,
        imports=modules,
    )
    ds = cfg.dataset
    _check_train_flags(cfg, out, threads, device, resume)
    check_optimizer_runs(cfg.optimizer, cfg.recipe, "--set optimizer_args")
    check_pipeline(cfg.recipe, pipeline, "--recipe/--set", "--pipeline")
    if download:
        download_dataset(ds)
    check_dataset_files(ds)
    check_input_size(ds, model, "--img-size")
    check_batch(ds, batch_size, "--batch-size")
    if threads:
        torch.set_num_threads(threads)

    def exit_on_stop(signum: int, frame) -> None:  # run_trial passes the signal on to this
        typer.echo(f"stopped by signal {signum}; resume with --resume", err=True)
        sys.exit(128 + signum)

    for s in STOP_SIGNALS:
        signal.signal(s, exit_on_stop)

    typer.echo(train_banner(cfg), err=True)

    def print_epoch(line: dict) -> None:  # stdout stays result.json's JSON
        typer.echo(epoch_line(line, epochs), err=True)

    try:
        result = run_trial(
            cfg,
            out,
            device,
            resume=resume,
            on_epoch=print_epoch,
            execution=Execution(pipeline=pipeline),
        )
    except TrialInterrupted as stopped:
        exit_on_stop(stopped.signum, None)
    except OSError as err:  # disk full, I/O error: one line (the checkpoint so far is kept)
        raise WriteError.from_os(err) from None
    typer.echo(result.model_dump_json(indent=2, exclude={"config"}))
    if result.status == "failed":
        raise typer.Exit(1)


def train_banner(cfg) -> str:
    """What `optbench train` is about to train, on stderr at its start: the lr the optimizer
    gets after the linear scaling rule (cfg.lr_used) and the recipe's key values."""
    r = cfg.recipe
    augment = [f"translate {r.translate}"] + (["hflip"] if r.hflip else [])
    augment += [f"{r.auto_augment}"] if r.auto_augment != "none" else []
    augment += [
        f"{k} {v:g}" for k, v in (("mixup", r.mixup_alpha), ("cutmix", r.cutmix_alpha)) if v
    ]
    return (
        f"training {cfg.model} on {cfg.dataset.name}, {cfg.optimizer}, {cfg.epochs} epochs, "
        f"seed {cfg.seed}: lr_used {cfg.lr_used:.4g} (lr {cfg.lr:g} x batch {cfg.batch_size} / "
        f"ref_batch {cfg.ref_batch}), wd {cfg.wd:g}\n"
        f"recipe {r.preset}: {r.schedule} schedule, warmup {r.warmup_for(cfg.epochs):g} epochs, "
        f"label_smoothing {r.label_smoothing:g}, "
        f"ema {'on' if r.ema else 'off'} (reports {r.report}), drop_path {r.drop_path:g}, "
        f"augment: {', '.join(augment)}"
    )


def epoch_line(line: dict, epochs: int) -> str:
    """One epoch of `optbench train`, from its metrics line."""
    loss = line.get("train_loss")
    parts = [f"epoch {line['epoch']}/{epochs}", f"loss {'nan' if loss is None else f'{loss:.4f}'}"]
    if line.get("val_error") is not None:
        kinds = [f"{k} {line[f'{k}_top1']:.2f}%" for k in ("raw", "ema") if f"{k}_top1" in line]
        parts.append(f"val error {line['val_error']:.2f}% ({', '.join(kinds)})")
    wait = line.get("input_wait")
    waited = f", {wait:.0%} waiting for input" if wait is not None else ""
    parts.append(f"{line['epoch_s']:.1f} s, {line['images_per_s']:.0f} img/s{waited}")
    return "  ".join(parts)


def _check_train_flags(cfg, out: Path, threads: int | None, device: str, resume: bool) -> None:
    """`optbench train`'s flags against this machine, before anything is written: threads,
    device, the process group's environment, the output folder and what --resume would
    continue from."""
    from optbench.host import check_writable_folder
    from optbench.run.preflight import check_device, check_threads
    from optbench.train.run_trial import check_environment, check_resume

    if threads is not None:
        check_threads(threads)
    check_device(device)
    check_environment()
    check_writable_folder(out, "--out")
    if resume:
        check_resume(cfg, out)


def models(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            help="models to describe, any timm name (default: the whole zoo)",
            autocompletion=_complete_model,
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print a JSON list instead")] = False,
    measure: Annotated[
        bool, typer.Option(help="also measure training images/s on this machine's device")
    ] = False,
    imports: ImportFlag = None,
) -> None:
    """Print the model zoo: each model's input, flops, params, acts.

    With --import, the modules' own models too (docs/extending.md)."""
    import json

    from optbench.errors import did_you_mean
    from optbench.models import is_model, model_names
    from optbench.models.zoo import describe, markdown_table, measure_throughput, zoo_models

    if imports:  # before any name is looked up; without NAME, the zoo and what they register
        from optbench.models import registered_by

        added = registered_by(_import_flags(imports))
        names = names or [*zoo_models(), *added]
    names = names or zoo_models()
    for name in names:
        if not is_model(name):
            hint = did_you_mean(name, model_names())
            raise UsageError(f"NAME: unknown model {name!r}{hint} (see `optbench models`)")
    if measure:
        import torch

        from optbench.host import training_device

        device = torch.device(training_device())
        # On a CPU a few small steps keep this cheap; the numbers still rank models by runtime.
        batch_size, steps = (64, 10) if device.type == "cuda" else (8, 2)
    rows = []
    for name in names:
        row = describe(name)
        if measure:
            row["images_per_s"] = round(
                measure_throughput(name, device=device, batch_size=batch_size, steps=steps), 1
            )
        rows.append(row)
    typer.echo(json.dumps(rows, indent=1) if json_out else markdown_table(rows))

"""The `optbench` command line: thin wrappers that parse flags and call the library.

Bad input (a spec that does not validate, an unknown model, a missing dataset folder) raises
`UsageError`; `main` prints it as one message and exits with code 2, before anything is written.
So does a flag that click refuses (a bad value, a missing argument): one `error:` line naming
it, not typer's usage box.
"""

from __future__ import annotations

import signal
import sys
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from optbench.console import text_console
from optbench.errors import (
    StorageUnavailable,
    UsageError,
    WriteError,
    format_errors,
    torch_mismatch,
)
from optbench.recipe import OPTIMIZERS, Recipe
from optbench.spec import StudySpec

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Benchmark how easy vision models are to optimize.",
)


# Piped output (CI logs, files) gets wide tables instead of rich's 80-column default. What it
# prints is text, never markup: lines and tables show data from files (progress.text_console).
console = text_console(width=None if sys.stdout.isatty() else 160)


def _print_version(value: bool) -> None:
    if value:
        from optbench import __version__

        typer.echo(f"optbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="print the version"),
    ] = False,
) -> None:
    """Benchmark how easy vision models are to optimize (Xiao et al. 2021; DHVT)."""


def _complete_model(incomplete: str) -> list[str]:
    from optbench.models.zoo import zoo_models

    return [name for name in zoo_models() if name.startswith(incomplete)]


# `--set KEY=VALUE` on the commands that read a study: applied to its YAML before validation.
Overrides = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="override a study key, KEY=VALUE with a dotted KEY and a YAML VALUE, e.g. "
        "--set search.n_samples=8 --set models='[vit_c_4gf]'; repeatable",
    ),
]


def _load(
    path: Path,
    *,
    data: bool,
    sized: bool = False,
    overrides: list[str] | None = None,
    flags: dict[str, tuple[str, object]] | None = None,
) -> StudySpec:
    """A study file with its overrides, validated, with its models and dataset checked (and its
    batch against the dataset's size, with sized; its files, with data). `flags`: dotted key ->
    (flag, value) of the flags that set a study key (`--executor slurm` is executor.kind), None
    values left out: applied after the --set overrides (a flag wins), so that the whole study
    is validated once with every override, and named in errors as the flag was typed."""
    from optbench.checks import check_spec
    from optbench.overrides import load_study, override_sources, parse_overrides

    parsed = parse_overrides(overrides or [])
    spelled = {}
    for key, (flag, value) in (flags or {}).items():
        if value is not None:
            parsed[key], spelled[key] = value, f"{flag} {value}"
    spec = load_study(path, parsed, spelled)
    sources = {**override_sources(parsed), **spelled}
    check_spec(spec, data=data, sized=sized, source=path, sources=sources)
    return spec


@app.command()
def train(
    model: Annotated[
        str,
        typer.Argument(
            help="a registered model name (`optbench models`)", autocompletion=_complete_model
        ),
    ],
    dataset: Annotated[str, typer.Option(help="dataset name, e.g. digits")],
    optimizer: Annotated[str, typer.Option(help="adamw or sgd")],
    lr: Annotated[float, typer.Option(help="learning rate, normalized to --ref-batch")],
    wd: Annotated[float, typer.Option(help="weight decay")],
    epochs: Annotated[int, typer.Option(help="schedule length")],
    out: Annotated[Path, typer.Option(help="folder for result.json and metrics.jsonl")],
    seed: int = 0,
    batch_size: int = 128,
    ref_batch: Annotated[
        int | None,
        typer.Option(
            help="batch size that --lr is normalized to (default: the preset's, 2048 or 512)"
        ),
    ] = None,
    data_root: Annotated[
        Path | None, typer.Option(help="dataset folder (on-disk datasets)")
    ] = None,
    img_size: Annotated[int | None, typer.Option(help="resize images to this size")] = None,
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
) -> None:
    """Train one configuration and write OUT/result.json (the runner's workers do the same).

    SIGTERM or SIGUSR2 saves OUT/checkpoint.pt and exits with 128 + the signal number; run the
    same command with --resume to continue."""
    import torch
    from pydantic import ValidationError

    from optbench.checks import check_batch, check_input_size
    from optbench.errors import did_you_mean
    from optbench.models import is_model, model_names
    from optbench.overrides import parse_overrides
    from optbench.train.config import Execution, make_train_config
    from optbench.train.datasets import check_dataset_files, download_dataset
    from optbench.train.loop import run_trial
    from optbench.train.signals import STOP_SIGNALS, TrialInterrupted

    if optimizer not in OPTIMIZERS:
        raise UsageError(f"--optimizer: must be one of {list(OPTIMIZERS)}, got {optimizer!r}")
    if pipeline not in ("auto", "pil", "tensor"):
        raise UsageError(f"--pipeline: must be auto, pil or tensor, got {pipeline!r}")
    if not is_model(model):
        hint = did_you_mean(model, model_names())
        raise UsageError(f"MODEL: unknown model {model!r}{hint} (see `optbench models`)")
    keys: dict = {"preset": recipe}
    if warmup_epochs is not None:
        keys["warmup_epochs"] = warmup_epochs
    keys.update(parse_overrides(set_ or []))  # the strict YAML reader, as a study's --set
    try:
        resolved_recipe = Recipe.model_validate(keys)
    except ValidationError as err:
        raise UsageError(format_errors("--recipe/--set", err, schema=Recipe)) from None
    cfg = make_train_config(
        "train",
        model=model,
        dataset={"name": dataset, "root": data_root, "img_size": img_size},
        optimizer=optimizer,
        lr=lr,
        wd=wd,
        epochs=epochs,
        batch_size=batch_size,
        ref_batch=ref_batch,
        seed=seed,
        recipe=resolved_recipe,
    )
    ds = cfg.dataset
    _check_train_flags(cfg, out, threads, device, resume)
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
    from optbench.checks import (
        check_device,
        check_environment,
        check_resume,
        check_threads,
        check_writable_folder,
    )

    if threads is not None:
        check_threads(threads)
    check_device(device)
    check_environment()
    check_writable_folder(out, "--out")
    if resume:
        check_resume(cfg, out)


@app.command()
def run(
    study: Annotated[Path, typer.Argument(help="study YAML file")],
    dry_run: Annotated[
        bool, typer.Option(help="print the trial plan and a compute estimate")
    ] = False,
    workers: Annotated[
        int | None, typer.Option(help="worker processes (default: executor.workers)")
    ] = None,
    executor_kind: Annotated[
        str | None,
        typer.Option("--executor", help="slurm, local or debug (default: executor.kind)"),
    ] = None,
    detach: Annotated[
        bool, typer.Option(help="slurm: submit and return; a later `optbench run` follows")
    ] = False,
    reports: Annotated[
        Path, typer.Option(help="--dry-run: reports root of an earlier report's advice")
    ] = Path("reports"),
    set_: Overrides = None,
) -> None:
    """Run every unfinished trial of a study, recording results as they end."""
    # The executor flags are study keys: validated with the study and every --set, as one
    # (a DDP study with a population is refused however its executor kind is given).
    flags = {
        "executor.kind": ("--executor", executor_kind),
        "executor.workers": ("--workers", workers),
    }
    spec = _load(study, data=not dry_run, sized=True, overrides=set_, flags=flags)
    if dry_run:  # a plan needs no data on this machine: say so if a real run would stop
        from optbench.checks import check_spec
        from optbench.study_tables import plan_table

        console.print(plan_table(spec))
        try:
            check_spec(spec, data=True, source=study)
        except UsageError as err:
            console.print(f"note: a real run would stop here: {err}", soft_wrap=True)
        from optbench.analysis.summary import earlier_advice

        advice = earlier_advice(reports / spec.name / "summary.json", reports)
        console.print(advice, markup=False, highlight=False, soft_wrap=True)
        return
    from optbench.executors import make_executor
    from optbench.runner import failed_trials, run_study, stop_signals_as_ctrl_c

    # The executor says what it submits; SLURM also says when it stops answering and answers again.
    notify = partial(console.print, markup=False, highlight=False)
    executor = make_executor(spec, notify=notify)
    if detach and not executor.jobs_outlive_driver:
        kind = spec.executor.kind
        raise UsageError(f"--detach: only the slurm executor can detach (executor is {kind!r})")
    try:
        with stop_signals_as_ctrl_c():
            progress = run_study(spec, executor, console=console, detach=detach)
    except KeyboardInterrupt as stopped:  # StopSignal: Ctrl-C, SIGTERM, SIGHUP
        raise typer.Exit(128 + getattr(stopped, "signum", signal.SIGINT)) from None
    failed = failed_trials(progress, spec.study_dir)
    if failed:  # the study is not complete: a script running it must see so (docs/faults.md)
        console.print(failed, markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)


@app.command()
def status(
    study: Annotated[Path, typer.Argument(help="study YAML file")],
    trials: Annotated[
        bool,
        typer.Option("--trials", help="also list trials in progress (epoch k/N, left or stalled)"),
    ] = False,
    set_: Overrides = None,
) -> None:
    """Print a study's counts per cell without running or writing anything."""
    from optbench.executors import jobs_executor
    from optbench.plan import plan
    from optbench.store import Store
    from optbench.study_tables import status_table, trials_table

    spec = _load(study, data=False, overrides=set_)
    running, summary = jobs_executor(spec).status()
    table, mixed_code = status_table(spec, running=running)
    console.print(table)
    for note in (mixed_code, Store(spec, create=False).earlier_note(plan(spec))):
        if note:
            console.print(note, markup=False, highlight=False, soft_wrap=True)
    if summary:  # the study has been on SLURM: its jobs' states
        console.print(summary, markup=False, highlight=False)
    if trials:
        table = trials_table(spec, running=running)
        console.print(table if table is not None else "no trial in progress")


@app.command()
def cancel(
    study: Annotated[Path, typer.Argument(help="study YAML file")], set_: Overrides = None
) -> None:
    """Cancel a study's queued and running SLURM jobs (scancel) and print what SLURM did; exit
    status 1 if scancel failed for any. The next `optbench run` records the cancelled trials as
    failed attempts and resubmits them (within executor.retries)."""
    from optbench.executors import jobs_executor
    from optbench.overrides import load_study, parse_overrides

    lines, ok = jobs_executor(load_study(study, parse_overrides(set_ or []))).cancel()
    for line in lines:
        console.print(line, markup=False, highlight=False)
    if not ok:
        raise typer.Exit(1)


@app.command()
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
) -> None:
    """Print the model zoo: input size, classes, flops, params and activations of each model."""
    import json

    from optbench.errors import did_you_mean
    from optbench.models import is_model, model_names
    from optbench.models.zoo import describe, markdown_table, measure_throughput, zoo_models

    names = names or zoo_models()
    for name in names:
        if not is_model(name):
            hint = did_you_mean(name, model_names())
            raise UsageError(f"NAME: unknown model {name!r}{hint} (see `optbench models`)")
    if measure:
        import torch

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
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


@app.command()
def report(
    studies: Annotated[
        list[Path] | None,
        typer.Argument(help="study YAML files (default: every study under --results)"),
    ] = None,
    edf: Annotated[
        bool, typer.Option("--edf", help="EDFs of dtop-1 and raw error, lr/wd scatter")
    ] = False,
    length: Annotated[bool, typer.Option("--length", help="training-length stability")] = False,
    optimizer: Annotated[bool, typer.Option("--optimizer", help="optimizer stability")] = False,
    stem: Annotated[bool, typer.Option("--stem", help="stem ablation")] = False,
    peak: Annotated[bool, typer.Option("--peak", help="peak error table")] = False,
    complexity: Annotated[bool, typer.Option("--complexity", help="complexity table")] = False,
    curves: Annotated[bool, typer.Option("--curves", help="error against epoch")] = False,
    all_: Annotated[bool, typer.Option("--all", help="every figure (the default)")] = False,
    out: Annotated[Path, typer.Option(help="reports root: writes OUT/<study name>/")] = Path(
        "reports"
    ),
    results: Annotated[
        Path, typer.Option(help="results root searched when no study is given")
    ] = Path("results"),
    metric: Annotated[
        str, typer.Option(help="final_error, best_error or pycls_best (docs/reports.md)")
    ] = "final_error",
    formats: Annotated[
        str,
        typer.Option(
            "--format", help="figure files, comma-separated: png, svg, pdf (editable text)"
        ),
    ] = "png,svg",
    set_: Overrides = None,
) -> None:
    """Write figures, trials.csv, summary.json and index.html for each study."""
    from optbench.analysis.report import refuse_links, write_report
    from optbench.analysis.summary import format_table
    from optbench.plan import plan
    from optbench.store import Store
    from optbench.tracking import attach_report

    flags = {
        "edf": edf,
        "length": length,
        "optimizer": optimizer,
        "stem": stem,
        "peak": peak,
        "complexity": complexity,
        "curves": curves,
    }
    figures = None if all_ or not any(flags.values()) else {k for k, v in flags.items() if v}
    if studies:
        specs = [_load(path, data=False, overrides=set_) for path in studies]
    else:
        saved = sorted(results.glob("*/spec.yaml"))
        if not saved:
            raise UsageError(
                f"--results: no studies under {results} (no */spec.yaml); run one first"
            )
        specs = [_load(path, data=False, overrides=set_) for path in saved]
    from optbench.checks import check_writable_folder

    for spec in specs:  # before any report is written: the last could not be
        check_writable_folder(out / spec.name, "--out")
        refuse_links(out / spec.name, out)
    for spec in specs:
        store, planned = Store(spec, create=False), plan(spec)
        trials = store.frame(planned)
        wanted = [f.strip() for f in formats.split(",") if f.strip()]
        summary = write_report(
            spec, trials, out / spec.name, figures, metric, formats=wanted, root=out
        )
        typer.echo(format_table(summary))
        note = attach_report(
            spec.tracking.resolved(spec.study_dir), spec.study_dir, out / spec.name
        )
        if note:
            typer.echo(note, err=True)
        earlier = store.earlier_note(planned)
        if earlier:
            typer.echo(earlier)
        typer.echo(f"wrote {out / spec.name}/index.html")


@app.command()
def compare(
    run_report: Annotated[Path, typer.Argument(help="report folder of your run")],
    reference: Annotated[Path, typer.Argument(help="report folder to compare it with")],
) -> None:
    """Compare two reports of a study trial by trial (matched by model, optimizer, epochs,
    sample, seed): equal weights digests and error differences. Writes nothing."""
    from optbench.analysis.compare import compare_trials, format_comparison, read_trials

    run_trials, reference_trials = read_trials(run_report), read_trials(reference)
    table = compare_trials(run_trials, reference_trials)
    typer.echo(format_comparison(table, run_report, reference, run_trials, reference_trials))


def main() -> None:
    try:
        # Not standalone: click's errors (a bad flag value, a missing argument) come here to be
        # one line, not typer's usage box. The name fixes the completion variable
        # (_OPTBENCH_COMPLETE) and the usage line under `python -m` too.
        code = app(prog_name="optbench", standalone_mode=False)
        sys.exit(code or 0)  # typer.Exit(code) and Ctrl-C (130) come back as an exit code
    except typer.TyperException as err:  # click's errors (typer vendors click): usage, files
        if type(err).__name__ == "NoArgsIsHelpError":  # bare `optbench`: typer printed the help
            sys.exit(2)
        typer.echo(f"error: {click_error_line(err)}", err=True)
        sys.exit(err.exit_code)  # 2 for a usage error, as in click's standalone mode
    except typer.Abort:  # Ctrl-D at a prompt (Ctrl-C is typer's exit 130)
        typer.echo("error: aborted", err=True)
        sys.exit(1)
    except UsageError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(2)
    except (WriteError, StorageUnavailable) as err:  # not bad input: a full disk, a server down
        typer.echo(f"error: {err}", err=True)
        sys.exit(1)
    except (RuntimeError, ImportError) as err:  # torchvision built for another torch: one line
        mismatch = torch_mismatch(err)
        if mismatch is None:
            raise
        typer.echo(f"error: {mismatch}", err=True)
        sys.exit(1)


def click_error_line(err: typer.TyperException) -> str:
    """A click error as one line: click's message (a usage error's names the option or
    argument) and, for a command's usage error, where that command's help is."""
    message = " ".join(err.format_message().split())
    ctx = getattr(err, "ctx", None)
    return f"{message} (see `{ctx.command_path} --help`)" if ctx is not None else message


if __name__ == "__main__":
    main()

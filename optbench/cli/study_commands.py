"""The commands that run and follow a study: `optbench run`, `status` and `cancel` (app.py
registers them), and how every command reads a study: the file, its cluster profile
(`--profile` or OPTBENCH_PROFILE), `--set` and the executor flags, validated once."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from functools import cache, partial
from pathlib import Path
from typing import Annotated

import typer

from optbench.errors import UsageError
from optbench.run.console import text_console
from optbench.spec.schema import StudySpec

# Piped output (CI logs, files) gets wide tables instead of rich's 80-column default. What it
# prints is text, never markup: lines and tables show data from files (progress.text_console).
console = text_console(width=None if sys.stdout.isatty() else 160)

MAX_MEASURE_STEPS = 10_000  # --measure-steps and --measure-warmup: a measurement, not a run

# `--set KEY=VALUE` on the commands that read a study: applied to its YAML before validation.
Overrides = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="override a study key, KEY=VALUE with a dotted KEY and a YAML VALUE, e.g. "
        "--set search.n_samples=8 --set models='[vit_c_4gf]'; repeatable",
    ),
]

# `--profile FILE`: a cluster profile laid under the study (spec/profiles.py, docs/slurm.md).
ProfileFlag = Annotated[
    Path | None,
    typer.Option(
        "--profile",
        help="cluster profile YAML: executor, storage, tracking and data roots of this site; "
        "the study's own keys win (default: $OPTBENCH_PROFILE)",
    ),
]


def read_study(
    path: Path,
    *,
    data: bool,
    sized: bool = False,
    overrides: list[str] | None = None,
    flags: dict[str, tuple[str, object]] | None = None,
    profile: Path | None = None,
    checked: bool = True,
    import_code: bool = False,
) -> StudySpec:
    """A study file over its cluster profile (`profile`, else OPTBENCH_PROFILE's) with its
    overrides, validated, with its models and dataset checked (and its batch against the
    dataset's size, with sized; its files, with data; nothing, without `checked`). Only with
    `import_code` (`run`) are the study's own modules imported: a command that reads a study or
    its results never runs them (preflight.check_spec). `flags`:
    dotted key -> (flag, value) of the flags that set a study key (`--executor slurm` is
    executor.kind), None values left out: applied after the --set overrides (a flag wins), so
    that the whole study is validated once with every override, and named in errors as the
    flag was typed."""
    from optbench.run.preflight import check_spec
    from optbench.spec.overrides import load_study, override_sources, parse_overrides
    from optbench.spec.profiles import find_profile
    from optbench.store.migrations import keep_recorded_cells

    parsed = parse_overrides(overrides or [])
    spelled = {}
    for key, (flag, value) in (flags or {}).items():
        if value is not None:
            parsed[key], spelled[key] = value, f"{flag} {value}"
    site = find_profile(profile)
    spec = load_study(path, parsed, spelled, site)
    spec, kept = keep_recorded_cells(spec)  # an earlier default's recorded cells (migrations.py)
    if kept:
        console.print(kept, markup=False, highlight=False, soft_wrap=True)
    if checked:
        sources = {**(site.sources(spec) if site else {}), **override_sources(parsed), **spelled}
        check_spec(
            spec, data=data, sized=sized, source=path, sources=sources, import_code=import_code
        )
    return spec


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
        Path,
        typer.Option(
            help="--dry-run: where `optbench report` wrote this study's earlier report (its "
            "--out); the plan ends with the sample-size advice of REPORTS/<study name>/"
            "summary.json"
        ),
    ] = Path("reports"),
    measure: Annotated[
        bool,
        typer.Option(
            help="--dry-run: time a short training run of each training configuration on this "
            "machine first (cached in the study folder; docs/slurm.md)"
        ),
    ] = False,
    measure_steps: Annotated[
        int, typer.Option(help="--measure: timed optimizer steps per configuration")
    ] = 30,
    measure_warmup: Annotated[int, typer.Option(help="--measure: untimed steps before them")] = 5,
    set_: Overrides = None,
    profile: ProfileFlag = None,
) -> None:
    """Run a study's unfinished trials, recording each as it ends."""
    from optbench.run.preflight import best_error_seed_note, pipeline_note, seed_effect_note

    _check_measure_flags(dry_run, measure, measure_steps, measure_warmup)
    # The executor flags are study keys: validated with the study and every --set, as one
    # (a DDP study with a population is refused however its executor kind is given).
    flags = {
        "executor.kind": ("--executor", executor_kind),
        "executor.workers": ("--workers", workers),
    }
    load = partial(
        read_study, study, sized=True, overrides=set_, flags=flags, profile=profile,
        import_code=True,  # the one command that trains the study's own code
    )  # fmt: skip
    spec = load(data=not dry_run or measure)  # a measurement trains: it needs the data
    for note in (pipeline_note(spec), seed_effect_note(spec), best_error_seed_note(spec)):
        if note:
            console.print(note, markup=False, highlight=False, soft_wrap=True)
    if dry_run:
        if measure:
            from optbench.run.measuring import measure_study

            notify = partial(console.print, markup=False, highlight=False)
            measure_study(spec, steps=measure_steps, warmup=measure_warmup, notify=notify)
        _dry_run(spec, partial(load, data=True), reports)
        return
    from optbench.cli.terminal_tables import lr_scale_note
    from optbench.executors import make_executor
    from optbench.run.driver import run_study
    from optbench.run.messages import failed_trials
    from optbench.run.stop_signals import stop_signals_as_ctrl_c

    if note := lr_scale_note(spec):  # the plan's lr column says it; a run says it once too
        console.print(note, markup=False, highlight=False, soft_wrap=True)

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


def _check_measure_flags(dry_run: bool, measure: bool, steps: int, warmup: int) -> None:
    if measure and not dry_run:
        raise UsageError("--measure: only with --dry-run (it plans; `optbench run` trains)")
    if not 1 <= steps <= MAX_MEASURE_STEPS:
        raise UsageError(f"--measure-steps: must be 1 .. {MAX_MEASURE_STEPS}, got {steps}")
    if not 0 <= warmup <= MAX_MEASURE_STEPS:
        raise UsageError(f"--measure-warmup: must be 0 .. {MAX_MEASURE_STEPS}, got {warmup}")


def _dry_run(spec: StudySpec, real_run: Callable[[], StudySpec], reports: Path) -> None:
    """The plan of `run --dry-run`; a plan needs no data on this machine, so it says where a
    real run (`real_run`: the study read again with its data checked) would stop."""
    from optbench.cli.terminal_tables import plan_table
    from optbench.report.summary import earlier_advice, earlier_claims, earlier_summary

    path = reports / spec.name / "summary.json"
    console.print(plan_table(spec, earlier_claims(earlier_summary(path, reports))))
    try:
        real_run()
    except UsageError as err:
        console.print(f"note: a real run would stop here: {err}", soft_wrap=True)
    advice = earlier_advice(path, reports)
    console.print(advice, markup=False, highlight=False, soft_wrap=True)


def status(
    study: Annotated[Path, typer.Argument(help="study YAML file")],
    trials: Annotated[
        bool,
        typer.Option("--trials", help="also list trials in progress (epoch k/N, left or stalled)"),
    ] = False,
    set_: Overrides = None,
    profile: ProfileFlag = None,
) -> None:
    """Print a study's trial counts per cell; runs, writes nothing."""
    from optbench.cli.terminal_tables import status_table, trials_table
    from optbench.executors import jobs_executor
    from optbench.plan.cost_notes import estimate_notes, job_notes, spent_notes
    from optbench.plan.trials import plan
    from optbench.run.preflight import own_optimizer_note
    from optbench.store.database import Store

    spec = read_study(study, data=False, overrides=set_, profile=profile)
    jobs = jobs_executor(spec)
    running, summary = jobs.status()
    table, mixed_code = status_table(spec, running=running)
    console.print(table)
    if note := own_optimizer_note(spec):  # its imports' optimizer: status imports none of them
        console.print(note, markup=False, highlight=False, soft_wrap=True)
    stored = Store(spec, create=False)
    job_times = cache(jobs.job_times)  # sacct asked once, where a line needs it
    estimates = estimate_notes(spec, stored, job_times)
    spent = [*spent_notes(spec, stored), *job_notes(spec, stored, job_times)]
    for note in (mixed_code, stored.earlier_note(plan(spec)), *spent, *estimates):
        if note:
            console.print(note, markup=False, highlight=False, soft_wrap=True)
    if spec.decide is not None:  # a sequential study: where each claim stands
        from optbench.run.rounds import Rounds, decision_lines

        for line in decision_lines(Rounds.of(spec, stored), waiting=None):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    if summary:  # the study has been on SLURM: its jobs' states
        console.print(summary, markup=False, highlight=False)
    if trials:
        table = trials_table(spec, running=running)
        console.print(table if table is not None else "no trial in progress")


def cancel(
    study: Annotated[Path, typer.Argument(help="study YAML file")],
    set_: Overrides = None,
    profile: ProfileFlag = None,
) -> None:
    """Cancel a study's queued and running SLURM jobs (scancel).

    Prints what SLURM did; exit status 1 if scancel failed for any. The next `optbench run`
    records the cancelled trials as failed attempts and resubmits them (within
    executor.retries)."""
    from optbench.executors import jobs_executor

    spec = read_study(study, data=False, overrides=set_, profile=profile, checked=False)
    lines, ok = jobs_executor(spec).cancel()
    for line in lines:
        console.print(line, markup=False, highlight=False)
    if not ok:
        raise typer.Exit(1)

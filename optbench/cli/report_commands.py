"""`optbench report` and `optbench compare`: figures and tables of finished studies, and two
reports compared trial by trial (app.py registers them)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from optbench.cli.study_commands import Overrides, ProfileFlag, read_study
from optbench.errors import UsageError


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
    band: Annotated[
        str,
        typer.Option(
            help="the EDFs' shaded 95% band: simultaneous (holds for the whole curve), "
            "pointwise (each x on its own) or none (docs/reports.md)"
        ),
    ] = "simultaneous",
    formats: Annotated[
        str,
        typer.Option(
            "--format", help="figure files, comma-separated: png, svg, pdf (editable text)"
        ),
    ] = "png,svg",
    set_: Overrides = None,
    profile: ProfileFlag = None,
) -> None:
    """Write each study's report: figures, tables, index.html.

    OUT/<study name>/ gets the figures (--format), trials.csv, summary.json and index.html
    (docs/reports.md)."""
    from optbench.report.claims_page import verdict_lines
    from optbench.report.summary_lines import format_table
    from optbench.report.writer import refuse_links, write_report
    from optbench.run.rounds import asked_trials
    from optbench.store.database import Store
    from optbench.trackers.backends import attach_report

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
        specs = [read_study(path, data=False, overrides=set_, profile=profile) for path in studies]
    else:
        saved = sorted(results.glob("*/spec.yaml"))
        if not saved:
            raise UsageError(
                f"--results: no studies under {results} (no */spec.yaml); run one first"
            )
        # each study's folder is where its spec.yaml was found, whatever `output` it names: a
        # folder someone sent you is read there, never beside your own results or elsewhere
        root = {"output": ("--results", str(results))}
        specs = [
            read_study(path, data=False, overrides=set_, flags=root, profile=profile)
            for path in saved
        ]
    from optbench.host import check_writable_folder

    for spec in specs:  # before any report is written: the last could not be
        check_writable_folder(out / spec.name, "--out")
        refuse_links(out / spec.name, out)
    # every study read before any report is written: a refused one (a sequential study changed
    # after its looks, a damaged looks record) stops the command with nothing written
    stores = [Store(spec, create=False) for spec in specs]
    asked = [asked_trials(spec, store) for spec, store in zip(specs, stores, strict=True)]
    for spec, store, planned in zip(specs, stores, asked, strict=True):
        trials = store.frame(planned)
        wanted = [f.strip() for f in formats.split(",") if f.strip()]
        summary = write_report(
            spec, trials, out / spec.name, figures, metric, formats=wanted, root=out, band=band,
            looks=store.looks(),
        )  # fmt: skip
        typer.echo(format_table(summary))
        for line in verdict_lines(summary, figures):  # the claims, as the page's lead says them
            typer.echo(line)
        note = attach_report(
            spec.tracking.resolved(spec.study_dir), spec.study_dir, out / spec.name
        )
        if note:
            typer.echo(note, err=True)
        earlier = store.earlier_note(planned)
        if earlier:
            typer.echo(earlier)
        typer.echo(f"wrote {out / spec.name}/index.html")


def compare(
    run_report: Annotated[Path, typer.Argument(help="report folder of your run")],
    reference: Annotated[Path, typer.Argument(help="report folder to compare it with")],
) -> None:
    """Compare two reports of a study, trial by trial.

    Trials are matched by model, optimizer, epochs, sample and seed; it prints how many weights
    digests are equal and the error differences. Writes nothing."""
    from optbench.report.compare import compare_trials, format_comparison, read_trials

    run_trials, reference_trials = read_trials(run_report), read_trials(reference)
    table = compare_trials(run_trials, reference_trials)
    typer.echo(format_comparison(table, run_report, reference, run_trials, reference_trials))

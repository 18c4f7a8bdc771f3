"""The report of one study, assembled and written into a folder: summary.json, trials.csv, the
figures (PNG + SVG, PDF on request) and index.html. `write_report` is the entry point. This
module checks the request, orders the trials, has the sections built (sections.py: their
figures, tables and notes), saves the figures and writes the files; the numbers of summary.json
come from decision/summary.py (`study_summary` adds the claims, looks and tunability), the page
from page.py.

Input is the store's trials table (one row per trial of the study as currently specified).
Only "finished" and "diverged" rows are results; "failed" and "pending" rows make the report
"partial: n of N". summary.json keeps the keys of issue 2 unchanged and adds new ones beside them.

The report folder is written as a study folder is (safefs): below the reports root nothing is
followed. A link at the report folder, on the way to it or at any file a report writes there is
refused (`refuse_links`) before anything is written; each file is then written to a temporary
file renamed into place, so a link planted meanwhile is replaced, never written through.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from optbench import safefs
from optbench.decision import frames, tunability
from optbench.decision.stats import N_BOOT
from optbench.decision.summary import Options, summarize
from optbench.errors import UsageError
from optbench.report import claims_page, drawing_samples, trials_file
from optbench.report.page import render_html
from optbench.report.sections import (
    FIGURES,
    build_sections,
    claims_with_looks,
    study_num_classes,
)
from optbench.spec.schema import StudySpec

METRICS: tuple[str, ...] = ("final_error", "best_error", frames.PYCLS_BEST)
PNG_DPI = 150
FORMATS: tuple[str, ...] = ("png", "svg", "pdf")
# Every figure a section may draw (its file is NAME.FORMAT) and the report's other files: the
# names a planted link is looked for at (refuse_links).
FIGURE_NAMES = (
    "edf",
    "edf_raw",
    "scatter",
    "length",
    "optimizer",
    "stem",
    "curves",
    "looks",
    "tunability",
)
DATA_FILES: tuple[str, ...] = ("trials.csv", "trials.parquet", "summary.json", "index.html")
DEFAULT_FORMATS: tuple[str, ...] = ("png", "svg")
# Vector figures keep their text as text, editable in Inkscape or Illustrator for a paper: SVG
# <text> elements instead of glyph paths, and TrueType (Type 42) fonts embedded in the PDF.
EDITABLE_TEXT = {"svg.fonttype": "none", "pdf.fonttype": 42}


# --- ordering ------------------------------------------------------------------------------


def _ordered(trials: pd.DataFrame, spec: StudySpec) -> pd.DataFrame:
    """Rows in the spec's order of models and optimizers, then by epochs, sample and seed."""

    def rank(order: list[str]) -> Callable[[pd.Series], pd.Series]:
        position = {name: i for i, name in enumerate(order)}
        return lambda col: col.map(lambda v: position.get(v, len(position)))

    keys = {"model": rank(list(spec.models)), "optimizer": rank(list(spec.optimizers))}
    by = [c for c in ["model", "optimizer", "epochs", "sample", "seed"] if c in trials.columns]
    return trials.sort_values(
        by, key=lambda col: keys.get(col.name, lambda c: c)(col), kind="stable"
    )


# --- files ----------------------------------------------------------------------------------


def _save(fig: Figure, out_dir: Path, name: str, formats: Sequence[str], root: Path) -> str:
    """Save the figure in each of `formats` (through safefs below `root`: matplotlib writes
    into the temporary file's handle); return its PNG as base64 for the page (drawn whether or
    not a PNG file is wanted)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=PNG_DPI)
    if "png" in formats:
        with safefs.atomic_open(out_dir / f"{name}.png", root, "wb") as f:
            f.write(buffer.getvalue())
    fig.set_layout_engine("none")  # the layout is settled: do not solve it again
    for vector in ("svg", "pdf"):
        if vector in formats:
            # No date and fixed SVG ids: the same numbers give the same bytes, so a regenerated
            # report differs (in git, say) only where a measurement did.
            undated = {"CreationDate": None} if vector == "pdf" else {"Date": None}
            with (
                matplotlib.rc_context({**EDITABLE_TEXT, "svg.hashsalt": f"optbench-{name}"}),
                safefs.atomic_open(out_dir / f"{name}.{vector}", root, "wb") as f,
            ):
                fig.savefig(f, format=vector, metadata=undated)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def refuse_links(out_dir: Path, root: Path) -> None:
    """UnsafePath (one line, exit 2) if the report folder `out_dir`, a folder between `root`
    and it, or any file a report writes there (every figure in every format, the data files)
    is a symbolic link: `optbench report` would otherwise overwrite what it points to."""
    safefs.check(out_dir, root)
    names = [f"{n}.{fmt}" for n in FIGURE_NAMES for fmt in FORMATS] + list(DATA_FILES)
    for name in names:
        safefs.check(out_dir / name, root)


def study_summary(
    spec: StudySpec,
    trials: pd.DataFrame,
    options: Options,
    data_shape: tuple[int, int, int] | None = None,
    claims_table: pd.DataFrame | None = None,
    looks: list[dict] | None = None,
) -> dict[str, Any]:
    """summary.json's content (decision/summary.py's numbers, near_chance where the number of
    classes is known, the claims and a sequential study's looks), for the report and
    `optbench.load_summary` alike. `claims_table`: claims.claims_table's rows where the caller
    has them (computed when None)."""
    trials = _ordered(trials, spec)
    summary = summarize(spec.name, trials, options, num_classes=study_num_classes(spec, data_shape))
    if claims_table is None:
        claims_table = claims_with_looks(
            spec, frames.with_errors(trials, options.metric), options, looks
        )
    summary["claims"] = claims_page.records(claims_table)
    summary["looks"] = list(looks or [])
    results = frames.with_errors(trials, options.metric)
    summary["tunability"] = tunability.tunability_records(results, options.n_boot, options.seed)
    return summary


def write_report(
    spec: StudySpec,
    trials: pd.DataFrame,
    out_dir: Path,
    figures: set[str] | None = None,
    metric: str = "final_error",
    *,
    n_boot: int = N_BOOT,
    seed: int = 0,
    data_shape: tuple[int, int, int] | None = None,
    formats: Sequence[str] = DEFAULT_FORMATS,
    root: Path | None = None,
    band: str = "simultaneous",
    looks: list[dict] | None = None,
) -> dict[str, Any]:
    """Write the study's report into `out_dir` and return the summary.

    `figures` picks sections from FIGURES (None: every section the data supports; a requested
    section without data gets a note instead of an empty figure). `data_shape` is
    (num_classes, in_chans, img_size) for the complexity table and the near-chance check,
    looked up when None (and left unknown where that needs the dataset's files). `formats`:
    the figure files, any of FORMATS (the page embeds PNGs whatever they are). `root`: the
    folder below which no link is followed (`refuse_links`; default: `out_dir` itself).
    `band`: the 95% band the EDF figures shade (drawing_samples.EDF_BANDS). `looks`: a sequential
    study's looks (the store's records; run/rounds.py), which its claims show.
    """
    unknown = set(figures or ()) - set(FIGURES)
    if unknown:
        raise UsageError(f"figures: unknown {sorted(unknown)}; choose from {list(FIGURES)}")
    if not formats or set(formats) - set(FORMATS):
        raise UsageError(f"--format: {','.join(formats)!r}: choose from {','.join(FORMATS)}")
    if metric not in METRICS:
        raise UsageError(f"--metric: {metric!r} is not one of {list(METRICS)}")
    if band not in drawing_samples.EDF_BANDS:
        raise UsageError(f"--band: {band!r} is not one of {list(drawing_samples.EDF_BANDS)}")
    options = Options(metric=metric, n_boot=n_boot, seed=seed, band=band)

    trials = _ordered(trials, spec)
    # the claims' bootstrap runs once: summary.json and the page show the same intervals
    claims_table = claims_with_looks(spec, frames.with_errors(trials, metric), options, looks)
    summary = study_summary(spec, trials, options, data_shape, claims_table, looks)
    sections = build_sections(spec, trials, figures, options, data_shape, claims_table, looks)

    out_dir = Path(out_dir)
    root = out_dir if root is None else Path(root)
    refuse_links(out_dir, root)
    safefs.make_dirs(out_dir, root)
    images = {
        name: _save(fig, out_dir, name, formats, root)
        for section in sections
        for name, fig in section.figures
    }
    trials_file.write_trials(trials, out_dir, root)
    text = json.dumps(summary, indent=2, allow_nan=False) + "\n"
    safefs.write_text(out_dir / "summary.json", root, text)
    safefs.write_text(out_dir / "index.html", root, render_html(spec, summary, sections, images))
    return summary

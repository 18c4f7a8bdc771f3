"""The page's sections of one study's report, figures still in memory: each section's figures
(figures.py), tables (decision/frames.py, decision/tunability.py) and notes, with a caption
saying what each figure draws, or the reason it is not drawn. `build_sections` gives them in
the page's order: the claims' verdicts (claims_page.py), the per-seed errors where cells train
fixed (lr, wd), then one section per figure family of FIGURES. writer.py saves the figures and
writes the page.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from optbench.decision import claims, frames, tunability
from optbench.decision.edf import AUC_MAX_POINTS
from optbench.decision.looks import with_looks
from optbench.decision.stop_estimates import with_stop_estimates
from optbench.decision.summary import Options
from optbench.errors import UsageError
from optbench.report import claims_page, drawing, figures, tunability_page
from optbench.report.page import Section
from optbench.spec.calibrations import calibration_words
from optbench.spec.catalogue import CATALOGUE
from optbench.spec.claim_kinds import MIN_EDF_SAMPLES
from optbench.spec.schema import StudySpec
from optbench.trial.config import mixed_pipelines_note

# The sections a page may show, in its order (`figures` of write_report picks among them)
FIGURES: tuple[str, ...] = (
    "edf",
    "tunability",
    "length",
    "optimizer",
    "stem",
    "peak",
    "complexity",
    "curves",
)
# the page's column names, with units, for the tables' own columns
UNITS = {
    "error": "error (%)",
    "dtop1": "dtop-1 (points)",
    "dtop1_low": "lowest seed (points)",
    "dtop1_high": "highest seed (points)",
    "low": "lowest seed (%)",
    "high": "highest seed (%)",
    "adamw": "AdamW (%)",
    "sgd": "SGD (%)",
    "gap": "gap (points)",
}


# --- sections: each returns figures, tables and notes for the page -------------------------


def _figure(section: Section, name: str, draw: Callable[[], Figure], caption: str) -> bool:
    """Add figure `name` with its caption (what it draws) to the section, or the reason it
    cannot be drawn as a note."""
    try:
        section.figures.append((name, draw()))
    except figures.NothingToDraw as why:
        section.notes.append(f"{name}: skipped: {why}.")
        return False
    section.captions[name] = caption
    return True


# What an EDF figure's shading is, per `--band` (the figure's legend names it too).
BAND_CAPTIONS = {
    "simultaneous": "Shaded: each curve's simultaneous 95% bootstrap band (the bootstrap of the "
    "largest deviation, {n_boot} resamples, the best recomputed in each): it holds for the "
    "whole curve at once, so it is the band to read when comparing whole curves "
    "(`optbench report --band pointwise` shades pointwise bands instead).",
    "pointwise": "Shaded: each curve's pointwise 95% bootstrap band ({n_boot} resamples, the "
    "best recomputed in each): it holds at each x on its own and is too narrow to compare "
    "whole curves by (`--band simultaneous`, the default, draws that band).",
    "none": "No band (`--band none`).",
}


def _edf_section(
    trials: pd.DataFrame, colors: dict[str, str], options: Options, num_classes: int | None
) -> Section:
    section = Section(
        "edf",
        "lr/wd stability: error distribution functions (Figs 4-5)",
        "F(x) = fraction of a cell's trials with dtop-1 = error - best error <= x; diverged "
        "trials count in n and are never within any x (summary.json gives each cell's DKW "
        "half-width too).",
    )
    band = BAND_CAPTIONS[options.band].format(n_boot=options.n_boot)
    near_chance = (
        " Dotted: a cell whose best error is near chance level (its trials barely learned: a "
        "steep EDF there is not stability)."
    )
    if not frames.sampled_cells(frames.with_errors(trials, options.metric)):
        section.notes.append(
            f"edf, edf_raw, scatter: not drawn: no cell has {MIN_EDF_SAMPLES} or more sampled "
            "(lr, wd) pairs (a study at fixed values, sampler: good, trains one); an EDF over "
            "(lr, wd) needs sampled pairs. The per-seed table and the seed claims compare it."
        )
        return section
    common = dict(metric=options.metric, n_boot=options.n_boot, seed=options.seed, colors=colors)
    edf = dict(common, num_classes=num_classes, band=options.band)
    _figure(
        section,
        "edf",
        lambda: figures.edf_figure(trials, **edf),
        "The EDF of dtop-1 of each model's trials (a colour per model, a panel per optimizer and "
        "schedule length; the legend gives each model's best error). The grey line at "
        f"{AUC_MAX_POINTS:g} points bounds the area claim (a) compares: each model's area under "
        f"its curve left of it, divided by {AUC_MAX_POINTS:g} (1 when every trial reaches the "
        f"best), given in the legend. {band}{near_chance}",
    )
    _figure(
        section,
        "edf_raw",
        lambda: figures.edf_figure(trials, raw=True, **edf),
        "The same EDFs of the raw error (%) instead of dtop-1, each model's curve starting at "
        "its own best error.",
    )
    _figure(
        section,
        "scatter",
        lambda: figures.scatter_figure(trials, **common),
        "Each finished trial's error against its lr, wd and lr·wd (log x), a dot per trial. "
        "Above the dots, a row per model: its good range as a box (the 2.5-97.5 percentiles of "
        "the best trial's value over bootstrap resamples) and its best trial's value as a "
        "tick.",
    )
    return section


def _tunability_section(trials: pd.DataFrame, colors: dict[str, str], options: Options) -> Section:
    section = Section(
        "tunability",
        "Tunability: the expected best error after k (lr, wd) samples",
        "What a search of k random (lr, wd) samples of each cell's box is expected to find, "
        "from the cell's own n samples (Dodge et al. 2019's expected validation performance, "
        "estimated without bias; docs/reports.md defines each number).",
    )
    common = dict(n_boot=options.n_boot, seed=options.seed)
    drawn = _figure(
        section,
        "tunability",
        lambda: figures.tunability_figure(trials, metric=options.metric, colors=colors, **common),
        "Each model's expected best error after k samples of its cell's box (a line per model, "
        "a panel per optimizer and schedule length, k on a log axis), estimated for k up to "
        "its n samples as the mean, over every set of k of them, of the set's best: the mean "
        "error at k = 1, the cell's best at k = n. A diverged trial counts as 100%. Shaded: a "
        f"95% studentized bootstrap band ({options.n_boot} resamples, jackknife standard "
        "errors), up to k = n / 2: past it the estimate rests on the best few samples and "
        "no band is drawn.",
    )
    results = frames.with_errors(trials, options.metric)
    for cell in tunability.unfinished_cells(results) if not results.empty else []:
        section.notes.append(
            f"{cell['model']}, {cell['optimizer']}, {cell['epochs']} ep: none of its "
            f"{cell['n']} (lr, wd) samples finished (every trial diverged): no tunability."
        )
    if drawn:
        table = tunability.tunability_table(results, **common)
        section.tables.append(
            (
                "Expected best error (%) after k samples [95% band; none at k > n / 2]; "
                "the samples needed to land within "
                f"{tunability.WITHIN_POINTS:g} point of the cell's best with probability "
                f"{tunability.PROBABILITY:g} (draws with replacement, so it may exceed n; "
                f'"rests on one trial" where only the best itself lies within '
                f"{tunability.WITHIN_POINTS:g} point)",
                tunability_page.page_table(table),
            )
        )
    return section


def _length_section(
    trials: pd.DataFrame, best: pd.DataFrame, colors: dict[str, str], metric: str
) -> Section:
    section = Section(
        "length",
        "Training-length stability (Fig 2)",
        "A cell's error is the mean over seeds of its best (lr, wd) pair (a diverged seed "
        "counted as 100%; with one seed, the best trial).",
    )
    draw = lambda: figures.length_figure(trials, metric=metric, colors=colors)  # noqa: E731
    caption = (
        "dtop-1 of each schedule length against the longest schedule with a finished result: "
        "a line per model, a panel per optimizer; bars span the seeds of the cell's best pair."
    )
    if _figure(section, "length", draw, caption):
        shown = frames.length_stability(best).rename(columns=UNITS)
        section.tables.append(("dtop-1 against the longest schedule", shown))
    return section


def _optimizer_section(trials: pd.DataFrame, best: pd.DataFrame, metric: str) -> Section:
    section = Section(
        "optimizer",
        "Optimizer stability (Fig 3)",
        "A cell's error as in Fig 2. A cell whose trials all diverged is replaced by the best "
        "shorter-schedule result of the same model and optimizer, as the paper does.",
    )
    caption = (
        "Each cell's error per schedule length with AdamW and with SGD, a panel per model; the "
        "numbers are the SGD - AdamW gap, bars span the seeds, dashed: a replaced cell."
    )
    draw = lambda: figures.optimizer_figure(trials, metric=metric)  # noqa: E731
    if not _figure(section, "optimizer", draw, caption):
        return section
    table = frames.optimizer_stability(best)
    section.tables.append(
        ("SGD - AdamW gap (points)", frames.optimizer_gaps(table).rename(columns=UNITS))
    )
    substituted = table[table["substituted"]]
    if not substituted.empty:
        section.tables.append(
            ("Diverged cells replaced by a shorter schedule", substituted.rename(columns=UNITS))
        )
    return section


def _stem_section(trials: pd.DataFrame, metric: str) -> Section:
    section = Section(
        "stem",
        "Stem ablation (Table 3)",
        "A cell's error as in Fig 2; the stem order: ViT_C's conv stem, then patchify stems S1, "
        "S2, ... of growing patch size, then ViT_P.",
    )
    _figure(
        section,
        "stem",
        lambda: figures.stem_figure(trials, metric=metric),
        "Each cell's error along the stem order, a point per optimizer, a panel per schedule "
        "length; bars span the seeds.",
    )
    return section


def _seeds_section(results: pd.DataFrame) -> Section | None:
    """Every seed's error of the cells that train fewer than MIN_EDF_SAMPLES (lr, wd) pairs
    (what their claims compare); None when every cell samples (lr, wd)."""
    table = frames.seed_table(results)
    if table.empty:
        return None
    section = Section(
        "seeds",
        "Errors per seed",
        "Cells at fixed (lr, wd) (fewer than "
        f"{MIN_EDF_SAMPLES} sampled pairs): each pair's error per training seed, their mean "
        f"(a diverged seed counted as {frames.DIVERGED_ERROR:g}%) and standard deviation.",
    )
    section.tables.append(("Errors per seed", table))
    return section


def _peak_section(best: pd.DataFrame) -> Section:
    section = Section(
        "peak",
        "Peak error (Table 2)",
        "Each cell's error (%) per model, optimizer and schedule length: the mean over seeds of "
        "its best (lr, wd) pair; with one seed, the best trial.",
    )
    table = frames.peak_table(best)
    if table.isna().all().all():
        section.notes.append("Skipped: no finished trials.")
    else:
        section.tables.append(("Cell error (%)", table))
    return section


def _pipeline_notes(results: pd.DataFrame) -> list[str]:
    """One line per cell whose trials came through more than one input pipeline."""
    if "pipeline" not in results:
        return []
    by_cell = results.dropna(subset=["pipeline"]).groupby("cell_id", sort=False)["pipeline"]
    notes = (mixed_pipelines_note(c, rows.value_counts().to_dict()) for c, rows in by_cell)
    return [note + "." for note in notes if note]


def _timing_notes(results: pd.DataFrame) -> list[str]:
    """One line where results hold a timing that is not one (trial/results.py: read_timing):
    read as absent, so the outside-epochs share leaves them out; their errors count."""
    if "timing_note" not in results:
        return []
    notes = results["timing_note"].dropna()
    if notes.empty:
        return []
    return [
        f"{len(notes)} result(s) hold a timing that is not one, read as absent (their errors "
        f"count; outside epochs leaves them out): {notes.iloc[0]}."
    ]


def _complexity_section(
    spec: StudySpec, results: pd.DataFrame, data_shape: tuple[int, int, int] | None
) -> Section:
    section = Section(
        "complexity",
        "Complexity (Table 1)",
        "GF: 1e9 multiply-adds of one forward pass of one image at the input size each model "
        "trains at; params and acts (activations) in millions, as Xiao et al. (Appendix D) count "
        "them; s/epoch (wall time of a trial / its epochs), img/s (training images per second) "
        "and input wait (the share of training time spent waiting for input) are medians over "
        "this study's finished trials, on the machines that ran them.",
    )
    section.notes.extend(_pipeline_notes(results))
    section.notes.extend(_timing_notes(results))
    from optbench.models import is_model
    from optbench.models.cache import cached_counts  # torch and timm: once per model

    shapes = {model: data_shape or _dataset_shape(spec, model) for model in spec.models}
    if None in shapes.values():
        section.notes.append(
            f"Complexity not measured: the input shape of dataset {spec.dataset.name!r} is read "
            f"from its files, which are not on this machine ({spec.dataset.root})."
        )
        return section
    num_classes, in_chans, _ = shapes[spec.models[0]]
    sizes = {model: shape[2] for model, shape in shapes.items()}
    one_size = len(set(sizes.values())) == 1
    rows = []
    finished = results[results["status"] == "finished"]
    for model in spec.models:
        if spec.imports and not is_model(model):  # registered by a module a report never runs
            section.notes.append(
                f"{model}: complexity not counted: a model of the study's own modules "
                f"({', '.join(spec.imports)}), whose code a report does not run."
            )
            continue
        try:
            measured = cached_counts(
                model, num_classes=num_classes, in_chans=in_chans, img_size=sizes[model]
            )
        except Exception as err:  # one unmeasurable model must not sink the page
            section.notes.append(f"{model}: complexity not measured ({type(err).__name__}: {err})")
            continue
        mine = finished[finished["model"] == model]
        rows.append(
            {
                "model": model,
                **({} if one_size else {"input px": sizes[model]}),
                "GF": measured["flops"] / 1e9,
                "params (M)": measured["params"] / 1e6,
                "acts (M)": measured["acts"] / 1e6,
                "s/epoch": float((mine["wall_s"] / mine["epochs"]).median())
                if len(mine)
                else np.nan,
                "img/s": float(mine["images_per_s"].median()) if len(mine) else np.nan,
                "input wait (%)": 100 * float(mine["input_wait"].median())
                if len(mine) and "input_wait" in mine
                else np.nan,
                # the harness's share of a trial (result.json's timing): NaN before it was kept
                "outside epochs (%)": 100
                * float((mine["outside_epochs_s"] / mine["wall_s"]).median())
                if len(mine) and "outside_epochs_s" in mine
                else np.nan,
            }
        )
    if rows:
        size = next(iter(sizes.values()))
        at = f"{size}x{size}" if one_size else "each model's input size"
        channels = f"{in_chans} channel{'s' if in_chans != 1 else ''}"
        title = f"Complexity at {at}, {channels}, {num_classes} classes"
        section.tables.append((title, pd.DataFrame(rows)))
    return section


def _dataset_shape(spec: StudySpec, model: str) -> tuple[int, int, int] | None:
    """(num_classes, in_chans, img_size) of the study's dataset as `model` trains on it; None
    where that needs the dataset's files and they are not here (a cluster study reported on a
    laptop)."""
    from optbench.data.datasets import dataset_info

    try:
        info = dataset_info(spec.dataset, model)
    except UsageError:
        return None
    return info.num_classes, info.in_chans, info.img_size


def study_num_classes(spec: StudySpec, data_shape: tuple[int, int, int] | None) -> int | None:
    """The study's number of classes (for the near-chance check), None where unknown."""
    shape = data_shape or _dataset_shape(spec, spec.models[0])
    return shape[0] if shape else None


def _curves_section(trials: pd.DataFrame, colors: dict[str, str], metric: str) -> Section:
    section = Section(
        "curves",
        "Training curves",
    )
    epochs = figures.per_epoch(trials) if "metrics" in trials.columns else trials.iloc[0:0]
    _figure(
        section,
        "curves",
        lambda: figures.curves_figure(epochs, metric=metric, colors=colors),
        "Validation error per epoch of the best (solid), median (dashed) and worst (dotted) "
        "finished trial of each cell, a colour per model, a panel per optimizer and schedule "
        "length.",
    )
    return section


def build_sections(
    spec: StudySpec,
    trials: pd.DataFrame,
    figures: set[str] | None = None,
    options: Options | None = None,
    data_shape: tuple[int, int, int] | None = None,
    claims_table: pd.DataFrame | None = None,
    looks: list[dict] | None = None,
) -> list[Section]:
    """The page's sections (figures still in memory), in FIGURES order. `trials` must already be
    in spec order (see write_report). `data_shape`: (num_classes, in_chans, img_size) of every
    model's input; None: each model's, looked up (unknown without the dataset's files: no
    complexity table, no near-chance check). `claims_table`: claims.claims_table's rows, where
    the caller has them already (computed here when None). `looks`: a sequential study's looks
    (the store's records): the claims show them (looks.with_looks) and draw their path."""
    options = options or Options()
    wanted = set(FIGURES) if figures is None else set(figures)
    results = frames.with_errors(trials, options.metric)
    if results.empty:
        empty = Section("results", "Results")
        empty.notes.append("No finished or diverged trial yet: no figure or table.")
        return [empty]
    colors = drawing.model_colors(list(dict.fromkeys([*spec.models, *trials["model"]])))
    best = frames.best_by_cell(results)
    metric = options.metric
    builders: dict[str, Callable[[], Section]] = {
        "edf": lambda: _edf_section(trials, colors, options, study_num_classes(spec, data_shape)),
        "tunability": lambda: _tunability_section(trials, colors, options),
        "length": lambda: _length_section(trials, best, colors, metric),
        "optimizer": lambda: _optimizer_section(trials, best, metric),
        "stem": lambda: _stem_section(trials, metric),
        "peak": lambda: _peak_section(best),
        "complexity": lambda: _complexity_section(spec, results, data_shape),
        "curves": lambda: _curves_section(trials, colors, metric),
    }
    sections = [builders[key]() for key in FIGURES if key in wanted]
    if claims_table is None:
        claims_table = claims_with_looks(spec, results, options, looks)
    verdicts = claims_page.sections(claims_table, options, wanted)
    if verdicts and looks:
        _looks_figure(verdicts[0], looks)
    seeds = _seeds_section(results)
    # the verdicts first (the claims whose figures this page draws), then what they compare
    return verdicts + ([seeds] if seeds else []) + sections


LOOKS_CAPTION = (
    "The path over the study's looks of each claim its decide: block names: at each look (its size on the x axis) "
    "the estimate and its repeated interval at the panel's level (the study's alpha shared by "
    "every panel it decides, Holm's step-down), estimate +- t x se, t Student's t (n - 1 degrees of freedom) at the level of "
    "the look's boundary c written above it; the study "
    "stopped adding to a claim at its first interval wholly above or below 0 (or inside the "
    "shaded equivalence margin). docs/sequential.md."
)


def _looks_figure(section: Section, looks: list[dict]) -> None:
    _figure(section, "looks", lambda: figures.looks_figure(looks), LOOKS_CAPTION)


def claims_with_looks(
    spec: StudySpec, results: pd.DataFrame, options: Options, looks: list[dict] | None
) -> pd.DataFrame:
    """The claims table, the study's declared comparisons with the paper's claims; a sequential
    study's panels show their looks (looks.with_looks) and the estimates at their stops
    (stop_estimates.with_stop_estimates), a best-error row its calibration. The near-chance
    check reads the
    catalogue's number of classes, as a look does (run/rounds.py)."""
    classes = CATALOGUE[spec.dataset.name].classes
    table = claims.claims_table(
        results, options, spec.name, comparisons=spec.comparisons, classes=classes
    )
    # a best-error row's measured null rate for its design (spec/calibrations.py), else None
    table["calibration"] = [calibration_words(spec, r.claim, r.cells) for r in table.itertuples()]
    if not looks:
        return table
    table = with_looks(table, looks)
    return with_stop_estimates(table, looks, spec.decide.looks) if spec.decide else table

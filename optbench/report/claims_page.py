"""The claims in words and tables (decision/claims.py computes them): one sentence per claim and
panel, the report page's "claims" section, summary.json's rows and claims.md.

`python -m optbench.report.claims_page OUT.md REPORT_DIR...` writes the claims of several
reports (each folder's summary.json, as its report computed them: a sequential study's at its
last look) as one Markdown table (studies/mini/run.sh's claims.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from optbench.decision import frames, ranking, sequential, stats, stop_estimates
from optbench.decision.claims import MIN_SEEDS, NOT_TESTED
from optbench.decision.summary import Options
from optbench.report import ranking_page
from optbench.report.page import Section
from optbench.spec.claim_kinds import KINDS, ClaimKind
from optbench.spec.optimizers import display_name


def _here(row) -> str:
    if pd.isna(row.low):  # not tested: no interval to show
        return "–" if pd.isna(row.estimate) else f"{row.estimate:+.3g} (no interval)"
    return f"{row.estimate:+.3g} [{row.low:+.3g}, {row.high:+.3g}]"


def _adjusted(row) -> bool:
    """Whether a row carries the estimates at its stop (stop_estimates.py; none in rows of a
    fixed-size study, of a panel that did not stop on its interval, or written before them)."""
    x = getattr(row, "median_unbiased", None)
    return x is not None and not pd.isna(x)


def _at_stop(row) -> str:
    """The estimates at a panel's stop that account for its stopping (stop_estimates.py)."""
    if not _adjusted(row):
        return "–"
    return (
        f"{row.median_unbiased:+.3g} [{row.ordering_low:+.3g}, {row.ordering_high:+.3g}] "
        f"({_percent(_level(row))}); {row.bias_adjusted:+.3g}"
    )


AT_STOP = (
    "at the stop (median-unbiased [ordering interval at the panel's level]; bias-adjusted mean)"
)


def _level(row) -> float:
    """A sequential row's panel level: the record's (Holm's step-down), or alpha / panels in
    rows written before looks kept it."""
    alpha = sequential.ALPHA if pd.isna(getattr(row, "alpha", None)) else float(row.alpha)
    panels = 1 if pd.isna(getattr(row, "panels", None)) else int(row.panels)
    level = getattr(row, "level", None)
    return alpha / panels if level is None or pd.isna(level) else float(level)


def _percent(level: float) -> str:
    """An interval's confidence at `level`: "95%", "97.5%", "99.6%"."""
    return f"{100 * (1 - level):.3g}%"


def section_table(table: pd.DataFrame) -> pd.DataFrame:
    """The page's view: claim | paper | here (estimate, 95% interval) | verdict, and the
    estimates at a stop where a row has them."""
    shown = pd.DataFrame(
        {
            "claim": table["claim"],
            "paper": table["paper"],
            "panel": [f"{r.optimizer}, {r.epochs} ep" for r in table.itertuples()],
            "models": table["models"],
            "statistic (unit)": table["statistic"],
            "here (estimate, 95% interval)": [_here(r) for r in table.itertuples()],
            "verdict": table["verdict"],
            "curve (simultaneous band)": table["curve_verdict"].fillna("–"),
            "trials (diverged)": [f"{r.trials} ({r.diverged})" for r in table.itertuples()],
        }
    )
    adjusted = [_at_stop(r) for r in table.itertuples()]
    if any(x != "–" for x in adjusted):
        shown.insert(5, AT_STOP, adjusted)
    return shown


def evidence_lines(table: pd.DataFrame) -> list[str]:
    """One line per claim and panel: how much evidence it has and would need."""
    return [f"({r.claim}) {r.optimizer}, {r.epochs} ep: {r.advice}" for r in table.itertuples()]


def kind_of(row) -> ClaimKind:
    """A row's kind: its `kind` (spec/claim_kinds.py), its claim in rows written before it."""
    kind = getattr(row, "kind", None)
    return KINDS[kind if isinstance(kind, str) else row.claim]


def _declared(row) -> bool:
    return kind_of(row).name != row.claim


def on_page(row, drawn: set[str] | None) -> bool:
    """Whether a page drawing the sections `drawn` (None: all) shows the row: a claim of the
    paper where the figure it reads is drawn, a comparison the study declares always (the
    user's own question, named in its spec, whatever figures were asked for)."""
    return drawn is None or _declared(row) or kind_of(row).section in drawn


def _panel_words(row) -> str:
    """The row's panel in its kind's phrase, e.g. "with AdamW at 8 epochs"."""
    optimizer = display_name(row.optimizer)  # (c)'s "sgd - adamw" stays as it is
    return kind_of(row).phrase.format(optimizer=optimizer, epochs=row.epochs)


def _sequential(row) -> bool:
    looks = getattr(row, "looks", None)  # None or NaN where a row has no looks
    return looks is not None and not pd.isna(looks) and looks > 0


def _outcome_words(row) -> str:
    """A sequential study's verdict and why it stopped, e.g. "holds after 6 of at most 24
    samples" (looks.with_looks)."""
    looks, n_now, n_max = int(row.looks), int(row.n_now), int(row.n_max)  # floats in a mixed table
    if row.verdict == "continue":
        return f"not decided yet at look {looks}, {n_now} of at most {n_max} {row.unit}"
    if row.verdict == "undecided":
        return f"undecided at the maximum, {n_max} {row.unit}"
    if row.verdict == sequential.NOTHING_LEARNED:
        return f"nothing learned: stopped after {n_now} of at most {n_max} {row.unit}"
    verdict = row.verdict
    if verdict in (sequential.HOLDS_NEGLIGIBLE, sequential.OPPOSITE_NEGLIGIBLE):
        side = "above" if verdict == sequential.HOLDS_NEGLIGIBLE else "below"
        verdict = (
            f"{verdict} (the interval lies {side} 0 and inside +-{row.margin:g}: a difference "
            "smaller than the margin)"
        )
    return f"{verdict} after {n_now} of at most {n_max} {row.unit}"


def _interval_words(row) -> str:
    """What a sequential row's interval is: repeated over the looks, at the panel's level (the
    study's alpha shared by every panel it decides, Holm's step-down: docs/sequential.md); and
    what its estimate is at an early stop."""
    alpha = sequential.ALPHA if pd.isna(getattr(row, "alpha", None)) else float(row.alpha)
    panels = 1 if pd.isna(getattr(row, "panels", None)) else int(row.panels)
    level = _level(row)
    words = f"a repeated {_percent(level)} interval"
    if panels > 1:
        words += (
            f" (this panel's level {level:.3g}: the study's alpha {alpha:g} shared by its "
            f"{panels} panels, Holm's step-down)"
        )
    if row.verdict in sequential.DECIDED and not _adjusted(row):
        words = "the estimate at the stop, not adjusted for stopping; " + words
    return words


def _stop_words(row) -> str:
    """A stopped panel's numbers, those that account for its stopping first (stop_estimates.py),
    then the look's own: its naive estimate and repeated interval."""
    if not _adjusted(row):
        return _here(row)
    return (
        f"median-unbiased {row.median_unbiased:+.3g}, {_percent(_level(row))} interval "
        f"[{row.ordering_low:+.3g}, {row.ordering_high:+.3g}] (stagewise ordering, at the "
        "panel's level), bias-adjusted mean "
        f"{row.bias_adjusted:+.3g}; naive estimate at the stop {_here(row)}"
    )


def _measure(row) -> str:
    """What the row's estimate measures, a best-error comparison's with its k ("k" in a row
    written before rows kept it: its `paper` and `statistic` name it)."""
    k = getattr(row, "best_of", None)
    return kind_of(row).measure.format(k="k" if k is None or pd.isna(k) else int(k))


def sentence(row) -> str:
    """One claim and panel in words a reader can act on: the claim first, then the verdict
    with what it rests on, the estimate and interval, and what the evidence says, e.g. "(a)
    ViT_C's lr/wd EDF is steeper than ViT_P's (Figs 4-5), with AdamW at 8 epochs: holds with 40
    samples (EDF area to 10 points: +0.26 [+0.15, +0.43]; as whole curves: holds); a new study
    of that size: 97% (if the effect is as estimated)"; why a row decides nothing (its `note`:
    degenerate data, a mixed chain) follows its verdict."""
    # a declared comparison's `paper` is its words: its name, sides and measure
    claim = row.paper if _declared(row) else f"({row.claim}) {row.paper}, {_panel_words(row)}"
    measured = f"{_measure(row)}: {_here(row)}"
    note = getattr(row, "note", None)
    note = "" if note is None or pd.isna(note) else f"; {note}"
    # a best-error row's measured null rate, or that none was measured (spec/calibrations.py)
    calibration = getattr(row, "calibration", None)
    note += "" if calibration is None or pd.isna(calibration) else f"; {calibration}"
    if row.verdict == NOT_TESTED and not _sequential(row):
        return f"{claim}: not tested ({measured}); {row.advice}"
    if _sequential(row):
        measured = f"{_measure(row)}: {_stop_words(row)}"
        line = f"{claim}: {_outcome_words(row)} ({measured}, {_interval_words(row)}){note}"
    else:
        curve = "" if pd.isna(row.curve_verdict) else f"; as whole curves: {row.curve_verdict}"
        line = f"{claim}: {row.verdict} with {row.n_now} {row.unit} ({measured}{curve}){note}"
    # the advice without its own opening ("not shown with 10 samples"), which the line says
    rest = row.advice.split("; ", 1)[1] if "; " in row.advice else ""
    return f"{line}; {rest}" if rest else line


def verdict_lines(summary: dict, drawn: set[str] | None = None) -> list[str]:
    """The claims of a summary (summary.json's rows) that a page drawing `drawn` shows, as
    sentences: what `optbench report` prints on the terminal, the page's lead (a ranking's
    order first, then the sentences of its pairs and the other claims)."""
    rows = [pd.Series(row) for row in summary.get("claims", [])]
    shown = [row for row in rows if on_page(row, drawn)]
    return ranking_lines(pd.DataFrame(shown)) + [sentence(row) for row in shown]


def ranking_lines(table: pd.DataFrame) -> list[str]:
    """One sentence per declared ranking among the rows (report/ranking_page.py)."""
    if table.empty or "kind" not in table:
        return []
    return [ranking_page.summary_line(name, rows) for name, rows in ranking.rankings(table).items()]


def markdown(table: pd.DataFrame) -> str:
    """The claims as Markdown, for docs and the README: one sentence per claim and panel, then
    the table."""
    lines = [f"- {line}" for line in ranking_lines(table)]  # a ranking's order first
    lines += [f"- {sentence(r)}" for r in table.itertuples()] + [""]
    lines += [
        "| claim | paper | study | panel | models | here (estimate, 95% interval) | "
        f"{AT_STOP} | verdict | evidence |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table.itertuples():
        lines.append(
            f"| ({r.claim}) | {r.paper} | {r.study} | {r.optimizer}, {r.epochs} ep | "
            f"{r.models} | {_here(r)} | {_at_stop(r)} | {r.verdict} | {r.advice} |"
        )
    return "\n".join(lines) + "\n"


def sections(table: pd.DataFrame, options: Options, drawn: set[str] | None = None) -> list[Section]:
    """The report page's "claims" section from `claims_table`'s rows (computed once per report:
    the page and summary.json show the same bootstrap), or nothing when the study tests no
    claim; with `drawn` (the report's sections), only the rows `on_page` keeps."""
    table = table[[on_page(row, drawn) for row in table.itertuples()]]
    if table.empty:
        return []
    declared = table["kind"] != table["claim"]
    title = {(False, True): "The paper's claims", (True, False): "Your comparisons"}
    section = Section(
        "claims",
        title.get(
            (bool(declared.any()), bool((~declared).any())),
            "The paper's claims and your comparisons",
        ),
        "Each claim's statistic on this study, its 95% interval and verdict: holds when the "
        "interval lies on the claim's side of 0 (for (d)'s chain: every step's), opposite when "
        "on the other, otherwise not shown; not tested where a cell has no finished trial or "
        "the contrast has no spread (the row says why). In a study with decide:, the repeated "
        'interval of its last look: holds, opposite ("negligible" too when it lies inside '
        "the margin), equivalent or undecided, its error rate the study's, shared by the "
        "panels it decides (Holm's step-down); where a panel stopped, the estimates that account "
        "for its stopping lead: the stagewise-ordering median-unbiased estimate and its "
        "interval at the panel's level (which holds 0 exactly where the panel's test does not "
        "reject) and Whitehead's bias-adjusted mean, the naive estimate at the stop beside "
        "them (docs/sequential.md). (a): bootstrap over the "
        "(lr, wd) samples, resampled together where both models trained the same pairs "
        "(paired) and each model's alone otherwise (BCa in a fixed-size study, "
        f"{options.n_boot} resamples; percentile where BCa degenerates), and the verdict of "
        "the simultaneous band of the EDF difference on [0, 10] points. (b)-(d): Student's t "
        f"over the per-seed contrasts; not tested below {MIN_SEEDS} seeds. Evidence: the "
        "study size at which the interval would show the claim in "
        f"{stats.POWER_TARGET:.0%} of simulated studies, if the effect is as estimated. "
        "Definitions: optbench/decision/claims.py. Cell errors here are means over seeds, a "
        f"diverged trial counted as {frames.DIVERGED_ERROR:g}%.",
        lead=ranking_lines(table) + [sentence(r) for r in table.itertuples()],
    )
    section.tables.append(("Claims", section_table(table)))
    for name, rows in ranking.rankings(table).items():  # each declared ranking's order
        title = (
            f"Ranking ({name}): places its decided pairs leave each cell, best first; cells "
            "whose places overlap are still tied; *: implied by the order of shown pairs"
        )
        section.tables.append((title, ranking_page.table(rows)))
    section.notes += [f"evidence: {line}" for line in evidence_lines(table)]
    return [section]


def records(table: pd.DataFrame) -> list[dict]:
    """claims_table's rows as summary.json rows (JSON's null where a value is missing)."""
    rows = table.to_dict(orient="records")
    for row in rows:
        # counts, floats in a column with a missing one; all but the first two: looks
        for key in ("n_needed", "best_of", "n_max", "looks", "panels"):
            if key in row:
                row[key] = None if pd.isna(row[key]) else int(row[key])
        for key in ("curve_verdict", "power_now", "interval", "se", "estimate", "low", "high"):
            row[key] = None if pd.isna(row[key]) else row[key]
        if "calibration" in row and not isinstance(row["calibration"], str):
            row["calibration"] = None
        for key in ("note", "alpha", "level", "margin", *stop_estimates.COLUMNS):
            if key in row and not isinstance(row[key], str):
                row[key] = None if pd.isna(row[key]) else float(row[key])
    return rows


def main(argv: list[str] | None = None) -> int:
    """`python -m optbench.report.claims_page OUT.md REPORT_DIR...`: the claims of several reports
    (each folder's summary.json) in one Markdown table. The rows are read, not recomputed: a
    sequential study's claims hold only at its looks (a fixed-size interval of its trials would
    be another statistic)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m optbench.report.claims_page OUT.md REPORT_DIR...", file=sys.stderr)
        return 2
    out, folders = Path(args[0]), [Path(a) for a in args[1:]]
    rows = [row for f in folders for row in json.loads((f / "summary.json").read_text())["claims"]]
    out.write_text(markdown(pd.DataFrame(rows)))
    print(out.read_text(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The report's HTML page: one self-contained index.html (figures as base64 PNG, every table,
the study spec, the trial counts). `Section` is one part of the page, as sections.py builds it.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from optbench.decision.edf import AUC_MAX_POINTS, FRAC_WITHIN_POINTS
from optbench.report.summary_lines import near_chance_warning
from optbench.spec.claim_kinds import MIN_EDF_SAMPLES
from optbench.spec.schema import StudySpec, dump_spec


@dataclass
class Section:
    """One part of the page. Figures are saved as <name>.png and <name>.svg."""

    key: str
    title: str
    caption: str = ""
    lead: list[str] = field(default_factory=list)  # sentences opening the section (the verdicts)
    figures: list[tuple[str, Figure]] = field(default_factory=list)
    captions: dict[str, str] = field(default_factory=dict)  # figure name -> what it draws
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


_CSS = """
body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.9em}
td,th{border:1px solid #ccc;padding:.2em .6em;text-align:right}
th{background:#f3f3f3} img{max-width:100%} .note{color:#8a5300}
.partial{background:#fff3cd;border:1px solid #e0c36c;padding:.5em 1em;font-weight:bold}
.warning{background:#fde2e1;border:1px solid #d9534f;padding:.5em 1em}
pre{background:#f6f6f6;padding:1em;overflow-x:auto;font-size:.85em}
figure{margin:1em 0 2em} figcaption{font-size:.9em;color:#444;max-width:60em}
"""


MISSING = "–"  # a value that is not there (no finished trial, not measured)


def _number(value: float) -> str:
    """Errors and fractions with two decimals, tiny values (p-values, GF) in 3 digits, rates of
    a thousand and more (img/s) without decimals."""
    if value != 0 and abs(value) < 0.01:
        return f"{value:.3g}"
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.2f}"


def _table_html(frame: pd.DataFrame) -> str:
    show_index = not isinstance(frame.index, pd.RangeIndex)  # keep meaningful row labels only
    frame = frame.astype(object).where(frame.notna(), np.nan).infer_objects()  # None is missing
    return frame.to_html(float_format=_number, na_rep=MISSING, border=0, index=show_index)


def _interval(bounds: list[float | None]) -> str:
    low, high = (_number(b) if b is not None and np.isfinite(b) else MISSING for b in bounds)
    return f"[{low}, {high}]"


def _near_chance_html(summary: dict[str, Any]) -> str:
    """A warning box naming each cell whose best error is near chance level ("" if none)."""
    near = [c for c in summary["cells"] if c.get("near_chance")]
    if not near:
        return ""
    items = "".join(
        f"<li>{html.escape(near_chance_warning(c, summary['chance_error']))}</li>" for c in near
    )
    return f"<div class='warning'><b>Near chance level</b><ul>{items}</ul></div>"


def _code_html(code: dict[str, Any]) -> str:
    """Which code made the results, one line, and a warning box when a cell mixes them."""
    if not code.get("code_fingerprints"):
        return ""
    said = [
        f"optbench {', '.join(code['versions'])}",
        f"commit {', '.join(c[:12] for c in code['commits'])}" if code["commits"] else "",
        f"training-code fingerprint {', '.join(code['code_fingerprints'])}",
    ]
    line = f"<p>Trained by {html.escape('; '.join(s for s in said if s))}.</p>"
    if code.get("warning"):
        line += f"<div class='warning'>{html.escape(code['warning'])}</div>"
    return line


def _summary_frames(summary: dict[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    auc_key = f"auc_{int(AUC_MAX_POINTS)}"
    cells = pd.DataFrame(
        [
            {
                "model": c["model"],
                "optimizer": c["optimizer"],
                "epochs": c["epochs"],
                "n": c["n"],
                "of planned": c["n_planned"],
                "diverged": c["n_diverged"],
                "best (%)": c["best_error"],
                "median (%)": c["median_error"],
                **{
                    f"within {k} pts (fraction)": (c["frac_within"] or {}).get(str(k), MISSING)
                    for k in FRAC_WITHIN_POINTS
                },
                f"EDF area to {int(AUC_MAX_POINTS)} pts (0-1)": c[auc_key]
                if c[auc_key] is not None
                else MISSING,
            }
            for c in summary["cells"]
        ]
    )
    comparisons = pd.DataFrame(
        [
            {
                "optimizer": c["optimizer"],
                "epochs": c["epochs"],
                "model a": c["model_a"],
                "model b": c["model_b"],
                "KS D": c["ks_statistic"],
                "KS p": c["ks_pvalue"],
                "within 4 pts: a - b (fraction)": c["frac_within_4_diff"],
                "95% CI (fraction)": _interval(c["frac_within_4_diff_ci"]),
                "evidence (within 4 pts)": c.get("advice", MISSING),
            }
            for c in summary["comparisons"]
        ]
    )
    return cells, comparisons


def _section_html(section: Section, images: dict[str, str]) -> list[str]:
    """A section's heading, caption, figures (embedded PNGs), tables and notes."""
    esc = html.escape
    parts = [f"<h2 id='{section.key}'>{esc(section.title)}</h2>"]
    parts += [f"<p class='lead'>{esc(line)}</p>" for line in section.lead]
    if section.caption and (section.figures or section.tables):
        parts.append(f"<p>{esc(section.caption)}</p>")
    for name, _ in section.figures:
        caption = section.captions.get(name)
        below = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
        parts.append(
            f"<figure><img alt='{name}' src='data:image/png;base64,{images[name]}'>{below}</figure>"
        )
    for title, table in section.tables:
        parts += [f"<h3>{esc(title)}</h3>", _table_html(table)]
    parts += [f"<p class='note'>{esc(note)}</p>" for note in section.notes]
    return parts


def render_html(
    spec: StudySpec, summary: dict[str, Any], sections: list[Section], images: dict[str, str]
) -> str:
    """One self-contained page: figures as base64 PNG, every table, the spec, the trial counts."""
    esc = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>optbench report: {esc(spec.name)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Study {esc(spec.name)}</h1>",
        f"<p>{summary['n_results']} of {summary['n_planned']} trials have a result "
        f"(finished or diverged); errors are top-1 {esc(summary['metric'])} in percent. By status: "
        + ", ".join(f"{esc(k)} {v}" for k, v in summary["status_counts"].items())
        + ".</p>",
    ]
    if summary["partial"]:
        parts.append(
            f"<p class='partial'>partial: {summary['n_results']} of {summary['n_planned']} trials</p>"
        )
    cells, comparisons = _summary_frames(summary)
    parts += [
        _code_html(summary.get("code") or {}),
        _near_chance_html(summary),
        *(line for s in sections if s.key == "claims" for line in _section_html(s, images)),
        "<h2>Summary per cell</h2>",
        _table_html(cells) if not cells.empty else "<p>No cells.</p>",
    ]
    if any(c["frac_within"] is None for c in summary["cells"]):
        parts.append(
            f"<p class='note'>– in the within and EDF area columns: the cell trains fewer than "
            f"{MIN_EDF_SAMPLES} (lr, wd) pairs, where dtop-1 measures seed noise, not lr/wd "
            "sensitivity; its errors per seed are in the per-seed table.</p>"
        )
    parts.append(
        "<h2>Between models (KS test on dtop-1; bootstrap CI of the difference in fraction within 4 points)</h2>"
    )
    if comparisons.empty:
        parts.append(
            "<p class='note'>No panel has two models whose cells sample (lr, wd) (at least "
            f"{MIN_EDF_SAMPLES} pairs each): no EDF comparison. Cells at fixed (lr, wd) are "
            "compared by seed in the claims.</p>"
        )
    else:  # its evidence column advises sizes too: say why they may differ from a claim's
        parts += [
            _table_html(comparisons),
            "<p class='note'>These rows test the fraction of trials within 4 points (and the "
            "whole curves, KS), not claim (a)'s EDF area to 10 points: the same two models can "
            "need a different number of samples for each, so a sample-size advice here can "
            "differ from the claim's; the claims table holds a claim's verdict and its size.</p>",
        ]
    for section in sections:
        if section.key != "claims":
            parts += _section_html(section, images)
    parts += ["<h2>Study spec</h2>", f"<pre>{esc(dump_spec(spec))}</pre>", "</body></html>"]
    return "\n".join(parts)

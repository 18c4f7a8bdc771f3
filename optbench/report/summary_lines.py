"""summary.json for people: `format_table` (the cells, for the terminal), `format_advice` (the
evidence lines) and `near_chance_warning`; and an earlier report's summary.json read back
(`earlier_summary`, `earlier_claims`, `earlier_advice`: what `optbench run --dry-run` shows).
The numbers are decision/summary.py's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from optbench import safefs
from optbench.decision.edf import FRAC_WITHIN_POINTS
from optbench.errors import UsageError


def format_advice(summary: dict[str, Any]) -> str:
    """One line per claim and EDF comparison of a summary: how much evidence it needs."""
    lines = [f"evidence of study {summary['study']} ({summary.get('metric', 'final_error')}):"]
    for c in summary.get("claims", []):
        if "advice" not in c:  # a summary written before the advice existed
            continue
        panel = f"{c['optimizer']}, {c['epochs']} ep"
        lines.append(f"  claim ({c['claim']}) {panel}: {c['verdict']}; {c['advice']}")
    for c in summary.get("comparisons", []):
        if "advice" in c:
            pair = f"{c['model_a']} - {c['model_b']}"
            panel = f"{c['optimizer']}, {c['epochs']} ep"
            lines.append(f"  within 4 points, {pair} ({panel}): {c['advice']}")
    return "\n".join(lines)


def format_table(summary: dict[str, Any]) -> str:
    """A short fixed-width table of the summary's cells, for the terminal."""
    header = ["model", "opt", "epochs", "n", "div", "best", "median", "<=1", "<=2", "<=4", "<=8"]
    lines = []
    for c in summary["cells"]:
        fw = c["frac_within"] or {}
        lines.append(
            [
                c["model"],
                c["optimizer"],
                str(c["epochs"]),
                str(c["n"]),
                str(c["n_diverged"]),
                _fmt(c["best_error"], ".2f"),
                _fmt(c["median_error"], ".2f"),
                *(_fmt(fw.get(str(k)), ".2f") for k in FRAC_WITHIN_POINTS),
            ]
        )
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    near = [c for c in summary["cells"] if c.get("near_chance")]
    text = [f"study {summary['study']} ({summary.get('metric', 'final_error')})"]
    if summary.get("partial"):
        text[0] += f"  partial: {summary['n_results']} of {summary['n_planned']} trials"
    for row in [header, *lines]:
        text.append(
            "  ".join(
                v.ljust(w) if i < 2 else v.rjust(w)
                for i, (v, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    text += [near_chance_warning(c, summary["chance_error"]) for c in near]
    if (summary.get("code") or {}).get("warning"):
        text.append(summary["code"]["warning"])
    return "\n".join(text)


def near_chance_warning(cell: dict[str, Any], chance: float) -> str:
    return (
        f"warning: {cell['model']}/{cell['optimizer']}/{cell['epochs']} epochs: best error "
        f"{cell['best_error']:.1f}% is near chance ({chance:.1f}%): its trials barely learned, "
        "so a steep EDF there is not stability"
    )


def _fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


MAX_SUMMARY_BYTES = 16 * 2**20


def earlier_summary(path: Path, root: Path) -> dict | str:
    """An earlier report's summary.json, or one line saying why there is none usable; never
    raises. `root` is the reports root: below it no link is followed (safefs), and a FIFO, a
    device or a file beyond MAX_SUMMARY_BYTES is not read."""
    try:
        raw = safefs.read_bytes(path, root, MAX_SUMMARY_BYTES)
    except (OSError, UsageError) as err:
        return f"{err}: no evidence advice"
    if raw is None:
        return f"no earlier report at {path}: no evidence advice yet (optbench report writes it)"
    try:
        summary = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        summary = None
    if not isinstance(summary, dict) or not isinstance(summary.get("claims", []), list):
        return f"{path}: not a summary.json optbench wrote: no evidence advice"
    return summary


def earlier_claims(found: dict | str) -> list[dict]:
    """The claims rows of `earlier_summary`'s answer whose numbers are numbers (the ones an
    estimate can be read from); [] without a summary."""
    if not isinstance(found, dict):
        return []

    def usable(row) -> bool:
        if not isinstance(row, dict):
            return False
        numbers = [row.get(k) for k in ("estimate", "se", "n_now")]
        return all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)
            for v in numbers
        )

    return [row for row in found.get("claims", []) if usable(row)]


def earlier_advice(path: Path, root: Path) -> str:
    """The evidence lines of an earlier report's summary.json (`format_advice`), or one line
    saying why there are none; never raises: `optbench run --dry-run` prints it as a note."""
    summary = earlier_summary(path, root)
    if isinstance(summary, str):
        return summary
    try:
        text = format_advice(summary)
    except (KeyError, TypeError):
        return f"{path}: not a summary.json optbench wrote: no evidence advice"
    if text.count("\n") == 0:
        return (
            f"{path}: no evidence advice in it (written before it existed; rerun optbench report)"
        )
    return f"from {path}:\n{text}"

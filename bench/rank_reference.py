"""A committed reference of a study that decides rankings (studies/rank_optimizers.yaml,
docs/reference/rank_optimizers/) replayed from its trials.csv, no training: its pairs decided by
Holm's step-down over the study's panels (as the driver decided them) and by the pairwise
Bonferroni design of the same cells (each pair at alpha / panels throughout, no level passed
on), each pair's stop and the samples each cell trains (until the last pair it is in stops),
beside the fixed design (every cell at the last look). Where Bonferroni's rule goes on past the
samples the reference trained, the pair stops "untrained" at that look
(holm_analysis.replay_family): its size, and its cells', is a lower bound.

`python bench/rank_reference.py [STUDY.yaml REFERENCE_FOLDER]`: one JSON line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
from holm_analysis import OPTIONS, ROOT, UNTRAINED, replay_family

from optbench.report import claims, frames
from optbench.run.rounds import declared, design
from optbench.spec.claim_kinds import comparison_key
from optbench.spec.schema import load_spec


def pair_looks(trials: pd.DataFrame, spec) -> dict:
    """(estimate, se, df, design) of each ranking pair at each look its two cells were trained
    for, keyed (panel key, n), as a look reads them."""
    named = declared(spec)
    trained = trials.groupby(frames.CELL_KEYS)["sample"].nunique()
    out = {}
    for n in spec.decide.looks:
        table = claims.claims_table(
            frames.with_errors(trials[trials["sample"] < n]),
            OPTIONS,
            spec.name,
            1.0,
            comparisons=tuple(named),
        )
        for row in table[table["claim"].isin([c.name for c in named])].itertuples():
            if all(trained[tuple(cell)] >= n for cell in row.cells):
                key = comparison_key(row.claim, row.cells)
                out[key, n] = (float(row.estimate), float(row.se), n - 1, row.design)
    return out


def analyse(study: Path, folder: Path) -> dict:
    spec = load_spec(study)
    trials = pd.read_csv(folder / "trials.csv")
    looks = pair_looks(trials, spec)
    panels = [panel for comparison in declared(spec) for panel in comparison.panels()]
    cells = sorted({cell for panel in panels for cell in panel.cells})
    trained = trials.groupby(frames.CELL_KEYS)["sample"].nunique()
    out = {
        "bench": "rank_reference",
        "study": spec.name,
        "panels": len(panels),
        "looks": list(spec.decide.looks),
        "trained_samples": int(sum(trained[c] for c in cells)),
        "fixed_samples": len(cells) * spec.decide.looks[-1],
    }
    for rule, holm in (("holm", True), ("bonferroni", False)):
        stops = replay_family([(looks, p.key) for p in panels], design(spec), holm)
        stopped = list(zip(panels, stops, strict=True))
        per_cell = {  # a cell trains until the last pair it is in stops
            " ".join(map(str, cell)): max(n for p, (_, n) in stopped if cell in p.cells)
            for cell in cells
        }
        out[rule] = {
            "pairs": {p.key: [outcome, n] for p, (outcome, n) in stopped},
            "decided": sum(o not in ("undecided", UNTRAINED) for o, _ in stops),
            "untrained": sum(o == UNTRAINED for o, _ in stops),
            "cell_samples": per_cell,
            "samples": sum(per_cell.values()),
        }
    return out


if __name__ == "__main__":
    args = sys.argv[1:] or [
        ROOT / "studies" / "rank_optimizers.yaml",
        ROOT / "docs" / "reference" / "rank_optimizers",
    ]
    print(json.dumps(analyse(Path(args[0]), Path(args[1]))))

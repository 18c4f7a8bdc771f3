"""`--dry-run`'s expected size from an earlier report's estimate (optbench.run.expected_size)
against the real rule, at the quickstart's design (looks 6, 8, 10, 12, 16, 24; Pocock; alpha
0.05): per effect in full-study standard errors (1.5, 2, the planned effect z_0.025 + z_0.9,
4), the real rule's expected size (the mean stopping size of 20,000 studies) and the mean
expected size planned from each of the earlier studies' claims rows at its stop, 150 of them
(the measurement docs/sequential.md has quoted since the first estimate) and 2,000 more (for
a smaller Monte-Carlo se). The studies are tests/test_expected_size.py's `_studies` (normal
units, one study at a time as the looks read it), seeds 1 (the truth), 2 (150) and 3 (2,000).
Prints one JSON line: per effect the truth, and per set the mean, its relative error and the
Monte-Carlo se of that error (both means' se combined).

    nice -n 10 python bench/expected_size.py
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_expected_size import DESIGN, PLANNED_Z, _studies  # noqa: E402

from optbench.run.expected_size import expected_size  # noqa: E402

TRUTHS = 20_000
EARLIER = {"150": (150, 2), "2000": (2_000, 3)}


def _mean_se(values) -> tuple[float, float]:
    values = np.asarray(values, float)
    return float(values.mean()), float(values.std(ddof=1) / math.sqrt(values.size))


def main() -> None:
    rows = {}
    for z in (1.5, 2.0, PLANNED_Z, 4.0):
        truth, truth_se = _mean_se([r["n_now"] for r in _studies(z, TRUTHS, seed=1)])
        row = {"truth": round(truth, 3), "truth_se": round(truth_se, 3)}
        for name, (n, seed) in EARLIER.items():
            mean, se = _mean_se([expected_size(DESIGN, r) for r in _studies(z, n, seed)])
            error_se = mean / truth * math.hypot(se / mean, truth_se / truth)
            row[name] = {
                "mean": round(mean, 3),
                "error": round(mean / truth - 1, 4),
                "error_se": round(error_se, 4),
            }
        rows[f"{z:.2f}"] = row
    print(json.dumps({"design": list(DESIGN.looks), "truths": TRUTHS, "effects": rows}))


if __name__ == "__main__":
    main()
